//! The per-CPU design of the perf backend (by default for the program's own process, for every
//! process with `FSPROF_PER_CPU=1`: `perf/design.rs`): no event on any thread. Each CPU has one
//! event at the scheduler's own tick where it can be had (`tick.rs`), else a cpu-clock event,
//! whose program (`sampling::program` with `Index::Watched`) keeps the samples of
//! watched threads only (a hash map of thread ids that fsprof fills) and copies their slots as a
//! thread's own event's program does; a program at the scheduler's `sched_switch` tracepoint
//! records each departure of a watched thread from its CPU (its slots, whether it was preempted,
//! its time on a CPU so far, and at most once a period its registers and the top of its stack)
//! and each return to one, except that a thread without marks folds its short stretches off
//! the CPU into totals by kind, recorded with its next departure that is recorded
//! (`layout::FOLD_MOST_NS`); and a program at the start of every `exec` (`sched_prepare_exec`,
//! before the new program's credentials are set) removes the thread from the map, so nothing of
//! a program that turned set-user-id is read: fsprof watches the thread again only once its exec
//! gate passed it. A switch costs that program's run (about 225 ns for a thread not followed,
//! some 100 ns of it the tracepoint's call of any program, BENCHMARKS.md; a table of the
//! watched ids, `direct.rs`, turns those threads away and finds the watched ones' values without
//! a hash lookup) where a thread's
//! own sampling event cost it about 4 us, and no event fires at a switch: a context-switch
//! event per CPU, which took the departures' stacks before, cost every switch of every thread
//! its overflow.
//!
//! The `sched_switch` program is attached while switches are followed (`perf/following.rs`: not
//! while the machine switches very often and no watched process marks); while it is not, a
//! program at `sched_process_exit` removes each exiting thread from the map instead.
//!
//! Some switches onto a CPU pass without the `sched_switch` tracepoint on some kernels (seen on
//! Linux 6.18, 1 return in a few hundred): a thread found running after a departure, at a
//! sample or its next departure, has its return inferred there (`programs::inferred_return`).
//! A thread that leaves its CPU too often with marks (`perf/following.rs`: the departures
//! recorded count) is made quiet: its switches are counted into its time on a CPU and recorded
//! no more.
//!
//! This module: those maps, events and rings, and the reading of their records into each
//! thread's stream (`stream::Taken`), in time order. Not here: the programs (`programs.rs`; the
//! slot copies', `fragments.rs`), the rings' layout and records (`ring.rs`), which threads to watch
//! (`perf.rs`). The processes `run` follows share the set of the program they descend from
//! (`perf/shared.rs`).

use crate::native::bpf::{
    attach_tracepoint, attach_typed_tracepoint, create_map, delete_bytes, holds_key,
    load_tracepoint_program, load_typed_tracepoint_program, update_bytes, BPF_MAP_TYPE_HASH,
};
use crate::native::layout::PROCESS_KEY;
use crate::native::layout::STACK_DUMP;
use crate::native::perf_events::{attach, open_cpu_event, open_tracepoint_event, rephase};
use crate::native::ring::{
    match_copies, parse, DepartureStack, Matched, Record, Ring, SlotCopy, ThreadEvent,
};
use crate::native::sampling::{load_program, load_tick_program, Index};
use crate::native::stream::{PerfSample, Switch, Taken};
use crate::native::unwind::{Registers, StackView};
use direct::Direct;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
pub(in crate::native) use forks::ForkWakes;
use forks::Forks;
use nix::errno::Errno;
use perf_event_open_sys as sys;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Records newer than this (before the read began) are left for the next read: a sample being
/// written on one CPU while the rings are read may be older than a switch read from another.
const HOLD_NS: u64 = 200_000;

/// Samples kept per thread between two reads of its stream at most (its oldest dropped, with a
/// gap), or as many as a CPU's ring holds where that is more (see [`ring_pages`]: a thread
/// that ran on one CPU throughout loses none but the ring's): a thread's own ring held about 60.
const MOST_HELD: usize = 256;

/// Threads not watched whose bare samples are held at most (see [`Stranger`]), and the bytes of
/// their stacks held at most, all together: beyond, their samples are dropped.
const MOST_STRANGERS: usize = 4096;
const MOST_STRANGER_BYTES: usize = 32 << 20;

