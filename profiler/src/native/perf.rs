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
//! `ring.rs`, the program `sampling.rs` (loaded by `bpf.rs`), the layout they share `layout.rs`. It does not unwind (`unwind.rs`), decode slots (`fsprof_shim::abi`) or decide which
//! threads to sample (the sampler). Everything read from a ring or a map came from the target's
//! memory or the kernel's copy of it and is bounded before use.
//!
//! The BPF programs (`sampling.rs`, `walk.rs`, with `asm.rs`'s labels) are hand-assembled: Rust's BPF toolchains (aya,
//! libbpf-rs) need a separate compiler, which `cargo build` cannot assume. It needs `CAP_BPF`
//! and `CAP_PERFMON` (or root); where refused, [`PerfSampler::new`] says why (ptrace then).

use crate::native::bpf::{create_map, page_size, BPF_MAP_TYPE_ARRAY};
use crate::native::cpu_wide::CpuWide;
use crate::native::layout::{ANCHORS, DEPARTURE_STACK_DUMP, SLOTS, STACK_DUMP};
use crate::native::layout::{
    FOLD_KINDS, VALUE_ADDRESSES, VALUE_ANCHORS, VALUE_BLOCK_COPIED, VALUE_CPU_NS, VALUE_DEPARTED,
    VALUE_FOLD_KIND, VALUE_FOLD_LEFT, VALUE_LABELS_OFFSET, VALUE_ON_SINCE, VALUE_QUIET, VALUE_SIZE,
    VALUE_SWITCHES, VALUE_TID, VALUE_WALK, VALUE_WATCHED_AT,
};
use crate::native::layout::{LABELS_CUSTOM, LABELS_OTEL};
use crate::native::map_value::Values;
use crate::native::perf_events::{attach, open_event, open_switch_event, output_to, rephase};
use crate::native::ring::{match_copies, parse, CopyRing, Record, Ring, Unmatched};
use crate::native::rules::Rules;
use crate::native::sampling::{load_program, Departure, Index, Programs};
use crate::native::stream::{Switch, Taken};

use crate::os::privilege::Refusal;
use foldhash::{HashMap, HashMapExt, HashSet};
use nix::errno::Errno;
use nix::libc;
use perf_event_open_sys as sys;
use std::os::fd::{AsRawFd, OwnedFd};

/// Threads sampled this way at once; further threads fall back to ptrace.
pub const MAX_THREADS: u32 = 1024;
/// Threads sampled by perf in a child process that `run` follows (`record/children.rs`) with
/// per-thread events of its own: a child seldom has many, and a smaller map is quicker to make
/// for each (more are stopped by ptrace). A child that joins the program's per-CPU sampler
/// (`perf/shared.rs`) shares its [`MAX_THREADS`] instead.
pub const CHILD_THREADS: u32 = 64;
/// The most a record in a thread's ring takes: a departure's (its stack dump, registers and
/// header). A ring with less room than this may have dropped the next record.
const LARGEST_RECORD: usize = DEPARTURE_STACK_DUMP as usize + 1024;
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
/// Bytes of the shared ring of slot copies per CPU at the default rate, more at a higher one
/// (`cpu_wide::rate_scale`, as the CPUs' rings: reads come as seldom; the copies of one sample,
/// or of one departure from a CPU, are a few hundred bytes, a preempted departure's stack up
/// to 64 KiB once a period; a CPU runs one thread at a time): room for about 10 ms of a thread
/// that leaves its CPU 100 000 times a second between two reads.
const COPIES_PER_CPU: usize = 1024 * 1024;
/// At most this many bytes for that ring, however many CPUs.
const COPIES_MAX: usize = 32 * 1024 * 1024;

