//! Applying rules to a profile: each sample group with a native stack gets, in its mark stack,
//! a built-in mark of every feature whose rule matches a frame of that stack, placed at the
//! outermost matching frame (`marks_at`), with the program's call site as its instance; and an
//! antimark of the features it is in where the program's own code is called back from inside
//! them (a comparator inside a sort), until a matching frame further in starts the feature again.
//! The marks are built-in ones (`Frame::builtin`), as the agent's were: inside a program's own
//! mark of the same feature they count for that mark, and blocked time inside them alone is
//! kept apart, as for every built-in feature (`analysis::attribution`).
//!
//! Work is done once per distinct native frame (which rules match it, whose code it is), once
//! per distinct native stack (where the marks go) and once per distinct pair of mark stack and
//! native stack (the merged stacks). Samples without a native stack are left as they are. Not
//! here: the patterns themselves (`pattern.rs`), counting (`analysis`).

use super::pattern::FrameNames;
use super::RuleSet;
use crate::profile::{clean, PayloadKind};
use crate::profile::{Frame, NativeFrame, NativeStack, Payload, Profile, Stack, MAX_STACK_FRAMES};
use crate::symbolize::call_sites::{short_path, NOT_FOUND};
use crate::symbolize::runtime_code;
use std::collections::{HashMap, HashSet};

/// Applies `rules` to `profile`'s samples (see the module's header); adds a note naming the
/// features found this way, and counts them among the built-in features.
pub fn apply(profile: &mut Profile, rules: &RuleSet) {
    if rules.is_empty() || profile.native_stacks.is_empty() {
        return;
    }
    let c_libraries: HashSet<String> = (profile.modules.iter())
        .filter(|module| module.c_library)
        .map(|module| module.name.clone())
        .collect();
    let program = Program::of(&profile.native_frames, &c_libraries);
    let mut classes: Vec<Class> = (profile.native_frames.iter())
        .map(|frame| Class::of(frame, rules, &program, &c_libraries))
        .collect();
    if (classes.iter()).all(|class| class.features.is_empty() && class.calls.is_empty()) {
        return;
    }
    // Rules to features: only those of rules that matched a frame join the profile's features.
    let mut ids: HashMap<u32, u32> = HashMap::new();
    for class in &mut classes {
        for list in [&mut class.features, &mut class.calls] {
            let mut features = Vec::with_capacity(list.len());
            for &rule in list.iter() {
                let id = *ids
                    .entry(rule)
                    .or_insert_with(|| feature_id(profile, &rules.rules[rule as usize].feature));
                if !features.contains(&id) {
                    features.push(id);
                }
            }
            *list = features;
        }
    }
    let mut payloads = Payloads::of(profile);
    let overlays: Vec<Vec<(u32, Frame)>> = (profile.native_stacks.iter())
        .map(|native| {
            overlay(
                &native.frames,
                &classes,
                &profile.native_frames,
                &mut payloads,
            )
        })
        .collect();
    payloads.finish(profile);

    let mut merged = Merged::of(profile);
    let mut samples = std::mem::take(&mut profile.samples);
    let mut found: HashSet<u32> = HashSet::new();
    for group in &mut samples {
        let Some(native) = group.native else { continue };
        let overlay = &overlays[native as usize];
        if overlay.is_empty() {
            continue;
        }
        found.extend(overlay.iter().map(|(_, frame)| frame.feature));
        let (stack, native) = merged.pair(group.stack, native, overlay);
        group.stack = stack;
        group.native = Some(native);
    }
    profile.samples = samples;
    merged.finish(profile);
    note(profile, rules, &ids, &found);
}

/// The id of feature `name`, added if the profile has none of that name.
fn feature_id(profile: &mut Profile, name: &str) -> u32 {
    match profile.features.iter().position(|f| f == name) {
        Some(id) => id as u32,
        None => {
            profile.features.push(name.to_owned());
            (profile.features.len() - 1) as u32
        }
    }
}

