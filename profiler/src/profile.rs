//! The profile: what a recording produced, in the form that is saved, loaded and analysed.
//!
//! A profile holds interned tables (feature names, instance payloads, mark stacks, threads) and
//! sample groups: for each (thread, mark stack) pair, how many samples saw it and how much wall and
//! active time they stand for. Memory grows with the number of distinct stacks, not with the length
//! of the run. Both time measures are kept so that any time view can be computed later.
//!
//! # Saved format (`profile.json`, versioned)
//! ```json
//! {"format": "fsprof-profile", "version": 1,
//!  "meta": {...},                                   // see `Meta`
//!  "features": ["output", "formatting"],            // feature id = index
//!  "payloads": [{"kind": "location", "text": "src/main.rs:13:28"}],
//!  "stacks": [{"frames": [{"feature": 0, "payload": 0}, {"feature": 0}]}],
//!                                                   // root first; no payload = antimark;
//!                                                   // "builtin": true when the agent marked it;
//!                                                   // "truncated_depth": N when deeper than recorded
//!  "threads": [{"tid": 4242, "name": "main"}],
//!  "native_frames": [{"function": "app::parse", "file": "src/parse.rs", "line": 57,
//!                     "module": "app", "inlined": false}],  // symbolized once, after recording
//!  "native_stacks": [{"frames": [0, 1], "marks_at": [1], "truncated": false}],
//!                                                   // root first; see `NativeStack`
//!  "samples": [{"thread": 0, "stack": 0, "native": 0, "count": 10,
//!               "wall_ns": 10000000, "active_ns": 9000000}],
//!                                                   // "image": N when not the first image
//!  "images": [{"name": "sh"}, {"name": "python3"}], // the programs run, in order (each exec
//!                                                   // starts one); absent in older profiles
//!  "modules": [{"name": "libc.so.6", "path": "/usr/lib/x86_64-linux-gnu/libc.so.6",
//!               "build_id": "a1b2..."}],           // the files native frames were found in
//!  "later_branches": [{"feature": 2, "payload": 7}]} // alternatives the program tried after
//!                                                   // earlier branches failed, seen in its
//!                                                   // histories (see `Profile::later_branches`)
//! ```
//! A reader refuses other `format`s and newer `version`s; fields may be added within a version.
//! `profile/builder.rs` builds one while recording.
//! Version 1 had no native stacks (`--no-native` profiles still have none).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Value of the `format` field.
pub const FORMAT: &str = "fsprof-profile";
/// Version written by this build; it reads this version and older.
pub const VERSION: u32 = 2;
/// Name of the profile file inside an output directory.
pub const FILE_NAME: &str = "profile.json";
/// Most frames a stack may have (a thread records at most a few regions' capacity of marks).
pub const MAX_STACK_FRAMES: usize = 1024;
/// Most native (physical) frames unwound per sample; inlined frames may add to them when
/// symbolized. Real recursion goes thousands deep (a recursive evaluator, a compiler's
/// expression walker): it was 1,024, which cut most stacks of a 2,400-deep recursion. A stack is
/// kept once however many samples share it, and a frame is a 4-byte index in the profile.
pub const MAX_NATIVE_FRAMES: usize = 16 * 1024;

