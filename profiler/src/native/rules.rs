//! What the BPF walk (`walk.rs`) knows of a process's code, in maps its programs read: the
//! rules of return addresses learnt by the unwinder (a hash map, and a bitmap of them for the
//! walk's scan), and the functions' table, each function's start and its body's rule
//! (`walk_tables.rs`), read on threads of their own when the modules are known; and the walk's
//! program, loaded when first needed. The walk's instructions are `walk.rs`, the rules' forms
//! `unwind.rs` ([`FrameRule`]).

use crate::native::bpf::map_shared;
use crate::native::bpf::{
    create_map, create_sparse_hash, delete_elem, update_elem, BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_PROG_ARRAY,
};
use crate::native::layout::{encode, BITMAP_BITS};
use crate::native::unwind::FrameRule;
use crate::native::walk::{bit, Registers, SCRATCH_SIZE};
use crate::program::modules::Module;
use nix::errno::Errno;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Return addresses whose rules are kept, per process.
pub const MAX_RULES: u32 = 1 << 15;

/// The rules of a process's return addresses, as the programs read them: a hash map, and a
/// bitmap of them (by `bit`) mapped into fsprof; made with the walk's other maps when the
/// process is made for (see `WalkMaps`).
pub struct Rules {
    maps: Option<WalkMaps>,
    /// Each CPU's scratch for the walk (its state, its record, a window of words): per CPU,
    /// not per thread (a thread's map value would be 6 KiB larger, 1024 of them).
    scratch: OwnedFd,
    /// The program array the threads' programs tail-call the walk through, and the walk's
    /// program (see [`Rules::prepare_walk`]).
    programs: OwnedFd,
    walk: Walk,
    /// Where the walk finds a sample's registers: which programs call it (a perf event's, or
    /// the tick's tracepoint's: `Rules::walk_at_tick`).
    source: Registers,
    /// Entries the table has room for (besides entry 0).
    capacity: usize,
    /// The functions' table as read so far.
    reading: Reading,
    /// The return addresses looked up, and their rules (in the maps once they are made).
    known: std::collections::HashMap<u64, Option<FrameRule>>,
    /// When a stack was first deeper than its copy (the walk is loaded then, a child's
    /// [`CHILD_WALK_AFTER`] later, and turned on once loaded), and whether the programs walk
    /// (see `PerfSampler::walk`).
    deep_since: Option<Instant>,
    pub(super) on: bool,
}

/// A child process (one `run` follows, not the one it starts or `attach` names) has the walk
/// loaded this long after its first stack deeper than its copy. The load takes 15
/// to 20 ms of fsprof's CPU, more than the whole deep life of most of a build's processes: with
/// the walk at the first deep stack, the walks of `make -j2`'s compilers (12 files) were 22% of
/// fsprof's CPU (BENCHMARKS.md, issue 39, twenty-third session). A compiler that runs on gets
/// it this much later (its stacks until then completed from the thread's stack image, or cut).
const CHILD_WALK_AFTER: Duration = Duration::from_millis(100);

/// The maps only the walk reads: the rules by return address, their bitmap and the functions'
/// table (1.1 MiB for a child, 8.1 MiB for the program, zeroed by the kernel). The process
/// `run` starts or `attach` names has them from the start; a child (a build's compiler, most of
/// which live a few ms) only once its walk is to be loaded: making them was 11% of fsprof's
/// CPU following `make -j2` (BENCHMARKS.md, issue 39, twenty-fourth session).
struct WalkMaps {
    map: OwnedFd,
    bitmap: OwnedFd,
    bits: *mut u64,
    /// The functions' table (see `walk_tables.rs`): entry 0 holds their number, then each
    /// function's start and its body's rule, by start.
    functions: OwnedFd,
    table: *mut u64,
    /// Entries the table has room for (besides entry 0).
    capacity: usize,
}

