//! Call-site instances (marks whose payload is a return address: the agent's built-in features
//! and `fsprof_mark(feature, NULL)`): which frame is the program's call site, the modules they
//! lie in, kept while the target lives, and their names, `function (file:line)`, found with the
//! symbolizer.
//!
//! **Which frame.** The agent records the return address of the interposed call and the stack
//! pointer at its entry, whoever called (it does nothing per call that depends on the caller).
//! When that address is the runtime's (libc's `strdup` calling `malloc`, Rust's
//! `FileDesc::write` calling `write`: see `runtime_code.rs`), the call site is the first return
//! address outward that is not: taken from the native stack captured with the marks when the
//! sample has one, else unwound (DWARF CFI) from a copy of the thread's stack read from the mark's
//! stack pointer up, right after its marks. That copy is trusted when the thread's marks did not
//! move meanwhile (the slot's sequence is the same: the call is still under way, its callers'
//! frames unchanged) or, failing that, when the mark's return address is still at its stack
//! pointer (the same function, called from the same frame); else it is the site last found for
//! the same address at the same stack pointer of the thread, if any, else the one site all
//! calls through that address were found to come from, if there is one; else it gets a stand-in
//! payload, named after recording from the site found later for the same frame (the thread
//! calling through the same address at the same stack pointer again), or after the runtime's
//! address if none was. Where unwinding stops (a frame whose rule needs the frame pointer, which is
//! not recorded), the rest of the copy is scanned for a return address of the program's code
//! that follows a call instruction.
//!
//! Works without native stacks too (`--no-native`): the memory map is read, and the modules
//! opened through `/proc/PID/map_files`, when a call site falls outside the modules known so far
//! (at most every [`REFRESH`]), so a library loaded late (a Python extension) is found while it is
//! mapped. Also tells whether a feature descriptor lies in the agent library (a built-in
//! feature). In the sampling loop, work is done once per distinct return address, and once per
//! call (a mark's push) whose address is the runtime's.

use crate::native::unwind::{StackView, Unwinder, Unwound, UnwoundFrame};
use crate::program::modules::{self, Mapping, Module};
use crate::program::names;
use crate::program::remote::Remote;
use crate::symbolize::runtime_code;
use crate::symbolize::symbols::Symbolizer;
use fsprof_shim::abi::RecordView;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Before the name of a call whose site in the program was not found (named after the
/// runtime's code that made it).
pub const NOT_FOUND: &str = "[call site not found]";
/// Least time between two reads of the memory map for call sites.
pub const REFRESH: Duration = Duration::from_millis(10);
/// Bytes of a thread's stack read above a mark's stack pointer to find its call site.
const STACK_WINDOW: usize = 32 * 1024;
/// Words of the stack scanned for a return address where unwinding stopped.
const SCAN_WORDS: usize = 1024;
/// Most addresses whose classification is cached, and most calls whose call site is.
const MAX_CACHED: usize = 1 << 16;

/// Where a mark's callers can be found.
pub enum Callers<'a> {
    /// The native stack captured at the instant the marks were copied, innermost first, of the
    /// thread whose own id is `tid`.
    Captured {
        tid: u32,
        frames: &'a [UnwoundFrame],
    },
    /// The live thread (own id `tid`), read now. `generation` changes whenever the thread pushed
    /// a mark since (its slots' sequences); `unchanged` tells whether its marks are still the
    /// ones copied.
    Live {
        tid: u32,
        generation: u64,
        unchanged: &'a mut dyn FnMut() -> bool,
    },
}

/// What the code at a return address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// The program's own (or unknown).
    Program,
    /// The runtime's.
    Runtime,
    /// The runtime's, inside a wait for another thread (see `CallSites::waiting_instead`).
    RuntimeWait,
}

/// How call sites in the runtime's code were resolved.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiteStats {
    /// Calls whose site was found outside the runtime.
    pub resolved: u64,
    /// Calls left at the runtime's address (no program frame found, or the stack moved).
    pub unresolved: u64,
}

