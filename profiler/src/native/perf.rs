//! Samples running threads' registers, the top of their stacks and their mark slots, at one
//! instant each, without stopping them: a per-thread `perf_event_open` task-clock event samples
//! the thread every period of its own CPU time (the timer fires on the thread's CPU, as for
//! `perf record`), writing registers and stack into the thread's ring, and a small BPF program
//! attached to the event copies the thread's slots from the region at that same instant (the
//! thread is interrupted, so its slots cannot change meanwhile) into one ring shared by all
//! threads. Every sample's copies are kept, so a reader that wakes rarely still has the marks of
//! each sample; a copy is matched to its sample by the time both carry (one clock, read within
//! the same interrupt).
//!
//! This module watches threads (their events, which `perf_events.rs` opens, with the BPF program
//! attached) and matches each sample with its slot copies; the rings and their records are
//! `ring.rs`, the maps and the program `bpf.rs`. It does not unwind (`unwind.rs`), decode slots (`fsprof_shim::abi`) or decide which
//! threads to sample (the sampler). Everything read from a ring or a map came from the target's
//! memory or the kernel's copy of it and is bounded before use.
//!
//! The BPF program (`bpf.rs`, `walk.rs`) is hand-assembled: Rust's BPF toolchains (aya,
//! libbpf-rs) need a separate compiler, which `cargo build` cannot assume. It needs `CAP_BPF`
//! and `CAP_PERFMON` (or root); where refused, [`PerfSampler::new`] says why (ptrace then).

use crate::native::bpf::{create_map, load_program, map_shared, page_size, BPF_MAP_TYPE_ARRAY};
use crate::native::perf_events::{open_event, open_switch_event};
use crate::native::ring::{match_copies, parse, read_copies, CopyRing, Record, Ring, SlotCopy};
use crate::native::rules::Rules;
use crate::native::unwind::{Registers, StackView};
use crate::record::privilege::Refusal;
use fsprof_shim::abi::{MARK_CAPACITY, RECORDS_OFFSET, RECORD_SIZE};
use nix::errno::Errno;
use nix::libc;
use perf_event_open_sys as sys;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};

/// Bytes of stack copied per sample, from the stack pointer up. At most 65528 (a sample record's
/// size is a 16-bit number); deeper stacks are cut (and marked as such). The kernel writes this
/// many bytes per sample whatever the stack's depth, in the thread's time: 48 KiB cost two busy
/// threads 5% at 1 kHz, 16 KiB 2.5% as perf record's 8 KiB did (BENCHMARKS.md), and the stacks
/// of the tests' programs, python3 and ripgrep unwind as completely.
pub const STACK_DUMP: u32 = 16 * 1024;
/// Slots copied per sample: one per region the thread marks in (the program's shim, the agent's).
pub const SLOTS: usize = 2;
/// A thread that leaves its CPU more often than this (per second, over at least
/// `SWITCH_WINDOW_NS`) is no longer followed off its CPU: following a switch costs the thread
/// about 3 us (BENCHMARKS.md), so this bounds that cost to about 6% of its time, and its time off
/// the CPU is estimated instead, as where the kernel refuses the switch events.
pub const MAX_SWITCH_RATE: u64 = 20_000;
const SWITCH_WINDOW_NS: u64 = 200_000_000;
/// Threads sampled this way at once; further threads fall back to ptrace.
pub const MAX_THREADS: u32 = 1024;
/// Threads sampled by perf in a child process that `run` follows (`record/tree.rs`): a child
/// seldom has many, and a smaller map is quicker to make for each (more are stopped by ptrace).
pub const CHILD_THREADS: u32 = 64;
/// Data pages of a thread's ring while few threads are sampled: room for about 60 samples of
/// [`STACK_DUMP`] bytes (1 MiB with 4 KiB pages), so that the sampler need wake only every few
/// tens of periods.
const RING_PAGES: usize = 256;
/// Data pages of the rings of threads beyond the first [`LARGE_RINGS`]: room for 15 samples,
/// so that a program with hundreds of threads does not pin gigabytes of kernel memory (the
/// sampler then wakes more often, see [`PerfSampler::ring_capacity`]).
const SMALL_RING_PAGES: usize = 64;
/// Threads that get a ring of [`RING_PAGES`].
const LARGE_RINGS: usize = 64;
/// Bytes of the shared ring of slot copies per CPU (the copies of one sample, or of one
/// departure from a CPU, are a few hundred bytes; a CPU runs one thread at a time): room for
/// about 10 ms of a thread that leaves its CPU 100 000 times a second between two reads.
const COPIES_PER_CPU: usize = 1024 * 1024;
/// At most this many bytes for that ring, however many CPUs.
const COPIES_MAX: usize = 32 * 1024 * 1024;