impl WalkMaps {
    fn new(capacity: usize) -> Result<WalkMaps, Errno> {
        let map = create_sparse_hash(8, 8, MAX_RULES)?;
        let bitmap = create_map(BPF_MAP_TYPE_ARRAY, 4, 8, (BITMAP_BITS / 64) as u32)?;
        let functions = create_map(BPF_MAP_TYPE_ARRAY, 4, 16, capacity as u32 + 1)?;
        let bits = map_shared(&bitmap, BITMAP_BYTES, true, 0)?.cast();
        // Unmapped by drop from here on, whatever fails next.
        let mut made = WalkMaps {
            map,
            bitmap,
            bits,
            functions,
            table: std::ptr::null_mut(),
            capacity,
        };
        made.table = map_shared(&made.functions, 16 * (capacity + 1), true, 0)?.cast();
        Ok(made)
    }

    /// Gives `rule` at `return_address` to the walk.
    fn give(&mut self, return_address: u64, rule: FrameRule) {
        if update_elem(self.map.as_raw_fd(), return_address, encode(rule)).is_ok() {
            let (index, bit) = bit(return_address);
            // SAFETY: `index` < BITMAP_BITS / 64, inside the mapping; volatile: the programs
            // read it at any time.
            unsafe {
                let word = self.bits.add(index);
                word.write_volatile(word.read_volatile() | 1 << bit);
            }
        }
    }
}

impl Drop for WalkMaps {
    fn drop(&mut self) {
        // SAFETY: unmaps what `new` mapped (the table only once mapped).
        unsafe {
            nix::libc::munmap(self.bits.cast(), BITMAP_BYTES);
            if !self.table.is_null() {
                nix::libc::munmap(self.table.cast(), 16 * (self.capacity + 1));
            }
        }
    }
}

// SAFETY: `bits` and `table` are owned by this struct (unmapped on drop) and only written
// through `&mut self`.
unsafe impl Send for WalkMaps {}

/// The walk's program: loaded on a thread of its own once asked for (the kernel's verifier
/// takes 15 to 20 ms, which the sampling loop would otherwise spend not reading samples).
enum Walk {
    NotAsked,
    Loading(Receiver<Result<OwnedFd, String>>),
    /// Loaded, and in the program array (which holds it).
    Loaded,
    /// The kernel refused it (before 6.9: no `may_goto`).
    Refused,
}

/// The functions' table as read so far (see [`Rules::read_functions`]).
struct Reading {
    /// The functions of modules being read, on threads of their own, and the modules asked
    /// for (their ranges, by start).
    channel: Channel,
    asked: std::collections::HashMap<u64, u64>,
    /// Bumped when the table starts again (after an exec); shared with the reading threads,
    /// which stop reading for an earlier one.
    generation: Arc<AtomicU64>,
    /// Whether the walk is loaded before it is wanted, and the functions read at the first
    /// deep stack (rather than once the walk is on, [`CHILD_WALK_AFTER`] later).
    eager: bool,
    /// The functions in the table, by start.
    entries: Vec<(u64, Option<FrameRule>)>,
}

const BITMAP_BYTES: usize = BITMAP_BITS / 8;

/// What the threads reading functions send: the table's generation they read for, and the
/// functions of a module.
type Functions = (u64, Vec<(u64, Option<FrameRule>)>);
type Channel = (
    std::sync::mpsc::Sender<Functions>,
    std::sync::mpsc::Receiver<Functions>,
);
/// Functions in the table at most (rustc's driver has 107 000, its LLVM 160 000): 8 MiB.
pub const FUNCTIONS: usize = (1 << 19) - 1;

impl Rules {
    /// The rules of a process: with room for [`FUNCTIONS`] functions, read at its first stack
    /// deeper than its copy (see [`Rules::read_functions`]); for a `child` process (a tree's
    /// compilers), an eighth of that, read once it walks.
    pub(super) fn new(child: bool) -> Result<Rules, Errno> {
        let (capacity, eager) = if child {
            (FUNCTIONS / 8, false)
        } else {
            (FUNCTIONS, true)
        };
        let maps = if eager {
            Some(WalkMaps::new(capacity)?)
        } else {
            None
        };
        let scratch = create_map(BPF_MAP_TYPE_PERCPU_ARRAY, 4, SCRATCH_SIZE as u32, 1)?;
        let programs = create_map(BPF_MAP_TYPE_PROG_ARRAY, 4, 4, 1)?;
        Ok(Rules {
            scratch,
            programs,
            walk: Walk::NotAsked,
            source: Registers::Context,
            maps,
            capacity,
            reading: Reading {
                channel: std::sync::mpsc::channel(),
                asked: Default::default(),
                generation: Default::default(),
                eager,
                entries: Vec::new(),
            },
            known: Default::default(),
            deep_since: None,
            on: false,
        })
    }