/// A recorded profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Format version.
    pub version: u32,
    /// How the profile was recorded.
    pub meta: Meta,
    /// Feature names; a frame's `feature` indexes this.
    pub features: Vec<String>,
    /// Instance payloads; a frame's `payload` indexes this.
    pub payloads: Vec<Payload>,
    /// Distinct mark stacks; a sample group's `stack` indexes this.
    pub stacks: Vec<Stack>,
    /// Threads seen; a sample group's `thread` indexes this.
    pub threads: Vec<Thread>,
    /// Aggregated samples.
    pub samples: Vec<SampleGroup>,
    /// Symbolized native frames; a native stack's `frames` index this.
    #[serde(default)]
    pub native_frames: Vec<NativeFrame>,
    /// Distinct native stacks (with their marks' places); a sample group's `native` indexes this.
    #[serde(default)]
    pub native_stacks: Vec<NativeStack>,
    /// The program images the process ran, in order: each `exec` starts a new one (a wrapper
    /// script, then the program it runs). A sample group's `image` indexes this; empty in
    /// profiles from before 2026-11-25 (one image).
    #[serde(default)]
    pub images: Vec<Image>,
    /// Later branches of alternatives (`mark_alternative` with a branch above 0) that the
    /// program pushed at an offset where an alternative of a sample had an earlier branch: read
    /// from the threads' histories of their latest later branches, whether or not a sample saw
    /// them, so that the backtracking analysis knows which sampled branches failed even when
    /// the branch tried after them was too short to be sampled. Empty in older profiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub later_branches: Vec<LaterBranch>,
    /// The files the native frames were symbolized from (a frame's `module` is a `name`), with
    /// their build ids, for tools that match profiles to binaries (pprof's mappings). Empty in
    /// profiles from before 2026-11-26 and in those without native stacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<ModuleFile>,
    /// The processes recorded, the program first, when `run` followed its children (or `attach
    /// --children` a process's): a thread's and an image's `process` index this. Empty when
    /// one process was recorded (the one `meta.pid` names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<Process>,
}

/// A process of a recording that followed a program's children (see [`Profile::processes`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// Its id.
    pub pid: u32,
    /// The id of the process it was found as a child of; absent for the program itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u32>,
    /// Its command line as last seen while it was recorded (after an `exec`, the new program's).
    pub command: Vec<String>,
}

impl Process {
    /// Its program's name: the command's first word without its directory.
    pub fn program(&self) -> &str {
        let first = self.command.first().map_or("", String::as_str);
        first.rsplit('/').next().unwrap_or(first)
    }
}

/// A file native frames were found in (see [`Profile::modules`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleFile {
    /// Its file name, as frames' `module` give it (`[vdso]` for the vdso).
    pub name: String,
    /// Its path in the target's file system (may no longer exist).
    pub path: String,
    /// Its GNU build id in hex, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// It holds the C library: it defines `__libc_start_main` (glibc's and musl's `libc.so`, a
    /// statically linked program). Rules that name `libc.so` match its functions too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub c_library: bool,
}

/// A later branch (see [`Profile::later_branches`]): its feature and its payload (an
/// alternative's, whose detail gives the choice, the branch and the offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LaterBranch {
    /// Index into [`Profile::features`].
    pub feature: u32,
    /// Index into [`Profile::payloads`].
    pub payload: u32,
}

/// A program image the process ran (see [`Profile::images`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The process's name while it ran (`/proc/PID/comm`).
    pub name: String,
    /// Index into [`Profile::processes`]: the process that ran it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub process: u32,
}

/// What kind of instance a payload names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadKind {
    /// `file:line:column` of the code that marked.
    Location,
    /// A name given by the program.
    Name,
    /// The return address of a call that marked (C ABI, no payload), as `0x…` until symbolized.
    CallSite,
    /// An alternative a parser tried: `choice, branch N` (the offset in the payload's detail).
    Alternative,
    /// A check at a boundary: `value (from -> to)`.
    Boundary,
    /// A label's value, published by the program by the custom-labels ABI or in an
    /// OpenTelemetry thread context (its key is the feature; `program/custom_labels.rs`,
    /// `program/otel_context.rs`), not pushed from a stack frame.
    Label,
}

/// An instance payload.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Payload {
    /// Location or name.
    pub kind: PayloadKind,
    /// Display text: `file:line:column` or the name. Payloads with the same text are one
    /// instance in the report, whatever their `detail` (an alternative's offset).
    pub text: String,
    /// What an alternative or a boundary mark carries besides its text; absent for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
}