/// Threads whose bare samples are dropped unread, at most: beyond, the set starts again (the
/// sampler also checks that a thread it hands out was never seen).
const MOST_IGNORED: usize = 1 << 16;

/// The kernel side of the per-CPU design, and the samples read from it not yet taken.
pub(super) struct CpuWide {
    /// Whether the CPUs' events sample at the scheduler's tick (`tick.rs`), which is never
    /// re-phased, rather than by a clock of their own.
    at_tick: bool,
    watched: OwnedFd,
    /// The ids of `watched`'s threads and their values, as the switch program looks at them
    /// first.
    direct: Direct,
    /// The wake-ups at the forks of watched processes, where the kernel allows them.
    forks: Option<Forks>,
    cpus: Vec<Cpu>,
    /// The `sched_switch` program, attached once [`CpuWide::follow_switches`] is asked.
    switch: Switches,
    /// The program at `sched_process_exit`, and its link while the switch program is not
    /// attached: that one removes an exiting thread itself, at its last switch, once it has
    /// recorded its departure (removed at its exit before, a thread's last departure went
    /// unrecorded, and a leader that exited before its threads read as running to the end).
    exit: OwnedFd,
    exit_link: Option<OwnedFd>,
    _programs: Vec<OwnedFd>,
    _links: Vec<OwnedFd>,
    /// The watched threads (thread id → map value index) and what their streams have given.
    threads: HashMap<u32, Thread>,
    /// Samples the kernel could not write (a CPU's ring was full), since last taken.
    pub(super) lost: u64,
    /// Samples read of threads not watched and dropped: a thread's just forgotten, or bare
    /// samples of one the sampler saw or watched before, or beyond what is held of those.
    pub(super) foreign: u64,
    /// Returns to a CPU taken, and of those how many were inferred (see `inferred_return`).
    pub(super) returns: [u64; 2],
    /// When the latest read of the rings began: what was written before it is in them.
    read_at: u64,
    /// The watched processes (see `layout::PROCESS_KEY`), and whether their key is in the map
    /// as far as fsprof knows (an `exec` removes it).
    processes: HashMap<u32, bool>,
    /// The bare samples of threads of watched processes that are not watched, by thread id.
    strangers: HashMap<u32, Stranger>,
    stranger_bytes: usize,
    /// Threads whose bare samples are dropped: seen by the sampler's ticks (whose samples stand
    /// for their time until they are watched), or watched once.
    ignored: HashSet<u32>,
    /// Those of `ignored` that perf sampled bare since the sampler last asked ([`CpuWide::ran`]):
    /// they run, though no tick found them running (a thread on a CPU a few percent of the
    /// time, between ticks), and are to be watched.
    ran: HashSet<u32>,
}

/// The `sched_switch` program, loaded for the typed hook where the kernel has one and lets it
/// load there (`tp_btf`: Linux 5.5 and BTF), else for the raw tracepoint; and once attached,
/// its link.
struct Switches {
    program: OwnedFd,
    typed: bool,
    link: Option<OwnedFd>,
}

/// A thread of a watched process that is not watched, and its bare samples: the programs write
/// one for each tick that finds it running (registers and stack; no slots, time on a CPU or
/// anchors). A thread born and gone between two of the sampler's ticks is known by these alone.
struct Stranger {
    pid: u32,
    samples: Vec<Held>,
}

struct Cpu {
    event: OwnedFd,
    ring: Ring,
    /// Whether a sample came since its timer was last re-phased.
    sampled: bool,
    timer: Timer,
}

/// A CPU's timer: the length of its ticks since it was last re-phased (or enabled), when that
/// was (CLOCK_MONOTONIC, ns), and the length before.
struct Timer {
    tick_ns: u64,
    since: u64,
    before_ns: u64,
}

impl Timer {
    /// The length of the tick that came at `time`. Every sample from before the latest change
    /// was read before it was made (`CpuWide::rephase` follows a read of the rings), but those
    /// written meanwhile, which have the length before.
    fn at(&self, time: u64) -> u64 {
        if time >= self.since {
            self.tick_ns
        } else {
            self.before_ns
        }
    }
}

