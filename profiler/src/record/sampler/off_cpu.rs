//! A thread's time on and off its CPU, from the kernel's records of its switches (perf
//! backend): each departure (preempted, so still runnable, or blocked) comes with the marks
//! copied as the thread left, and with the stack the kernel copied then, at most once per
//! sampling period (else, preempted, the latest sample's stands, if the marks are that
//! sample's, or the block's it has just come back from, or its previous preemption's; blocked,
//! the latest block's that has one, with the same marks, and a tick's read
//! of the stack replaces it while the block lasts), each return with its time, and every
//! interval in between is added as a sample of exactly its length with those marks: waiting
//! for a CPU is active time, blocked time is wall time only (which counts inside the program's
//! own marks, or with `--idle`; the rules' features keep it apart as their waits, by its
//! stack). Its time on the CPU is in perf's samples of it (`native_stacks.rs` takes them):
//! each carries the thread's CPU time when it was taken, and stands, with its own marks, for
//! what the thread ran since the previous one; what it ran after its last sample is added at
//! its exit (its CPU time then, which the kernel keeps, though it records no departure) or at
//! the end of recording, with its latest marks. So a tick adds nothing of its own for a
//! thread followed this way, and none of its time is estimated.
//!
//! A departure that blocked ends with a wake-up, after which the thread may wait for a CPU
//! before it runs (on a busy machine, milliseconds): that wait is active time, but the switches
//! do not tell it apart from the block. The kernel's total of the thread's waits for a CPU
//! (`schedstat`), read every few ticks, does: its growth, less the preempted stretches already
//! counted as active, is shared among the blocked stretches that ended since the previous read
//! and moved from their blocked time to their active time. Without it, the workers of
//! `coordinator.c` read 3.7 points high beside one busy loop (their wake-ups, and the
//! coordinator's, left out of the program's time). Each stretch's share is at most the time
//! from the latest instant the thread was known blocked (its departure, or a tick that found
//! it so) to its return: the kernel's total also grows while a thread that blocked stays queued
//! (EEVDF's delayed dequeue), and once put the whole 3 s `join` of `queue`'s main thread in its
//! active time (1 run in 5 to 8 of `queue` beside nothing else).
//!
//! A sample stands for the CPU time before it, not for the time between two ticks: shared out
//! among the samples of each tick's interval, the time of an interval without a sample (a
//! thread that ran a little between two sleeps) went to the marks it left its CPU with, and a
//! loop of 700 us in one mark and 300 us outside, with a sleep in a second mark, read 1 to 2
//! points too little of the first and too much of the second.

use super::*;
use crate::native::layout::JUST_BACK_NS;
use crate::native::stream::Switch;
use crate::os::time::monotonic_ns;
use crate::program::process;
use crate::record::marks::snapshot_records;

/// A thread's scheduling totals are read at most this often (for its wake-ups' waits).
const WAKEUP_READ_NS: u64 = 20_000_000;
/// Blocked stretches remembered between two reads; the waits of more go to these.
const MAX_WOKEN: usize = 64;

/// A thread's latest perf sample, for the time off its CPU that follows it: its native stack,
/// its marks as placed on it (each with the stack address it was pushed at) and their stack.
pub(super) struct LatestSample {
    pub captured: Captured,
    pub records: Vec<RecordView>,
    pub stack: u32,
}

/// A thread whose switches are followed.
pub(super) struct Followed {
    /// The tick at which following began: the ticks after it add nothing for the thread.
    since_tick: u64,
    /// Where the thread is off its CPU now, if it is.
    off: Option<OffCpu>,
    /// Its latest known marks at a sample or a departure (their stack, and when: CLOCK_MONOTONIC,
    /// ns), for its running time after its last sample, unless a tick read it later.
    latest: Option<(u32, u64)>,
    /// The marks the latest tick read (see [`Sampler::note_ticked`]).
    ticked: Option<Ticked>,
    /// The marks and native stack of its latest departure that blocked with the stack the
    /// kernel copied then, for those of its blocks that came too soon after it for a copy of
    /// their own (see `Sampler::switch`).
    blocked_with: Option<(u32, u32)>,
    /// Since its latest return from a block, until a sample or its next block (see
    /// [`Sampler::switch`]).
    back: Option<Back>,
    /// Its CPU time (task-clock count) up to which its running time is added.
    credited_ns: u64,
    /// Whether its records had a gap since (see [`Sampler::gap`]).
    gap: bool,
    /// Running time of samples lost in gaps, not yet shared among the samples after them.
    owed_ns: u64,
    /// For samples of a CPU's ticks (see [`Sampler::calibrate`]): the running time they were
    /// credited, the lengths of their ticks, and what was added for them.
    ran_ns: u64,
    ticks_ns: u64,
    added_ns: u64,
    wakeups: Wakeups,
    /// Where it was as following began (runnable or not, and when), until the tick's end
    /// opens its stretch off the CPU (see [`Sampler::seed_off_cpu`]).
    seed: Option<(bool, u64)>,
}

