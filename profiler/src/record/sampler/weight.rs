//! What a thread's sample at a tick weighs ([`Weight`]: its interval, less what perf's samples
//! of it already count, and its waits for a CPU, where its switches are not followed, from its
//! scheduling totals: [`Waits`]), and a sample that waits to be added
//! ([`PendingSample`]: for its thread's late stop, or its first perf sample; [`LateStop`]: all
//! those of a thread that waits for its stop). Not here: which
//! interval a sample stands for (from its thread's previous sample or birth: `sampler.rs`).

use super::*;
use crate::program::thread_status::SchedTimes;

/// How far behind a running thread's time on a CPU in its scheduling totals may be: the
/// kernel adds to it at the scheduler's ticks (every 4 ms at its usual 250 Hz, 10 ms at 100 Hz)
/// and at switches, not as the thread runs.
const RUN_LAG: Duration = Duration::from_millis(10);

/// What a thread's sample at a tick stands for.
#[derive(Clone, Copy)]
pub(super) struct Weight {
    pub(super) wall_ns: u64,
    pub(super) active_ns: u64,
    /// For a running thread born during a long interval, which stands for its runnable time so
    /// far: the whole interval, which it stands for instead if it is gone before it is sampled
    /// again. A thread seen at one tick only is sampled in proportion to its life, and so
    /// stands for the interval (as at the full rate); its age would favour what it does late
    /// in its life (seen then, it weighs more).
    pub(super) if_gone_ns: Option<u64>,
}

/// The interval a thread's next sample at a tick stands for: since when, and the time a late
/// tick left owed to the samples after it.
///
/// A tick that comes late (fsprof kept off the CPUs: a host that steals much of a VM's time)
/// ends an interval of which the marks read then tell only the end: the thread may have been
/// anywhere in between (unless it was blocked all along: see `Sampler::sample_thread`, which
/// then asks for no cut). Its sample stands for at most
/// twice the mean interval (later than that, the clock counts it late), and the rest is owed and
/// shared among the thread's next samples (each carries at most its own length again): what the
/// thread does over the next intervals is a sample of it, the one instant fsprof got its CPU back
/// is not. With fsprof stopped 80 ms in every 280 ms, a Rust program's condition-variable waits
/// read -7.6 points without native stacks, each late tick's 80 ms on one mark.
pub(super) struct TickInterval {
    since: Instant,
    owed_ns: u64,
}

impl TickInterval {
    pub(super) fn new(since: Instant) -> TickInterval {
        TickInterval { since, owed_ns: 0 }
    }

    /// Starts the interval again at `now`, owing nothing (the program was replaced by an exec).
    pub(super) fn restart(&mut self, now: Instant) {
        *self = TickInterval::new(now);
    }

    /// When the interval began.
    pub(super) fn since(&self) -> Instant {
        self.since
    }

    /// Ends the interval at `now` (where the thread was born after `now`, it is empty) and
    /// begins the next one: its length, in ns.
    pub(super) fn end(&mut self, now: Instant) -> u64 {
        let since = self.since;
        self.since = now.max(since);
        now.saturating_duration_since(since).as_nanos() as u64
    }

    /// `weight`, a sample of an interval at most `most_ns` of which the tick knows (0: all of
    /// it), with the time owed from earlier intervals that it carries.
    pub(super) fn settle(&mut self, mut weight: Weight, most_ns: u64) -> Weight {
        if most_ns > 0 && weight.wall_ns > most_ns {
            let cut = weight.wall_ns - most_ns;
            weight.active_ns -=
                (weight.active_ns as f64 * cut as f64 / weight.wall_ns as f64) as u64;
            weight.wall_ns = most_ns;
            self.owed_ns += cut;
            return weight;
        }
        let paid = self.owed_ns.min(weight.wall_ns);
        if paid > 0 {
            self.owed_ns -= paid;
            let active = (weight.active_ns as f64 * paid as f64 / weight.wall_ns as f64) as u64;
            (weight.wall_ns, weight.active_ns) = (weight.wall_ns + paid, weight.active_ns + active);
        }
        weight
    }
}

/// A sample waiting for its thread's late stop, or for its first perf sample.
pub(super) struct PendingSample {
    pub(super) thread: u32,
    pub(super) stack: u32,
    pub(super) records: Vec<RecordView>,
    pub(super) weight: Weight,
    /// Its marks were read before fsprof knew where the thread marks (no region of its process
    /// found yet): they are unknown, not none.
    pub(super) marks_unknown: bool,
}

impl PendingSample {
    pub(super) fn add(self, builder: &mut ProfileBuilder, native: Option<u32>) {
        let Weight {
            wall_ns, active_ns, ..
        } = self.weight;
        builder.add_sample(self.thread, self.stack, native, wall_ns, active_ns);
    }

