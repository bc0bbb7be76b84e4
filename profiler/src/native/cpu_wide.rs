//! The per-CPU design of the perf backend (by default for the program's own process, for every
//! process with `FSPROF_PER_CPU=1`: `perf/design.rs`): no event on any thread. Each CPU has one
//! cpu-clock event whose program (`bpf::program` with `Index::Watched`) keeps the samples of
//! watched threads only (a hash map of thread ids that fsprof fills) and copies their slots as a
//! thread's own event's program does; a program at the scheduler's `sched_switch` tracepoint
//! records each departure of a watched thread from its CPU (its slots, whether it was preempted,
//! its time on a CPU so far) and each return to one; and a program at the start of every `exec`
//! (`sched_prepare_exec`, before the new program's credentials are set) removes the thread from the
//! map, so nothing of a program that turned set-user-id is read: fsprof watches the thread again
//! only once its exec gate passed it. A switch costs a program's run (a few hundred ns) where a
//! thread's own sampling event cost it about 4 us (BENCHMARKS.md, "What one context switch costs").
//!
//! Some switches onto a CPU pass without the `sched_switch` tracepoint on some kernels (seen on
//! Linux 6.18, 1 return in a few hundred): a thread found running after a departure, at a
//! sample or its next departure, has its return inferred there ([`inferred_return`]).
//!
//! This module: those maps, programs, events and rings, and the reading of their records into
//! each thread's stream (`perf::Taken`), in time order. Not here: the slot copies' program
//! (`bpf.rs`), the rings' layout and records (`ring.rs`), which threads to watch (`perf.rs`).
//! The stack a thread leaves its CPU with comes from a context-switch event per CPU whose
//! program lets the kernel write a sample only for a watched thread, at most once per period
//! (a switch of any thread pays that event's overflow, under a microsecond; copying the stack
//! from the `sched_switch` program instead is the next step). Not yet: one set of events for all
//! the processes recorded (each process's sampler opens its own).

use crate::native::bpf::{
    attach_tracepoint, create_map, delete_bytes, departure_filter, insn, load_event_program,
    load_program, load_tracepoint_program, update_bytes, value_of_thread, watched_index, Index,
    Insn, ADD64_IMM, ADD64_REG, AND64_IMM, BPF_MAP_TYPE_HASH, CALL, EXIT,
    HELPER_GET_CURRENT_PID_TGID, HELPER_KTIME_GET_NS, HELPER_MAP_DELETE_ELEM,
    HELPER_PROBE_READ_KERNEL, HELPER_RINGBUF_OUTPUT, INDEX_SLOT, JEQ_IMM, JNE_IMM, LDX_DW, LDX_W,
    LD_IMM64, MOV64_IMM, MOV64_REG, PSEUDO_MAP_FD, RB_NO_WAKEUP, STX_DW, STX_W, ST_DW, ST_W,
    SUB64_REG,
};
use crate::native::map_value::{
    COPY_HEADER, VALUE_CPU_NS, VALUE_ON_SINCE, VALUE_SWITCHES, VALUE_SWITCH_RECORD,
    VALUE_TIME_RECORD,
};
use crate::native::perf::{PerfSample, Switch, Taken, CPU_TICKS_PER_SAMPLE, STACK_DUMP};
use crate::native::perf_events::{attach, open_cpu_event, output_to, rephase};
use crate::native::ring::{
    match_copies, parse, Record, Ring, SlotCopy, ThreadEvent, CPU_TIME, DEPARTED, EXECED, RETURNED,
};
use crate::native::unwind::{Registers, StackView};
use crate::native::walk::CONTEXT;
use foldhash::{HashMap, HashMapExt};
use nix::errno::Errno;
use perf_event_open_sys as sys;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

const LSH64_IMM: u8 = 0x67;
const RSH64_IMM: u8 = 0x77;
const OR64_REG: u8 = 0x4f;
const OR64_IMM: u8 = 0x47;
/// A task's state bit once it has exited, as it leaves its CPU for the last time.
const TASK_DEAD: i32 = 0x80;