/// Which code is the program's own, beyond the runtime's: the crates (first path segments) of
/// the functions whose source file is outside Cargo's registry and the toolchain, and of the
/// program's `main`.
struct Program {
    crates: HashSet<String>,
    /// A Rust program: its C `main` is the shim rustc makes, which starts Rust's runtime (whose
    /// own calls before the program's `main`, reading `/proc/self/maps` for the main thread's
    /// stack, are the runtime's, not a call site in the program).
    rust: bool,
}

impl Program {
    fn of(frames: &[NativeFrame], c_libraries: &HashSet<String>) -> Program {
        let mut crates = HashSet::new();
        for frame in frames {
            if is_runtime(frame, c_libraries) {
                continue;
            }
            let Some(krate) = crate_of(&frame.function) else {
                continue;
            };
            let own_source = frame.file.as_deref().is_some_and(|f| !is_dependency(f));
            let is_main = frame.function == format!("{krate}::main");
            if own_source || is_main {
                crates.insert(krate.to_owned());
            }
        }
        let rust = (frames.iter()).any(|frame| frame.function.starts_with("std::rt::lang_start"));
        Program { crates, rust }
    }

    /// Whether `frame` (not the runtime's) is the program's own code.
    fn owns(&self, frame: &NativeFrame) -> bool {
        if let Some(file) = &frame.file {
            return !is_dependency(file);
        }
        match crate_of(&frame.function) {
            Some(krate) => self.crates.contains(krate),
            // A C function, or code without a name: the program's, as for call sites.
            None => true,
        }
    }
}

/// What a native frame is, for the rules.
#[derive(Clone, Debug, Default)]
struct Class {
    /// The features (ids in the profile; first, of the rules) whose rules match it.
    features: Vec<u32>,
    /// The program's own code, unmatched: called from inside a feature, it is called back
    /// (the feature's antimark).
    own: bool,
    /// Neither the runtime's nor matched: a call site (the program's, or a dependency's, as
    /// the agent's call sites are).
    call_site: bool,
    /// The features whose rules match the function its call calls (`NativeFrame::calls`): the
    /// frames after it are in them, whether or not the callee left a frame of its own.
    calls: Vec<u32>,
}

impl Class {
    fn of(
        frame: &NativeFrame,
        rules: &RuleSet,
        program: &Program,
        c_libraries: &HashSet<String>,
    ) -> Class {
        let own_type = |path: &str| {
            path.split("::")
                .next()
                .is_some_and(|krate| program.crates.contains(krate))
        };
        let names = FrameNames::new(&frame.function, frame.file.as_deref(), own_type);
        let matched = matching(rules, &names, &frame.module, c_libraries);
        let calls = match &frame.calls {
            Some(callee) => {
                let names = FrameNames::new(&callee.function, None, own_type);
                matching(rules, &names, &callee.module, c_libraries)
            }
            None => Vec::new(),
        };
        let runtime = is_runtime(frame, c_libraries) || (program.rust && frame.function == "main");
        Class {
            own: matched.is_empty() && !runtime && program.owns(frame),
            call_site: matched.is_empty() && !runtime,
            features: matched,
            calls,
        }
    }
}

/// The rules (indexes) a pattern of which matches a function of `names` in module `module`; a
/// module among `c_libraries` (it holds the C library: a static program, musl's) answers to
/// `libc.so` as well, the name the catalog's C patterns give.
fn matching(
    rules: &RuleSet,
    names: &FrameNames,
    module: &str,
    c_libraries: &HashSet<String>,
) -> Vec<u32> {
    let c_library = c_libraries.contains(module);
    (rules.rules.iter().enumerate())
        .filter(|(_, rule)| {
            (rule.patterns.iter())
                .any(|p| p.matches(names, module) || (c_library && p.matches(names, C_LIBRARY)))
        })
        .map(|(index, _)| index as u32)
        .collect()
}