/// The structure of an alternative's or a boundary's payload (see `fsprof_shim::abi`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Detail {
    /// An alternative a parser tried: `Feature::mark_alternative`.
    Alternative {
        /// The choice point.
        choice: String,
        /// Which of its branches (0 the first).
        branch: u32,
        /// The input offset the branch started at.
        offset: u64,
    },
    /// A check at a boundary between two components: `Feature::mark_boundary`.
    Boundary {
        /// What is checked.
        value: String,
        /// The component on the calling side.
        from: String,
        /// The component on the called side.
        to: String,
    },
}

/// A mark stack, root first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stack {
    /// Marks and antimarks, outermost first.
    pub frames: Vec<Frame>,
    /// The thread's real depth, when it was deeper than the frames recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_depth: Option<u32>,
}

/// One mark (with a payload) or antimark (without).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Index into [`Profile::features`].
    pub feature: u32,
    /// Index into [`Profile::payloads`]; absent for an antimark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<u32>,
    /// Pushed by the agent around a libc call (a built-in feature), not by the program.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub builtin: bool,
}

/// One native frame, symbolized: a function, or a function inlined into another (then the frame
/// of the function it was inlined into comes right before it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NativeFrame {
    /// Demangled function name without Rust's hash suffix; `module+0xoffset` when unknown.
    pub function: String,
    /// Source file, when debug information says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Source line, when debug information says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// File name of the executable or library (`[vdso]` for the vdso).
    pub module: String,
    /// Whether this function was inlined into the previous (outer) frame.
    #[serde(default)]
    pub inlined: bool,
    /// For the innermost function at a caller's return address: the function its call calls,
    /// by the call instruction (`symbolize::call_targets`), when that names one. Known even
    /// where the callee left no frame (a function that ends by jumping to another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<Callee>,
}

/// A function a call instruction calls: its symbol, and the file that defines it (for a symbol
/// imported through the linkage table, the library its version names: `libc.so.6`; empty when
/// unknown).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Callee {
    pub function: String,
    pub module: String,
}

/// A sample's native call stack, root first, and where its marks were pushed in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NativeStack {
    /// Indexes into [`Profile::native_frames`], outermost (the thread's root) first.
    pub frames: Vec<u32>,
    /// For each frame of the sample's mark stack (outermost first): how many native frames come
    /// before it, i.e. the mark was pushed by `frames[marks_at[i] - 1]` (0: before every frame,
    /// which happens when it was pushed in a part of the stack that was not unwound). Never
    /// decreasing, at most `frames.len()`.
    pub marks_at: Vec<u32>,
    /// Unwinding stopped before the thread's root (`_start`, the thread start routine): frames
    /// are missing at the root end of `frames`.
    #[serde(default)]
    pub truncated: bool,
    /// The mark stack (index into [`Profile::stacks`]) at the instant this native stack was
    /// taken, when it differs from its samples' own marks (with the perf backend the stack is
    /// taken a moment after the sample's marks were read; see `sampler.rs`). `marks_at` then
    /// places these marks, and flamegraphs draw them; the tables count the samples' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<u32>,
}

/// A thread of the target.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Thread {
    /// Kernel thread id.
    pub tid: u32,
    /// Name when first seen.
    pub name: String,
    /// Index into [`Profile::processes`]: the process it belongs to.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub process: u32,
}