/// A followed thread's marks as the ticks read them.
struct Ticked {
    /// Its slots' `seq`s then, folded: the same at the next tick, its marks are the same.
    generation: u64,
    stack: u32,
    /// When the latest tick that found them read them (CLOCK_MONOTONIC, ns).
    read_ns: u64,
}

/// The waits for a CPU that follow a thread's wake-ups, not yet added.
struct Wakeups {
    /// The kernel's total of the thread's waits for a CPU, when last read, and when.
    run_delay_ns: Option<u64>,
    read_at: u64,
    /// That total's growth not yet accounted for, less the preempted stretches added as
    /// active (negative while one added up to a tick has not reached the total yet: the
    /// kernel counts a wait when it ends).
    balance: i64,
    /// The blocked stretches that ended since the read (their marks and native stack).
    /// Each with the longest its wait for a CPU may have been (see `OffCpu::blocked_seen`).
    woken: Vec<(u32, Option<u32>, u64)>,
}

/// A stretch off the CPU not yet added.
struct OffCpu {
    /// Since when (CLOCK_MONOTONIC, ns): its departure, or the tick up to which it was added.
    since: u64,
    /// When it left.
    left: u64,
    /// Blocked, the latest instant it was known blocked (its departure, or a tick that found
    /// it so): a wait for a CPU after its wake-up came after that.
    blocked_seen: u64,
    preempted: bool,
    /// Seeded as following began, the thread runnable (see [`Sampler::seed_off_cpu`]): not
    /// added until the thread's next switch, a return, tells that it was off its CPU.
    tentative: bool,
    stack: u32,
    native: Option<u32>,
    /// Its native stack is the one the kernel copied as it left (no tick need read it).
    left_with_stack: bool,
    /// Its stack, read at a tick while it was blocked (see [`Sampler::refresh_off_cpu`]): it
    /// stands until the thread runs again.
    captured: Option<Captured>,
}

/// A thread back from a block: what it blocked with, for a preemption that comes before it has
/// run on from there.
#[derive(Clone, Copy)]
struct Back {
    /// Its latest return to a CPU (from the block, or from a preemption since).
    returned: u64,
    /// How long it has run since the block ended.
    ran_ns: u64,
    /// The marks and native stack of the block, or of a preemption since that the kernel
    /// copied a stack at (`preempted`).
    stack: u32,
    native: Option<u32>,
    preempted: bool,
}

impl Followed {
    /// Following a thread from tick `tick` on, running then, with `cpu_ns` of CPU time so far
    /// (counted by the tick).
    /// Its waits for a CPU so far are `run_delay_ns` (`schedstat`, if the kernel keeps it).
    pub(super) fn new(tick: u64, cpu_ns: u64, run_delay_ns: Option<u64>) -> Followed {
        Followed {
            since_tick: tick,
            off: None,
            latest: None,
            ticked: None,
            blocked_with: None,
            back: None,
            credited_ns: cpu_ns,
            gap: false,
            owed_ns: 0,
            ran_ns: 0,
            ticks_ns: 0,
            added_ns: 0,
            wakeups: Wakeups {
                run_delay_ns,
                read_at: monotonic_ns(),
                balance: 0,
                woken: Vec::new(),
            },
            seed: None,
        }
    }