/// Records newer than this (before the read began) are left for the next read: a sample being
/// written on one CPU while the rings are read may be older than a switch read from another.
const HOLD_NS: u64 = 200_000;

/// Samples kept per thread between two reads of its stream at most (its oldest dropped, with a
/// gap): a thread's own ring held about 60.
const MOST_HELD: usize = 256;

/// The kernel side of the per-CPU design, and the samples read from it not yet taken.
pub(super) struct CpuWide {
    watched: OwnedFd,
    cpus: Vec<Cpu>,
    _programs: Vec<OwnedFd>,
    _links: Vec<OwnedFd>,
    /// The watched threads (thread id → map value index) and what their streams have given.
    threads: HashMap<u32, Thread>,
    /// Samples the kernel could not write (a CPU's ring was full), since last taken.
    pub(super) lost: u64,
    /// Samples read of threads not watched (none but those of a thread just forgotten: the
    /// programs leave the others out).
    pub(super) foreign: u64,
    /// Returns to a CPU taken, and of those how many were inferred (see `inferred_return`).
    pub(super) returns: [u64; 2],
    /// When the latest read of the rings began: what was written before it is in them.
    read_at: u64,
}

struct Cpu {
    event: OwnedFd,
    /// Its context-switch event, writing departures' stacks into `ring` if `departures`.
    _switches: OwnedFd,
    departures: bool,
    ring: Ring,
    /// Whether a sample came since its timer was last re-phased.
    sampled: bool,
}

/// A sample read from a CPU's ring, its stack copied out of the ring.
struct Held {
    time: u64,
    regs: Registers,
    stack: Vec<u8>,
}

enum Pending {
    Sample(Held),
    /// The registers and stack a thread left its CPU with.
    Departure(Held),
    /// Records of unknown threads were lost on a CPU at about this time.
    Gap(u64),
}

struct Thread {
    /// When it was watched: a record older than that (an earlier thread's, with the same map
    /// value index, read late) is not its.
    watched_at: u64,
    pending: VecDeque<Pending>,
    /// The number of the switch expected next (see `ThreadEvent::Departed`), once one was seen.
    seq: Option<u64>,
    /// The latest time handed out.
    latest: u64,
    /// Its CPU time as last known, and since when it has run on from there (0: off its CPU).
    cpu_ns: u64,
    running_since: u64,
}