/// The CPU time between two of perf's samples of a thread at `rate_hz`, a thread's timer's and
/// a CPU's tick (one tick a period: each costs the interrupted thread about 20 us of its CPU in
/// a virtual machine). Ticks every quarter period, one kept at random (0817dca to 27873a6),
/// biased a loop of equal steps of a few µs (a sample stood for the CPU time since the previous
/// one, longer for a tick late in its period); a CPU's timer ticked twice a period, one kept at
/// random, until the twenty-eighth session, when its samples came to stand for their tick's
/// length (`Credit::calibrate`, `record/sampler/off_cpu/followed.rs`): by CPU time since the previous sample, one tick read a loop of
/// 700 us of `hashing`, a 500 us sleep and 300 us unmarked 1.9 to 2.8 points high (the thread's
/// CPU time between two ticks of its CPU depends on where its sleep fell). Against a loop in step
/// with the ticks, `rephase` restarts them at random. BENCHMARKS.md (issue 18's section, and
/// issue 39's of the twenty-second, twenty-third and twenty-eighth sessions) has the runs.
///
/// A twentieth less than
/// `1 / rate_hz`, so that the timer's ticks are no round number of microseconds apart (950 us
/// at 1000 Hz, 3.8 ms at 250 Hz, one a period). At 250 Hz ticks 1 ms apart (four a period, then)
/// kept in step with a loop of 1 ms of CPU whatever tick was kept (`sleepy`'s `hashing` read
/// 2.6 to 4.2 points low on a quiet machine); loops of round lengths are common, and those of
/// these lengths are not.
pub fn sampling_period(rate_hz: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(0.95 / rate_hz)
}

struct Thread {
    index: u32,
    /// Which holder watches it (see [`Owner`]).
    owner: Owner,
    /// Its own events (`None` in the per-CPU design, `cpu_wide.rs`).
    own: Option<OwnEvents>,
    addresses: [u64; SLOTS],
    /// Whether it ran as it was last asked to be watched (see [`PerfSampler::watch_by`]).
    running: bool,
    /// Watched before its switches were followed, and to be watched again once its samples
    /// until now are taken (see [`PerfSampler::follow_switches`]).
    handover: bool,
    /// Its departures from its CPU since `window_start` (CLOCK_MONOTONIC, ns).
    departures: u64,
    window_start: u64,
    /// Its samples since its timer was last re-phased (see [`REPHASE_SAMPLES`]).
    unphased: u64,
    /// Whether the latest of its switches read was a departure from its CPU: its timer is not
    /// re-phased then (see [`REPHASE_SAMPLES`]).
    off_cpu: bool,
}

/// A thread's own events and ring.
struct OwnEvents {
    event: OwnedFd,
    _program: OwnedFd,
    /// Its context-switch event and that event's program, which copies its slots as it leaves
    /// its CPU (`None` where the kernel refused them: its switches are then not followed).
    switches: Option<(OwnedFd, OwnedFd)>,
    /// Whether the kernel let that event's samples go to `ring`.
    departures: bool,
    ring: Ring,
}

/// How a process publishes the labels perf's program copies at its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelFormat {
    /// The custom-labels ABI v1: a label set (`program/custom_labels.rs`).
    CustomLabels,
    /// The OpenTelemetry thread context: a record (`program/otel_context.rs`).
    Otel,
}

impl LabelFormat {
    fn word(self) -> u64 {
        match self {
            LabelFormat::CustomLabels => LABELS_CUSTOM,
            LabelFormat::Otel => LABELS_OTEL,
        }
    }
}

/// The perf side of a sampler: one event per sampled thread, or one per CPU (`cpu_wide.rs`;
/// which, `perf/design.rs`).
pub struct PerfSampler {
    map: OwnedFd,
    /// One map value per thread it can sample at once (at most [`MAX_THREADS`]), mapped into
    /// fsprof.
    values: Values,
    copies: CopyRing,
    /// Slot copies read from `copies` and not yet matched, per map value index: made at
    /// samples, and as threads left their CPU.
    queues: Unmatched,
    threads: HashMap<u32, Thread>,
    free: Vec<u32>,
    page: usize,
    period_ns: u64,
    /// Samples the kernel could not write (a thread's ring was full).
    pub lost: u64,
    /// Samples whose slot copies were missing or failed.
    pub unmatched: u64,
    /// Threads no longer followed off their CPU (see [`MAX_SWITCH_RATE`]).
    too_fast: HashSet<u32>,
    /// When the threads' switches are followed, and whether they are now (`following.rs`).
    asked: Following,
    following: bool,
    /// Whether a watched process marks: then they are followed, whatever the cost.
    marked: bool,
    /// The machine's activity at the start of the current window, and when (ns).
    window: Option<(crate::os::machine::Activity, u64)>,
    /// The machine's switches a second per busy CPU when following stopped for their cost, the
    /// most if it stopped more than once.
    pub stopped_at_rate: Option<u64>,
    /// When threads made by sampled threads were born (CLOCK_MONOTONIC, ns), until asked for.
    births: HashMap<u32, u64>,
    programs: Programs,
    /// The per-CPU design's events and programs, where chosen (`perf/design.rs`).
    wide: Option<CpuWide>,
    /// The latest owner given out (see [`Owner`]).
    owners: Owner,
    /// Holders alive (`perf/shared.rs`'s `Perf`s), each of one process.
    holders: usize,
    /// Per owner whose labels are read, the offset of their thread-local pointer from a
    /// thread's thread pointer and their format (see `layout::VALUE_LABELS_OFFSET`).
    labels: HashMap<Owner, [u64; 2]>,
    /// Per CPU, each owner's process, whose threads not watched get bare samples
    /// (`perf/shared.rs`).
    processes: HashMap<Owner, u32>,
}