/// Samples of one thread with one mark stack.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SampleGroup {
    /// Index into [`Profile::threads`].
    pub thread: u32,
    /// Index into [`Profile::stacks`].
    pub stack: u32,
    /// Index into [`Profile::native_stacks`]; absent when recorded without native stacks
    /// (`--no-native`) or when the thread's stack could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<u32>,
    /// Number of samples.
    pub count: u64,
    /// Wall time the samples stand for.
    pub wall_ns: u64,
    /// Of that, the intervals of samples that found the thread running or waiting for a CPU.
    pub active_ns: u64,
    /// Index into [`Profile::images`]: which program the process was running.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub image: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl Profile {
    /// Whether image `image` is the last its process ran (true for an image not in the table:
    /// older profiles have none).
    pub fn is_last_image(&self, image: u32) -> bool {
        let Some(this) = self.images.get(image as usize) else {
            return true;
        };
        !self.images[image as usize + 1..]
            .iter()
            .any(|later| later.process == this.process)
    }

    /// For each payload id, the instance it counts for: the first payload with the same text
    /// (alternatives tried at different offsets are one instance).
    pub fn instance_ids(&self) -> Vec<u32> {
        let mut first: HashMap<&str, u32> = HashMap::new();
        (0..self.payloads.len() as u32)
            .map(|id| *first.entry(&self.payloads[id as usize].text).or_insert(id))
            .collect()
    }

    /// Writes the profile as `dir/profile.json`, whole or not at all (`os/output.rs`).
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(FILE_NAME);
        let json = self.to_json()?;
        crate::os::output::write(&path, &json)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// The profile as saved.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).context("serialising the profile")
    }

    /// Loads a profile from a file, or from `profile.json` in a directory.
    pub fn load(path: &Path) -> Result<Profile> {
        let file = if path.is_dir() {
            path.join(FILE_NAME)
        } else {
            path.to_owned()
        };
        let bytes = read_bounded(&file)?;
        Profile::parse(&bytes, &file)
    }

    /// A profile from the bytes of a profile file (`file` names it in errors): checked (every
    /// index into its table, stack depths bounded) and its texts sanitised, or an error.
    pub fn parse(bytes: &[u8], file: &Path) -> Result<Profile> {
        let mut profile: Profile = serde_json::from_slice(bytes)
            .with_context(|| format!("{} is not an fsprof profile", file.display()))?;
        if profile.format != FORMAT {
            bail!(
                "{} is not an fsprof profile (format {:?})",
                file.display(),
                profile.format
            );
        }
        if profile.version > VERSION {
            bail!(
                "{} has profile format version {}, this fsprof reads up to {VERSION}: upgrade fsprof",
                file.display(),
                profile.version
            );
        }
        profile
            .check()
            .with_context(|| format!("{} is damaged", file.display()))?;
        profile.sanitise();
        Ok(profile)
    }

    /// Checks that every index points into its table and that stacks are of a sane size.
    fn check(&self) -> Result<()> {
        for stack in &self.stacks {
            if stack.frames.len() > MAX_STACK_FRAMES {
                bail!(
                    "a stack has {} frames (at most {MAX_STACK_FRAMES})",
                    stack.frames.len()
                );
            }
            for frame in &stack.frames {
                if frame.feature as usize >= self.features.len()
                    || frame
                        .payload
                        .is_some_and(|p| p as usize >= self.payloads.len())
                {
                    bail!("a stack refers to a missing feature or payload");
                }
            }
        }
        for native in &self.native_stacks {
            if native.frames.len() > MAX_NATIVE_FRAMES * 4
                || native
                    .frames
                    .iter()
                    .any(|f| *f as usize >= self.native_frames.len())
            {
                bail!("a native stack is too deep or refers to a missing frame");
            }
            let in_order = native.marks_at.windows(2).all(|w| w[0] <= w[1]);
            let inside = native
                .marks_at
                .last()
                .is_none_or(|last| *last as usize <= native.frames.len());
            if !in_order || !inside {
                bail!("a native stack places its marks out of order");
            }
        }
        for group in &self.samples {
            if group.thread as usize >= self.threads.len()
                || group.stack as usize >= self.stacks.len()
            {
                bail!("a sample refers to a missing thread or stack");
            }
            if let Some(native) = group.native {
                let Some(native) = self.native_stacks.get(native as usize) else {
                    bail!("a sample refers to a missing native stack");
                };
                let marks = native.marks.unwrap_or(group.stack) as usize;
                let Some(marks) = self.stacks.get(marks) else {
                    bail!("a native stack refers to a missing mark stack");
                };
                if native.marks_at.len() != marks.frames.len() {
                    bail!("a sample's native stack places another number of marks than it has");
                }
            }
        }
        Ok(())
    }

    /// Replaces control and bidi characters in every text that reaches a terminal: a profile is a
    /// file anyone may have written.
    fn sanitise(&mut self) {
        let clean = |text: &mut String| *text = clean(text);
        self.features.iter_mut().for_each(clean);
        for payload in &mut self.payloads {
            clean(&mut payload.text);
            match &mut payload.detail {
                Some(Detail::Alternative { choice, .. }) => clean(choice),
                Some(Detail::Boundary { value, from, to }) => {
                    [value, from, to].into_iter().for_each(clean)
                }
                None => {}
            }
        }
        self.threads.iter_mut().for_each(|t| clean(&mut t.name));
        self.images.iter_mut().for_each(|i| clean(&mut i.name));
        for process in &mut self.processes {
            process.command.iter_mut().for_each(clean);
        }
        for module in &mut self.modules {
            clean(&mut module.name);
            clean(&mut module.path);
            if let Some(id) = &mut module.build_id {
                clean(id);
            }
        }
        for frame in &mut self.native_frames {
            clean(&mut frame.function);
            clean(&mut frame.module);
            if let Some(file) = &mut frame.file {
                clean(file);
            }
        }
        let meta = &mut self.meta;
        meta.command
            .iter_mut()
            .chain(meta.notes.iter_mut())
            .chain(meta.builtin_features.iter_mut())
            .for_each(clean);
        for text in [
            &mut meta.end,
            &mut meta.mode,
            &mut meta.fsprof_version,
            &mut meta.sampling.sampler_priority,
            &mut meta.sampling.realtime_refused,
        ] {
            clean(text);
        }
    }
}