/// Layout of one map value (one per sampled thread): slot addresses (set by fsprof), then, per
/// slot, the ring record the BPF program builds at each sample: a header (the sample's time, the
/// value's index, the slot's number, the address copied from, the copy's result: 0 or an error)
/// and the slot's bytes (its state, then the records below its depth).
pub(super) const VALUE_ADDRESSES: usize = 0;
pub(super) const VALUE_SCRATCH: usize = 8 * SLOTS;
pub(super) const COPY_HEADER: usize = 32;
/// Room for what the program copies of a slot: its state and its records, not the history of
/// later branches after them (read apart, see `region.rs`). With the history the map was three
/// times larger (13 MB), and making it took several milliseconds per process recorded.
pub(super) const SCRATCH_SIZE: usize = COPY_HEADER + RECORDS_OFFSET + MARK_CAPACITY * RECORD_SIZE;
/// Then the program's sampling state (see [`TICKS_PER_SAMPLE`]): the timer ticks still to skip
/// before the next sample (u32), and the place of the latest sample in its period (u32).
pub(super) const VALUE_JITTER: usize = VALUE_SCRATCH + SLOTS * SCRATCH_SIZE;
/// Then the anchors (see [`ANCHORS`]): their addresses (set by fsprof, 0 for none), and the
/// record the program builds of them at each sample (a copy header, then an address and the
/// word read there, per anchor), put in the ring like a slot's copy with slot number [`SLOTS`].
pub(super) const VALUE_ANCHORS: usize = VALUE_JITTER + 8;
pub(super) const VALUE_ANCHOR_RECORD: usize = VALUE_ANCHORS + 8 * ANCHORS;
pub(super) const ANCHOR_RECORD_SIZE: usize = COPY_HEADER + 16 * ANCHORS;
/// Then the walk's part (`walk.rs`).
pub(super) const VALUE_WALK: usize = VALUE_ANCHOR_RECORD + ANCHOR_RECORD_SIZE;
pub(super) const VALUE_SIZE: usize = VALUE_WALK + 8;
/// Stack words the program reads at each sample besides the top of the stack, for threads
/// that have some: where fsprof completes a deep stack with an image of the thread's outer
/// stack read later (beyond what the walk read, `walk.rs`: a recursion of thousands of
/// frames), the words at a few of that image's return-address slots, as they were at the
/// sample, tell whether the image was still the thread's stack then (`native/complete.rs`).
/// A read costs the sampled thread tens of ns.
pub const ANCHORS: usize = 32;

/// The task-clock timer ticks this many times per sampling period, and the program keeps the
/// tick at a random place in each period, dropping the others (jittered sampling); [`rephase`]
/// also restarts the ticks at random every few ms. Two, a compromise measured both ways:
/// * Four ticks a period (0817dca to 27873a6) biased a loop of equal steps of a few µs: a
///   sample stands for the CPU time since the previous one, longer for a tick late in its
///   period, and where four ticks span a whole number of the loop's cycles each place in the
///   period samples the same place in the loop (`contracts --equal-steps` at 1000 Hz,
///   `positive?` +0.1 to +4.6 points, mean +2.2; with two ticks -0.2 to +2.5, mean +1.5; with
///   one, -0.4 to +1.9).
/// * One tick a period (6db9cfc to 1b48db0) under-sampled short bursts of CPU after a wake-up:
///   the echo server's `conn-B` actor (polls of about 0.3 ms, each after a wake-up, 8.4% of the
///   time) read 0.55 to 1.5 points low in 10 runs at 1000 Hz, failing its 2.5-point tree bound
///   through `conn-A` in 3 of them; with two ticks -0.3 to +0.1, with four -0.3 to +0.3.
///
/// BENCHMARKS.md, issue 18's section, has the runs.
pub(super) const TICKS_PER_SAMPLE: u64 = 2;

/// The CPU time between two of perf's samples of a thread at `rate_hz`: a twentieth less than
/// `1 / rate_hz`, so that the timer's ticks are no round number of microseconds apart (237.5 us
/// at 1000 Hz, 950 us at 250 Hz). At 250 Hz ticks 1 ms apart kept in step with a loop of 1 ms of
/// CPU whatever tick was kept (`sleepy`'s `hashing` read 2.6 to 4.2 points low on a quiet
/// machine); loops of round lengths are common, and those of these lengths are not.
pub fn sampling_period(rate_hz: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(0.95 / rate_hz)
}