impl CpuWide {
    /// Creates the map of watched threads, loads the programs (the sampling one over the
    /// values `map`, putting copies in `copies`, handing over to the walk through `walk`), and
    /// opens and enables a cpu-clock event per CPU that ticks `CPU_TICKS_PER_SAMPLE` times per
    /// `period_ns` of wall time (each kept tick a sample of the thread running), and a
    /// context-switch event per CPU (at most one departure's stack per thread per period).
    pub(super) fn new(
        map: RawFd,
        copies: RawFd,
        walk: [RawFd; 2],
        period_ns: u64,
        capacity: u32,
        page: usize,
        pages: usize,
    ) -> Result<CpuWide, String> {
        let tick_ns = period_ns / CPU_TICKS_PER_SAMPLE;
        let pid_offset = crate::native::btf::task_pid_offset()
            .ok_or("the kernel does not describe its task_struct (no /sys/kernel/btf/vmlinux)")?;
        let watched = create_map(BPF_MAP_TYPE_HASH, 4, 4, capacity)
            .map_err(|e| format!("cannot create a BPF hash map ({})", e.desc()))?;
        let w = watched.as_raw_fd();
        let sampling = load_program(map, copies, walk, Index::Watched(w), None)?;
        let switch = load_tracepoint_program(switch_program(map, copies, w, pid_offset))?;
        let mut links = vec![attach_tracepoint(c"sched_switch", &switch)
            .map_err(|e| format!("cannot attach to sched_switch ({})", e.desc()))?];
        // At the start of an exec too where the kernel has that tracepoint (Linux 6.10).
        let early = load_tracepoint_program(exec_program(copies, w, false))?;
        links.extend(attach_tracepoint(c"sched_prepare_exec", &early).ok());
        let late = load_tracepoint_program(exec_program(copies, w, true))?;
        links.push(
            attach_tracepoint(c"sched_process_exec", &late)
                .map_err(|e| format!("cannot attach to sched_process_exec ({})", e.desc()))?,
        );
        let filter = load_event_program(departure_filter(map, w, period_ns))?;
        let mut cpus = Vec::new();
        for cpu in online_cpus() {
            let refused = |what: &str, e: Errno| format!("{what} on CPU {cpu} ({})", e.desc());
            let event = open_cpu_event(cpu, sys::bindings::PERF_COUNT_SW_CPU_CLOCK, tick_ns)
                .map_err(|e| refused("perf_event_open refused", e))?;
            let ring =
                Ring::new(&event, page, pages).map_err(|e| refused("cannot map a ring", e))?;
            let switches = open_cpu_event(cpu, sys::bindings::PERF_COUNT_SW_CONTEXT_SWITCHES, 1)
                .map_err(|e| refused("perf_event_open refused", e))?;
            attach(&event, &sampling).map_err(|e| refused("cannot attach a program", e))?;
            attach(&switches, &filter).map_err(|e| refused("cannot attach a program", e))?;
            let departures = output_to(&switches, &event);
            cpus.push(Cpu {
                event,
                _switches: switches,
                departures,
                ring,
                sampled: false,
            });
        }
        for cpu in &cpus {
            for event in [&cpu.event, &cpu._switches] {
                // SAFETY: a valid descriptor.
                if unsafe { sys::ioctls::ENABLE(event.as_raw_fd(), 0) } != 0 {
                    let why = Errno::last().desc();
                    return Err(format!("cannot enable a CPU's event ({why})"));
                }
            }
        }
        Ok(CpuWide {
            watched,
            cpus,
            _programs: vec![sampling, switch, early, late, filter],
            _links: links,
            threads: HashMap::new(),
            lost: 0,
            foreign: 0,
            returns: [0; 2],
            read_at: 0,
        })
    }

    /// Has the programs record thread `tid` from now on, in the map value `index`.
    pub(super) fn watch(&mut self, tid: u32, index: u32) -> Result<(), Errno> {
        update_bytes(
            self.watched.as_raw_fd(),
            &tid.to_ne_bytes(),
            &index.to_ne_bytes(),
        )?;
        self.threads.insert(
            tid,
            Thread {
                watched_at: crate::record::clock::monotonic_ns(),
                pending: VecDeque::new(),
                seq: None,
                latest: 0,
                cpu_ns: 0,
                running_since: 0,
            },
        );
        Ok(())
    }

    /// Records `tid` no more (if it still is: an `exec` removes it in the kernel).
    pub(super) fn unwatch(&mut self, tid: u32) {
        let _ = delete_bytes(self.watched.as_raw_fd(), &tid.to_ne_bytes());
        self.threads.remove(&tid);
    }