/// The sampling period at which a CPU's ring has the pages the sampler asks for (250 Hz, the
/// default rate); at shorter ones it gets more (see [`ring_pages`]).
const RING_PERIOD_NS: u64 = 4_000_000;
/// Bytes of the CPUs' rings together, at most, where a shorter period asks for larger rings.
const RINGS_MOST: usize = 64 * 1024 * 1024;

/// How often a CPU's timer is re-phased at most (see [`CpuWide::rephase`]).
const REPHASE_NS: u64 = 40_000_000;

/// A sample read from a CPU's ring, its stack copied out of the ring.
pub(in crate::native) struct Held {
    pub(in crate::native) time: u64,
    pub(in crate::native) regs: Registers,
    pub(in crate::native) stack: Vec<u8>,
    /// Whether `stack` stops short of the kernel's copy (see `Thread::stack_end`).
    trimmed: bool,
    /// The length of the tick that took it.
    pub(in crate::native) tick_ns: u64,
}

enum Pending {
    Sample(Held),
    /// Records of unknown threads were lost on a CPU at about this time.
    Gap(u64),
}

struct Thread {
    /// When it was watched: a record older than that (an earlier thread's, with the same map
    /// value index, read late; or a sample of its own taken bare, before) is not handed out.
    watched_at: u64,
    pending: VecDeque<Pending>,
    /// The number of the switch expected next (see `ThreadEvent::Departed`), once one was seen.
    seq: Option<u64>,
    /// The latest time handed out.
    latest: u64,
    /// Its CPU time as last known, and since when it has run on from there (0: off its CPU).
    cpu_ns: u64,
    running_since: u64,
    /// Whether its switches are no longer followed (see `perf::MAX_WIDE_SWITCH_RATE`): those
    /// still read are not handed out.
    quiet: bool,
    /// Where its samples' stacks stop being kept (0: kept whole): the outermost frame of its
    /// stacks unwound to their root, as the sampler last said ([`CpuWide::keep_stacks_below`]).
    /// The kernel copies up to 8 KiB (`STACK_DUMP`) from the stack pointer, whatever lies beyond the root
    /// (a thread's control block, the main thread's environment); copying that out of the ring
    /// for each sample was a fifth of fsprof's CPU at 1 kHz.
    stack_end: u64,
}