    /// The descriptors of the scratch and the program array, for the threads' programs.
    pub(super) fn hand_over(&self) -> [RawFd; 2] {
        [self.scratch.as_raw_fd(), self.programs.as_raw_fd()]
    }

    /// Starts loading the walk (`copies`: the ring its records go to) on a thread of its own,
    /// if not yet done: the kernel's verifier takes 15 to 20 ms of CPU, more on a busy machine,
    /// and a deep program's samples until the walk is on stop short (rustc's first 40 to 90 ms
    /// when it was loaded at the first deep stack). Started when the perf sampler is made for
    /// the process `run` starts or `attach` names, and for others [`CHILD_WALK_AFTER`] after
    /// their first deep stack; the kernel refuses it before Linux 6.9 (no walk then).
    pub(super) fn prepare_walk(&mut self, copies: RawFd) {
        if let Walk::NotAsked = self.walk {
            self.walk = match self.make_maps() {
                Ok(()) => self.load_walk(copies),
                Err(_) => Walk::Refused,
            };
        }
    }

    /// Has the walk called by the program of the scheduler's tick (`cpu_wide/tick.rs`), a
    /// tracepoint's, rather than by perf events' programs: a program can tail-call only
    /// programs of its own type, and the tracepoint's context holds no registers, so the walk
    /// reads them from the current thread's kernel stack (`stack`: where `task_struct` points
    /// to it). A walk loaded, or being loaded, for perf events is loaded again.
    pub(super) fn walk_at_tick(&mut self, stack: u32, copies: RawFd) {
        if self.source == Registers::Task(stack) {
            return;
        }
        self.source = Registers::Task(stack);
        if !matches!(self.walk, Walk::NotAsked) {
            self.walk = Walk::NotAsked;
            self.prepare_walk(copies);
        }
    }

    /// Makes the walk's maps if not yet made, with the rules learnt so far in them.
    fn make_maps(&mut self) -> Result<(), Errno> {
        if self.maps.is_some() {
            return Ok(());
        }
        let mut maps = WalkMaps::new(self.capacity)?;
        for (address, rule) in &self.known {
            if let Some(rule) = rule {
                maps.give(*address, *rule);
            }
        }
        self.maps = Some(maps);
        Ok(())
    }

    /// Turns the walk on once it is wanted (a stack was `deeper` than its copy, now or before;
    /// in a child process, [`CHILD_WALK_AFTER`] before) and loaded (`copies`: the ring its
    /// records go to); whether this call did.
    pub(super) fn turn_on(&mut self, deeper: bool, copies: RawFd) -> bool {
        if deeper && self.deep_since.is_none() {
            self.deep_since = Some(Instant::now());
        }
        let Some(since) = self.deep_since else {
            return false;
        };
        if self.on || (!self.reading.eager && since.elapsed() < CHILD_WALK_AFTER) {
            return false;
        }
        self.prepare_walk(copies);
        self.on = self.walk_ready(Duration::ZERO);
        self.on
    }