/// Offset of `depth` in a slot (after `seq` and `tid`).
pub(super) const DEPTH_OFFSET: i32 = 8;

/// Registers perf copies (bits of `enum perf_event_x86_regs`): bp, sp, ip, in this order.
#[cfg(target_arch = "x86_64")]
pub(super) const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
#[cfg(not(target_arch = "x86_64"))]
pub(super) const REGS_MASK: u64 = 0;

/// One sample of one thread, as its ring holds it.
#[derive(Debug)]
pub struct PerfSample<'a> {
    /// When it was taken (CLOCK_MONOTONIC, ns).
    pub time: u64,
    /// The thread's time on a CPU when it was taken (its task-clock count, ns): what it ran
    /// since its previous sample is the difference.
    pub cpu_ns: u64,
    /// Registers at the sample.
    pub regs: Registers,
    /// The top of its stack (in the ring: not copied).
    pub stack: StackView<'a>,
    /// The raw bytes of each of the thread's slots, copied at the sample: its state and the
    /// records below its depth. `None` where the thread had no slot (or its address was not yet
    /// given), and all `None` when the marks are unknown.
    pub slots: [Option<Vec<u8>>; SLOTS],
    /// Whether `slots` are this sample's (else its marks are unknown: a copy failed, or was lost).
    pub marks_known: bool,
    /// The anchors read at the sample: (address, word there), for the addresses set then.
    pub anchors: Vec<(u64, u64)>,
    /// The words the walk read beyond the copy at the sample (`walk.rs`): (address, word),
    /// by address.
    pub instant: Vec<(u64, u64)>,
}

/// What a thread's ring gave, oldest first.
pub enum Taken<'a> {
    /// A sample of its CPU time.
    Sample(PerfSample<'a>),
    /// It left its CPU or came back to one.
    Switch(Switch),
}

/// The thread left its CPU (`out`) or came back to one, at `time` (CLOCK_MONOTONIC, ns). Leaving,
/// it was either preempted (still runnable: waiting for a CPU from then on) or blocked; its slots
/// are the copies made as it left (`marks_known` as for a sample; never for a return).
#[derive(Debug)]
pub struct Switch {
    pub time: u64,
    pub out: bool,
    pub preempted: bool,
    pub slots: [Option<Vec<u8>>; SLOTS],
    pub marks_known: bool,
}

struct Thread {
    index: u32,
    event: OwnedFd,
    _program: OwnedFd,
    /// Its context-switch event and that event's program, which copies its slots as it leaves
    /// its CPU (`None` where the kernel refused them: its switches are then not followed).
    switches: Option<(OwnedFd, OwnedFd)>,
    ring: Ring,
    addresses: [u64; SLOTS],
    /// Its departures from its CPU since `window_start` (CLOCK_MONOTONIC, ns).
    departures: u64,
    window_start: u64,
}

/// The perf side of a sampler: one event per sampled thread.
pub struct PerfSampler {
    map: OwnedFd,
    /// `capacity` map values, mapped into fsprof.
    values: *mut u8,
    copies: CopyRing,
    /// Slot copies read from `copies` and not yet matched, per map value index: made at
    /// samples, and as threads left their CPU.
    waiting: Vec<VecDeque<SlotCopy>>,
    switch_waiting: Vec<VecDeque<SlotCopy>>,
    threads: HashMap<u32, Thread>,
    free: Vec<u32>,
    /// Threads it can sample at once (map values), at most [`MAX_THREADS`].
    capacity: u32,
    page: usize,
    period_ns: u64,
    /// Samples the kernel could not write (a thread's ring was full).
    pub lost: u64,
    /// Samples whose slot copies were missing or failed.
    pub unmatched: u64,
    /// Threads no longer followed off their CPU (see [`MAX_SWITCH_RATE`]).
    too_fast: std::collections::HashSet<u32>,
    /// When threads made by sampled threads were born (CLOCK_MONOTONIC, ns), until asked for.
    births: HashMap<u32, u64>,
    /// The programs loaded, per map value index (copying at samples, and at departures), and
    /// the rules their walks follow.
    programs: ([Vec<Option<OwnedFd>>; 2], Rules),
}

/// Births remembered at most (those of threads that never ran long enough to be found, or of
/// processes, are dropped when the map is full).
const MAX_BIRTHS: usize = 4096;

// SAFETY: `values` is owned by this struct (unmapped on drop) and only used through `&mut self`.
unsafe impl Send for PerfSampler {}