    /// Moves every CPU's samples to their threads' queues, and hands `birth` each thread or
    /// process a watched thread made (its id and when).
    pub(super) fn read_cpus(&mut self, mut birth: impl FnMut(u32, u64)) {
        self.read_at = crate::record::clock::monotonic_ns();
        let threads = &mut self.threads;
        let (lost, foreign) = (&mut self.lost, &mut self.foreign);
        for cpu in &mut self.cpus {
            let head = cpu.ring.head();
            let mut lost_at = None;
            let (sampled, has_departures) = (&mut cpu.sampled, cpu.departures);
            let room = cpu.ring.drain(head, |record| match parse(record) {
                Record::Sample {
                    departure,
                    tid,
                    sample,
                } => {
                    let Some(thread) = threads.get_mut(&tid) else {
                        *foreign += 1;
                        return;
                    };
                    if thread.pending.len() >= MOST_HELD {
                        // The oldest two go, a gap in their place (one, after a gap).
                        let dropped = thread.pending.pop_front().expect("full");
                        if !matches!(thread.pending.front(), Some(Pending::Gap(_))) {
                            thread.pending.pop_front();
                            thread.pending.push_front(Pending::Gap(dropped.time()));
                        }
                    }
                    let held = Held {
                        time: sample.time,
                        regs: sample.regs,
                        stack: sample.stack.bytes.to_vec(),
                    };
                    if departure && has_departures {
                        insert(&mut thread.pending, Pending::Departure(held));
                    } else {
                        *sampled = true;
                        insert(&mut thread.pending, Pending::Sample(held));
                    }
                }
                Record::Fork { tid, time, parent } if threads.contains_key(&parent) => {
                    birth(tid, time);
                }
                Record::Lost(count) => {
                    *lost = lost.saturating_add(count);
                    lost_at = Some(crate::record::clock::monotonic_ns());
                }
                _ => {}
            });
            if room < STACK_DUMP as usize + 1024 {
                lost_at.get_or_insert_with(crate::record::clock::monotonic_ns);
            }
            if let Some(at) = lost_at {
                // Where in a thread's stream the loss was is not known: at the read (one gap
                // however many reads find losses before the thread is taken).
                for thread in threads.values_mut() {
                    if !matches!(thread.pending.back(), Some(Pending::Gap(_))) {
                        thread.pending.push_back(Pending::Gap(at));
                    }
                }
            }
        }
    }

    /// How many switches of `tid` its stream has handed out (the number of the next), once one
    /// was.
    pub(super) fn switches_handed(&self, tid: u32) -> Option<u64> {
        self.threads.get(&tid)?.seq
    }

    /// Up to when the streams handed out are complete: their records are held back from
    /// shortly before the latest read began (see [`HOLD_NS`]).
    pub(super) fn complete_until(&self) -> u64 {
        self.read_at.saturating_sub(HOLD_NS + DEPARTURE_LAG_NS)
    }

    /// Starts each CPU's timer again at a random place (see `perf::rephase`) where it sampled
    /// a watched thread since it last was.
    pub(super) fn rephase(&mut self, tick_ns: u64) {
        for cpu in &mut self.cpus {
            if std::mem::take(&mut cpu.sampled) {
                rephase(&cpu.event, tick_ns);
            }
        }
    }