    /// Whether the walk is loaded and put where the threads' programs call it, waiting up to
    /// `wait` for it if it is being loaded (`fsprof run` makes the perf sampler, and waits,
    /// before it starts the program: the verifier then has a CPU, and the walk is there for
    /// the program's first sample).
    pub fn walk_ready(&mut self, wait: Duration) -> bool {
        if let Walk::Loading(loaded) = &self.walk {
            self.walk = match loaded.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => return false,
                Ok(Ok(walk))
                    if update_elem(self.programs.as_raw_fd(), 0, walk.as_raw_fd() as u64)
                        .is_ok() =>
                {
                    Walk::Loaded
                }
                _ => Walk::Refused,
            };
        }
        matches!(self.walk, Walk::Loaded)
    }

    /// Whether the walk is loaded before it is wanted, and the functions read as soon as it
    /// is (for the process `run` started or `attach` named).
    pub(super) fn eager(&self) -> bool {
        self.reading.eager
    }

    /// Starts loading the walk on a thread of its own, with its own descriptors of the maps (the
    /// rules may be dropped meanwhile).
    fn load_walk(&self, copies: RawFd) -> Walk {
        // SAFETY: `copies` is the caller's open descriptor, only duplicated here.
        let copies = unsafe { std::os::fd::BorrowedFd::borrow_raw(copies) };
        let Some(maps) = &self.maps else {
            return Walk::Refused;
        };
        let fds = [&maps.map, &maps.bitmap, &maps.functions, &self.scratch]
            .map(|fd| fd.try_clone().ok())
            .into_iter()
            .chain([copies.try_clone_to_owned().ok()])
            .collect::<Option<Vec<OwnedFd>>>();
        let Some(fds) = fds else {
            return Walk::Refused;
        };
        let source = self.source;
        let (send, loaded) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("fsprof-walk".to_owned())
            .spawn(move || {
                // At the sampler's priority: the verifier's 15 to 20 ms of CPU, normally
                // scheduled beside 1000 busy threads, took seconds (the walk was not there for
                // the recording, and fsprof's exit waited for it).
                let _ = crate::os::priority::raise();
                let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
                let maps = [raw[0], raw[1], raw[2], raw[3]];
                // With fsprof's BPF privilege raised for the load (this thread's own set).
                let load = || load_walk(maps, raw[4], source);
                let _ = send.send(crate::os::privilege::with_perf(load));
            });
        match spawned {
            Ok(_) => Walk::Loading(loaded),
            Err(_) => Walk::Refused,
        }
    }

    /// Room in the functions' table.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Reads the functions of those of `modules` not read yet into the table, on a thread of
    /// its own (rustc's driver takes 30 ms, read by four threads): one module after the
    /// other, the largest first, each put in the table when read (see [`Rules::poll`]). Reads
    /// from the first stack deeper than its copy for the process `run` started or `attach`
    /// named (its walk is loaded already), and once the walk is on for others (a tree's
    /// compilers each would read theirs for nothing). Read as soon as the modules were known,
    /// libc's and a small program's took 2 to 3 ms of fsprof's CPU in the program's first 60
    /// ms, beside a program whose stacks are never deeper than the copy (half of fsprof's CPU
    /// in a 0.4 s run of the cost model's two threads, issue 39). After an `exec` (a module
    /// read is gone), the table starts again, and so do the rules learnt.
    pub fn read_functions(&mut self, modules: &[Module]) {
        if !self.on && (!self.reading.eager || self.deep_since.is_none()) {
            return;
        }
        let gone: Vec<std::ops::Range<u64>> = (self.reading.asked.iter())
            .filter(|(start, _)| !modules.iter().any(|m| m.range.start == **start))
            .map(|(start, end)| *start..*end)
            .collect();
        if !gone.is_empty() {
            self.reading.asked.clear();
            self.reading.entries.clear();
            self.set_functions(&[]);
            self.reading.generation.fetch_add(1, Ordering::Relaxed);
            self.forget_rules(&gone);
        }
        let mut new: Vec<Module> = (modules.iter())
            .filter(|m| (self.reading.asked.insert(m.range.start, m.range.end)).is_none())
            .cloned()
            .collect();
        if new.is_empty() {
            return;
        }
        new.sort_by_key(|m| std::cmp::Reverse(m.range.end - m.range.start));
        let (send, current, most) = (
            self.reading.channel.0.clone(),
            self.reading.generation.clone(),
            self.capacity,
        );
        let generation = current.load(Ordering::Relaxed);
        let _ = std::thread::Builder::new()
            .name("fsprof-functions".to_owned())
            .spawn(move || {
                // It reads files only (and its helpers inherit this).
                crate::os::privilege::drop_all();
                for module in &new {
                    if current.load(Ordering::Relaxed) != generation {
                        return; // the program called exec: these modules are gone
                    }
                    let functions = crate::native::walk_tables::functions(module, most);
                    if send.send((generation, functions)).is_err() {
                        return;
                    }
                }
            });
    }

    /// Puts the functions read by [`Rules::read_functions`] since the previous call in the
    /// table.
    pub fn poll(&mut self) {
        let mut more = false;
        while let Ok((generation, functions)) = self.reading.channel.1.try_recv() {
            if generation != self.reading.generation.load(Ordering::Relaxed) {
                continue; // the modules of the program before an exec
            }
            let room = self.capacity.saturating_sub(self.reading.entries.len());
            self.reading
                .entries
                .extend(functions.into_iter().take(room));
            more = true;
        }
        if more {
            let mut entries = std::mem::take(&mut self.reading.entries);
            entries.sort_unstable_by_key(|(start, _)| *start);
            self.set_functions(&entries);
            self.reading.entries = entries;
        }
    }

    /// Gives the functions' table (by start, at most [`Rules::capacity`]).
    fn set_functions(&mut self, functions: &[(u64, Option<FrameRule>)]) {
        let Some(maps) = &self.maps else {
            return;
        };
        let count = functions.len().min(maps.capacity);
        let table = maps.table;
        // SAFETY: entries 0 ..= capacity, two words each, inside the mapping; volatile: the
        // programs read it at any time (a walk that reads it half written reads the wrong
        // words, which the unwinder does not take).
        unsafe {
            table.write_volatile(0);
            for (i, (start, rule)) in functions[..count].iter().enumerate() {
                let entry = table.add(2 * (i + 1));
                entry.write_volatile(*start);
                entry.add(1).write_volatile(rule.map_or(0, encode));
            }
            table.write_volatile(count as u64);
        }
    }

    /// Whether the rule at `return_address` was given (or found to be none), or no more
    /// rules can be ([`MAX_RULES`]: nothing to look up for it).
    pub fn knows(&self, return_address: u64) -> bool {
        if self.known.len() >= MAX_RULES as usize {
            return true;
        }
        self.known.contains_key(&return_address)
    }

    /// Gives the rule at `return_address` (`None`: it has none the walk can follow).
    pub fn learn(&mut self, return_address: u64, rule: Option<FrameRule>) {
        if self.known.len() >= MAX_RULES as usize || self.known.contains_key(&return_address) {
            return;
        }
        self.known.insert(return_address, rule);
        if let (Some(maps), Some(rule)) = (&mut self.maps, rule) {
            maps.give(return_address, rule);
        }
    }

    /// Forgets the rules learnt in the modules `gone` (unloaded, or an exec's old program: the
    /// addresses may be another code's now), and makes the bitmap again from the others (two
    /// addresses may share a bit).
    fn forget_rules(&mut self, gone: &[std::ops::Range<u64>]) {
        let map = self.maps.as_ref().map(|maps| maps.map.as_raw_fd());
        self.known.retain(|address, _| {
            let keep = !gone.iter().any(|range| range.contains(address));
            if let (false, Some(map)) = (keep, map) {
                let _ = delete_elem(map, *address);
            }
            keep
        });
        let Some(maps) = &self.maps else {
            return;
        };
        let mut bits = vec![0u64; BITMAP_BITS / 64];
        for (address, rule) in &self.known {
            if rule.is_some() {
                let (index, bit) = bit(*address);
                bits[index] |= 1 << bit;
            }
        }
        for (index, word) in bits.into_iter().enumerate() {
            // SAFETY: inside the mapping; volatile: the programs read it at any time.
            unsafe { maps.bits.add(index).write_volatile(word) };
        }
    }
}