    /// Notes that following began with the thread runnable (`running`: on a CPU or waiting for
    /// one) or blocked, at `now` (CLOCK_MONOTONIC, ns), for [`Sampler::seed_off_cpu`].
    pub(super) fn began(&mut self, running: bool, now: u64) {
        self.seed = Some((running, now));
    }
}

impl Sampler {
    /// Whether thread `tid`'s time since the previous tick is all in perf's samples and its
    /// switches (then the tick adds nothing for it).
    pub(super) fn followed_off_cpu(&self, tid: u32) -> bool {
        self.threads
            .states
            .get(&tid)
            .and_then(|state| state.followed.as_ref())
            .is_some_and(|followed| followed.since_tick < self.clock.ticks())
    }

    /// Whether followed thread `tid` is on a CPU or waiting for one, as its switches read up to
    /// now tell (a departure not followed by a return leaves it off its CPU, runnable if it was
    /// preempted), with no system call: one read of `/proc/.../stat` per thread per tick was a
    /// fifth of fsprof's own CPU with 64 busy threads (BENCHMARKS.md, issue 39). Blocked by its
    /// switches, /proc is read all the same: a thread woken since waits for a CPU, which its
    /// switches tell only once it runs. Gone, it is blocked (and forgotten at the tick's end).
    pub(super) fn running_by_switches(&mut self, tid: u32) -> bool {
        let off = self.followed_mut(tid).and_then(|f| f.off.as_ref());
        if off.is_none_or(|off| off.preempted) {
            return true;
        }
        self.proc_running(tid).unwrap_or(false)
    }