    /// Hands `each` what `tid` did up to shortly before now, oldest first: its samples (with
    /// the copies in `waiting` made at each), its departures (with those in `switch_waiting`)
    /// and its returns, from `events`; `tolerance` as for a thread's own ring. Returns whether
    /// the thread was removed at an `exec` (watch it again only once it may be traced).
    pub(super) fn take(
        &mut self,
        tid: u32,
        waiting: &mut VecDeque<SlotCopy>,
        switch_waiting: &mut VecDeque<SlotCopy>,
        events: &mut VecDeque<ThreadEvent>,
        tolerance: u64,
        mut each: impl FnMut(Taken<'_>),
    ) -> bool {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return false;
        };
        let returns = &mut self.returns;
        let until = self.read_at.saturating_sub(HOLD_NS);
        let mut execed = false;
        loop {
            let sample_at = thread.pending.front().map(Pending::time);
            let event_at = events.front().map(ThreadEvent::time);
            let sample_first = match (sample_at, event_at) {
                (Some(s), Some(e)) => s <= e,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            // An event waits for its departure's stack, which comes just after it.
            let (next, cutoff) = if sample_first {
                (sample_at, until)
            } else {
                (event_at, until.saturating_sub(DEPARTURE_LAG_NS))
            };
            if next.is_some_and(|time| time > cutoff) {
                break;
            }
            if sample_first {
                match thread.pending.pop_front().expect("front") {
                    Pending::Gap(_) => each(Taken::Gap { at: thread.latest }),
                    // A departure's stack not right after its departure's record: the record
                    // was lost, or the stack is of a thread watched in between. Not used.
                    Pending::Departure(_) => {}
                    Pending::Sample(held) => {
                        let matched = match_copies(waiting, held.time, [tolerance, tolerance]);
                        let cpu_ns = matched.cpu_ns.unwrap_or_else(|| thread.estimate(held.time));
                        (thread.cpu_ns, thread.running_since) = (cpu_ns, held.time);
                        thread.latest = thread.latest.max(held.time);
                        each(Taken::Sample(PerfSample {
                            time: held.time,
                            cpu_ns,
                            regs: held.regs,
                            stack: StackView::new(held.regs.sp, &held.stack),
                            slots: matched.slots,
                            marks_known: matched.known,
                            anchors: matched.anchors,
                            instant: matched.instant,
                        }));
                    }
                }
                continue;
            }
            let event = events.pop_front().expect("front");
            let time = event.time();
            if time < thread.watched_at {
                continue;
            }
            match event {
                ThreadEvent::Departed {
                    cpu_ns,
                    preempted,
                    seq,
                    ..
                } => {
                    if thread.missed(seq) {
                        each(Taken::Gap { at: thread.latest });
                    }
                    (thread.cpu_ns, thread.running_since) = (cpu_ns, 0);
                    // The context-switch event's sample of this departure comes just after
                    // the tracepoint's record; the stream gives it before, as a thread's own
                    // events do.
                    if let Some(Pending::Departure(held)) = thread.pending.front() {
                        if held.time.saturating_sub(time) <= DEPARTURE_LAG_NS {
                            each(Taken::Departure(departure(held, time)));
                            thread.pending.pop_front();
                        }
                    }
                    let matched = match_copies(switch_waiting, time, [tolerance, 0]);
                    each(Taken::Switch(Switch {
                        time,
                        out: true,
                        preempted,
                        slots: matched.slots,
                        marks_known: matched.known,
                    }));
                }
                ThreadEvent::Returned {
                    cpu_ns,
                    seq,
                    inferred,
                    ..
                } => {
                    returns[0] += 1;
                    returns[1] += u64::from(inferred);
                    if thread.missed(seq) {
                        each(Taken::Gap { at: thread.latest });
                    }
                    (thread.cpu_ns, thread.running_since) = (cpu_ns, time);
                    each(Taken::Switch(Switch {
                        time,
                        out: false,
                        preempted: false,
                        slots: Default::default(),
                        marks_known: false,
                    }));
                }
                ThreadEvent::Execed { .. } => execed = true,
            }
            thread.latest = thread.latest.max(time);
        }
        execed
    }
}

/// Most a departure's sample (from the context-switch event) comes after the `sched_switch`
/// program's record of the same departure.
const DEPARTURE_LAG_NS: u64 = 100_000;

/// A held departure's registers and stack as the stream gives them, at the time of its
/// departure's record (the same instant, microseconds apart); its slots are that departure's,
/// on the switch that follows.
fn departure(held: &Held, time: u64) -> PerfSample<'_> {
    PerfSample {
        time,
        cpu_ns: 0,
        regs: held.regs,
        stack: StackView::new(held.regs.sp, &held.stack),
        slots: Default::default(),
        marks_known: false,
        anchors: Vec::new(),
        instant: Vec::new(),
    }
}

impl Pending {
    fn time(&self) -> u64 {
        match self {
            Pending::Sample(held) | Pending::Departure(held) => held.time,
            Pending::Gap(at) => *at,
        }
    }
}

/// Puts `item` in `queue` by its time (a thread's samples come from whichever CPU it ran on, so
/// rings read one after another give them slightly out of order).
fn insert(queue: &mut VecDeque<Pending>, item: Pending) {
    let time = item.time();
    let at = queue.len() - queue.iter().rev().take_while(|p| p.time() > time).count();
    queue.insert(at, item);
}

impl Thread {
    /// Its CPU time at `time`: as last known, plus the time since if it has run on from then.
    fn estimate(&self, time: u64) -> u64 {
        match self.running_since {
            0 => self.cpu_ns,
            since => self.cpu_ns + time.saturating_sub(since),
        }
    }

