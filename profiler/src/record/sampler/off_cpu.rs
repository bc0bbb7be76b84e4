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
//!
//! Each followed thread's account (its stretch off the CPU, what it blocked with, its wake-ups'
//! waits, the CPU time its samples were credited) is a `Followed` (`followed.rs`), which owns
//! that state and its rules; this file is the glue that reads the target (marks, stacks,
//! scheduling totals), interns what it read, and adds what the account returns to the profile.

use super::*;
use crate::native::stream::Switch;
use crate::os::time::monotonic_ns;
use crate::record::marks::snapshot_records;
pub(super) use followed::Followed;
use followed::{Addition, Departure, Refresh};

/// A thread's scheduling totals are read at most this often (for its wake-ups' waits).
const WAKEUP_READ_NS: u64 = 20_000_000;

/// A thread's latest perf sample, for the time off its CPU that follows it: its native stack,
/// its marks as placed on it (each with the stack address it was pushed at) and their stack.
pub(super) struct LatestSample {
    pub captured: Captured,
    pub records: Vec<RecordView>,
    /// Its marks, without its custom labels.
    pub stack: u32,
    /// Its custom labels (`labels.rs`), which hold while the thread is off its CPU: it cannot
    /// change them there.
    pub labels: Vec<crate::program::custom_labels::Label>,
}

impl Sampler {
    /// Whether thread `tid`'s time since the previous tick is all in perf's samples and its
    /// switches (then the tick adds nothing for it).
    pub(super) fn followed_off_cpu(&self, tid: u32) -> bool {
        self.threads
            .states
            .get(&tid)
            .and_then(|state| state.followed.as_ref())
            .is_some_and(|followed| followed.began_before(self.clock.ticks()))
    }