    /// Takes a switch of thread `tid` (sample thread `thread`): a departure opens a stretch
    /// off the CPU with the marks copied then (else those of `latest`, the thread's latest perf
    /// sample), and the stack `departed` taken then, if it was preempted (else the latest
    /// sample's, where its marks are that sample's); a return adds the stretch.
    pub(super) fn switch(
        &mut self,
        tid: u32,
        own_tid: u32,
        thread: u32,
        switch: Switch,
        latest: Option<&LatestSample>,
        departed: Option<Captured>,
    ) {
        if !switch.out {
            if let Some(followed) = self.followed_mut(tid) {
                followed.back = match (&followed.off, followed.back) {
                    (Some(off), _) if !off.preempted && !off.tentative => Some(Back {
                        returned: switch.time,
                        ran_ns: 0,
                        stack: off.stack,
                        native: off.native,
                        preempted: false,
                    }),
                    (Some(_), Some(back)) => Some(Back {
                        returned: switch.time,
                        ..back
                    }),
                    _ => None,
                };
            }
            self.add_off_cpu(tid, thread, Some(switch.time), true);
            return;
        }
        // A block the kernel folded, opened by a tick as it lasted (see `refresh_folded`),
        // recorded whole as it ended: already open.
        if self.followed_mut(tid).is_some_and(|f| {
            (f.off.as_ref()).is_some_and(|off| off.left == switch.time && !off.preempted)
        }) {
            return;
        }
        // All slots copied (a thread without one gives no marks), or the marks are unknown.
        let copied = switch
            .marks_known
            .then(|| snapshot_records(own_tid, &switch.slots))
            .flatten();
        let has_departed = departed.is_some();
        let (stack, native) = match (copied, latest, departed) {
            (Some((mut records, truncated)), _, Some(departed)) => {
                // Its marks and its stack, both as it left.
                self.resolve_captured(own_tid, &mut records, &departed.frames);
                let stack = self.intern_records(records, truncated);
                let placed = capture::place(&departed, &self.records);
                (stack, Some(self.builder.native_stack(placed)))
            }
            (Some((mut records, truncated)), latest, None) => {
                if let Some(latest) = latest {
                    self.resolve_captured(own_tid, &mut records, &latest.captured.frames);
                }
                let stack = self.intern_records(records, truncated);
                // Preempted, it was running the code of its latest sample (less than a period
                // ago); blocked, it may have run on into a call that blocks, whose stack only a
                // tick's read shows (see `refresh_off_cpu`).
                // Only with the very marks of that sample, pushed at the same stack addresses:
                // the same marks pushed again elsewhere (a recursion's leaf at another depth)
                // would be placed on frames of the sample's stack that were not theirs, a
                // spliced stack (`deep leaves` beside two busy loops: 8 to 20% of the leaves'
                // time).
                let native = latest
                    .filter(|l| {
                        switch.preempted
                            && l.stack == stack
                            && same_places(&l.records, &self.records)
                    })
                    .map(|latest| {
                        let placed = capture::place(&latest.captured, &self.records);
                        self.builder.native_stack(placed)
                    });
                (stack, native)
            }
            (None, Some(LatestSample { stack, .. }), _) => {
                // A copy failed or was lost: the latest sample's marks stand in (in the tables;
                // without a native stack, which would be drawn with other marks).
                self.tally.departures_unmarked += 1;
                (*stack, None)
            }
            (None, None, _) => return, // nothing to attribute it to: left out
        };
        let (blocked, left_with_stack) = (!switch.preempted, has_departed && native.is_some());
        if let Some(followed) = self.followed_mut(tid) {
            // Blocked without a stack of its own, the latest block's stands for it where the
            // marks are the same: the kernel copies a blocked thread's stack at most once per
            // sampling period, so the blocks that got one are a sample of all of them, taken
            // at times that do not depend on where the thread blocks.
            let native = match (native, followed.blocked_with) {
                (Some(native), _) if blocked => {
                    followed.blocked_with = Some((stack, native));
                    Some(native)
                }
                (None, Some((with, native))) if blocked && with == stack => Some(native),
                (native, _) => native,
            };
            // Preempted without a stack of its own soon after a block ended (the kernel copies
            // one at most once per period, and the block took this period's), it is still on
            // its way out of the blocking call: its wait for a CPU is that call's, as the block
            // was, not the latest sample's code before the block.
            // Preempted again without one, after a preemption that had one (no sample since),
            // it resumed where it was then and ran less than a period: that stack is the later.
            let native = match followed.back.as_mut() {
                Some(back) if switch.preempted => {
                    back.ran_ns += switch.time.saturating_sub(back.returned);
                    let near = back.preempted || back.ran_ns <= JUST_BACK_NS;
                    if !has_departed && near && back.stack == stack {
                        back.native
                    } else {
                        native
                    }
                }
                _ => native,
            };
            if blocked {
                followed.back = None;
            } else if has_departed && native.is_some() {
                followed.back = Some(Back {
                    returned: switch.time,
                    ran_ns: 0,
                    stack,
                    native,
                    preempted: true,
                });
            }
            followed.latest = Some((stack, switch.time));
            // A stretch seeded by `seed_off_cpu` has been added up to its `since` (a tentative
            // one not at all).
            let since = followed.off.as_ref().map_or(0, |off| off.since);
            followed.off = Some(OffCpu {
                since: switch.time.max(since),
                left: switch.time,
                blocked_seen: switch.time,
                preempted: switch.preempted,
                tentative: false,
                stack,
                native,
                left_with_stack,
                captured: None,
            });
        }
    }

    /// Opens a stretch off the CPU for thread `tid` (own thread id `own_tid`) from the instant
    /// following began (see [`Followed::began`]), its event enabled after the tick found it
    /// runnable (on a CPU or waiting for one) or blocked. Off its CPU then, the kernel records no
    /// departure, and its time off would count as running time that never comes: new threads
    /// block on their way to their first blocking call (in `cancel.c`, a thread per round blocked
    /// 20 ms in `read`, 1 to 7 of 50 threads had their `read` count 0.05 ms), and beside busy
    /// ones wait for a CPU (`requests`' threads of 3 to 6 ms: milliseconds each, 1 to 3 points of
    /// the program's time). Runnable, it may as well be on a CPU: the stretch is *tentative*,
    /// added whole if the thread's next switch is a return, dropped if it is a departure. It has
    /// the marks this tick read (those it left with are unknown), which the next tick's read
    /// replaces (see `refresh_off_cpu`).
    ///
    /// Done at the tick's end, for every thread whose following began in it: interning its
    /// marks may find call sites, and the first classification of a call site parses the
    /// program's files (ripgrep's: 25 to 35 ms), during which the threads sampled after it in
    /// the same tick were not yet followed, their running time then the tick's, with the tick's
    /// marks (a worker born as it started had 28 to 43 ms in its `nanosleep`, without a stack,
    /// in 1 run of ripgrep in 5 to 10).
    pub(super) fn seed_off_cpu(&mut self, tid: u32, own_tid: u32) {
        let Some((running, since)) = self.followed_mut(tid).and_then(|f| f.seed.take()) else {
            return;
        };
        let stack = self.stack_of(own_tid, None);
        if let Some(followed) = self.followed_mut(tid).filter(|f| f.off.is_none()) {
            followed.off = Some(OffCpu {
                since,
                left: since,
                blocked_seen: since,
                preempted: running,
                tentative: running,
                stack,
                native: None,
                left_with_stack: false,
                captured: None,
            });
        }
    }