/// Call sites found before, kept for the calls that cannot be resolved again.
#[derive(Default)]
struct Memo {
    /// Call sites of live threads' calls, by (thread, generation, stack pointer, address).
    resolved: HashMap<(u32, u64, u64, u64), u64>,
    /// The last call site found for a call by (thread, stack pointer, address).
    last_site: HashMap<(u32, u64, u64), u64>,
    /// The one call site found for an address so far, by address (`None` once calls from two
    /// sites reached it: then it tells nothing).
    only_site: HashMap<u64, Option<u64>>,
    /// Calls left unresolved, by (thread, stack pointer, address): the stand-in payload each
    /// was given, named after recording from the site found later for the same frame (the
    /// same function called again from the same place), if any.
    pending: HashMap<(u32, u64, u64), u64>,
}

/// Stand-in payloads of calls left unresolved have this bit set (no user-space address has).
const PENDING: u64 = 1 << 63;

/// The call sites of a recording and the modules they lie in.
pub struct CallSites {
    /// (payload id, return address).
    sites: Vec<(u32, u64)>,
    /// Names of the call sites of a program image replaced since (by `exec`).
    named: Vec<(u32, String)>,
    modules: Vec<Module>,
    maps: Vec<Mapping>,
    last_read: Option<Instant>,
    /// Some call site lies outside the modules known: the map is read again when next allowed.
    uncovered: bool,
    /// Over `modules`: which addresses are the runtime's, and the names.
    symbolizer: Symbolizer,
    unwinder: Unwinder,
    /// What the code at a return address is, per address.
    runtime: HashMap<u64, Class>,
    /// The agent's `waiting` descriptor for its `locks` descriptor (see `waiting_instead`).
    twins: HashMap<u64, Option<u64>>,
    /// Call sites found before.
    memo: Memo,
    stack: Vec<u8>,
    unwound: Unwound,
    /// How call sites in the runtime were resolved.
    pub stats: SiteStats,
}

impl Default for CallSites {
    fn default() -> Self {
        CallSites::new()
    }
}

impl CallSites {
    /// Nothing recorded yet.
    pub fn new() -> CallSites {
        CallSites {
            sites: Vec::new(),
            named: Vec::new(),
            modules: Vec::new(),
            maps: Vec::new(),
            last_read: None,
            uncovered: false,
            symbolizer: Symbolizer::new(&[]),
            unwinder: Unwinder::new(),
            runtime: HashMap::new(),
            twins: HashMap::new(),
            memo: Memo::default(),
            stack: Vec::new(),
            unwound: Unwound::default(),
            stats: SiteStats::default(),
        }
    }

    /// Records that payload `id` is the call site `address` of process `pid` (read through
    /// thread `via`), loading the module it lies in if it is new.
    pub fn add(&mut self, pid: u32, via: u32, id: u32, address: u64) {
        self.sites.push((id, address));
        if address & PENDING == 0 && !self.covered(address) {
            self.uncovered = true;
            self.settle(pid, || via);
        }
    }

    /// Reads the memory map again if a call site was left outside the known modules because the
    /// previous read was too recent (several new call sites can come within one sample's
    /// stacks); cheap when there is none. Called at every tick; `via` names a live thread of
    /// `pid` to read the map through.
    pub fn settle(&mut self, pid: u32, via: impl FnOnce() -> u32) {
        if !self.uncovered {
            return;
        }
        if self.refresh(pid, via(), false) {
            // Read after the site was seen: whatever is still outside is outside every module.
            self.uncovered = false;
        }
    }

    fn covered(&self, address: u64) -> bool {
        self.modules.iter().any(|m| m.range.contains(&address))
    }

    /// Reads the memory map (unless read less than [`REFRESH`] ago and not `force`) and loads
    /// the modules not known yet; whether it was read.
    fn refresh(&mut self, pid: u32, via: u32, force: bool) -> bool {
        let now = Instant::now();
        if !force && self.last_read.is_some_and(|last| now < last + REFRESH) {
            return false;
        }
        self.last_read = Some(now);
        let Ok(maps) = modules::read_maps(pid, via) else {
            return false;
        };
        let mut added = false;
        for module in modules::modules(pid, &maps, &self.modules) {
            let known = self
                .modules
                .iter()
                .any(|m| m.range.start == module.range.start && m.path == module.path);
            if !known {
                self.symbolizer.add(module.clone());
                self.modules.push(module);
                added = true;
            }
        }
        if added {
            self.unwinder.set_modules(self.modules.clone());
        }
        self.maps = maps;
        true
    }