/// The file name a module holding the C library answers to in patterns (glibc's).
const C_LIBRARY: &str = "libc.so.6";

/// Whether `frame` is the runtime's. In a program that holds the C library (linked statically),
/// the library's functions are those without a source file: the program's own have DWARF,
/// the C library's archive has none (without `-g`, every function of such a program is taken
/// for the library's, and its call sites are not found).
fn is_runtime(frame: &NativeFrame, c_libraries: &HashSet<String>) -> bool {
    runtime_code::is_runtime_module(&frame.module)
        || runtime_code::is_runtime_function(&frame.function, frame.file.as_deref())
        || (frame.file.is_none() && c_libraries.contains(&frame.module))
}

/// Whether a source file is a dependency's (Cargo's registry or git checkouts, vendored crates)
/// or the toolchain's: Rust's standard library (`/rustc/HASH/library/...`) and C and C++ system
/// headers, whose templates and inline functions are compiled into the program (std::regex's
/// matcher, inside `regex_search`, is not the program's code called back).
fn is_dependency(file: &str) -> bool {
    file.contains("/registry/src/")
        || file.contains("/git/checkouts/")
        || file.contains("/vendor/")
        || file.starts_with("/rustc/")
        || file.starts_with("/usr/include/")
        || file.starts_with("/usr/local/include/")
        || (file.starts_with("/usr/lib/gcc/") && file.contains("/include/"))
}