    /// Opens the stretches off the CPU of the threads whose following began at this tick
    /// (see [`Sampler::seed_off_cpu`]).
    pub(super) fn seed_began(&mut self) {
        let began: Vec<(u32, u32)> = (self.threads.states.iter())
            .filter(|(_, state)| state.followed.as_ref().is_some_and(|f| f.seed.is_some()))
            .filter_map(|(tid, state)| Some((*tid, state.own_tid?)))
            .collect();
        for (tid, own_tid) in began {
            self.seed_off_cpu(tid, own_tid);
        }
    }

    /// Takes a gap in thread `tid`'s records (sample thread `thread`), those before it complete
    /// up to `at`: a stretch off the CPU still open is added up to `at` and closed, as the
    /// thread may have come back in the gap (else the ticks would add it on while the thread
    /// ran); what it ran in the gap is shared among its next samples (see [`Sampler::credit`]),
    /// and its waits for a CPU count from the next read of its totals on, those of the gap
    /// unknown.
    pub(super) fn gap(&mut self, tid: u32, thread: u32, at: u64) {
        if self
            .followed_mut(tid)
            .is_some_and(|f| f.off.as_ref().is_some_and(|off| !off.tentative))
        {
            self.add_off_cpu(tid, thread, Some(at), true);
        }
        let pid = self.pid;
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        followed.gap = true;
        followed.back = None;
        let wakeups = &mut followed.wakeups;
        wakeups.woken.clear();
        wakeups.balance = 0;
        wakeups.run_delay_ns = process::sched_times(pid, tid).map(|t| t.wait_ns);
        wakeups.read_at = monotonic_ns();
    }

    /// Adds thread `tid`'s stretch off the CPU up to `until` (now if `None`); closes it if
    /// `close` (the thread is back on a CPU), else keeps it open from `until` on.
    pub(super) fn add_off_cpu(&mut self, tid: u32, thread: u32, until: Option<u64>, close: bool) {
        let until = until.unwrap_or_else(monotonic_ns);
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        let Some(off) = followed.off.as_mut().filter(|off| close || !off.tentative) else {
            return;
        };
        let ns = until.saturating_sub(off.since);
        let (stack, native, preempted) = (off.stack, off.native, off.preempted);
        let most_wait = until.saturating_sub(off.blocked_seen);
        off.since = off.since.max(until);
        if close {
            followed.off = None;
        }
        let wakeups = &mut followed.wakeups;
        if preempted {
            wakeups.balance = wakeups.balance.saturating_sub_unsigned(ns);
        } else if close && wakeups.woken.len() < MAX_WOKEN {
            wakeups.woken.push((stack, native, most_wait));
        }
        if preempted && native.is_none() {
            self.tally.unplaced_ns += ns;
        }
        if ns > 0 {
            let active_ns = if preempted { ns } else { 0 };
            self.builder
                .add_sample(thread, stack, native, ns, active_ns);
        }
    }