impl PerfSampler {
    /// Creates the maps and checks that this process may load the program and open events that
    /// sample every `period_ns` of a thread's CPU time. The error says what the kernel refused
    /// and what to do.
    pub fn new(period_ns: u64, capacity: u32) -> Result<PerfSampler, String> {
        crate::record::privilege::with_perf(|| PerfSampler::create(period_ns, capacity))
    }

    fn create(period_ns: u64, capacity: u32) -> Result<PerfSampler, String> {
        let capacity = capacity.clamp(1, MAX_THREADS);
        if let Some(why) = crate::record::privilege::perf_withheld() {
            return Err(why.to_owned());
        }
        if !cfg!(target_arch = "x86_64") {
            return Err("the perf backend is x86-64 only".to_owned());
        }
        let needs = "the perf backend needs root, or CAP_BPF and CAP_PERFMON";
        let map = create_map(BPF_MAP_TYPE_ARRAY, 4, VALUE_SIZE as u32, capacity)
            .map_err(|e| format!("cannot create a BPF map ({}): {needs}", e.desc()))?;
        let page = page_size();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let copies = CopyRing::new(
            page,
            (cpus * COPIES_PER_CPU).min(COPIES_MAX).next_power_of_two(),
        )
        .map_err(|e| format!("cannot create a BPF ring buffer ({}): {needs}", e.desc()))?;
        let len = values_len(page, capacity);
        // The BPF array was created mmapable.
        let values = map_shared(&map, len, true, 0)
            .map_err(|e| format!("cannot map the BPF map ({})", e.desc()))?;
        let mut sampler = PerfSampler {
            map,
            values,
            copies,
            waiting: (0..capacity).map(|_| VecDeque::new()).collect(),
            switch_waiting: (0..capacity).map(|_| VecDeque::new()).collect(),
            threads: HashMap::new(),
            free: (0..capacity).rev().collect(),
            capacity,
            page,
            period_ns: period_ns.max(10_000 * TICKS_PER_SAMPLE),
            lost: 0,
            unmatched: 0,
            too_fast: Default::default(),
            births: HashMap::new(),
            programs: (
                Default::default(),
                Rules::new(capacity <= CHILD_THREADS)
                    .map_err(|e| format!("cannot create a BPF map ({}): {needs}", e.desc()))?,
            ),
        };
        let rules = sampler.programs.1.hand_over();
        load_program(
            sampler.map.as_raw_fd(),
            sampler.copies.fd(),
            rules,
            0,
            false,
        )
        .map_err(|e| format!("cannot load a BPF program ({e}): {needs}"))?;
        if sampler.programs.1.eager() {
            sampler.programs.1.prepare_walk(sampler.copies.fd());
        }
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        open_event(me, sampler.period_ns, true).map_err(|e| {
            format!(
                "perf_event_open refused ({}; kernel.perf_event_paranoid is {}): run as root, or grant CAP_PERFMON",
                e.desc(),
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .map_or("unknown".to_owned(), |s| s.trim().to_owned())
            )
        })?;
        Ok(sampler)
    }

    /// Samples the smallest ring of a sampled thread holds: a reader must come back before a
    /// thread has run that many periods, or samples are lost.
    pub fn ring_capacity(&self) -> usize {
        let pages = if self.threads.len() > LARGE_RINGS {
            SMALL_RING_PAGES
        } else {
            RING_PAGES
        };
        pages * self.page / (STACK_DUMP as usize + 128)
    }