    /// The call site of the call-site mark `mark` (its payload, a return address) in the
    /// program's own code: the payload itself unless it is the runtime's, else the first caller
    /// outside the runtime that `callers` shows (see the module's documentation).
    pub fn resolve(
        &mut self,
        (pid, via): (u32, u32),
        remote: &Remote,
        mark: &RecordView,
        callers: &mut Callers<'_>,
    ) -> u64 {
        let ret = mark.payload;
        // A call from the program is its own site; one whose code cannot be told yet (its
        // module's map is unreadable: the program is exiting) is looked for as the runtime's.
        if ret == 0 || self.class(pid, via, ret) == Some(Class::Program) {
            return ret;
        }
        let (tid, found, memo_key) = match callers {
            Callers::Captured { tid, frames } => {
                // Stacks taken with other marks (a thread preempted again within a sampling
                // period leaves with its latest sample's stack, older than a call it made
                // since) do not hold the call: the live stack does while the call's return
                // address is still where it was pushed (the call is not over).
                let found = self.in_frames(pid, via, ret, mark.sp, frames).or_else(|| {
                    let call = (ret, mark.sp, frame_pointer(mark));
                    self.on_live_stack((pid, via), remote, call, &mut || false)
                });
                (*tid, self.remember((*tid, mark.sp, ret), found), None)
            }
            Callers::Live {
                tid,
                generation,
                unchanged,
            } => {
                let key = (*tid, *generation, mark.sp, ret);
                if let Some(site) = self.memo.resolved.get(&key) {
                    return *site;
                }
                let call = (ret, mark.sp, frame_pointer(mark));
                let found = self.on_live_stack((pid, via), remote, call, &mut **unchanged);
                if self.memo.resolved.len() >= MAX_CACHED {
                    self.memo.resolved.clear();
                }
                (*tid, self.remember((*tid, mark.sp, ret), found), Some(key))
            }
        };
        let payload = match found {
            Some(site) => {
                self.stats.resolved += 1;
                site
            }
            None => {
                self.stats.unresolved += 1;
                self.stand_in((tid, mark.sp, ret))
            }
        };
        if let Some(key) = memo_key {
            self.memo.resolved.insert(key, payload);
        }
        payload
    }

    /// The stand-in payload of a call left unresolved (see `Memo::pending`), or its runtime
    /// address once too many are kept.
    fn stand_in(&mut self, call: (u32, u64, u64)) -> u64 {
        let next = PENDING | self.memo.pending.len() as u64;
        if self.memo.pending.len() >= MAX_CACHED {
            return self.memo.pending.get(&call).copied().unwrap_or(call.2);
        }
        *self.memo.pending.entry(call).or_insert(next)
    }

    /// Remembers the site `found` for a call by (thread, stack pointer, return address), or,
    /// when none was found (the call was over before its stack could be read, or the native
    /// stack stops short of it), gives the best guess: the site last found for the same call,
    /// else the one site every call through the same return address came from so far (a
    /// runtime function that the program calls from one place only, such as Rust's `File::open`
    /// from one line). With two such sites or none, nothing is guessed.
    fn remember(&mut self, call: (u32, u64, u64), found: Option<u64>) -> Option<u64> {
        let ret = call.2;
        match found {
            Some(site) => {
                if self.memo.last_site.len() >= MAX_CACHED
                    || self.memo.only_site.len() >= MAX_CACHED
                {
                    self.memo.last_site.clear();
                    self.memo.only_site.clear();
                }
                self.memo.last_site.insert(call, site);
                let only = self.memo.only_site.entry(ret).or_insert(Some(site));
                if *only != Some(site) {
                    *only = None;
                }
                Some(site)
            }
            None => self
                .memo
                .last_site
                .get(&call)
                .copied()
                .or_else(|| self.memo.only_site.get(&ret).copied().flatten()),
        }
    }

    /// The first caller outside the runtime in a native stack taken with the marks: the frames
    /// outward from the one `ret` returns into (the frame above the mark's stack pointer).
    fn in_frames(
        &mut self,
        pid: u32,
        via: u32,
        ret: u64,
        sp: u64,
        frames: &[UnwoundFrame],
    ) -> Option<u64> {
        let at = frames
            .iter()
            .position(|frame| frame.cfa > sp && frame.address == ret - 1)?;
        frames[at + 1..]
            .iter()
            .map(|frame| frame.address + 1)
            .find(|&address| self.covered(address) && !self.is_runtime(pid, via, address))
    }