    /// Whether switches numbered before `seq` were not seen (their records lost).
    fn missed(&mut self, seq: u64) -> bool {
        let missed = self.seq.is_some_and(|expected| seq != expected);
        self.seq = Some(seq + 1);
        missed
    }
}

/// The CPUs online, from `/sys/devices/system/cpu/online` ("0-3,5"); CPU 0 alone if unreadable.
fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let mut bounds = part.splitn(2, '-').map(|n| n.trim().parse::<u32>());
        match (bounds.next(), bounds.next()) {
            (Some(Ok(first)), None) => cpus.push(first),
            (Some(Ok(first)), Some(Ok(last))) if last >= first && last - first < 4096 => {
                cpus.extend(first..=last)
            }
            _ => {}
        }
    }
    if cpus.is_empty() {
        cpus.push(0);
    }
    cpus
}

/// Part of the sampling program (`bpf::program`, `r6` the value, `r7` the time, the index at
/// `INDEX_SLOT`): the thread's time on a CPU at the sample in the ring `copies` (slot number
/// [`CPU_TIME`]): what it ran up to its latest departure, and since it came back. A thread
/// watched while it ran counts from its first sample.
pub(super) fn cpu_time(p: &mut Vec<Insn>, copies: RawFd) {
    let (cpu, on, record) = (
        VALUE_CPU_NS as i16,
        VALUE_ON_SINCE as i16,
        VALUE_TIME_RECORD as i16,
    );
    // Not known to be on a CPU: watched while it ran, or its return was not traced.
    p.extend([insn(LDX_DW, 1, 6, on, 0), insn(JNE_IMM, 1, 0, 0, 0)]);
    let known = p.len() - 1;
    p.push(insn(STX_DW, 6, 7, on, 0));
    inferred_return(p, copies);
    p.push(insn(MOV64_REG, 1, 7, 0, 0));
    p[known].off = (p.len() - known - 1) as i16;
    p.extend([
        insn(MOV64_REG, 2, 7, 0, 0),
        insn(SUB64_REG, 2, 1, 0, 0),
        insn(LDX_DW, 3, 6, cpu, 0),
        insn(ADD64_REG, 2, 3, 0, 0),
    ]);
    record_event(p, record, CPU_TIME);
    p.extend([
        insn(STX_DW, 6, 2, record + 16, 0),
        insn(ST_DW, 6, 0, record + 24, 0),
    ]);
    output(p, copies, record);
}

/// A return record (see [`returned`]) for a thread found on a CPU, at a sample or a departure,
/// though no return was recorded since its latest departure (`r6` its value, `r7` the time):
/// some switches onto a CPU pass without the `sched_switch` tracepoint on some kernels (seen
/// on Linux 6.18: a thread preempted by some tasks came back untraced, 1 return in a few
/// hundred). It says it was inferred; its time is the earliest the thread is known to run.
/// Uses r1-r5.
fn inferred_return(p: &mut Vec<Insn>, copies: RawFd) {
    p.extend([
        insn(LDX_DW, 1, 6, VALUE_SWITCHES as i16, 0),
        insn(JEQ_IMM, 1, 0, 0, 0), // no switch yet: watched while it ran
    ]);
    let skip = p.len() - 1;
    returned(p, copies, true);
    p[skip].off = (p.len() - skip - 1) as i16;
}

/// The return record of the thread whose value is `r6` at the time `r7`: its time on a CPU so
/// far, its switch number, whether `inferred` (see [`inferred_return`]). Uses r1-r5.
fn returned(p: &mut Vec<Insn>, copies: RawFd, inferred: bool) {
    let record = VALUE_SWITCH_RECORD as i16;
    record_event(p, record, RETURNED);
    p.extend([
        insn(LDX_DW, 2, 6, VALUE_CPU_NS as i16, 0),
        insn(STX_DW, 6, 2, record + 16, 0),
    ]);
    next_switch(p);
    p.extend([
        insn(OR64_IMM, 1, 0, 0, i32::from(inferred)),
        insn(STX_DW, 6, 1, record + 24, 0),
    ]);
    output(p, copies, record);
}