    /// The sampling period, in CPU time.
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.period_ns)
    }

    /// When thread `tid` was born (CLOCK_MONOTONIC, ns), if a sampled thread made it and its
    /// ring has been read since; asked once.
    pub fn birth(&mut self, tid: u32) -> Option<u64> {
        self.births.remove(&tid)
    }

    /// Whether `tid` is being sampled.
    pub fn watches(&self, tid: u32) -> bool {
        self.threads.contains_key(&tid)
    }

    /// `tid`'s time on a CPU since it was first watched, in ns (its task-clock count: exact,
    /// also once the thread has exited, until it is forgotten).
    pub fn cpu_ns(&self, tid: u32) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        let mut value = [0u8; 8];
        nix::unistd::read(thread.event.as_raw_fd(), &mut value)
            .ok()
            .filter(|n| *n == 8)?;
        Some(u64::from_ne_bytes(value))
    }

    /// Whether `tid`'s departures from its CPU are followed (see [`Taken::Switch`]).
    pub fn follows_switches(&self, tid: u32) -> bool {
        self.threads
            .get(&tid)
            .is_some_and(|thread| thread.switches.is_some())
    }

    /// Makes sure `tid` is being sampled, copying the slots at `addresses` (0 for none) with
    /// each sample from now on. Fails if the thread cannot be sampled this way.
    pub fn watch(&mut self, tid: u32, addresses: [u64; SLOTS]) -> Result<(), WatchError> {
        if !self.threads.contains_key(&tid) {
            let thread = self.open(tid)?;
            self.threads.insert(tid, thread);
        }
        let value = value_at(self.values, self.threads[&tid].index);
        let thread = self.threads.get_mut(&tid).expect("inserted");
        if thread.addresses != addresses {
            write_words(value, VALUE_ADDRESSES, &addresses);
            thread.addresses = addresses;
        }
        Ok(())
    }

    /// Sets the stack addresses whose words the program reads at each sample of `tid` from now
    /// on (0: none); see [`ANCHORS`].
    pub fn set_anchors(&mut self, tid: u32, anchors: [u64; ANCHORS]) {
        let Some(thread) = self.threads.get(&tid) else {
            return;
        };
        write_words(value_at(self.values, thread.index), VALUE_ANCHORS, &anchors);
    }

    /// Has the programs walk the stacks of the process's threads at their samples (see
    /// `walk.rs`) once the walk is loaded: asked for once a stack was `deeper` than the copy,
    /// and turned on by a later call once loaded.
    pub fn walk(&mut self, deeper: bool) {
        if self.programs.1.turn_on(deeper, self.copies.fd()) {
            for thread in self.threads.values() {
                write_words(value_at(self.values, thread.index), VALUE_WALK, &[1]);
            }
        }
    }

    /// Whether the programs walk the stacks.
    pub fn walks(&self) -> bool {
        self.programs.1.on
    }

    /// The rules the walks follow, to learn more.
    pub fn rules(&mut self) -> &mut Rules {
        &mut self.programs.1
    }

    /// Hands `each` the samples `tid` took and its switches since the previous call, oldest
    /// first. Each sample's slots are the copies the program made at its instant: the program
    /// runs, and puts its copies in the shared ring, before the kernel writes the sample, so
    /// every sample in the thread's ring when the shared ring is read has its copies there;
    /// they carry its time. So for a departure from the CPU, whose copies the switch event's
    /// program makes just before the kernel writes the switch.
    pub fn take(&mut self, tid: u32, mut each: impl FnMut(Taken<'_>)) {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let head = thread.ring.head();
        let bound = SLOTS * 4 * RING_PAGES * self.page / STACK_DUMP as usize;
        read_copies(
            &mut self.copies,
            [&mut self.waiting, &mut self.switch_waiting],
            bound,
        );
        let waiting = &mut self.waiting[thread.index as usize];
        let switch_waiting = &mut self.switch_waiting[thread.index as usize];
        // Two samples are at least one timer tick apart.
        let tolerance = (self.period_ns / TICKS_PER_SAMPLE / 2).min(MATCH_TOLERANCE_NS);
        let (mut lost, mut unmatched, mut samples) = (0u64, 0u64, 0u64);
        let departures = &mut thread.departures;
        let births = &mut self.births;
        thread.ring.drain(head, |record| match parse(record) {
            Record::Sample(mut sample) => {
                let matched = match_copies(waiting, sample.time, [tolerance, tolerance]);
                (sample.slots, sample.marks_known) = (matched.slots, matched.known);
                (sample.anchors, sample.instant) = (matched.anchors, matched.instant);
                unmatched += u64::from(!sample.marks_known);
                samples += 1;
                each(Taken::Sample(*sample));
            }
            Record::Switch {
                time,
                out,
                preempted,
            } => {
                // A departure's copies come just before it (its program runs first), and a
                // departure may follow the previous one by less than the tolerance: only
                // copies made before it are its.
                *departures += u64::from(out);
                let (slots, marks_known) = if out {
                    let matched = match_copies(switch_waiting, time, [MATCH_TOLERANCE_NS, 0]);
                    (matched.slots, matched.known)
                } else {
                    Default::default()
                };
                each(Taken::Switch(Switch {
                    time,
                    out,
                    preempted,
                    slots,
                    marks_known,
                }));
            }
            Record::Fork { tid, time } => {
                if births.len() >= MAX_BIRTHS {
                    births.clear();
                }
                births.insert(tid, time);
            }
            Record::Lost(count) => lost = lost.saturating_add(count),
            Record::Other => {}
        });
        self.lost = self.lost.saturating_add(lost);
        self.unmatched = self.unmatched.saturating_add(unmatched);
        if samples > 0 {
            rephase(&thread.event, self.period_ns / TICKS_PER_SAMPLE);
        }
        self.stop_following_if_too_fast(tid);
    }

    /// Reopens `tid`'s event without its switches if it left its CPU more than
    /// [`MAX_SWITCH_RATE`] times a second in the window now closing (its ring was just read:
    /// nothing in it is lost). If the event cannot be reopened, the thread is no longer sampled.
    fn stop_following_if_too_fast(&mut self, tid: u32) {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let now = crate::record::clock::monotonic_ns();
        let elapsed = now.saturating_sub(thread.window_start);
        if thread.switches.is_none() || elapsed < SWITCH_WINDOW_NS {
            return;
        }
        let rate = thread.departures.saturating_mul(1_000_000_000) / elapsed;
        (thread.departures, thread.window_start) = (0, now);
        if rate <= MAX_SWITCH_RATE {
            return;
        }
        let addresses = thread.addresses;
        self.too_fast.insert(tid);
        self.forget(tid);
        let _ = self.watch(tid, addresses);
    }

    /// How many threads are no longer followed off their CPU (see [`MAX_SWITCH_RATE`]).
    pub fn too_fast(&self) -> usize {
        self.too_fast.len()
    }

    /// Closes the event of a thread that is gone.
    pub fn forget(&mut self, tid: u32) {
        if let Some(thread) = self.threads.remove(&tid) {
            self.waiting[thread.index as usize].clear();
            self.switch_waiting[thread.index as usize].clear();
            self.free.push(thread.index);
        }
    }

    /// Opens `tid`'s event, ring and program. `CAP_PERFMON`, when fsprof holds it, lets
    /// `perf_event_open` pass over the kernel's check that fsprof's user may trace the thread:
    /// the thread is checked before, and again once its event exists, which is enabled only
    /// then (its credentials may have changed in between, by a setuid `exec`, which removes the
    /// events the thread had but not one opened after); one in mid-`exec` waits a tick.
    fn open(&mut self, tid: u32) -> Result<Thread, WatchError> {
        let check = |tid| match crate::record::privilege::may_trace(tid) {
            Ok(()) => Ok(()),
            Err(Refusal::Gone) => Err(WatchError::Refused(Errno::ESRCH)),
            Err(Refusal::Unsettled(_)) => Err(WatchError::Refused(Errno::EAGAIN)),
            Err(Refusal::Rule(why)) => Err(WatchError::Foreign { tid, why }),
        };
        check(tid)?;
        let thread = crate::record::privilege::with_perf(|| self.open_unchecked(tid))
            .map_err(WatchError::Refused)?;
        // Enabled only once the thread passed again: nothing is sampled in between.
        let enabled = check(tid).and_then(|()| {
            let events =
                std::iter::once(&thread.event).chain(thread.switches.as_ref().map(|s| &s.0));
            for event in events {
                // SAFETY: a valid descriptor.
                if unsafe { sys::ioctls::ENABLE(event.as_raw_fd(), 0) } != 0 {
                    return Err(WatchError::Refused(Errno::last()));
                }
            }
            Ok(())
        });
        if let Err(error) = enabled {
            self.waiting[thread.index as usize].clear();
            self.switch_waiting[thread.index as usize].clear();
            self.free.push(thread.index);
            return Err(error);
        }
        Ok(thread)
    }

    /// The program for map value `index` (the one that copies slots at samples, or at
    /// departures if `switch`): loaded once per index and kept, since a thread that ends frees
    /// its index for the next. Loading one (the kernel checks it) takes about 300 µs, which a
    /// new thread spent running before perf counted it: twice per thread, 0.6 ms of the 0.9 ms
    /// between the tick that found it and its event's enabling (`requests`, strace -T).
    fn program(&mut self, index: u32, switch: bool) -> Result<OwnedFd, Errno> {
        let rules = self.programs.1.hand_over();
        let cache = &mut self.programs.0[usize::from(switch)];
        if cache.len() <= index as usize {
            cache.resize_with(index as usize + 1, || None);
        }
        if cache[index as usize].is_none() {
            let (map, copies) = (self.map.as_raw_fd(), self.copies.fd());
            let loaded =
                load_program(map, copies, rules, index, switch).map_err(|_| Errno::EPERM)?;
            cache[index as usize] = Some(loaded);
        }
        let program = cache[index as usize].as_ref().expect("loaded");
        program
            .try_clone()
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
    }

    fn open_unchecked(&mut self, tid: u32) -> Result<Thread, Errno> {
        let index = self.free.pop().ok_or(Errno::EMFILE)?;
        // No anchors from the value's previous thread.
        let value = value_at(self.values, index);
        write_words(value, VALUE_ANCHORS, &[0; ANCHORS]);
        write_words(value, VALUE_WALK, &[u64::from(self.programs.1.on)]);
        self.waiting[index as usize].clear();
        self.switch_waiting[index as usize].clear();
        let pages = if self.threads.len() >= LARGE_RINGS {
            SMALL_RING_PAGES
        } else {
            RING_PAGES
        };
        let opened = (|| {
            let follow = !self.too_fast.contains(&tid);
            let event = open_event(tid as i32, self.period_ns / TICKS_PER_SAMPLE, follow)?;
            let ring = Ring::new(&event, self.page, pages)?;
            let program = self.program(index, false)?;
            attach(&event, &program)?;
            let switches = follow.then(|| {
                let event = open_switch_event(tid as i32)?;
                let program = self.program(index, true)?;
                attach(&event, &program)?;
                Ok::<_, Errno>((event, program))
            });
            let switches = switches.and_then(Result::ok);
            Ok(Thread {
                index,
                event,
                _program: program,
                switches,
                ring,
                addresses: [0; SLOTS],
                departures: 0,
                window_start: crate::record::clock::monotonic_ns(),
            })
        })();
        if opened.is_err() {
            self.free.push(index);
        }
        opened
    }
}