/// Loads the walk (`walk.rs`), which the threads' programs tail-call; `maps`: the rules, the
/// bitmap, the functions' table, the scratch; `source`: the type of program that calls it. Its
/// loops need Linux 6.9 (`may_goto`).
fn load_walk(maps: [RawFd; 4], copies: RawFd, source: Registers) -> Result<OwnedFd, String> {
    let program = crate::native::walk::program(maps, copies, source);
    match source {
        Registers::Context => crate::native::bpf::load(program),
        Registers::Task(_) => crate::native::bpf::load_tracepoint_event_program(program),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::bpf::page_size;
    use crate::native::ring::CopyRing;

    /// A copies ring and a child's rules, made as root; `None` (and said) where BPF is refused.
    fn child_rules() -> Option<(CopyRing, Rules)> {
        let made = crate::os::privilege::with_perf(|| {
            let ring = CopyRing::new(page_size(), 1 << 16).map_err(|e| e.desc().to_owned())?;
            let child = Rules::new(true).map_err(|e| e.desc().to_owned())?;
            Ok::<_, String>((ring, child))
        });
        made.map_err(|why| eprintln!("skipped: {why}")).ok()
    }

    /// A child's walk maps (1.1 MiB) are made only when its walk is about to be loaded, with
    /// the rules learnt until then in them; the program's from the start (as root; elsewhere
    /// skipped: the maps need BPF).
    #[test]
    fn a_childs_walk_maps_wait_for_its_walk_and_get_the_rules_learnt_before() {
        let Some((ring, mut child)) = child_rules() else {
            return;
        };
        let is_set = |rules: &Rules, address: u64| {
            let (index, bit) = bit(address);
            let maps = rules.maps.as_ref().expect("made");
            // SAFETY: inside the mapping.
            unsafe { maps.bits.add(index).read_volatile() & 1 << bit != 0 }
        };
        let rule = FrameRule::StackPointer {
            cfa: 16,
            bp_saved: 0,
        };
        assert!(child.maps.is_none(), "made with the rules");
        child.learn(0x40_1000, Some(rule));
        assert!(child.maps.is_none(), "made at a rule learnt");
        child.prepare_walk(ring.fd());
        assert!(is_set(&child, 0x40_1000), "the rule learnt before");
        child.learn(0x40_2000, Some(rule));
        assert!(is_set(&child, 0x40_2000), "a rule learnt after");
        assert!(Rules::new(false).unwrap().maps.is_some(), "the program's");
    }

    /// At the tick, the walk is loaded again as a tracepoint's program, reading the registers
    /// from the thread's kernel stack: it loads wherever the perf events' walk does (Linux 6.9;
    /// as root, with BTF; elsewhere skipped).
    #[test]
    fn the_walk_at_the_tick_loads_where_the_clocks_walk_does() {
        let Some((ring, mut clock)) = child_rules() else {
            return;
        };
        let Some(stack) = crate::native::btf::task_stack_offset() else {
            eprintln!("skipped: the kernel does not describe task_struct's stack");
            return;
        };
        let wait = Duration::from_secs(10);
        clock.prepare_walk(ring.fd());
        let loads = crate::os::privilege::with_perf(|| clock.walk_ready(wait));
        let mut tick = Rules::new(true).unwrap();
        tick.prepare_walk(ring.fd());
        tick.walk_at_tick(stack, ring.fd());
        assert_eq!(tick.source, Registers::Task(stack));
        assert_eq!(
            crate::os::privilege::with_perf(|| tick.walk_ready(wait)),
            loads,
            "the tick's walk loads (or not) as the clock's does"
        );
    }

    /// A child's walk is not loaded at its first deep stack, only `CHILD_WALK_AFTER` later; the
    /// process `run` starts has it loaded as soon as asked (as root; elsewhere skipped: the
    /// maps need BPF).
    #[test]
    fn a_childs_walk_waits_until_its_stacks_have_been_deep_a_while() {
        let Some((ring, mut child)) = child_rules() else {
            return;
        };
        let first = Instant::now();
        child.turn_on(true, ring.fd());
        let due = Instant::now() + CHILD_WALK_AFTER;
        assert!(matches!(child.walk, Walk::NotAsked), "loaded at once");
        if first.elapsed() < CHILD_WALK_AFTER / 2 {
            child.turn_on(false, ring.fd());
            assert!(matches!(child.walk, Walk::NotAsked), "loaded early");
        }
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        child.turn_on(false, ring.fd());
        assert!(!matches!(child.walk, Walk::NotAsked), "not loaded once due");
        let mut program = Rules::new(false).unwrap();
        program.turn_on(true, ring.fd());
        assert!(
            !matches!(program.walk, Walk::NotAsked),
            "the program's not at once"
        );
    }
}