    /// Adds it for a thread that is gone (see [`Weight::if_gone_ns`]).
    pub(super) fn add_gone(mut self, builder: &mut ProfileBuilder) {
        if let Some(interval) = self.weight.if_gone_ns {
            (self.weight.wall_ns, self.weight.active_ns) = (interval, interval);
        }
        self.add(builder, None);
    }
}

/// How long a thread's samples wait for its late stop before they are added without a native
/// stack. A thread asked to stop runs no code of its own until it stops, so its stack at the
/// stop is its stack at every tick since it was asked: a thread waiting for a CPU, or one whose
/// virtual CPU the hypervisor took away (steal: it runs, as its kernel sees it, but nothing of
/// it executes), is sampled at each tick meanwhile and all those samples get the stack. Steal
/// holds a virtual CPU for milliseconds to tens of milliseconds at a time; the ticks did not
/// wait past the next one before, and a 2-vCPU machine with a third of its time stolen read
/// 10 to 16% of a busy thread's samples without a stack. A thread in uninterruptible sleep may
/// not stop for seconds: past this its samples are added without one.
const LATE_STOP_MOST: Duration = Duration::from_millis(250);

/// A thread's samples that wait for its late stop, oldest first (see [`LATE_STOP_MOST`]).
#[derive(Default)]
pub(super) struct LateStop {
    /// When the oldest was taken.
    since: Option<Instant>,
    samples: Vec<PendingSample>,
}

impl LateStop {
    /// Adds the sample taken just now.
    pub(super) fn push(&mut self, sample: PendingSample) {
        self.since.get_or_insert_with(Instant::now);
        self.samples.push(sample);
    }

    /// All of them (the thread stopped, or it is gone), leaving none.
    pub(super) fn take(&mut self) -> Vec<PendingSample> {
        self.since = None;
        std::mem::take(&mut self.samples)
    }

    /// All of them if the oldest waited longer than [`LATE_STOP_MOST`] at `now`; else none.
    pub(super) fn take_expired(&mut self, now: Instant) -> Vec<PendingSample> {
        match self.since {
            Some(since) if now.saturating_duration_since(since) >= LATE_STOP_MOST => self.take(),
            _ => Vec::new(),
        }
    }
}

/// What a thread whose switches are not followed waited for a CPU, as the ticks count it from
/// its scheduling totals (`/proc/PID/task/TID/schedstat`): the kernel adds a wait to them as it
/// ends, when the thread comes onto a CPU. A tick's sample of a runnable thread carries the
/// waits that ended since the previous tick (and those owed, below), at most its time not
/// running; a blocked thread's waits are owed to its next sample that finds it runnable (the
/// blocked one has the stack of its block, not of where it waited). A thread runnable at two
/// ticks in a row that came onto no CPU in between either ran or waited all along: its time not
/// running then is waiting, credited now and taken off the totals' growth once its wait ends
/// (a thread among 500 others on two CPUs waits seconds at a time).
///
/// Estimated instead from the ticks' states alone (runnable at two ticks: all its time not
/// running was a wait), python3 with four threads passing the lock among them read 1.73 to 1.87
/// times their CPU time where their own totals said 1.34 to 1.42: they ran, blocked and woke in
/// between. From the totals, within -2.5% to +7% (BENCHMARKS.md, issue 39).
#[derive(Default)]
pub(super) struct Waits {
    /// Waits counted by the estimate that the totals do not show yet.
    credited: u64,
    /// Waits the totals showed, not yet carried by a sample.
    owed: u64,
    /// The tick whose read last found it runnable.
    runnable_at: Option<u64>,
}

impl Waits {
    /// The wait a sample of thread `running` (runnable) or not at tick `tick` carries, at most
    /// `room_ns` (its time not running over the `interval_ns` since its previous sample);
    /// `before` and `now`: its totals as read at an earlier tick and now; `born`: it was born
    /// since the previous tick (its waits so far are all new).
    fn settle(
        &mut self,
        (before, now): (Option<(u64, SchedTimes)>, SchedTimes),
        tick: u64,
        interval_ns: u64,
        running: bool,
        room_ns: u64,
        born: bool,
    ) -> u64 {
        let growth = match before {
            Some((_, before)) => now.wait_ns.saturating_sub(before.wait_ns),
            None if born => now.wait_ns,
            None => 0,
        };
        let absorbed = growth.min(self.credited);
        self.credited -= absorbed;
        let fresh = growth - absorbed;
        let runnable_before = self.runnable_at.is_some_and(|at| at + 1 == tick);
        self.runnable_at = running.then_some(tick);
        match before {
            Some((at, before))
                if running && runnable_before && at + 1 == tick && before.slices == now.slices =>
            {
                let ran = now.run_ns.saturating_sub(before.run_ns);
                let waited = room_ns.min(interval_ns.saturating_sub(ran));
                self.credited = self.credited.saturating_add(waited);
                self.owed = self.owed.saturating_add(fresh);
                waited
            }
            _ => {
                let due = self.owed.saturating_add(fresh);
                let given = if running { due.min(room_ns) } else { 0 };
                self.owed = due - given;
                given
            }
        }
    }
}