impl CpuWide {
    /// Creates the map of watched threads, loads the programs (the sampling one over the
    /// values `map`, putting copies in `copies`, handing over to the walk through `walk`), and
    /// opens and enables a cpu-clock event per CPU that ticks once per `period_ns` of wall time
    /// (each tick a sample of the watched thread running, if one is); `copies` is
    /// the shared ring and its size (a departure's stack goes there too, at most one per
    /// thread per period).
    pub(super) fn new(
        map: RawFd,
        (copies, copies_size): (RawFd, usize),
        walk: [RawFd; 2],
        period_ns: u64,
        capacity: u32,
        page: usize,
        pages: usize,
    ) -> Result<CpuWide, String> {
        let pid_offset = crate::native::btf::task_pid_offset()
            .ok_or("the kernel does not describe its task_struct (no /sys/kernel/btf/vmlinux)")?;
        let watched = create_map(BPF_MAP_TYPE_HASH, 4, 4, capacity)
            .map_err(|e| format!("cannot create a BPF hash map ({})", e.desc()))?;
        let w = watched.as_raw_fd();
        let direct =
            Direct::new().map_err(|e| format!("cannot create a BPF array ({})", e.desc()))?;
        let online = online_cpus();
        // At the tick, the first CPU's event is opened first: to ask whether the tick is free.
        let mut at_tick = tick::asked(period_ns);
        let mut first = None;
        if let (Some(tick), Some(&cpu)) = (at_tick, online.first()) {
            first = tick::first_event(cpu, tick);
            at_tick = at_tick.filter(|_| first.is_some());
        }
        let sampling = match at_tick {
            Some(tick) => {
                let walk = crate::native::btf::task_stack_offset().map(|_| walk);
                load_tick_program(map, copies, walk, w, (tick.handler, tick.every))?
            }
            None => load_program(map, copies, walk, Index::Watched(w), None)?,
        };
        let program = |typed| {
            let (ring, watch) = ((copies, copies_size), (w, direct.fd()));
            switch_program(map, ring, watch, pid_offset, period_ns, typed)
        };
        // At the typed hook where the kernel has one and lets the program attach (`tp_btf`:
        // Linux 5.5 and BTF; tried now, detached at once), else at the raw tracepoint.
        let typed = (crate::native::btf::switch_hook_type_id())
            .filter(|_| i16::try_from(pid_offset).is_ok())
            .and_then(|hook| load_typed_tracepoint_program(program(true), hook).ok())
            .filter(|switch| attach_typed_tracepoint(switch).is_ok());
        let switch = match typed {
            Some(program) => Switches {
                program,
                typed: true,
                link: None,
            },
            None => Switches {
                program: load_tracepoint_program(program(false))?,
                typed: false,
                link: None,
            },
        };
        let exit = load_tracepoint_program(exit_program(map, w))?;
        let exit_link = Some(attach_exit(&exit)?);
        let mut links = Vec::new();
        // At the start of an exec too where the kernel has that tracepoint (Linux 6.10).
        let forks = Forks::start(w, page);
        let rings = (copies, forks.as_ref().map(Forks::wake));
        let early = load_tracepoint_program(exec_program(map, rings, w, false))?;
        links.extend(attach_tracepoint(c"sched_prepare_exec", &early).ok());
        let late = load_tracepoint_program(exec_program(map, rings, w, true))?;
        links.push(
            attach_tracepoint(c"sched_process_exec", &late)
                .map_err(|e| format!("cannot attach to sched_process_exec ({})", e.desc()))?,
        );
        let mut cpus = Vec::new();
        let pages = ring_pages(pages, period_ns, online.len(), page);
        for cpu in online {
            let refused = |what: &str, e: Errno| format!("{what} on CPU {cpu} ({})", e.desc());
            let event = match (first.take(), at_tick) {
                (Some(event), _) => Ok(event),
                (None, Some(tick)) => open_tracepoint_event(cpu, tick.tracepoint),
                (None, None) => {
                    open_cpu_event(cpu, sys::bindings::PERF_COUNT_SW_CPU_CLOCK, period_ns)
                }
            }
            .map_err(|e| refused("perf_event_open refused", e))?;
            let ring =
                Ring::new(&event, page, pages).map_err(|e| refused("cannot map a ring", e))?;
            // A tracepoint's programs are the tracepoint's, whichever event attached them: one
            // attach serves every CPU's event (a second one is refused, `EEXIST`).
            if at_tick.is_none() || cpus.is_empty() {
                attach(&event, &sampling).map_err(|e| refused("cannot attach a program", e))?;
            }
            cpus.push(Cpu {
                event,
                ring,
                sampled: false,
                timer: Timer {
                    tick_ns: at_tick.map_or(period_ns, |tick| tick.tick_ns),
                    since: 0,
                    before_ns: at_tick.map_or(period_ns, |tick| tick.tick_ns),
                },
            });
        }
        for cpu in &cpus {
            // SAFETY: a valid descriptor.
            if unsafe { sys::ioctls::ENABLE(cpu.event.as_raw_fd(), 0) } != 0 {
                let why = Errno::last().desc();
                return Err(format!("cannot enable a CPU's event ({why})"));
            }
        }
        Ok(CpuWide {
            watched,
            direct,
            forks,
            cpus,
            switch,
            exit,
            exit_link,
            _programs: vec![sampling, early, late],
            _links: links,
            threads: HashMap::new(),
            lost: 0,
            foreign: 0,
            returns: [0; 2],
            read_at: 0,
            processes: HashMap::new(),
            strangers: HashMap::new(),
            stranger_bytes: 0,
            ignored: HashSet::new(),
            ran: HashSet::new(),
            at_tick: at_tick.is_some(),
        })
    }

    /// Attaches the `sched_switch` program, if it is not yet: the watched threads' switches are
    /// recorded from now on (those watched before are watched again for that: their values
    /// hold no time on a CPU that the program could add to, see `PerfSampler::follow_switches`).
    pub(super) fn follow_switches(&mut self) -> Result<(), String> {
        if self.switch.link.is_some() {
            return Ok(());
        }
        let link = match self.switch.typed {
            true => attach_typed_tracepoint(&self.switch.program),
            false => attach_tracepoint(c"sched_switch", &self.switch.program),
        };
        let link = link.map_err(|e| format!("cannot attach to sched_switch ({})", e.desc()))?;
        self.switch.link = Some(link);
        self.exit_link = None;
        Ok(())
    }