/// Why a thread cannot be sampled with perf.
#[derive(Debug)]
pub enum WatchError {
    /// The kernel refused (the thread is gone, too many open files, ...): sample it another way.
    Refused(Errno),
    /// fsprof holds privilege its user lacks, and the thread is not one that user could trace
    /// (it turned into another user's, by a setuid `exec` say). The perf sampler must be dropped
    /// whole: slot copies already in its shared ring may have come from that thread.
    Foreign {
        /// The thread.
        tid: u32,
        /// Which rule it breaks.
        why: String,
    },
}

/// Gives a thread's timer a tick of a new length, drawn around `tick_ns` (half to one and a
/// half times it), from its next tick on, which then comes that long after now (or after the
/// thread's next return to a CPU). Called whenever the thread ran since the sampler's previous
/// read (a few ms apart), it moves the grid of ticks, which otherwise stays fixed in the
/// thread's CPU time: keeping a random tick of several (see [`TICKS_PER_SAMPLE`]) does not
/// move the grid, and a loop whose CPU time is near a multiple of the tick length kept in step
/// with it (`contracts`, checks of 8, 3 and 6 us in a fixed loop: 5 points low at 250 Hz, 12 high at
/// 1000 Hz; `blocking`'s `work` 9% high beside a busy loop). Starting again from a random place
/// every few ms, the grid is systematic sampling with a random start, which has no bias. The
/// kernel asks the thread's CPU to restart the timer if the thread is running (an
/// interprocessor interrupt: a few us of its time, about a hundred times a second at most). A
/// refusal leaves the timer as it was.
fn rephase(event: &OwnedFd, tick_ns: u64) {
    let mut period = (tick_ns as f64 * (0.5 + fastrand::f64())) as u64;
    period = period.max(10_000);
    // SAFETY: a valid descriptor, and the kernel reads a u64 through the pointer (the crate's
    // `ioctls::PERIOD` passes the value itself, which the kernel would take for an address).
    unsafe {
        libc::ioctl(
            event.as_raw_fd(),
            sys::bindings::PERIOD as _,
            std::ptr::from_mut(&mut period),
        )
    };
}