    /// The first caller outside the runtime found in a copy of the live thread's stack above
    /// `sp` (see the module's documentation for when the copy is trusted).
    fn on_live_stack(
        &mut self,
        target: (u32, u32),
        remote: &Remote,
        call: (u64, u64, u64),
        unchanged: &mut dyn FnMut() -> bool,
    ) -> Option<u64> {
        let sp = call.1;
        let mut stack = std::mem::take(&mut self.stack);
        stack.resize(STACK_WINDOW, 0);
        let got = remote.read_partial(sp, &mut stack).unwrap_or(0);
        stack.truncate(got);
        let found = self.search_copy(target, remote, call, &stack, unchanged);
        self.stack = stack;
        found
    }

    fn search_copy(
        &mut self,
        (pid, via): (u32, u32),
        remote: &Remote,
        (ret, sp, bp): (u64, u64, u64),
        stack: &[u8],
        unchanged: &mut dyn FnMut() -> bool,
    ) -> Option<u64> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(stack.get(at..at + 8)?.try_into().ok()?))
        };
        if !unchanged() && word(0) != Some(ret) {
            return None; // the call is over and its frame reused
        }
        let view = StackView::new(sp, stack);
        let mut unwound = std::mem::take(&mut self.unwound);
        self.unwinder
            .unwind_from_call(ret, sp, bp, view, &mut unwound);
        let mut scan_from = sp + 8;
        let mut found = None;
        for frame in unwound.frames.iter().skip(1) {
            let address = frame.address + 1;
            if !self.covered(address) {
                break;
            }
            if !self.is_runtime(pid, via, address) {
                found = Some(address);
                break;
            }
        }
        if let (None, false) = (found, unwound.complete) {
            // Unwinding stopped early: scan what lies above the last frame it could place.
            if let Some(last) = unwound.frames.iter().rev().find(|f| f.cfa != u64::MAX) {
                scan_from = scan_from.max(last.cfa);
            }
            let first = (scan_from - sp) as usize;
            found = (first..stack.len())
                .step_by(8)
                .take(SCAN_WORDS)
                .filter_map(word)
                .find(|&address| {
                    self.covered(address)
                        && !self.is_runtime(pid, via, address)
                        && after_call(remote, address)
                });
        }
        self.unwound = unwound;
        found
    }

    /// Whether the return address `address` lies in the runtime's code: a runtime module, or a
    /// function whose frames at the call (inlined ones included) are all the runtime's.
    /// Code that cannot be told counts as the program's.
    fn is_runtime(&mut self, pid: u32, via: u32, address: u64) -> bool {
        self.class(pid, via, address)
            .is_some_and(|class| class != Class::Program)
    }

    /// What the code at return address `address` is (see [`Class`]), once per address; `None`
    /// while no module known covers it and the memory map cannot be read (decided again once
    /// it may be).
    fn class(&mut self, pid: u32, via: u32, address: u64) -> Option<Class> {
        if let Some(class) = self.runtime.get(&address) {
            return Some(*class);
        }
        if !self.covered(address) && !self.refresh(pid, via, false) {
            return None;
        }
        Some(self.classify(address))
    }

    /// What the code at `address` is, from the modules known (the program's if none covers it).
    fn classify(&mut self, address: u64) -> Class {
        let class = match self.modules.iter().find(|m| m.range.contains(&address)) {
            None => Class::Program,
            Some(module)
                if runtime_code::is_runtime_module(&module.path)
                    || crate::program::modules::is_agent_path(&module.path) =>
            {
                Class::Runtime
            }
            Some(_) => self.classify_function(address),
        };
        if self.runtime.len() >= MAX_CACHED {
            self.runtime.clear();
        }
        self.runtime.insert(address, class);
        class
    }

    /// What the code at `address` is, from the functions (inlined ones included) the symbolizer
    /// finds there: the program's if any is, or if it finds none.
    fn classify_function(&mut self, address: u64) -> Class {
        let frames = self.symbolizer.symbolize(address.saturating_sub(1));
        let runtime = |frame: &crate::profile::NativeFrame| {
            runtime_code::is_runtime_function(&frame.function, frame.file.as_deref())
        };
        if frames.is_empty() || !frames.iter().all(runtime) {
            Class::Program
        } else if frames
            .iter()
            .any(|frame| runtime_code::is_wait_primitive(&frame.function))
        {
            Class::RuntimeWait
        } else {
            Class::Runtime
        }
    }

    /// The agent's `waiting` feature, for a `locks` mark (`feature`, its descriptor) whose call
    /// (return address `ret`) was made by one of the runtime's waits for another thread (a
    /// condition variable's wait, a parker's park: Rust's `Condvar`, channels and `join` wait
    /// with a futex, which the agent marks `locks`, as it does a contended `Mutex`); else `None`.
    pub fn waiting_instead(
        &mut self,
        (pid, via): (u32, u32),
        remote: &Remote,
        feature: u64,
        ret: u64,
    ) -> Option<u64> {
        if self.runtime.get(&ret) != Some(&Class::RuntimeWait)
            && self.class(pid, via, ret) != Some(Class::RuntimeWait)
        {
            return None;
        }
        *self.twins.entry(feature).or_insert_with(|| {
            // The agent's descriptors are an array in the order of its names: `locks` is the
            // fourth, `waiting` the ninth. Checked by name, as read from the target.
            let waiting =
                feature.checked_add(5 * fsprof_shim::abi::FEATURE_DESCRIPTOR_SIZE as u64)?;
            (names::feature_name(remote, feature) == "locks"
                && names::feature_name(remote, waiting) == "waiting")
                .then_some(waiting)
        })
    }

    /// Whether `address` (a feature descriptor) lies in a mapping of the agent library, i.e. is
    /// one of its built-in features.
    pub fn in_agent(&mut self, pid: u32, via: u32, address: u64) -> bool {
        let find = |maps: &[Mapping]| {
            maps.iter()
                .find(|m| m.range.contains(&address))
                .map(|m| crate::program::modules::is_agent_path(&m.path))
        };
        if let Some(found) = find(&self.maps) {
            return found;
        }
        self.refresh(pid, via, true);
        find(&self.maps).unwrap_or(false)
    }

    /// The memory map as last read, and the modules open.
    pub fn known(&self) -> (&[Mapping], &[Module]) {
        (&self.maps, &self.modules)
    }

    /// The display name of each call site: (payload id, `function (file:line)`), or the
    /// function alone, or `module+0xoffset`, or `0x…` outside every module.
    /// A call left at the runtime's address (its site in the program was not found) is named
    /// after that address with [`NOT_FOUND`] before it.
    pub fn names(&mut self) -> Vec<(u32, String)> {
        // A stand-in for an unresolved call: the site found later for the same frame, else the
        // runtime's address it was left at.
        let calls: HashMap<u64, (u32, u64, u64)> = self
            .memo
            .pending
            .iter()
            .map(|(call, token)| (*token, *call))
            .collect();
        let last_site = &self.memo.last_site;
        let sites: Vec<(u32, u64)> = (self.sites.iter())
            .map(|(id, address)| match calls.get(address) {
                Some(call) => (*id, last_site.get(call).copied().unwrap_or(call.2)),
                None => (*id, *address),
            })
            .collect();
        let mut named = self.named.clone();
        for (id, address) in sites {
            // An address never told (the memory map was unreadable then, at the program's
            // exit) is told now, by the functions at it.
            let class = match self.runtime.get(&address) {
                Some(class) => *class,
                None => self.classify_function(address),
            };
            let name = name(&mut self.symbolizer, address);
            named.push(match class {
                Class::Program => (id, name),
                Class::Runtime | Class::RuntimeWait => (id, format!("{NOT_FOUND} {name}")),
            });
        }
        named
    }

    /// The program replaced its image (`exec`): its call sites are named now, while their
    /// modules are the ones known, and the memory map is forgotten (the same addresses may
    /// now hold other code, and the agent's features other addresses).
    pub fn forget_image(&mut self) {
        if !self.sites.is_empty() {
            self.named = self.names();
        }
        let stats = self.stats;
        *self = CallSites {
            named: std::mem::take(&mut self.named),
            stats,
            ..CallSites::new()
        };
    }
}