/// Who watches a thread: the process the sampler was made for ([`FIRST_OWNER`], whose code
/// the walk's rules are), or another process of the same tree that shares its per-CPU events
/// (`perf/shared.rs`): its threads are never walked (the rules are of another program).
pub type Owner = u32;
/// The owner a sampler was made for.
pub const FIRST_OWNER: Owner = 0;

/// When a perf sampler follows its threads' switches (see `Taken::Switch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Following {
    /// Always: where every thread's blocked time counts (`--idle`).
    Always,
    /// While the machine switches seldom enough, or once a watched process marks (see
    /// `following.rs`).
    WhileCheap,
}

/// Births remembered at most (those of threads that never ran long enough to be found, or of
/// processes, are dropped when the map is full).
const MAX_BIRTHS: usize = 4096;

impl PerfSampler {
    /// Creates the maps and checks that this process may load the program and open events that
    /// sample every `period_ns` of a thread's CPU time. The error says what the kernel refused
    /// and what to do.
    pub fn new(period_ns: u64, capacity: u32, following: Following) -> Result<PerfSampler, String> {
        let design = Design::from_environment();
        let create = || PerfSampler::create(period_ns, capacity, design, following);
        crate::os::privilege::with_perf(create)
    }

    /// [`PerfSampler::new`], in the design asked for.
    pub(super) fn create(
        period_ns: u64,
        capacity: u32,
        design: Design,
        following: Following,
    ) -> Result<PerfSampler, String> {
        let capacity = capacity.clamp(1, MAX_THREADS);
        if let Some(why) = crate::os::privilege::perf_withheld() {
            return Err(why.to_owned());
        }
        if !cfg!(target_arch = "x86_64") {
            return Err("the perf backend is x86-64 only".to_owned());
        }
        let needs = "the perf backend needs root, or CAP_BPF and CAP_PERFMON";
        let map = create_map(BPF_MAP_TYPE_ARRAY, 4, VALUE_SIZE as u32, capacity)
            .map_err(|e| format!("cannot create a BPF map ({}): {needs}", e.desc()))?;
        let page = page_size();
        let cpus = crate::os::machine::cpus();
        let copies = CopyRing::new(
            page,
            (cpus * COPIES_PER_CPU)
                .saturating_mul(crate::native::cpu_wide::rate_scale(period_ns))
                .min(COPIES_MAX)
                .next_power_of_two(),
        )
        .map_err(|e| format!("cannot create a BPF ring buffer ({}): {needs}", e.desc()))?;
        let values = Values::map(&map, page, capacity)
            .map_err(|e| format!("cannot map the BPF map ({})", e.desc()))?;
        let mut sampler = PerfSampler {
            map,
            values,
            copies,
            queues: Unmatched::new(capacity),
            threads: HashMap::new(),
            free: (0..capacity).rev().collect(),
            page,
            period_ns: period_ns.max(10_000),
            lost: 0,
            unmatched: 0,
            too_fast: Default::default(),
            asked: following,
            following: true,
            marked: false,
            window: None,
            stopped_at_rate: None,
            births: HashMap::new(),
            programs: Programs::new(
                Rules::new(capacity <= CHILD_THREADS)
                    .map_err(|e| format!("cannot create a BPF map ({}): {needs}", e.desc()))?,
                Departure { gap_ns: period_ns },
            ),
            wide: None,
            owners: FIRST_OWNER,
            holders: 0,
            labels: HashMap::new(),
            processes: HashMap::new(),
        };
        if sampler.programs.rules.eager() {
            sampler.programs.rules.prepare_walk(sampler.copies.fd());
        }
        sampler.wide = sampler.open_design(design, capacity);
        if sampler.wide.is_none() {
            // What the per-thread events need, tried now so that the error says it: the
            // program loads (the first thread's, kept), and an event opens (on this thread).
            let (map, copies) = (sampler.map.as_raw_fd(), sampler.copies.fd());
            let rules = sampler.programs.rules.hand_over();
            load_program(map, copies, rules, Index::Fixed(0), None)
                .map_err(|e| format!("cannot load a BPF program ({e}): {needs}"))
                .map(|loaded| sampler.programs.keep(0, false, loaded))?;
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
        }
        Ok(sampler)
    }