/// Attaches `program` to `event`.
fn attach(event: &OwnedFd, program: &OwnedFd) -> Result<(), Errno> {
    // SAFETY: valid descriptors.
    match unsafe { sys::ioctls::SET_BPF(event.as_raw_fd(), program.as_raw_fd() as u32) } {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// Most a slot copy's time may differ from its sample's: both are read in the same interrupt,
/// microseconds apart; successive samples of a thread are a period apart.
const MATCH_TOLERANCE_NS: u64 = 100_000;

impl Drop for PerfSampler {
    fn drop(&mut self) {
        self.threads.clear();
        // SAFETY: unmaps what `new` mapped.
        unsafe { libc::munmap(self.values.cast(), values_len(self.page, self.capacity)) };
    }
}

fn values_len(page: usize, capacity: u32) -> usize {
    (capacity as usize * VALUE_SIZE).div_ceil(page) * page
}

/// Writes `words` into the map value at `value` from byte `offset` (volatile: the BPF program
/// reads them at any time).
fn write_words(value: *mut u8, offset: usize, words: &[u64]) {
    debug_assert!(offset + 8 * words.len() <= VALUE_SIZE && offset.is_multiple_of(8));
    for (i, word) in words.iter().enumerate() {
        // SAFETY: `value` is a thread's map value (`value_at`), VALUE_SIZE bytes, 8-aligned, and
        // the words lie inside it (the callers' offsets are the layout's).
        unsafe {
            value
                .add(offset + 8 * i)
                .cast::<u64>()
                .write_volatile(*word)
        };
    }
}

fn value_at(values: *mut u8, index: u32) -> *mut u8 {
    // SAFETY: index < the sampler's capacity (an index comes from its free list), so the value
    // lies inside the mapping.
    unsafe { values.add(index as usize * VALUE_SIZE) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsprof_shim::abi::SLOT_SIZE;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;

    /// A thread of this process spins while "marking": its fake slot (two words that change
    /// together) must come back from the sample exactly as it was at the sample's instant.
    #[test]
    fn a_running_thread_is_sampled_with_its_slot_at_the_same_instant() {
        let mut perf = match PerfSampler::new(1_000_000, MAX_THREADS) {
            Ok(perf) => perf,
            // Only root is sure to have perf events and BPF; elsewhere this backend is off.
            Err(why) if unsafe { libc::geteuid() } != 0 => {
                eprintln!("skipped: {why}");
                return;
            }
            Err(why) => panic!("perf backend unavailable as root: {why}"),
        };
        let slot = Arc::new(
            (0..SLOT_SIZE / 4)
                .map(|_| AtomicU32::new(0))
                .collect::<Vec<_>>(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU32::new(0));
        let worker = {
            let (slot, stop, tid) = (slot.clone(), stop.clone(), tid.clone());
            std::thread::spawn(move || {
                tid.store(
                    unsafe { libc::syscall(libc::SYS_gettid) } as u32,
                    Ordering::SeqCst,
                );
                slot[2].store(2, Ordering::Relaxed); // depth: two records
                let last = RECORDS_OFFSET / 4 + 2 * RECORD_SIZE / 4 - 1;
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    slot[0].store(n, Ordering::Relaxed);
                    slot[1].store(n, Ordering::Relaxed);
                    slot[last].store(n, Ordering::Relaxed); // the second record's last word
                    slot[last + 1].store(n, Ordering::Relaxed); // beyond the depth: not copied
                }
            })
        };
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let tid = tid.load(Ordering::SeqCst);
        let address = slot.as_ptr() as u64;
        let (mut taken, mut unknown) = (0, 0);
        let mut last_time = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        perf.watch(tid, [address, 0]).unwrap();
        // Rarely read: every sample since the previous read comes back, each with its own copy.
        while taken < 200 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(15));
            perf.take(tid, |item| {
                let Taken::Sample(sample) = item else {
                    return;
                };
                assert!(sample.time > last_time, "in order");
                last_time = sample.time;
                if !sample.marks_known {
                    unknown += 1;
                    return;
                }
                taken += 1;
                let copy = sample.slots[0].as_ref().unwrap();
                let a = u32::from_ne_bytes(copy[0..4].try_into().unwrap());
                let b = u32::from_ne_bytes(copy[4..8].try_into().unwrap());
                // A copy made while the thread ran could catch it between the two stores; one
                // made while it is interrupted cannot (well, a == b + 1 in that instant: the
                // first store done, the second not yet).
                assert!(a == b || a == b.wrapping_add(1), "{a} {b}");
                assert!(a != 0);
                let at = RECORDS_OFFSET + 2 * RECORD_SIZE - 4;
                let c = u32::from_ne_bytes(copy[at..at + 4].try_into().unwrap());
                assert!(c == b || c.wrapping_add(1) == b, "{b} {c}");
                assert_eq!(
                    copy.len(),
                    RECORDS_OFFSET + 2 * RECORD_SIZE,
                    "only the records below the depth are copied"
                );
                assert!(sample.slots[1].is_none());
                assert!(!sample.stack.bytes.is_empty());
                assert_eq!(sample.stack.start, sample.regs.sp);
            });
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        assert!(taken >= 200, "{taken} samples with their marks within 10 s");
        assert!(
            unknown * 100 <= taken,
            "{unknown} samples without their marks, {taken} with"
        );
        assert_eq!(perf.lost, 0, "no sample lost at 15 ms between reads");
        perf.forget(tid);
    }
}