    /// Thread `tid`'s waits for a CPU after its wake-ups since the previous read of its
    /// scheduling totals (at most every [`WAKEUP_READ_NS`] unless `now`), shared evenly among
    /// the blocked stretches that ended since, each moved from its blocked time to its active
    /// time (see the module's header). A stretch's share is at most its bound, and what it
    /// cannot take goes to the others: split evenly and the excess dropped, python3's four
    /// threads (80 000 switches a second) lost 240 ms of their 798 ms of waits, and each read
    /// 83-91% of its run and wait time.
    pub(super) fn add_wakeups(&mut self, tid: u32, thread: u32, now: bool) {
        let pid = self.pid;
        let time = monotonic_ns();
        let Some(wakeups) = self.followed_mut(tid).map(|f| &mut f.wakeups) else {
            return;
        };
        if wakeups.woken.is_empty() || (!now && time < wakeups.read_at + WAKEUP_READ_NS) {
            return;
        }
        let (Some(previous), Some(times)) = (wakeups.run_delay_ns, process::sched_times(pid, tid))
        else {
            return;
        };
        wakeups.read_at = time;
        wakeups.run_delay_ns = Some(times.wait_ns);
        let grown = times.wait_ns.saturating_sub(previous);
        wakeups.balance = wakeups.balance.saturating_add_unsigned(grown);
        let woken = std::mem::take(&mut wakeups.woken);
        if wakeups.balance <= 0 {
            return;
        }
        let (mut left, mut count) = (wakeups.balance as u64, woken.len() as u64);
        wakeups.balance = 0;
        let mut woken = woken;
        woken.sort_unstable_by_key(|(_, _, most)| *most);
        for (stack, native, most) in woken {
            let share = (left / count).min(most);
            (left, count) = (left - share, count - 1);
            self.builder.add_active(thread, stack, native, share);
        }
    }

    /// At a tick, for a thread still off its CPU since it left it before the tick read its
    /// marks (and, per CPU, has not switched since, as far as the programs' count tells), its
    /// marks as the tick read them, which are those it left with (it has not run since), for the rest of the stretch, and, blocked, its stack read once while it is
    /// blocked (for the rules' features, inside marks or not). The copy made as it left may lack
    /// a slot that fsprof did not know of yet (one claimed just before, or a new program's after
    /// an exec), and its latest perf sample may be older than its block, or missing; the tick's
    /// reads have neither flaw, and a later tick may know more slots than an earlier one.
    /// (Preempted, new threads of `requests` beside busy ones waited for a CPU milliseconds at a
    /// time with no marks: they claimed their slot after the tick that began to follow them.)
    pub(super) fn refresh_off_cpu(&mut self, tid: u32, own_tid: u32, running: bool) {
        let read_ns = self.reader.read_ns();
        // Per CPU, the switch records taken lag the programs' by a few hundred µs: the thread
        // may have come back and marked otherwise since, unseen yet (a sleep in `wait` read as
        // the `queue` it blocked in next: busy's `blocking`, wait -13%, queue +7%). Then the
        // marks and stack it left with stand.
        let unseen = self
            .native
            .as_ref()
            .and_then(|n| n.perf_switched_unseen(tid));
        if unseen == Some(true) {
            return;
        }
        let Some(off) = self.followed_mut(tid).and_then(|f| f.off.as_mut()) else {
            return;
        };
        if off.left >= read_ns {
            return;
        }
        if !running && !off.preempted {
            off.blocked_seen = off.blocked_seen.max(read_ns);
        }
        if off.preempted {
            // Its stack is its latest sample's, placed with the marks it left with: kept only
            // while they stand.
            let stack = self.stack_of(own_tid, None);
            if let Some(off) = self.followed_mut(tid).and_then(|f| f.off.as_mut()) {
                off.native = off.native.filter(|_| off.stack == stack);
                off.stack = stack;
            }
            return;
        }
        if running {
            return;
        }
        let mut captured = off.captured.take();
        if captured.is_none() && !off.left_with_stack {
            if let Some(Native::Captured(read)) = self.blocked(tid, own_tid) {
                captured = Some(read);
            }
        }
        let stack = self.stack_of(own_tid, captured.as_ref().map(|c| c.frames.as_slice()));
        let native = captured.as_ref().map(|captured| {
            let placed = capture::place(captured, &self.records);
            self.builder.native_stack(placed)
        });
        if let Some(off) = self.followed_mut(tid).and_then(|f| f.off.as_mut()) {
            // Without a stack read while blocked, the one it left with stands if it was placed
            // with these marks.
            off.native = native.or(off.native.filter(|_| off.stack == stack));
            off.stack = stack;
            off.captured = captured;
        }
    }