/// The most bytes a profile file may have: a long recording of a large program writes tens of
/// megabytes; this leaves room for a hundred times that, and refuses what no recording makes.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// The bytes of the profile file `file`: refused, with the reason, when it is not a regular file
/// (a FIFO would block the read, a device never end it) or is larger than [`MAX_FILE_BYTES`].
fn read_bounded(file: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: opening a FIFO must not wait for a writer before it is refused.
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let meta = handle
        .metadata()
        .with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        bail!(
            "{} is not a regular file: give fsprof report the directory fsprof run or attach wrote, or its profile.json",
            file.display()
        );
    }
    if meta.len() > MAX_FILE_BYTES {
        bail!(
            "{} has {} MB, more than the {} MB a profile may have: it is not one fsprof wrote",
            file.display(),
            meta.len() >> 20,
            MAX_FILE_BYTES >> 20
        );
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    handle
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        bail!(
            "{} grew past {} MB while it was read",
            file.display(),
            MAX_FILE_BYTES >> 20
        );
    }
    Ok(bytes)
}

mod builder;
#[cfg(test)]
pub(crate) mod fixtures;
mod merge;
mod meta;
mod native_table;
pub use builder::{ProfileBuilder, RawNativeStack, Snapshot, Symbolize};
pub use merge::merge;
pub use meta::{
    BeyondCopy, Meta, MissingSymbols, NativeMeta, PerfLosses, ReadingMeta, SamplingMeta, Stops,
    UnnamedModule, UnseenThreads,
};
/// `text` safe to print on a terminal: control characters (escape sequences) and the bidi and
/// other invisible format characters that can make text display as something else are replaced
/// by U+FFFD. Everything fsprof prints that came from a target or a file goes through this.
pub fn clean(text: &str) -> String {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
    };
    if text.chars().any(unsafe_char) {
        text.chars()
            .map(|c| if unsafe_char(c) { '\u{FFFD}' } else { c })
            .collect()
    } else {
        text.to_owned()
    }
}