    /// Detaches the `sched_switch` program: nothing more is recorded of switches, and the
    /// watched threads' values no longer count their time on a CPU (to follow them again, they
    /// are watched anew).
    pub(super) fn stop_following(&mut self) -> Result<(), String> {
        if self.exit_link.is_none() {
            self.exit_link = Some(attach_exit(&self.exit)?);
        }
        self.switch.link = None;
        Ok(())
    }

    /// What wakes a thread at each fork of a watched process (see `forks.rs`), where the kernel
    /// allows it.
    pub(super) fn fork_wakes(&self) -> Option<std::sync::Arc<ForkWakes>> {
        self.forks.as_ref().map(Forks::wakes)
    }

    /// Has the programs write bare samples of process `pid`'s threads not watched (see
    /// [`Stranger`]), where they do not already.
    pub(super) fn watch_process(&mut self, pid: u32) -> Result<(), Errno> {
        if self.processes.get(&pid) == Some(&true) {
            return Ok(());
        }
        let key = (pid | PROCESS_KEY).to_ne_bytes();
        update_bytes(self.watched.as_raw_fd(), &key, &0u32.to_ne_bytes())?;
        self.processes.insert(pid, true);
        Ok(())
    }

    /// Whether the programs watch process `pid` now, as the kernel's map says: from
    /// [`CpuWide::watch_process`] until an `exec` of it (its program removes the key at once,
    /// where `processes` learns of it only once the exec's record is read).
    pub(super) fn watches_process_now(&self, pid: u32) -> bool {
        holds_key(self.watched.as_raw_fd(), &(pid | PROCESS_KEY).to_ne_bytes())
    }

    /// Writes no bare samples of process `pid`'s threads any more, and drops those held.
    pub(super) fn unwatch_process(&mut self, pid: u32) {
        let key = (pid | PROCESS_KEY).to_ne_bytes();
        let _ = delete_bytes(self.watched.as_raw_fd(), &key);
        self.processes.remove(&pid);
        for tid in self.strangers_of(pid) {
            self.take_stranger(tid);
        }
    }

    /// An `exec` was seen: the programs removed its process's key, which the next
    /// [`CpuWide::watch_process`] puts back (every process's: which one is not known here).
    pub(super) fn processes_stale(&mut self) {
        self.processes.values_mut().for_each(|known| *known = false);
    }

    /// The threads of process `pid` whose bare samples are held.
    pub(super) fn strangers_of(&self, pid: u32) -> Vec<u32> {
        (self.strangers.iter())
            .filter(|(_, stranger)| stranger.pid == pid)
            .map(|(tid, _)| *tid)
            .collect()
    }

    /// The bare samples held of thread `tid`, oldest first.
    pub(super) fn take_stranger(&mut self, tid: u32) -> Vec<Held> {
        let Some(stranger) = self.strangers.remove(&tid) else {
            return Vec::new();
        };
        let mut samples = stranger.samples;
        let bytes: usize = samples.iter().map(|held| held.stack.len()).sum();
        self.stranger_bytes = self.stranger_bytes.saturating_sub(bytes);
        samples.sort_by_key(|held| held.time);
        samples
    }

    /// Whether perf sampled thread `tid` bare since it was ignored (or since the previous call):
    /// it ran unwatched, and its time on a CPU is in no sample (see [`CpuWide::ignore`]).
    pub(super) fn ran(&mut self, tid: u32) -> bool {
        self.ran.remove(&tid)
    }

    /// Drops thread `tid`'s bare samples, held and to come (the sampler's ticks saw it).
    pub(super) fn ignore(&mut self, tid: u32) {
        self.take_stranger(tid);
        if self.ignored.len() >= MOST_IGNORED {
            self.ignored.clear();
            self.ran.clear();
        }
        self.ignored.insert(tid);
    }