/// The header of an event record at `record` in the value `r6`: the time (`r7`), the index
/// (at `INDEX_SLOT`), the kind; uses r1.
fn record_event(p: &mut Vec<Insn>, record: i16, kind: usize) {
    p.extend([
        insn(STX_DW, 6, 7, record, 0),
        insn(LDX_W, 1, 10, INDEX_SLOT, 0),
        insn(STX_W, 6, 1, record + 8, 0),
        insn(ST_W, 6, 0, record + 12, kind as i32),
    ]);
}

/// Puts the 32-byte record at `record` in the value `r6` in the ring `copies`.
fn output(p: &mut Vec<Insn>, copies: RawFd, record: i16) {
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 6, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(record)),
        insn(MOV64_IMM, 3, 0, 0, COPY_HEADER as i32),
        insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
    ]);
}

/// The next switch number of the value `r6` in `r1`, counted.
fn next_switch(p: &mut Vec<Insn>) {
    let switches = VALUE_SWITCHES as i16;
    p.extend([
        insn(LDX_DW, 1, 6, switches, 0),
        insn(MOV64_REG, 2, 1, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, 1),
        insn(STX_DW, 6, 2, switches, 0),
        insn(LSH64_IMM, 1, 0, 0, 1),
    ]);
}

/// The program at `sched_switch` (its arguments: whether the switch is a preemption, the task
/// leaving, the task coming, the state the leaving one left in). The leaving task is the
/// current one: if watched, its time on a CPU is counted up to now, its slots are copied (as at
/// a departure) and a departure record follows them. The coming one's pid is read from its
/// `task_struct` at `pid_offset`: if watched, it is on a CPU from now, and a return record
/// says so. Other switches cost two lookups.
fn switch_program(map: RawFd, copies: RawFd, watched: RawFd, pid_offset: u32) -> Vec<Insn> {
    let (cpu, on, record) = (
        VALUE_CPU_NS as i16,
        VALUE_ON_SINCE as i16,
        VALUE_SWITCH_RECORD as i16,
    );
    const LEAVING: i16 = -12;
    let mut p = vec![
        insn(STX_DW, 10, 1, CONTEXT, 0),
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0), // r7: the time
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(STX_W, 10, 0, INDEX_SLOT, 0),
        insn(STX_W, 10, 0, LEAVING, 0),
    ];
    let mut to_coming = Vec::new();
    watched_index(&mut p, watched, INDEX_SLOT);
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_coming.push(p.len() - 1);
    p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
    p.extend(value_of_thread(map));
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_coming.push(p.len() - 1);
    p.push(insn(MOV64_REG, 6, 0, 0, 0)); // r6: the leaving thread's value
    p.extend([insn(LDX_DW, 1, 6, on, 0), insn(JNE_IMM, 1, 0, 0, 0)]);
    let known = p.len() - 1;
    inferred_return(&mut p, copies);
    p[known].off = (p.len() - known - 1) as i16;
    p.extend([
        insn(LDX_DW, 1, 6, on, 0),
        insn(LDX_DW, 2, 6, cpu, 0),
        insn(JEQ_IMM, 1, 0, 3, 0), // not known to be on a CPU: nothing to add
        insn(MOV64_REG, 3, 7, 0, 0),
        insn(SUB64_REG, 3, 1, 0, 0),
        insn(ADD64_REG, 2, 3, 0, 0),
        insn(STX_DW, 6, 2, cpu, 0),
        insn(ST_DW, 6, 0, on, 0),
    ]);
    record_event(&mut p, record, DEPARTED);
    p.push(insn(STX_DW, 6, 2, record + 16, 0));
    next_switch(&mut p);
    // Preempted: the switch says so, or the thread left still runnable (state 0).
    p.extend([
        insn(LDX_DW, 2, 10, CONTEXT, 0),
        insn(LDX_DW, 3, 2, 0, 0),
        insn(LDX_DW, 4, 2, 24, 0),
        insn(MOV64_IMM, 5, 0, 0, 1),
        insn(JNE_IMM, 3, 0, 2, 0),
        insn(JEQ_IMM, 4, 0, 1, 0),
        insn(MOV64_IMM, 5, 0, 0, 0),
        insn(OR64_REG, 1, 5, 0, 0),
        insn(STX_DW, 6, 1, record + 24, 0),
    ]);
    crate::native::bpf::copy_slots(&mut p, copies, true);
    output(&mut p, copies, record);
    // Its last switch (it is dead): watched no more, so that its id, once reused, is not.
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 2, 1, 24, 0),
        insn(AND64_IMM, 2, 0, 0, TASK_DEAD),
        insn(JEQ_IMM, 2, 0, 5, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(LEAVING)),
        insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
    ]);
    let coming = p.len();
    for at in to_coming {
        p[at].off = (coming - at - 1) as i16;
    }
    let mut to_end = Vec::new();
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 3, 1, 16, 0),
        insn(ADD64_IMM, 3, 0, 0, pid_offset as i32),
        insn(MOV64_REG, 1, 10, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, -8),
        insn(MOV64_IMM, 2, 0, 0, 4),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
        insn(JNE_IMM, 0, 0, 0, 0),
    ]);
    to_end.push(p.len() - 1);
    watched_index(&mut p, watched, -8);
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_end.push(p.len() - 1);
    p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
    p.extend(value_of_thread(map));
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_end.push(p.len() - 1);
    p.extend([
        insn(MOV64_REG, 6, 0, 0, 0), // r6: the coming thread's value
        insn(STX_DW, 6, 7, on, 0),
    ]);
    returned(&mut p, copies, false);
    let end = p.len();
    for at in to_end {
        p[at].off = (end - at - 1) as i16;
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p
}