/// The crate (or C++ namespace) of a function: its path's first segment, if it has one.
fn crate_of(function: &str) -> Option<&str> {
    let name = function.trim_start_matches('<');
    let end = name.find("::")?;
    let head = &name[..end];
    (!head.is_empty() && head.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(head)
}

/// Where the rules' marks go in one native stack (root first): (how many frames come before the
/// mark, the mark), outermost first.
fn overlay(
    frames: &[u32],
    classes: &[Class],
    named: &[NativeFrame],
    payloads: &mut Payloads,
) -> Vec<(u32, Frame)> {
    let mut out = Vec::new();
    let mut active: Vec<u32> = Vec::new();
    for (at, &frame) in frames.iter().enumerate() {
        let class = &classes[frame as usize];
        if class.features.is_empty() && class.own && !active.is_empty() {
            // Called back: the features it is inside stop here.
            for &feature in &active {
                out.push((at as u32, antimark(feature)));
            }
            active.clear();
        }
        // In a feature from this frame on, or, by its call, from the next one on.
        let callee = named[frame as usize].calls.as_ref();
        let starts = (class.features.iter()).map(|&feature| (feature, at, None));
        let called = (class.calls.iter())
            .filter(|_| at + 1 < frames.len())
            .map(|&feature| (feature, at + 1, callee.map(|c| c.function.as_str())));
        for (feature, from, callee) in starts.chain(called).collect::<Vec<_>>() {
            if active.contains(&feature) {
                continue;
            }
            let site = (frames[..from].iter().enumerate().rev())
                .find(|&(_, &outer)| classes[outer as usize].call_site);
            let payload = match (site, callee) {
                (Some((at, &outer)), _) => {
                    // A call site in a function without a name is told by its nearest named
                    // caller's in the program (`calculate_dominance_info > cc1plus+0x9b2ca0`;
                    // not the C library's start, which calls every `main`).
                    let site = &named[outer as usize];
                    let caller = (!has_name(site))
                        .then(|| {
                            (frames[..at].iter().rev().take(MAX_CALLERS_LOOKED_AT))
                                .filter(|&&frame| classes[frame as usize].call_site)
                                .map(|&frame| &named[frame as usize])
                                .find(|frame| has_name(frame))
                        })
                        .flatten();
                    payloads.call_site(site, caller)
                }
                (None, Some(callee)) => payloads.not_found(callee),
                (None, None) => payloads.not_found(&named[frame as usize].function),
            };
            out.push((
                from as u32,
                Frame {
                    feature,
                    payload: Some(payload),
                    builtin: true,
                },
            ));
            active.push(feature);
        }
    }
    out
}

/// Most frames out from an unnamed call site looked at for a named caller.
const MAX_CALLERS_LOOKED_AT: usize = 16;

/// Whether `frame`'s function has a name (not `module+0x…` nor `0x…`, what symbolization gives
/// code it cannot name).
fn has_name(frame: &NativeFrame) -> bool {
    let unnamed = frame.function.starts_with("0x")
        || (frame.function.strip_prefix(frame.module.as_str()))
            .is_some_and(|rest| rest.starts_with("+0x"));
    !unnamed
}

fn antimark(feature: u32) -> Frame {
    Frame {
        feature,
        payload: None,
        builtin: true,
    }
}

/// The call-site payloads, by text: the profile's, and those added.
struct Payloads {
    ids: HashMap<String, u32>,
    added: Vec<Payload>,
    first_new: u32,
}

impl Payloads {
    fn of(profile: &Profile) -> Payloads {
        let ids = (profile.payloads.iter().enumerate())
            .filter(|(_, p)| p.kind == PayloadKind::CallSite && p.detail.is_none())
            .map(|(id, p)| (p.text.clone(), id as u32))
            .collect();
        Payloads {
            ids,
            added: Vec::new(),
            first_new: profile.payloads.len() as u32,
        }
    }

    /// The instance of a call made at `frame`: `function (file:line)`, as the agent's call
    /// sites are named; `caller > function` where a `caller` is given.
    fn call_site(&mut self, frame: &NativeFrame, caller: Option<&NativeFrame>) -> u32 {
        let function = match caller {
            Some(caller) => format!("{} > {}", clean(&caller.function), clean(&frame.function)),
            None => clean(&frame.function),
        };
        let text = match (&frame.file, frame.line) {
            (Some(file), Some(line)) => {
                format!("{function} ({}:{line})", clean(short_path(file)))
            }
            (Some(file), None) => format!("{function} ({})", clean(short_path(file))),
            _ => function,
        };
        self.id(text)
    }

    /// The instance of a feature whose call site is not in the stack (it was not unwound that
    /// far): named after the feature's outermost function.
    fn not_found(&mut self, function: &str) -> u32 {
        let text = format!("{NOT_FOUND} {}", clean(function));
        self.id(text)
    }

    fn id(&mut self, text: String) -> u32 {
        if let Some(&id) = self.ids.get(&text) {
            return id;
        }
        let id = self.first_new + self.added.len() as u32;
        self.added.push(Payload {
            kind: PayloadKind::CallSite,
            text: text.clone(),
            detail: None,
        });
        self.ids.insert(text, id);
        id
    }

    fn finish(self, profile: &mut Profile) {
        profile.payloads.extend(self.added);
    }
}

/// The merged mark stacks and native stacks, interned with the profile's own.
struct Merged {
    stacks: Vec<Stack>,
    stack_ids: HashMap<Stack, u32>,
    natives: Vec<NativeStack>,
    native_ids: HashMap<NativeStack, u32>,
    pairs: HashMap<(u32, u32), (u32, u32)>,
}

impl Merged {
    fn of(profile: &mut Profile) -> Merged {
        let stacks = std::mem::take(&mut profile.stacks);
        let natives = std::mem::take(&mut profile.native_stacks);
        Merged {
            stack_ids: (stacks.iter().cloned().enumerate())
                .map(|(id, s)| (s, id as u32))
                .collect(),
            native_ids: (natives.iter().cloned().enumerate())
                .map(|(id, s)| (s, id as u32))
                .collect(),
            stacks,
            natives,
            pairs: HashMap::new(),
        }
    }

    /// The mark stack and native stack of samples of mark stack `stack` and native stack
    /// `native` once `overlay`'s marks are in.
    fn pair(&mut self, stack: u32, native: u32, overlay: &[(u32, Frame)]) -> (u32, u32) {
        if let Some(&done) = self.pairs.get(&(stack, native)) {
            return done;
        }
        let old = self.natives[native as usize].clone();
        let sample = self.stacks[stack as usize].clone();
        let depth = old.frames.len() as u32;
        let (own, new_native) = match old.marks {
            // `marks_at` places the sample's own marks.
            None => {
                let (frames, marks_at) = merge(&sample.frames, &old.marks_at, overlay, depth);
                let own = self.stack(&sample, frames);
                (own, NativeStack { marks_at, ..old })
            }
            // `marks_at` places the marks the stack was taken with, which differ from the
            // sample's: the rules' marks go after the sample's own, unplaced.
            Some(taken) => {
                let taken_stack = self.stacks[taken as usize].clone();
                let (frames, marks_at) = merge(&taken_stack.frames, &old.marks_at, overlay, depth);
                let taken = self.stack(&taken_stack, frames);
                let mut frames = sample.frames.clone();
                frames.extend(overlay.iter().map(|(_, frame)| *frame));
                let own = self.stack(&sample, frames);
                (
                    own,
                    NativeStack {
                        marks_at,
                        marks: Some(taken),
                        ..old
                    },
                )
            }
        };
        let merged = (
            own,
            intern(&mut self.natives, &mut self.native_ids, new_native),
        );
        self.pairs.insert((stack, native), merged);
        merged
    }

    /// The id of `like` with `frames` instead of its own (at most [`MAX_STACK_FRAMES`]).
    fn stack(&mut self, like: &Stack, mut frames: Vec<Frame>) -> u32 {
        frames.truncate(MAX_STACK_FRAMES);
        let stack = Stack {
            frames,
            truncated_depth: like.truncated_depth,
        };
        intern(&mut self.stacks, &mut self.stack_ids, stack)
    }

    fn finish(self, profile: &mut Profile) {
        profile.stacks = self.stacks;
        profile.native_stacks = self.natives;
    }
}

fn intern<T: Clone + Eq + std::hash::Hash>(
    table: &mut Vec<T>,
    ids: &mut HashMap<T, u32>,
    value: T,
) -> u32 {
    if let Some(&id) = ids.get(&value) {
        return id;
    }
    let id = table.len() as u32;
    table.push(value.clone());
    ids.insert(value, id);
    id
}

/// `marks` (placed by `marks_at` in a native stack of `depth` frames) and `overlay`'s marks in
/// one stack, outermost first, with their places. At one place the sample's own mark comes
/// first (it was pushed by the frame before, the rule's marks by the frame itself).
fn merge(
    marks: &[Frame],
    marks_at: &[u32],
    overlay: &[(u32, Frame)],
    depth: u32,
) -> (Vec<Frame>, Vec<u32>) {
    let mut frames = Vec::with_capacity(marks.len() + overlay.len());
    let mut places = Vec::with_capacity(marks.len() + overlay.len());
    let mut rules = overlay.iter().peekable();
    for (i, mark) in marks.iter().enumerate() {
        let place = marks_at.get(i).copied().unwrap_or(depth).min(depth);
        while let Some((at, frame)) = rules.next_if(|&&(at, _)| at < place) {
            frames.push(*frame);
            places.push(*at);
        }
        frames.push(*mark);
        places.push(place);
    }
    for (at, frame) in rules {
        frames.push(*frame);
        places.push(*at);
    }
    (frames, places)
}

/// A note naming the features the rules found, and each among the built-in features.
fn note(profile: &mut Profile, rules: &RuleSet, ids: &HashMap<u32, u32>, found: &HashSet<u32>) {
    let mut by_origin: Vec<(String, Vec<String>)> = Vec::new();
    for (index, rule) in rules.rules.iter().enumerate() {
        let Some(feature) = ids.get(&(index as u32)).filter(|id| found.contains(id)) else {
            continue;
        };
        let name = &profile.features[*feature as usize];
        if !profile.meta.builtin_features.contains(name) {
            profile.meta.builtin_features.push(name.clone());
        }
        let at = match by_origin.iter().position(|(o, _)| *o == rule.origin) {
            Some(at) => at,
            None => {
                by_origin.push((rule.origin.clone(), Vec::new()));
                by_origin.len() - 1
            }
        };
        if !by_origin[at].1.contains(name) {
            by_origin[at].1.push(name.clone());
        }
    }
    if by_origin.is_empty() {
        return;
    }
    let parts: Vec<String> = (by_origin.into_iter())
        .map(|(origin, names)| format!("{} (from {origin})", names.join(", ")))
        .collect();
    profile.meta.notes.push(format!(
        "features found in the native stacks by rules: {}; `fsprof rules` lists the built-in ones and their functions",
        parts.join("; ")
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::counted_marks;
    use crate::profile::fixtures::{build, S};
    use crate::rules::from_spec;

    /// A test frame: its function, file and line, and module.
    type Named = (&'static str, Option<(&'static str, u32)>, &'static str);
    /// A test sample: its marks, its native stack (indexes into FRAMES, root first), and where
    /// its marks are in it.
    type Sampled = (
        Vec<(&'static str, Option<&'static str>)>,
        Vec<u64>,
        Vec<u32>,
    );

    /// The frames the tests' addresses stand for.
    const FRAMES: [Named; 10] = [
        ("main", Some(("src/main.c", 5)), "prog"),
        ("myprog::render", Some(("src/main.rs", 10)), "prog"),
        (
            "alloc::fmt::format",
            Some(("/rustc/abc/library/alloc/src/fmt.rs", 600)),
            "prog",
        ),
        ("core::fmt::write", None, "prog"),
        (
            "<myprog::Point as core::fmt::Display>::fmt",
            Some(("src/main.rs", 20)),
            "prog",
        ),
        ("core::fmt::Formatter::pad", None, "prog"),
        ("myprog::log", Some(("src/main.rs", 30)), "prog"),
        ("write", None, "libc.so.6"),
        ("write", None, "prog"),       // a static program's own copy
        ("prog+0x1230", None, "prog"), // a function without a name
    ];

    /// A profile of `samples`, each (its marks, its native stack as indexes into FRAMES root
    /// first, where its marks are), 1 ms each, with FRAMES's names.
    fn profile(samples: &[Sampled]) -> Profile {
        let samples: Vec<S> = (samples.iter())
            .map(|(marks, stack, marks_at)| S {
                marks: marks.clone(),
                native: Some((stack.clone(), marks_at.clone(), false)),
                tid: 1,
                wall_us: 1000,
                active_us: 1000,
            })
            .collect();
        let mut profile = build(&samples);
        for frame in &mut profile.native_frames {
            let n: usize = frame.function[1..].parse().unwrap();
            let (function, place, module) = FRAMES[n];
            frame.function = function.into();
            frame.file = place.map(|(file, _)| file.into());
            frame.line = place.map(|(_, line)| line);
            frame.module = module.into();
        }
        profile
    }

    fn rules(specs: &[&str]) -> RuleSet {
        RuleSet {
            rules: specs.iter().map(|s| from_spec(s).unwrap()).collect(),
        }
    }

    /// What each sample counts for: (feature, instance) names.
    fn counted(profile: &Profile) -> Vec<Vec<(String, String)>> {
        (profile.samples.iter())
            .map(|group| {
                counted_marks(&profile.stacks[group.stack as usize])
                    .into_iter()
                    .map(|(f, p)| {
                        (
                            profile.features[f as usize].clone(),
                            profile.payloads[p as usize].text.clone(),
                        )
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_matching_frame_counts_for_the_programs_call_site_and_callbacks_do_not() {
        let mut p = profile(&[
            (vec![], vec![0, 1, 2, 3], vec![]),    // in the format machinery
            (vec![], vec![0, 1, 2, 3, 4], vec![]), // in the program's Display impl
            (vec![], vec![0, 1, 2, 3, 4, 5], vec![]), // formatting called from that impl
            (vec![], vec![0, 1], vec![]),          // the program alone
        ]);
        apply(&mut p, &rules(&["formatting=core::fmt,alloc::fmt::format"]));
        let site = |s: &str| vec![("formatting".to_owned(), s.to_owned())];
        assert_eq!(
            counted(&p),
            vec![
                site("myprog::render (src/main.rs:10)"),
                vec![],
                site("<myprog::Point as core::fmt::Display>::fmt (src/main.rs:20)"),
                vec![],
            ]
        );
        assert!(p.meta.builtin_features.contains(&"formatting".to_owned()));
        assert!(p
            .meta
            .notes
            .iter()
            .any(|n| n.contains("formatting (from --feature)")));
    }

    #[test]
    fn a_call_site_without_a_name_is_told_by_its_nearest_named_caller() {
        let mut p = profile(&[
            (vec![], vec![0, 9, 7], vec![]),
            (vec![], vec![0, 6, 7], vec![]),
        ]);
        apply(&mut p, &rules(&["output=libc.so*!write"]));
        let counted = counted(&p);
        assert_eq!(
            counted[0],
            [("output".to_owned(), "main > prog+0x1230".to_owned())]
        );
        assert_eq!(
            counted[1],
            [(
                "output".to_owned(),
                "myprog::log (src/main.rs:30)".to_owned()
            )]
        );
    }

    #[test]
    fn a_programs_own_mark_of_the_feature_keeps_the_time() {
        let mut p = profile(&[
            (vec![("output", Some("log"))], vec![0, 6, 7], vec![2]),
            (vec![], vec![0, 6, 7], vec![]),
        ]);
        apply(&mut p, &rules(&["output=libc.so*!write"]));
        let counted = counted(&p);
        assert_eq!(counted[0], vec![("output".to_owned(), "log".to_owned())]);
        assert_eq!(
            counted[1],
            vec![(
                "output".to_owned(),
                "myprog::log (src/main.rs:30)".to_owned()
            )]
        );
        // The rule's mark sits at the frame that matched, after the program's.
        let native = &p.native_stacks[p.samples[0].native.unwrap() as usize];
        assert_eq!(native.marks_at, vec![2, 2]);
        assert_eq!(p.features.iter().filter(|f| *f == "output").count(), 1);
    }

    #[test]
    fn a_program_holding_the_c_library_answers_to_its_patterns() {
        let static_program = || profile(&[(vec![], vec![0, 6, 8], vec![])]);
        let output = rules(&["output=libc.so*!write"]);
        let mut p = static_program();
        apply(&mut p, &output);
        assert_eq!(counted(&p), vec![vec![]], "a `write` of the program's own");
        let mut p = static_program();
        p.modules.push(crate::profile::ModuleFile {
            name: "prog".into(),
            path: "/bin/prog".into(),
            build_id: None,
            c_library: true,
        });
        apply(&mut p, &output);
        let site = "myprog::log (src/main.rs:30)".to_owned();
        assert_eq!(counted(&p), vec![vec![("output".to_owned(), site)]]);
    }

    #[test]
    fn samples_without_a_match_or_a_native_stack_are_left_alone() {
        let mut p = profile(&[(vec![("parse", Some("x"))], vec![0, 1], vec![1])]);
        let before = (
            p.stacks.clone(),
            p.native_stacks.clone(),
            p.samples[0].stack,
        );
        apply(&mut p, &RuleSet::catalog());
        assert_eq!(
            (
                p.stacks.clone(),
                p.native_stacks.clone(),
                p.samples[0].stack
            ),
            before
        );
        assert!(p.meta.notes.is_empty());
    }
}