/// The frame pointer a call-site mark recorded (its `position`), 0 if unknown.
pub fn frame_pointer(mark: &RecordView) -> u64 {
    u64::from(mark.line) << 32 | u64::from(mark.column)
}

/// Whether the code before `address` in the target ends with a call instruction: `call rel32`
/// (e8, 5 bytes) or an indirect `call` (ff /2) of 2, 3, 6 or 7 bytes.
fn after_call(remote: &Remote, address: u64) -> bool {
    let mut code = [0u8; 7];
    let Some(start) = address.checked_sub(7) else {
        return false;
    };
    if remote.read(start, &mut code).is_err() {
        return false;
    }
    let byte = |back: usize| code[7 - back];
    byte(5) == 0xe8
        || [2usize, 3, 6, 7]
            .iter()
            .any(|&back| byte(back) == 0xff && (byte(back - 1) >> 3) & 7 == 2)
}

/// The name of the call whose return address is `address`: the innermost function at the call
/// instruction (`address - 1`), inlined or not, with its line.
/// The name of the call site whose return address is `address`: `function (file:line)` of the
/// program's innermost frame there (also `fsprof top`'s, while recording).
pub fn name(symbolizer: &mut Symbolizer, address: u64) -> String {
    if address == 0 {
        return "[unknown call site]".to_owned();
    }
    let frames = symbolizer.symbolize(address - 1);
    // The innermost of the program's frames (standard-library code inlined into it stays
    // inside its line), else the innermost.
    let own = frames
        .iter()
        .rev()
        .find(|frame| !runtime_code::is_runtime_function(&frame.function, frame.file.as_deref()));
    let Some(frame) = own.or(frames.last()) else {
        return format!("{address:#x}");
    };
    let function = crate::profile::clean(&frame.function);
    match (&frame.file, frame.line) {
        (Some(file), Some(line)) => {
            format!(
                "{function} ({}:{line})",
                crate::profile::clean(short_path(file))
            )
        }
        (Some(file), None) => format!("{function} ({})", crate::profile::clean(short_path(file))),
        _ => function,
    }
}