    /// Whether followed thread `tid` is on a CPU or waiting for one, as its switches read up to
    /// now tell (a departure not followed by a return leaves it off its CPU, runnable if it was
    /// preempted), with no system call: one read of `/proc/.../stat` per thread per tick was a
    /// fifth of fsprof's own CPU with 64 busy threads (BENCHMARKS.md, issue 39). Blocked by its
    /// switches, /proc is read all the same: a thread woken since waits for a CPU, which its
    /// switches tell only once it runs. Gone, it is blocked (and forgotten at the tick's end).
    pub(super) fn running_by_switches(&mut self, tid: u32) -> bool {
        if self
            .followed_mut(tid)
            .is_none_or(|f| f.runnable_by_switches())
        {
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
                followed.returned(switch.time);
            }
            self.add_off_cpu(tid, thread, Some(switch.time), true);
            return;
        }
        // A block the kernel folded, opened by a tick as it lasted (see `refresh_folded`),
        // recorded whole as it ended: already open.
        if (self.followed_mut(tid)).is_some_and(|f| f.has_block_from(switch.time)) {
            return;
        }
        // All slots copied (a thread without one gives no marks), or the marks are unknown.
        let copied = switch
            .marks_known
            .then(|| snapshot_records(own_tid, &switch.slots))
            .flatten();
        let has_departed = departed.is_some();
        let (stack, placed) = match (copied, latest, departed) {
            (Some((mut records, truncated)), _, Some(departed)) => {
                // Its marks and its stack, both as it left.
                self.resolve_captured(own_tid, &mut records, &departed.frames);
                let stack = self.intern_records(records, truncated);
                (stack, capture::place(&departed, &self.records))
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
                let placed = latest
                    .filter(|l| {
                        switch.preempted
                            && l.stack == stack
                            && same_places(&l.records, &self.records)
                    })
                    .and_then(|latest| capture::place(&latest.captured, &self.records));
                (stack, placed)
            }
            (None, Some(LatestSample { stack, .. }), _) => {
                // A copy failed or was lost: the latest sample's marks stand in (in the tables;
                // without a native stack, which would be drawn with other marks).
                self.tally.departures_unmarked += 1;
                (*stack, None)
            }
            (None, None, _) => return, // nothing to attribute it to: left out
        };
        // The labels of its latest sample, outermost: a thread waiting for a CPU under labels
        // spends that time under them (beside a busy process, a third of a label's time went
        // to no feature without them).
        let labels = latest.map_or(&[][..], |l| l.labels.as_slice());
        let (stack, native) = self.labelled(stack, placed, labels);
        if let Some(followed) = self.followed_mut(tid) {
            followed.left(Departure {
                time: switch.time,
                preempted: switch.preempted,
                stack,
                native,
                copied: has_departed,
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
        let Some((running, since)) = self.followed_mut(tid).and_then(Followed::take_seed) else {
            return;
        };
        let stack = self.stack_of(own_tid, None);
        let (stack, _) = self.with_latest_labels(tid, stack, None);
        if let Some(followed) = self.followed_mut(tid) {
            followed.open_seeded(running, since, stack);
        }
    }

    /// Opens the stretches off the CPU of the threads whose following began at this tick
    /// (see [`Sampler::seed_off_cpu`]).
    pub(super) fn seed_began(&mut self) {
        let began: Vec<(u32, u32)> = (self.threads.states.iter())
            .filter(|(_, state)| state.followed.as_ref().is_some_and(Followed::seeded))
            .filter_map(|(tid, state)| Some((*tid, state.own_tid?)))
            .collect();
        for (tid, own_tid) in began {
            self.seed_off_cpu(tid, own_tid);
        }
    }

    /// Takes a gap in thread `tid`'s records (sample thread `thread`), those before it complete
    /// up to `at`: a stretch off the CPU still open is added up to `at` and closed, as the
    /// thread may have come back in the gap (else the ticks would add it on while the thread
    /// ran); what it ran in the gap is shared among its next samples (see `Credit::credit`),
    /// and its waits for a CPU count from the next read of its totals on, those of the gap
    /// unknown.
    pub(super) fn gap(&mut self, tid: u32, thread: u32, at: u64) {
        if self.followed_mut(tid).is_some_and(|f| f.is_surely_off()) {
            self.add_off_cpu(tid, thread, Some(at), true);
        }
        let run_delay_ns = self.sched_times(tid).map(|t| t.wait_ns);
        if let Some(followed) = self.followed_mut(tid) {
            followed.gap(run_delay_ns, monotonic_ns());
        }
    }

    /// Adds thread `tid`'s stretch off the CPU up to `until` (now if `None`); closes it if
    /// `close` (the thread is back on a CPU), else keeps it open from `until` on.
    pub(super) fn add_off_cpu(&mut self, tid: u32, thread: u32, until: Option<u64>, close: bool) {
        let until = until.unwrap_or_else(monotonic_ns);
        let Some(stretch) = self
            .followed_mut(tid)
            .and_then(|f| f.take_stretch(until, close))
        else {
            return;
        };
        self.add(thread, stretch);
    }

    /// Adds `addition` to the profile as thread `thread`'s (a wait for a CPU without a native
    /// stack is counted apart, for the report).
    fn add(&mut self, thread: u32, addition: Addition) {
        let Addition {
            ns,
            stack,
            native,
            active,
        } = addition;
        match (active, native) {
            (true, None) => self.tally.unplaced_ns += ns,
            (false, None) => self.tally.blocked_unplaced_ns += ns,
            _ => {}
        }
        if ns > 0 {
            let active_ns = if active { ns } else { 0 };
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
        let time = monotonic_ns();
        if !(self.followed_mut(tid)).is_some_and(|f| f.wakeups_due(time, WAKEUP_READ_NS, now)) {
            return;
        }
        // Its switches' count off its CPU, the same before and after its totals are read.
        let counted = |s: &Self| s.native.as_ref().and_then(|n| n.perf_cpu_ns_off(tid));
        let before = counted(self);
        let Some(times) = self.sched_times(tid) else {
            return;
        };
        let counted = before.filter(|&before| counted(self) == Some(before));
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        followed.switch_path(times.run_ns, counted);
        for share in followed.share_wakeups(times.wait_ns, time) {
            self.builder
                .add_active(thread, share.stack, share.native, share.ns);
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
        let Some(refresh) = (self.followed_mut(tid)).map(|f| f.refresh_due(read_ns, running))
        else {
            return;
        };
        let (mut captured, read) = match refresh {
            Refresh::Nothing => return,
            Refresh::Marks => {
                // Its stack is its latest sample's, placed with the marks it left with: kept
                // only while they stand.
                let stack = self.stack_of(own_tid, None);
                let (stack, _) = self.with_latest_labels(tid, stack, None);
                if let Some(followed) = self.followed_mut(tid) {
                    followed.refreshed(stack, None, None);
                }
                return;
            }
            Refresh::Blocked { captured, read } => (captured, read),
        };
        if read {
            if let Some(Native::Captured(read)) = self.blocked(tid, own_tid) {
                captured = Some(read);
            }
        }
        let stack = self.stack_of(own_tid, captured.as_ref().map(|c| c.frames.as_slice()));
        let placed =
            (captured.as_ref()).and_then(|captured| capture::place(captured, &self.records));
        let (stack, native) = self.with_latest_labels(tid, stack, placed);
        if let Some(followed) = self.followed_mut(tid) {
            followed.refreshed(stack, native, captured);
        }
    }

    /// Adds a perf sample of thread `tid` (sample thread `thread`), taken at `at.1` when the
    /// thread had run `at.0`, for its running time since the previous one: at most a period
    /// (see `Credit::credit`).
    pub(super) fn keep_sample(
        &mut self,
        tid: u32,
        thread: u32,
        stack: u32,
        native: Option<u32>,
        at: (u64, u64, u64),
    ) {
        let period_ns = self.period_ns();
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        let (ns, lost_ns) = followed.sampled(stack, at, period_ns);
        self.tally.lost_cpu_ns += lost_ns;
        if ns > 0 {
            self.builder.add_sample(thread, stack, native, ns, ns);
        }
    }

    /// The sampling period, for the running time a sample stands for after a gap (see
    /// `Credit::credit`).
    fn period_ns(&self) -> u64 {
        self.options
            .perf
            .map_or(u64::MAX / 2, |p| p.as_nanos() as u64)
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
        if (self.followed_mut(tid)).is_none_or(|f| f.ticked_again(generation, read_ns)) {
            return;
        }
        let stack = self.stack_of(own_tid, None);
        let (stack, _) = self.with_latest_labels(tid, stack, None);
        if let Some(followed) = self.followed_mut(tid) {
            followed.ticked(generation, stack, read_ns);
        }
    }

    /// Adds thread `tid`'s running time since its last sample, with its latest marks: at its
    /// exit, or at the end of the profile (its CPU time then, which the kernel keeps until fsprof
    /// closes the thread's event). The latest are a tick's, where a tick read them after its
    /// last sample and departure: short-lived threads (`requests`' 3 to 6 ms, 2 CPUs busy) ran
    /// their last milliseconds after their last sample, and with that sample's marks 1 in 30
    /// counted their whole request outside its mark (their one sample came before fsprof knew
    /// their slot), and others counted their exit inside it, twice their request at times.
    /// With it, what its samples of CPUs' ticks were still to add, to their marks (see
    /// `Followed::last_run`).
    pub(super) fn add_last_run(&mut self, tid: u32, thread: u32) {
        let Some(cpu_ns) = self.native.as_ref().and_then(|n| n.perf_cpu_ns(tid)) else {
            return;
        };
        let period_ns = self.period_ns();
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        let end = followed.last_run(cpu_ns, period_ns);
        self.tally.lost_cpu_ns += end.lost_ns;
        for (stack, ns) in end.last.into_iter().chain(end.owed_to) {
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

mod followed;
mod short_stretches;