    /// Has the programs record thread `tid` from now on, in the map value `index`.
    pub(super) fn watch(&mut self, tid: u32, index: u32, quiet: bool) -> Result<(), Errno> {
        self.direct.add(tid, index)?;
        update_bytes(
            self.watched.as_raw_fd(),
            &tid.to_ne_bytes(),
            &index.to_ne_bytes(),
        )?;
        self.threads.insert(
            tid,
            Thread {
                watched_at: crate::os::time::monotonic_ns(),
                pending: VecDeque::new(),
                seq: None,
                latest: 0,
                cpu_ns: 0,
                running_since: 0,
                quiet,
                stack_end: 0,
            },
        );
        // Its bare samples until now: the sampler's ticks stood for that time.
        self.take_stranger(tid);
        Ok(())
    }

    /// Keeps only the part of `tid`'s samples' stacks below `end` from now on (0: all of it).
    pub(super) fn keep_stacks_below(&mut self, tid: u32, end: u64) {
        if let Some(thread) = self.threads.get_mut(&tid) {
            thread.stack_end = end;
        }
    }

    /// Hands out `tid`'s switches no more: the programs no longer record them (its map value
    /// says so, which fsprof writes).
    pub(super) fn quiet(&mut self, tid: u32) {
        if let Some(thread) = self.threads.get_mut(&tid) {
            thread.quiet = true;
        }
    }

    /// Records `tid` no more (if it still is: an `exec` removes it in the kernel).
    pub(super) fn unwatch(&mut self, tid: u32) {
        let _ = delete_bytes(self.watched.as_raw_fd(), &tid.to_ne_bytes());
        if self.threads.remove(&tid).is_some() {
            self.direct.remove(tid);
            self.ignore(tid);
        }
    }