impl Sampler {
    /// What thread `tid`'s sample at the tick counted `tick` weighs: it stands for `interval_ns`
    /// since its previous sample, `running` (or runnable) or blocked; `slow`: the ticks are
    /// rare; `by_perf`: its running time in perf's samples since the previous tick, if perf
    /// samples it.
    pub(super) fn weigh(
        &mut self,
        tid: u32,
        tick: u64,
        running: bool,
        slow: bool,
        by_perf: Option<u64>,
        interval_ns: u64,
    ) -> Weight {
        let uses_perf = self.native.as_ref().is_some_and(NativeSampler::uses_perf);
        // Between rare ticks perf's samples carry a watched thread's running time, and its
        // totals tell the rest; a thread born since the previous tick stands for its life.
        let by_perf = by_perf.filter(|_| slow && uses_perf);
        // A thread's totals are read once at its first rare tick whatever it does: a later tick
        // that finds it running before perf carries its time knows then how much of the
        // interval it can have run (see below).
        let never_read = (self.threads.states.get(&tid)).is_some_and(|s| s.last_sched.is_none());
        let read = uses_perf && slow && (running || by_perf.is_some() || never_read);
        let now = read.then(|| self.sched_times(tid)).flatten();
        let state = self.threads.states.get_mut(&tid).expect("sampled");
        let born = std::mem::replace(&mut state.born, false);
        let earlier = match read {
            true => std::mem::replace(&mut state.last_sched, now.map(|now| (tick, now))),
            false => None,
        };
        // Totals read at an earlier tick than the previous one: the ticks between (at the full
        // rate, where a sample stands for its whole interval, or while its switches were
        // followed, which count its waits) had its waits already; what is owed or credited
        // from before them is dropped too.
        let before = earlier.filter(|(at, _)| at + 1 == tick);
        if read && before.is_none() {
            state.waits = Waits::default();
        }
        let wall_ns = match (born && running, now) {
            (true, Some(now)) => interval_ns.min(now.run_ns.saturating_add(now.wait_ns)),
            _ => interval_ns,
        };
        // Whether its time is its totals' growth (see below): gone, it stands for no more.
        let estimated = by_perf.is_none() && running && !born && now.is_some();
        let (wall_ns, active_ns) = match (by_perf, running, now) {
            // Its running time is in perf's samples; of the rest of the interval, its waits for
            // a CPU are active, the remainder blocked (its wall time only, which counts inside
            // the program's own marks: a waiter on a mutex woken since the previous tick was
            // blocked for part of the interval).
            (Some(ran), _, Some(now)) => {
                let room = match running {
                    true => wall_ns.saturating_sub(ran),
                    false => wall_ns,
                };
                let waited =
                    (state.waits).settle((before, now), tick, interval_ns, running, room, born);
                (room, waited)
            }
            (Some(ran), true, None) => (wall_ns.saturating_sub(ran), 0),
            (_, false, _) => (wall_ns, 0),
            // Running, and none of its time in perf's samples: at most what it ran and waited
            // since its totals were last read (a thread asleep at that tick and found running
            // at this one ran its bursts in between, not the whole interval), and what the
            // kernel had not added yet (a running thread's time on a CPU is brought up to date
            // at the scheduler's ticks and switches: `RUN_LAG`). Beside a busy thread, threads
            // running 2 ms every 400 ms read 2.5 times their time at the defaults in 1 run of
            // 3 when each such tick stood for the whole 40 ms interval. The rest of the interval
            // it was blocked, where is not known: not in the marks it runs in now (the whole
            // interval, a tokio worker parked 98 ms outside every mark counted them in the
            // actor's poll it ran at the tick).
            (None, true, Some(now)) if !born => {
                let active = |t: &SchedTimes| t.run_ns.saturating_add(t.wait_ns);
                // Its totals never read before: at most all it ran and waited in its life.
                let grown = earlier.map_or(active(&now), |(_, was)| {
                    active(&now).saturating_sub(active(&was))
                });
                let active = wall_ns.min(grown.saturating_add(RUN_LAG.as_nanos() as u64));
                (active, active)
            }
            (None, true, _) => (wall_ns, wall_ns),
        };
        Weight {
            wall_ns,
            active_ns,
            if_gone_ns: (running && !estimated && wall_ns < interval_ns).then_some(interval_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(stack: u32) -> PendingSample {
        PendingSample {
            thread: 0,
            stack,
            records: Vec::new(),
            marks_unknown: false,
            weight: Weight {
                wall_ns: 500_000,
                active_ns: 500_000,
                if_gone_ns: None,
            },
        }
    }

    fn times(run_ms: u64, wait_ms: u64, slices: u64) -> SchedTimes {
        SchedTimes {
            run_ns: run_ms * 1_000_000,
            wait_ns: wait_ms * 1_000_000,
            slices,
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn waits_come_from_the_totals_growth_carried_to_a_runnable_sample() {
        let mut waits = Waits::default();
        let interval = 40 * MS;
        // Runnable at tick 2, having run 10 ms and waited 12 of the 40 since tick 1 (in
        // several stretches: it came onto a CPU 30 times): its 12 ms, within its 30 not running.
        let (t1, t2) = (times(100, 50, 1000), times(110, 62, 1030));
        assert_eq!(
            waits.settle((Some((1, t1)), t2), 2, interval, true, 30 * MS, false),
            12 * MS
        );
        // Blocked at tick 3, having waited 5 ms more: owed to its next runnable sample, with
        // what did not fit in that one's time not running.
        let t3 = times(115, 67, 1040);
        assert_eq!(
            waits.settle((Some((2, t2)), t3), 3, interval, false, interval, false),
            0
        );
        let t4 = times(135, 75, 1050);
        assert_eq!(
            waits.settle((Some((3, t3)), t4), 4, interval, true, 10 * MS, false),
            10 * MS
        );
        let t5 = times(170, 75, 1051);
        assert_eq!(
            waits.settle((Some((4, t4)), t5), 5, interval, true, 5 * MS, false),
            3 * MS
        );
        // Never read before: nothing, unless it was born since the previous tick.
        let mut fresh = Waits::default();
        assert_eq!(
            fresh.settle((None, t5), 5, interval, true, interval, false),
            0
        );
        assert_eq!(
            fresh.settle((None, times(1, 2, 3)), 5, interval, true, interval, true),
            2 * MS
        );
    }

    #[test]
    fn a_wait_that_spans_ticks_is_counted_as_it_goes_and_once() {
        let mut waits = Waits::default();
        let interval = 40 * MS;
        // Runnable at ticks 1, 2 and 3 and onto no CPU since 1: its time not running waited,
        // though the totals show nothing of it until it ends.
        let t1 = times(100, 50, 1000);
        assert_eq!(
            waits.settle((None, t1), 1, interval, true, interval, false),
            0
        );
        let t2 = times(100, 50, 1000);
        assert_eq!(
            waits.settle((Some((1, t1)), t2), 2, interval, true, interval, false),
            interval
        );
        let t3 = times(100, 50, 1000);
        assert_eq!(
            waits.settle((Some((2, t2)), t3), 3, interval, true, interval, false),
            interval
        );
        // It came onto a CPU after waiting 90 ms in all, and ran 30 ms: of the growth, the 80
        // counted already are taken off; the rest (10 ms), within its 10 ms not running.
        let t4 = times(130, 140, 1001);
        assert_eq!(
            waits.settle((Some((3, t3)), t4), 4, interval, true, 10 * MS, false),
            10 * MS
        );
        // Found blocked at tick 5, then runnable at 6 with no arrival since: woken at some
        // point and waiting since, but not all along: no estimate.
        let t5 = times(130, 140, 1001);
        assert_eq!(
            waits.settle((Some((4, t4)), t5), 5, interval, false, interval, false),
            0
        );
        assert_eq!(
            waits.settle((Some((5, t5)), t5), 6, interval, true, interval, false),
            0
        );
    }

    #[test]
    fn samples_wait_for_a_late_stop_together_until_the_oldest_expires() {
        let mut late = LateStop::default();
        let first = Instant::now();
        late.push(sample(1));
        late.push(sample(2));
        let pushed = Instant::now();
        // Within the wait, at any tick: kept, oldest first, for the stop to complete.
        assert!(late.take_expired(first).is_empty());
        assert!(late.take_expired(first + LATE_STOP_MOST / 2).is_empty());
        // Past it from the oldest: all go (the newer waited less, but the thread did not run
        // since the oldest either).
        let expired = late.take_expired(pushed + LATE_STOP_MOST);
        assert_eq!(expired.iter().map(|s| s.stack).collect::<Vec<_>>(), [1, 2]);
        // Emptied, and the wait starts again with the next.
        assert!(late.take().is_empty());
        late.push(sample(3));
        assert_eq!(late.take().len(), 1);
        assert!(late.take_expired(first + LATE_STOP_MOST * 10).is_empty());
    }
}