    /// Sampling periods the smallest ring of a sampled thread holds: a reader must come back
    /// before a thread has run that many periods, or samples are lost. A period may bring a
    /// sample and a departure's (at most one per period: `sampling::Departure`).
    pub fn ring_capacity(&self) -> usize {
        if let Some(wide) = &self.wide {
            // A CPU's ring, which a sample per period may fill (departures' stacks go to the
            // shared ring, with the slot copies).
            return wide.ring_bytes() / (STACK_DUMP as usize + 256);
        }
        let pages = if self.threads.len() > LARGE_RINGS {
            SMALL_RING_PAGES
        } else {
            RING_PAGES
        };
        pages * self.page / (STACK_DUMP as usize + DEPARTURE_STACK_DUMP as usize + 256)
    }

    /// The most slot copies kept per thread waiting for their samples (or departures): more
    /// than a thread's ring, or its CPU's, could need between two reads.
    fn copies_bound(&self) -> usize {
        let ring = (self.wide.as_ref()).map_or(0, CpuWide::ring_bytes);
        SLOTS * 4 * ring.max(RING_PAGES * self.page) / STACK_DUMP as usize
    }

    /// How long the smallest ring lasts while its thread (or, per CPU, its CPU) runs, until
    /// the next read: its capacity at the shortest tick a timer has. A rephase gives a timer a
    /// tick of two thirds to two periods (`perf_events::rephase`): per CPU, the ticks the
    /// CPUs' timers have now (kept until the next read); per thread, half a period (a margin
    /// below the shortest). At whole periods, as before, a CPU's ring of 63 samples at 1 kHz
    /// was taken to last 60 ms where it lasted 30 at the shortest tick (this module's tests
    /// lost 20 and 1 samples in two suites, reading 45 and 55 ms apart).
    pub fn ring_lasts(&self) -> std::time::Duration {
        let tick_ns = match &self.wide {
            Some(wide) => wide.shortest_tick_ns().unwrap_or(self.period_ns),
            None => self.period_ns / 2,
        };
        std::time::Duration::from_nanos(tick_ns) * self.ring_capacity() as u32
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

    /// Up to when what [`PerfSampler::take`] handed out is complete, where that is earlier than
    /// the take (the per-CPU design holds the last few hundred µs back: `cpu_wide.rs`).
    pub fn complete_until(&self) -> Option<u64> {
        self.wide.as_ref().map(CpuWide::complete_until)
    }

    /// `tid`'s time on a CPU since it was first watched, in ns (its task-clock count: exact,
    /// also once the thread has exited, until it is forgotten).
    pub fn cpu_ns(&self, tid: u32) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        if self.wide.is_some() {
            let now = crate::os::time::monotonic_ns();
            return Some(self.values.cpu_ns(thread.index, now));
        }
        let mut value = [0u8; 8];
        nix::unistd::read(thread.own.as_ref()?.event.as_raw_fd(), &mut value)
            .ok()
            .filter(|n| *n == 8)?;
        Some(u64::from_ne_bytes(value))
    }

    /// Per CPU, `tid`'s time on a CPU up to its latest departure and its count of switches,
    /// while it is off its CPU (the time is then whole, as the kernel's totals are); `None`
    /// while it runs (or its return went untraced), and with per-thread events.
    pub fn cpu_ns_off(&self, tid: u32) -> Option<(u64, u64)> {
        self.wide.as_ref()?;
        let index = self.threads.get(&tid)?.index;
        let switches = self.values.read(index, VALUE_SWITCHES);
        let off = self.values.read(index, VALUE_ON_SINCE) == 0;
        let cpu_ns = self.values.read(index, VALUE_CPU_NS);
        let still = self.values.read(index, VALUE_SWITCHES) == switches;
        (off && still).then_some((cpu_ns, switches))
    }

    /// Per CPU, whether `tid` left or came back to a CPU since the latest switch its stream
    /// handed out (the programs' count is ahead of the records taken: they are held back, or
    /// not read yet); `None` for the per-thread events, or before its first switch.
    pub fn switched_unseen(&self, tid: u32) -> Option<bool> {
        let handed = self.wide.as_ref()?.switches_handed(tid)?;
        let index = self.threads.get(&tid)?.index;
        Some(self.values.read(index, VALUE_SWITCHES) != handed)
    }