/// The program at an `exec`: removes the current thread and its process's leader (whose id it
/// takes) from the watched threads, with a record of each it removes; `done` (the program at
/// `sched_process_exec`, whose second argument is the id the thread had before) removes that
/// id too.
fn exec_program(copies: RawFd, watched: RawFd, done: bool) -> Vec<Insn> {
    const KEY: i16 = -8;
    const RECORD: i16 = -64;
    let mut p = vec![
        insn(STX_DW, 10, 1, CONTEXT, 0),
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(MOV64_REG, 6, 0, 0, 0), // r6: tgid << 32 | tid
        insn(STX_W, 10, 6, KEY, 0),
    ];
    let remove = |p: &mut Vec<Insn>| {
        watched_index(p, watched, KEY);
        let skip = p.len();
        p.extend([
            insn(JEQ_IMM, 0, 0, 0, 0),
            insn(LDX_W, 1, 0, 0, 0),
            insn(STX_DW, 10, 7, RECORD, 0),
            insn(STX_W, 10, 1, RECORD + 8, 0),
            insn(ST_W, 10, 0, RECORD + 12, EXECED as i32),
            insn(LDX_W, 2, 10, KEY, 0),
            insn(STX_DW, 10, 2, RECORD + 16, 0),
            insn(ST_DW, 10, 0, RECORD + 24, 0),
            insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_REG, 2, 10, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, i32::from(KEY)),
            insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
            insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_REG, 2, 10, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, i32::from(RECORD)),
            insn(MOV64_IMM, 3, 0, 0, COPY_HEADER as i32),
            insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
            insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
        ]);
        p[skip].off = (p.len() - skip - 1) as i16;
    };
    remove(&mut p);
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(RSH64_IMM, 1, 0, 0, 32),
        insn(STX_W, 10, 1, KEY, 0),
    ]);
    remove(&mut p);
    if done {
        p.extend([
            insn(LDX_DW, 1, 10, CONTEXT, 0),
            insn(LDX_DW, 2, 1, 8, 0),
            insn(STX_W, 10, 2, KEY, 0),
        ]);
        remove(&mut p);
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p
}

#[cfg(test)]
mod tests;