    /// Adds a perf sample of thread `tid` (sample thread `thread`), taken at `at.1` when the
    /// thread had run `at.0`, for its running time since the previous one: at most a period
    /// (see [`Sampler::credit`]).
    pub(super) fn keep_sample(
        &mut self,
        tid: u32,
        thread: u32,
        stack: u32,
        native: Option<u32>,
        at: (u64, u64, u64),
    ) {
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        let (cpu_ns, time, tick_ns) = at;
        followed.latest = Some((stack, time));
        followed.back = None;
        let mut ns = self.credit(tid, cpu_ns);
        if tick_ns > 0 {
            ns = self.calibrate(tid, ns, tick_ns);
        }
        if ns > 0 {
            self.builder.add_sample(thread, stack, native, ns, ns);
        }
    }

    /// The running time of thread `tid` that a sample (or its end) at `cpu_ns` of its CPU
    /// time stands for: what it ran since the previous sample added (a sample not added, its
    /// marks not copied, leaves its time to the next, a period later, which carries it well:
    /// 13% of an unstarved run's samples follow one missing), except after a gap in its
    /// records (see [`Sampler::gap`]): there the samples of many periods were lost, and the
    /// sample stands for one period, the rest owed and shared among the samples that follow
    /// (each carries at most its own time again), a sample of what the thread does over the
    /// next periods. Given whole to the first sample after the gap, it went to where the
    /// thread was when fsprof read its ring again, which on a starved machine is where the
    /// program blocks: an event loop's 8 ms of handling per request read 3 to 7 points low,
    /// its `epoll_wait`, `read` and `write` high, with fsprof stopped 60 to 100 ms in every
    /// 300 ms (a CI run read it 84.6% against 88.4-90.6%); to the sample before the gap, 0.5 to
    /// 2.5 points low (the ring fills as the thread blocks, when the kernel copies its whole
    /// stack); left out, the shares leaned to the time recorded exactly, the blocks (a
    /// program's condition-variable waits +5 to +7 points).
    fn credit(&mut self, tid: u32, cpu_ns: u64) -> u64 {
        let period = self
            .options
            .perf
            .map_or(u64::MAX / 2, |p| p.as_nanos() as u64);
        let Some(followed) = self.followed_mut(tid) else {
            return 0;
        };
        let mut ns = cpu_ns.saturating_sub(followed.credited_ns);
        followed.credited_ns = followed.credited_ns.max(cpu_ns);
        if std::mem::take(&mut followed.gap) && ns > period + period / 2 {
            followed.owed_ns += ns - period;
            self.tally.lost_cpu_ns += ns - period;
            ns = period;
        }
        let Some(followed) = self.followed_mut(tid) else {
            return ns;
        };
        let paid = followed.owed_ns.min(ns);
        followed.owed_ns -= paid;
        ns + paid
    }

    /// The running time a sample of a CPU's tick of `tick_ns` stands for, `ran_ns` the thread's
    /// running time since its previous sample: the tick's length, scaled by the thread's
    /// running time over its samples' ticks so far (ticks are lost where the kernel's timer
    /// interrupt comes late, in a virtual machine 7-8% of them), so that its samples add up to
    /// its running time.
    ///
    /// Not `ran_ns` itself, as for a thread's own timer: a CPU's ticks come on the CPU's clock,
    /// not on the thread's time, and a thread that sleeps between two has run less between
    /// them, by an amount that depends on where in its rhythm the sample fell. A loop of 700 us
    /// of `spin_hashing`, a 500 us sleep and 300 us of `spin_unmarked` (10 s, one tick a
    /// period at 250 Hz) read `spin_hashing` 2.2 to 7.1 points low by running time since the
    /// previous sample (mean -3.9 in 5 runs), +0.22 on average this way (sd 0.79), as the
    /// samples' count does; with two ticks a period, one kept at random, +2.81 (sd 1.55;
    /// `tests/benches/tick-bias.sh`, BENCHMARKS.md, issue 39, twenty-eighth session).
    fn calibrate(&mut self, tid: u32, ran_ns: u64, tick_ns: u64) -> u64 {
        let Some(followed) = self.followed_mut(tid) else {
            return ran_ns;
        };
        followed.ran_ns = followed.ran_ns.saturating_add(ran_ns);
        followed.ticks_ns = followed.ticks_ns.saturating_add(tick_ns);
        // Four ticks' worth of the ratio's prior, 1, for the first samples.
        let prior = 4 * u128::from(tick_ns);
        let scaled = u128::from(tick_ns) * (u128::from(followed.ran_ns) + prior)
            / (u128::from(followed.ticks_ns) + prior);
        let ns = u64::try_from(scaled).unwrap_or(u64::MAX);
        followed.added_ns = followed.added_ns.saturating_add(ns);
        ns
    }