    /// Moves every CPU's samples to their threads' queues, and hands `birth` each thread or
    /// process a watched thread made (its id and when).
    pub(super) fn read_cpus(&mut self, mut birth: impl FnMut(u32, u64)) {
        self.read_at = crate::os::time::monotonic_ns();
        let most_held = MOST_HELD.max(self.ring_bytes() / (STACK_DUMP as usize + 256));
        let threads = &mut self.threads;
        let (lost, foreign) = (&mut self.lost, &mut self.foreign);
        let (processes, ignored, ran) = (&self.processes, &mut self.ignored, &mut self.ran);
        let (strangers, stranger_bytes) = (&mut self.strangers, &mut self.stranger_bytes);
        for cpu in &mut self.cpus {
            let head = cpu.ring.head();
            let mut lost_at = None;
            let (sampled, timer) = (&mut cpu.sampled, &cpu.timer);
            let room = cpu.ring.drain(head, |record| match parse(record) {
                Record::Sample {
                    tid, pid, sample, ..
                } => {
                    let Some(thread) = threads.get_mut(&tid) else {
                        let bytes = sample.stack.bytes;
                        let room = strangers.len() < MOST_STRANGERS || strangers.contains_key(&tid);
                        let held = strangers.get(&tid).map_or(0, |s| s.samples.len());
                        // A thread the ticks saw that runs unwatched: its samples are held
                        // until the sampler watches it (or drops them at its tick's end).
                        if processes.contains_key(&pid) && ignored.contains(&tid) {
                            ran.insert(tid);
                        }
                        if !processes.contains_key(&pid)
                            || !room
                            || held >= MOST_HELD
                            || *stranger_bytes + bytes.len() > MOST_STRANGER_BYTES
                        {
                            *foreign += 1;
                            return;
                        }
                        *stranger_bytes += bytes.len();
                        let stranger = strangers.entry(tid).or_insert_with(|| Stranger {
                            pid,
                            samples: Vec::new(),
                        });
                        stranger.samples.push(Held {
                            time: sample.time,
                            regs: sample.regs,
                            stack: bytes.to_vec(),
                            trimmed: false,
                            tick_ns: timer.at(sample.time),
                        });
                        return;
                    };
                    if thread.pending.len() >= most_held {
                        // The oldest two go, a gap in their place (one, after a gap).
                        let dropped = thread.pending.pop_front().expect("full");
                        if !matches!(thread.pending.front(), Some(Pending::Gap(_))) {
                            thread.pending.pop_front();
                            thread.pending.push_front(Pending::Gap(dropped.time()));
                        }
                    }
                    let bytes = sample.stack.bytes;
                    let kept = kept_len(bytes.len(), sample.stack.start, thread.stack_end);
                    let held = Held {
                        time: sample.time,
                        regs: sample.regs,
                        stack: bytes[..kept].to_vec(),
                        trimmed: kept < bytes.len(),
                        tick_ns: timer.at(sample.time),
                    };
                    *sampled = true;
                    insert(&mut thread.pending, Pending::Sample(held));
                }
                Record::Fork { tid, time, parent } => {
                    // A new thread: its id may be one ignored before.
                    ignored.remove(&tid);
                    ran.remove(&tid);
                    if threads.contains_key(&parent) {
                        birth(tid, time);
                    }
                }
                Record::Lost(count) => {
                    *lost = lost.saturating_add(count);
                    lost_at = Some(crate::os::time::monotonic_ns());
                }
                _ => {}
            });
            if room < STACK_DUMP as usize + 1024 {
                lost_at.get_or_insert_with(crate::os::time::monotonic_ns);
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
        self.read_at.saturating_sub(HOLD_NS)
    }

    /// Starts each CPU's timer again at a random place (see `perf_events::rephase`) where it
    /// sampled a watched thread since it last was, at most every [`REPHASE_NS`]. The kernel
    /// restarts another CPU's timer by an interprocessor interrupt, for which fsprof waits:
    /// done at every read (every 10 ms), those were 30% of fsprof's CPU time while a
    /// two-thread program ran (`perf record` of fsprof, 250 Hz), each one an interrupt of the
    /// program too. Whatever the number of restarts, the ticks are systematic sampling with
    /// random starts, as long as when they restart does not depend on what the program does.
    /// Restarting only the timer of the CPU fsprof runs on needs no interrupt, but fsprof
    /// tends to wake on a CPU a thread left idle (its sleep), so its restarts would follow the
    /// program's rhythm: `sleepy`'s `hashing` read +0.2 to +1.3 that way (5 runs), +0.2 to
    /// +1.0 this way, +0.3 to +0.5 with every CPU restarted at every read (4 runs).
    pub(super) fn rephase(&mut self, tick_ns: u64) {
        if self.at_tick {
            return;
        }
        let now = crate::os::time::monotonic_ns();
        for cpu in &mut self.cpus {
            if cpu.sampled && now.saturating_sub(cpu.timer.since) >= REPHASE_NS {
                cpu.sampled = false;
                if let Some(length) = rephase(&cpu.event, tick_ns) {
                    cpu.timer = Timer {
                        tick_ns: length,
                        since: crate::os::time::monotonic_ns(),
                        before_ns: cpu.timer.tick_ns,
                    };
                }
            }
        }
    }

    /// Whether the CPUs' events sample at the scheduler's tick (`tick.rs`).
    pub(super) fn at_tick(&self) -> bool {
        self.at_tick
    }

    /// Bytes of records a CPU's ring holds at most.
    pub(super) fn ring_bytes(&self) -> usize {
        self.cpus
            .iter()
            .map(|cpu| cpu.ring.data_size())
            .min()
            .unwrap_or(0)
    }

    /// The shortest tick a CPU's timer has now, which it keeps until the next read (a
    /// rephase follows a read); `None` without CPUs.
    pub(super) fn shortest_tick_ns(&self) -> Option<u64> {
        self.cpus.iter().map(|cpu| cpu.timer.tick_ns).min()
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
            let next = if sample_first { sample_at } else { event_at };
            if next.is_some_and(|time| time > until) {
                break;
            }
            if sample_first {
                match thread.pending.pop_front().expect("front") {
                    Pending::Gap(_) => each(Taken::Gap { at: thread.latest }),
                    // Taken before the thread was watched, read after: the program copied
                    // nothing then (its marks are unknown, not lost), as for the bare samples
                    // `watch` drops. Handed out, it read as a failed copy, and its running
                    // time went to no marks at all: a program's first mark, its thread
                    // watched 6 ms into it, read 5% low (1 run in 40, CI too).
                    Pending::Sample(held) if held.time < thread.watched_at => {}
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
                            labels: matched.labels,
                            tick_ns: held.tick_ns,
                            trimmed: held.trimmed,
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
            if thread.quiet {
                execed |= matches!(event, ThreadEvent::Execed { .. });
                continue;
            }
            match event {
                ThreadEvent::Departed {
                    cpu_ns,
                    preempted,
                    slotless,
                    seq,
                    stack,
                    ..
                } => {
                    if thread.missed(seq) {
                        each(Taken::Gap { at: thread.latest });
                    }
                    (thread.cpu_ns, thread.running_since) = (cpu_ns, 0);
                    // Its stack as it left, when the program copied it: the stream gives it
                    // before its departure, as a thread's own events do.
                    if let Some(stack) = &stack {
                        each(Taken::Departure(departure(stack, time)));
                    }
                    let matched = match slotless {
                        true => Matched {
                            known: true,
                            ..Matched::default()
                        },
                        false => match_copies(switch_waiting, time, [tolerance, 0]),
                    };
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
                ThreadEvent::Folded { folded, seq } => {
                    if thread.missed(seq) {
                        each(Taken::Gap { at: thread.latest });
                    }
                    each(Taken::Folded(folded));
                }
            }
            thread.latest = thread.latest.max(time);
        }
        execed
    }
}

/// How many of a sample's `len` stack bytes, copied from `start`, are kept where the thread's
/// stacks stop being read at `stack_end` (0: all; all too where the stack pointer lies at or
/// beyond it, on another stack).
fn kept_len(len: usize, start: u64, stack_end: u64) -> usize {
    match stack_end.checked_sub(start) {
        Some(below) if stack_end != 0 && below > 0 => {
            len.min(usize::try_from(below).unwrap_or(len))
        }
        _ => len,
    }
}

/// A departure's registers and stack as the stream gives them, at the time of its departure;
/// its slots are that departure's, on the switch that follows.
fn departure(held: &DepartureStack, time: u64) -> PerfSample<'_> {
    PerfSample {
        time,
        cpu_ns: 0,
        regs: held.regs,
        stack: StackView::new(held.regs.sp, &held.stack),
        slots: Default::default(),
        marks_known: false,
        anchors: Vec::new(),
        instant: Vec::new(),
        labels: None,
        tick_ns: 0,
        trimmed: false,
    }
}

impl Pending {
    fn time(&self) -> u64 {
        match self {
            Pending::Sample(held) => held.time,
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

/// Attaches the program at a thread's exit (`programs::exit_program`).
fn attach_exit(program: &OwnedFd) -> Result<OwnedFd, String> {
    attach_tracepoint(c"sched_process_exit", program)
        .map_err(|e| format!("cannot attach to sched_process_exit ({})", e.desc()))
}

/// Data pages of each CPU's ring, `pages` (a power of two) at a period of [`RING_PERIOD_NS`]:
/// at a shorter one, as many more as keep the ring lasting as long, so that the sampler, which
/// reads the rings when a third of that time is gone (`record/clock.rs`), wakes no more often
/// at a higher rate; within [`RINGS_MOST`] over `cpus` CPUs, but never fewer than `pages`. At
/// `--rate 1000` with 1 MiB rings, a two-thread program's slow ticks came every 10 ms (37 of
/// them in 0.7 s, against 16 with 4 MiB), and fsprof preempted it about 135 times, against 115
/// with 4 MiB and 70 for `perf record -F 1000`. Larger rings also lose nothing while fsprof is
/// starved of its CPU for longer (at 2 kHz, 30 ms of a busy CPU's samples filled 1 MiB).
fn ring_pages(pages: usize, period_ns: u64, cpus: usize, page: usize) -> usize {
    let room = RINGS_MOST / cpus.max(1) / page.max(1);
    let mut chosen = pages.saturating_mul(rate_scale(period_ns));
    while chosen > room && chosen > pages {
        chosen /= 2;
    }
    chosen.max(pages)
}

/// How many times the default rate's ring a ring needs at a sampling period of `period_ns` to
/// last as long: 1 at [`RING_PERIOD_NS`] or longer, a power of two at shorter periods (4 at
/// 1 kHz). The shared ring of slot copies grows by as much (`perf.rs`): departures' stacks go
/// there too, at most one per period.
pub(in crate::native) fn rate_scale(period_ns: u64) -> usize {
    let scale = RING_PERIOD_NS
        .div_ceil(period_ns.max(1))
        .next_power_of_two();
    usize::try_from(scale).unwrap_or(usize::MAX)
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

mod direct;
mod forks;
pub(super) mod programs;
#[cfg(test)]
mod tests;
pub(in crate::native) mod tick;

use programs::{exec_program, exit_program, switch_program};