    /// Per CPU, whether `tid`, not watched, ran since a tick saw it (see `CpuWide::ran`).
    pub fn ran_unwatched(&mut self, tid: u32) -> bool {
        self.wide.as_mut().is_some_and(|wide| wide.ran(tid))
    }

    /// Per CPU, when `tid` left its CPU, if it is blocked since a departure that the
    /// `sched_switch` program folded (not recorded: see `layout::FOLD_MOST_NS`); read again if the
    /// departure changed between the two words.
    pub fn folded_open(&self, tid: u32) -> Option<u64> {
        self.wide.as_ref()?;
        let index = self.threads.get(&tid)?.index;
        let left = self.values.read(index, VALUE_FOLD_LEFT);
        let blocked = self.values.read(index, VALUE_FOLD_KIND) == 0;
        (left != 0 && blocked && self.values.read(index, VALUE_FOLD_LEFT) == left).then_some(left)
    }

    /// Makes sure `tid` is being sampled, copying the slots at `addresses` (0 for none) with
    /// each sample from now on. Fails if the thread cannot be sampled this way.
    pub fn watch(&mut self, tid: u32, addresses: [u64; SLOTS]) -> Result<(), WatchError> {
        self.watch_by(FIRST_OWNER, tid, addresses, false)
    }

    /// Has the program read, at each sample of `owner`'s threads from now on, the pointer to
    /// their labels, `offset` bytes from their thread pointer, in format `format` (see
    /// `program/custom_labels.rs`, `program/otel_context.rs`); they come with their samples
    /// (`PerfSample::labels`).
    pub fn read_labels(&mut self, owner: Owner, offset: i64, format: LabelFormat) {
        let words = [offset as u64, format.word()];
        self.labels.insert(owner, words);
        for thread in self.threads.values().filter(|t| t.owner == owner) {
            self.values.write(thread.index, VALUE_LABELS_OFFSET, &words);
        }
    }

    /// Keeps only the part of `tid`'s samples' stacks below `end` from now on (0: all of it),
    /// where samples wait outside the rings (per CPU: `cpu_wide.rs`; a thread's own ring is
    /// read in place).
    pub fn keep_stacks_below(&mut self, tid: u32, end: u64) {
        if let Some(wide) = &mut self.wide {
            wide.keep_stacks_below(tid, end);
        }
    }

    /// Sets the stack addresses whose words the program reads at each sample of `tid` from now
    /// on (0: none); see [`ANCHORS`].
    pub fn set_anchors(&mut self, tid: u32, anchors: [u64; ANCHORS]) {
        let Some(thread) = self.threads.get(&tid) else {
            return;
        };
        self.values.write(thread.index, VALUE_ANCHORS, &anchors);
    }

    /// Has the programs walk the stacks of the process's threads at their samples (see
    /// `walk.rs`) once the walk is loaded: asked for once a stack was `deeper` than the copy,
    /// and turned on by a later call once loaded.
    pub fn walk(&mut self, deeper: bool) {
        if self.programs.rules.turn_on(deeper, self.copies.fd()) {
            for thread in self.threads.values().filter(|t| t.owner == FIRST_OWNER) {
                self.values.write(thread.index, VALUE_WALK, &[1]);
            }
        }
    }

    /// Whether the programs walk the stacks.
    pub fn walks(&self) -> bool {
        self.programs.rules.on
    }

    /// The rules the walks follow, to learn more.
    pub fn rules(&mut self) -> &mut Rules {
        &mut self.programs.rules
    }