    /// Ends recording: each thread perf follows gets its running time since its last sample,
    /// counted up to now, not up to [`Sampler::finish`] (the program runs on meanwhile: 40 to
    /// 270 ms of a busy thread's time were added after a 4.5 s recording). Done by `finish` too.
    pub fn end_recording(&mut self) {
        let followed: Vec<(u32, u32)> = (self.threads.states.iter())
            .filter(|(_, state)| state.followed.is_some())
            .map(|(tid, state)| (*tid, state.id))
            .collect();
        for (tid, thread) in followed {
            self.add_wakeups(tid, thread, true);
            self.add_last_run(tid, thread);
            if let Some(state) = self.threads.states.get_mut(&tid) {
                state.followed = None;
            }
        }
    }

    /// Keeps the marks this tick read of thread `tid` (own id `own_tid`), followed: those it
    /// has latest, when they are later than its latest sample's and departure's, for its running
    /// time after its last sample (see [`Sampler::add_last_run`]). Interned only when they
    /// changed since the previous tick.
    pub(super) fn note_ticked(&mut self, tid: u32, own_tid: u32) {
        let read_ns = self.reader.read_ns();
        let generation = (self.reader.of(own_tid).iter())
            .fold(0u64, |g, m| g.rotate_left(32) ^ u64::from(m.seq));
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        if let Some(ticked) = followed.ticked.as_mut() {
            if ticked.generation == generation {
                ticked.read_ns = read_ns;
                return;
            }
        }
        let stack = self.stack_of(own_tid, None);
        if let Some(followed) = self.followed_mut(tid) {
            followed.ticked = Some(Ticked {
                generation,
                stack,
                read_ns,
            });
        }
    }

    /// Adds thread `tid`'s running time since its last sample, with its latest marks: at its
    /// exit, or at the end of the profile (its CPU time then, which the kernel keeps until fsprof
    /// closes the thread's event). The latest are a tick's, where a tick read them after its
    /// last sample and departure: short-lived threads (`requests`' 3 to 6 ms, 2 CPUs busy) ran
    /// their last milliseconds after their last sample, and with that sample's marks 1 in 30
    /// counted their whole request outside its mark (their one sample came before fsprof knew
    /// their slot), and others counted their exit inside it, twice their request at times.
    pub(super) fn add_last_run(&mut self, tid: u32, thread: u32) {
        let Some(cpu_ns) = self.native.as_ref().and_then(|n| n.perf_cpu_ns(tid)) else {
            return;
        };
        let ns = self.credit(tid, cpu_ns);
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        // What its samples of CPUs' ticks added short of the running time they were credited
        // (see `calibrate`), or beyond it.
        let owed = i128::from(followed.ran_ns) - i128::from(followed.added_ns);
        let ns = u64::try_from((i128::from(ns) + owed).max(0)).unwrap_or(u64::MAX);
        let latest = match (followed.latest, &followed.ticked) {
            (Some((_, at)), Some(ticked)) if ticked.read_ns > at => Some(ticked.stack),
            (None, Some(ticked)) => Some(ticked.stack),
            (latest, _) => latest.map(|(stack, _)| stack),
        };
        if let (Some(stack), true) = (latest, ns > 0) {
            self.builder.add_sample(thread, stack, None, ns, ns);
        }
    }

    fn followed_mut(&mut self, tid: u32) -> Option<&mut Followed> {
        self.threads.states.get_mut(&tid)?.followed.as_mut()
    }
}

/// Whether two samples' marks were pushed at the same stack addresses (the same marks, as their
/// stacks say, placed on the same frames of a native stack).
fn same_places(a: &[RecordView], b: &[RecordView]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.sp == b.sp)
}

mod folded;