/// Rust's standard library paths without their `/rustc/<commit>/` prefix, and crates from
/// Cargo's registry or git checkouts from their own directory on (`ignore-0.4.29/src/dir.rs`).
pub fn short_path(file: &str) -> &str {
    if let Some(rest) = file.strip_prefix("/rustc/") {
        if let Some((_, path)) = rest.split_once('/') {
            return path;
        }
    }
    for cache in ["/registry/src/", "/git/checkouts/"] {
        if let Some((_, rest)) = file.split_once(cache) {
            if let Some((_, path)) = rest.split_once('/') {
                return path;
            }
        }
    }
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_call_site_in_this_test_binary_with_its_line() {
        let pid = std::process::id();
        let mut sites = CallSites::new();
        // An address inside this function: a call site as good as any.
        let address =
            names_a_call_site_in_this_test_binary_with_its_line as fn() as usize as u64 + 8;
        sites.add(pid, pid, 0, address);
        sites.add(pid, pid, 1, 0);
        sites.add(pid, pid, 2, 8);
        let names = sites.names();
        let (function, place) = names[0].1.split_once(" (").unwrap();
        assert!(
            function.ends_with("names_a_call_site_in_this_test_binary_with_its_line")
                && place.contains("src/symbolize/call_sites.rs:"),
            "{names:?}"
        );
        assert_eq!(names[1].1, "[unknown call site]");
        assert_eq!(names[2].1, "0x7");
        assert_eq!(
            short_path("/rustc/abc123/library/std/src/io.rs"),
            "library/std/src/io.rs"
        );
        assert_eq!(short_path("src/main.rs"), "src/main.rs");
        assert_eq!(
            short_path("/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/ignore-0.4.29/src/dir.rs"),
            "ignore-0.4.29/src/dir.rs"
        );
    }

    #[test]
    fn descriptors_outside_the_agent_are_not_built_in() {
        let pid = std::process::id();
        static F: fsprof_shim::Feature = fsprof_shim::Feature::new("x");
        let mut sites = CallSites::new();
        assert!(!sites.in_agent(pid, pid, &F as *const _ as u64));
        assert!(!sites.in_agent(pid, pid, 8));
    }
}