    /// Hands `each` the samples `tid` took and its switches since the previous call, oldest
    /// first. Each sample's slots are the copies the program made at its instant: the program
    /// runs, and puts its copies in the shared ring, before the kernel writes the sample, so
    /// every sample in the thread's ring when the shared ring is read has its copies there;
    /// they carry its time. So for a departure from the CPU, whose copies the switch event's
    /// program makes just before the kernel writes the switch. Then, where following its
    /// switches began or ended since, the thread is handed over (`following.rs`).
    pub fn take(&mut self, tid: u32, each: impl FnMut(Taken<'_>)) {
        match self.wide.is_some() {
            true => self.take_wide(tid, each),
            false => self.take_own(tid, each),
        }
        self.hand_over(tid);
    }

    /// [`PerfSampler::take`] with the thread's own events.
    fn take_own(&mut self, tid: u32, mut each: impl FnMut(Taken<'_>)) {
        let bound = self.copies_bound();
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some(own) = thread.own.as_mut() else {
            return;
        };
        let head = own.ring.head();
        self.queues.read(&mut self.copies, bound);
        let waiting = &mut self.queues.at_samples[thread.index as usize];
        let switch_waiting = &mut self.queues.at_switches[thread.index as usize];
        // Two samples are at least one timer tick apart.
        let tolerance = (self.period_ns / 2).min(MATCH_TOLERANCE_NS);
        let (mut lost, mut unmatched, mut samples) = (0u64, 0u64, 0u64);
        let departures = &mut thread.departures;
        let off_cpu = &mut thread.off_cpu;
        let births = &mut self.births;
        let has_departures = own.departures;
        let mut latest = 0u64;
        let room = own.ring.drain(head, |record| match parse(record) {
            Record::Sample {
                departure: true,
                sample,
                ..
            } if has_departures => {
                latest = latest.max(sample.time);
                each(Taken::Departure(*sample));
            }
            Record::Sample { mut sample, .. } => {
                latest = latest.max(sample.time);
                let matched = match_copies(waiting, sample.time, [tolerance, tolerance]);
                (sample.slots, sample.marks_known) = (matched.slots, matched.known);
                (sample.anchors, sample.instant) = (matched.anchors, matched.instant);
                sample.labels = matched.labels;
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
                latest = latest.max(time);
                *departures += u64::from(out);
                *off_cpu = out;
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
            Record::Fork { tid, time, .. } => {
                if births.len() >= MAX_BIRTHS {
                    births.clear();
                }
                births.insert(tid, time);
            }
            Record::Lost(count) => {
                lost = lost.saturating_add(count);
                each(Taken::Gap { at: latest });
            }
            Record::Other => {}
        });
        if room < LARGEST_RECORD {
            each(Taken::Gap { at: latest });
        }
        self.lost = self.lost.saturating_add(lost);
        self.unmatched = self.unmatched.saturating_add(unmatched);
        thread.unphased += samples;
        if thread.unphased >= REPHASE_SAMPLES && !thread.off_cpu {
            rephase(&own.event, self.period_ns);
            thread.unphased = 0;
        }
        self.stop_following_if_too_fast(tid);
    }

    /// [`PerfSampler::take`] in the per-CPU design (`cpu_wide.rs`): the CPUs' rings and the
    /// shared ring are read into their threads' queues, then `tid`'s are merged in time order.
    /// A thread removed at an `exec` is forgotten, to be watched again (checked) at its next
    /// sample.
    fn take_wide(&mut self, tid: u32, mut each: impl FnMut(Taken<'_>)) {
        let bound = self.copies_bound();
        let (Some(thread), Some(wide)) = (self.threads.get(&tid), self.wide.as_mut()) else {
            return;
        };
        let index = thread.index as usize;
        read_cpus(wide, &mut self.births);
        self.queues.read(&mut self.copies, bound);
        let tolerance = (self.period_ns / 2).min(MATCH_TOLERANCE_NS);
        let (mut unmatched, mut departures) = (0u64, 0u64);
        let execed = wide.take(
            tid,
            &mut self.queues.at_samples[index],
            &mut self.queues.at_switches[index],
            &mut self.queues.events[index],
            tolerance,
            |item| {
                match &item {
                    Taken::Sample(sample) => unmatched += u64::from(!sample.marks_known),
                    Taken::Switch(switch) => departures += u64::from(switch.out),
                    _ => {}
                }
                each(item);
            },
        );
        wide.rephase(self.period_ns);
        self.lost = self.lost.saturating_add(std::mem::take(&mut wide.lost));
        self.unmatched = self.unmatched.saturating_add(unmatched);
        if execed {
            wide.processes_stale();
            self.forget(tid);
        } else if let Some(thread) = self.threads.get_mut(&tid) {
            thread.departures += departures;
            self.stop_following_if_too_fast(tid);
        }
    }

    /// Returns to a CPU taken, and how many of them inferred (`cpu_wide.rs`; 0 otherwise).
    #[cfg(test)]
    pub(super) fn returns(&self) -> [u64; 2] {
        self.wide.as_ref().map_or([0; 2], |wide| wide.returns)
    }

    /// Whether the programs walk `tid`'s stack at its samples (its map value says so).
    #[cfg(test)]
    pub(super) fn walks_thread(&self, tid: u32) -> bool {
        (self.threads.get(&tid)).is_some_and(|t| self.values.read(t.index, VALUE_WALK) != 0)
    }

    /// Samples the CPUs' rings held of threads not watched (`cpu_wide.rs`; 0 otherwise).
    /// The thread id `tid`'s map value says it is for (see `layout::VALUE_TID`).
    #[cfg(test)]
    pub(super) fn value_tid(&self, tid: u32) -> Option<u64> {
        let thread = self.threads.get(&tid)?;
        Some(self.values.read(thread.index, VALUE_TID))
    }

    #[cfg(test)]
    pub(super) fn foreign_samples(&self) -> u64 {
        self.wide.as_ref().map_or(0, |wide| wide.foreign)
    }

    /// Closes the event of a thread that is gone.
    pub fn forget(&mut self, tid: u32) {
        if let Some(thread) = self.threads.remove(&tid) {
            if let Some(wide) = &mut self.wide {
                wide.unwatch(tid);
            }
            self.release(thread.index);
        }
    }

    /// Makes map value `index` free for another thread, no thread's meanwhile.
    fn release(&mut self, index: u32) {
        self.values.write(index, VALUE_TID, &[0]);
        self.queues.clear(index);
        self.free.push(index);
    }

    /// Opens `tid`'s event, ring and program. `CAP_PERFMON`, when fsprof holds it, lets
    /// `perf_event_open` pass over the kernel's check that fsprof's user may trace the thread:
    /// the thread is checked before, and again once its event exists, which is enabled only
    /// then (its credentials may have changed in between, by a setuid `exec`, which removes the
    /// events the thread had but not one opened after); one in mid-`exec` waits a tick.
    fn open(
        &mut self,
        owner: Owner,
        tid: u32,
        addresses: [u64; SLOTS],
        running: bool,
    ) -> Result<Thread, WatchError> {
        let check = |tid| match crate::os::privilege::may_trace(tid) {
            Ok(()) => Ok(()),
            Err(Refusal::Gone) => Err(WatchError::Refused(Errno::ESRCH)),
            Err(Refusal::Unsettled(_)) => Err(WatchError::Refused(Errno::EAGAIN)),
            Err(Refusal::Rule(why)) => Err(WatchError::Foreign { tid, why }),
        };
        check(tid)?;
        let thread =
            crate::os::privilege::with_perf(|| self.open_unchecked(owner, tid, addresses, running))
                .map_err(WatchError::Refused)?;
        // Enabled (or, per CPU, watched) only once the thread passed again: nothing is
        // sampled in between.
        let (wide, too_fast) = (&mut self.wide, &self.too_fast);
        let enabled = check(tid).and_then(|()| {
            let Some(own) = &thread.own else {
                let wide = wide
                    .as_mut()
                    .expect("a thread without events is watched per CPU");
                let quiet = too_fast.contains(&tid);
                return (wide.watch(tid, thread.index, quiet)).map_err(WatchError::Refused);
            };
            let events = std::iter::once(&own.event).chain(own.switches.as_ref().map(|s| &s.0));
            for event in events {
                // SAFETY: a valid descriptor.
                if unsafe { sys::ioctls::ENABLE(event.as_raw_fd(), 0) } != 0 {
                    return Err(WatchError::Refused(Errno::last()));
                }
            }
            Ok(())
        });
        if let Err(error) = enabled {
            self.release(thread.index);
            return Err(error);
        }
        Ok(thread)
    }

    fn open_unchecked(
        &mut self,
        owner: Owner,
        tid: u32,
        addresses: [u64; SLOTS],
        running: bool,
    ) -> Result<Thread, Errno> {
        let index = self.free.pop().ok_or(Errno::EMFILE)?;
        // The thread's slot addresses before it is sampled (written after, a sample in between
        // copied no slot yet counted its marks as known: the two-samplers lib test failed 2 runs
        // of 6), and no anchors from the value's previous thread.
        self.values.write(index, VALUE_ADDRESSES, &addresses);
        self.values.write(index, VALUE_ANCHORS, &[0; ANCHORS]);
        let labels = self.labels.get(&owner).copied().unwrap_or([0, 0]);
        self.values.write(index, VALUE_LABELS_OFFSET, &labels);
        let walk = u64::from(self.programs.rules.on && owner == FIRST_OWNER);
        self.values.write(index, VALUE_WALK, &[walk]);
        // Per CPU, a thread no longer followed off its CPU is not once watched again (after an
        // exec): its switches only count into its time on a CPU.
        let quiet = self.wide.is_some() && self.too_fast.contains(&tid);
        self.values.write(index, VALUE_DEPARTED, &[0]);
        self.values.write(index, VALUE_BLOCK_COPIED, &[0]);
        self.values.write(index, VALUE_QUIET, &[u64::from(quiet)]);
        // Nothing known of its time on a CPU, and no switch counted; when it was watched, if it
        // runs (0: its time counts from its first return onto a CPU, or else its first sample).
        self.values.write(index, VALUE_CPU_NS, &[0, 0, 0]);
        let watched_at = if running {
            crate::os::time::monotonic_ns()
        } else {
            0
        };
        self.values.write(index, VALUE_WATCHED_AT, &[watched_at]);
        self.values.write(index, VALUE_TID, &[u64::from(tid)]);
        self.values
            .write(index, VALUE_FOLD_LEFT, &[0; 3 + FOLD_KINDS]);
        self.queues.clear(index);
        let thread = |own| Thread {
            index,
            owner,
            own,
            addresses,
            running,
            handover: false,
            departures: 0,
            window_start: crate::os::time::monotonic_ns(),
            unphased: 0,
            off_cpu: false,
        };
        if self.wide.is_some() {
            return Ok(thread(None));
        }
        let pages = if self.threads.len() >= LARGE_RINGS {
            SMALL_RING_PAGES
        } else {
            RING_PAGES
        };
        let opened = (|| {
            let follow = self.following && !self.too_fast.contains(&tid);
            let event = open_event(tid as i32, self.period_ns, follow)?;
            let ring = Ring::new(&event, self.page, pages)?;
            let (map, copies) = (self.map.as_raw_fd(), self.copies.fd());
            let program = self.programs.get(map, copies, index, false)?;
            attach(&event, &program)?;
            let switches = follow.then(|| {
                let switch = open_switch_event(tid as i32)?;
                let program = self.programs.get(map, copies, index, true)?;
                attach(&switch, &program)?;
                Ok::<_, Errno>((switch, program))
            });
            let switches = switches.and_then(Result::ok);
            let departures =
                (switches.as_ref()).is_some_and(|(switch, _)| output_to(switch, &event));
            Ok(thread(Some(OwnEvents {
                event,
                _program: program,
                switches,
                departures,
                ring,
            })))
        })();
        if opened.is_err() {
            self.release(index);
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

/// A thread's timer is re-phased ([`rephase`]) at a read of its ring once it took this many
/// samples since it last was: at every read with a sample. Each re-phasing is a synchronous
/// interprocessor interrupt to the thread's last CPU, running or not (`task_function_call`),
/// which in a virtual machine costs both sides tens of microseconds: the `ioctl` is 10 to 19%
/// of fsprof's own CPU (BENCHMARKS.md, issue 39). Re-phasing every 6 samples instead
/// (0720e79 to d5178e2) leaves the grid fixed longer, which can only widen the spread of a
/// loop in step with it; in one fresh-clone run then, `contracts`' formatting read 2.54 points
/// (bound 2.5) and the condition-variable coordinator's work 4.3 high, each a first in 20 runs
/// (alone right after: at most 1.9 and 1.4 in 5 runs each). Until the spread is measured both
/// ways, every read. But never while the thread is off its CPU, as far as its switches read
/// tell: its next tick then comes that long after its return, so the grid starts again where
/// it was preempted, and a program preempted at some places more than others (beside a busy
/// process) had the code that follows them sampled too often: `spans` pinned to one CPU beside
/// a busy loop read `render` 1.47 points low (10 runs, standard deviation 1.09); without
/// re-phasing at all, 0.35 low (0.48).
const REPHASE_SAMPLES: u64 = 1;

/// Most a slot copy's time may differ from its sample's: both are read in the same interrupt,
/// microseconds apart; successive samples of a thread are a period apart.
const MATCH_TOLERANCE_NS: u64 = 100_000;

mod design;
mod following;
mod shared;

#[cfg(test)]
pub(super) use design::per_cpu_refused;
pub(super) use design::Design;
pub use following::{MAX_SWITCH_RATE, MAX_WIDE_SWITCH_RATE};
pub use shared::{Perf, SharedPerf};

#[cfg(test)]
mod tests;

/// Has `wide` read its CPUs' rings, keeping the births they tell of in `births`.
fn read_cpus(wide: &mut CpuWide, births: &mut HashMap<u32, u64>) {
    wide.read_cpus(|tid, time| {
        if births.len() >= MAX_BIRTHS {
            births.clear();
        }
        births.insert(tid, time);
    });
}
