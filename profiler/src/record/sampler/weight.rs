//! What a thread's sample at a tick weighs ([`Weight`]: its interval, less what perf's samples
//! of it already count, and the share it waited for a CPU), and a sample that waits to be added
//! ([`PendingSample`]: for its thread's late stop, or its first perf sample; [`LateStop`]: all
//! those of a thread that waits for its stop). Not here: which
//! interval a sample stands for (from its thread's previous sample or birth: `sampler.rs`).

use super::*;

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
        let (waiting, wall_ns) = match uses_perf && running && slow {
            true => self.waiting_share(tid, tick, interval_ns),
            false => (0.0, interval_ns),
        };
        let state = self.threads.states.get_mut(&tid).expect("sampled");
        state.born = false;
        let (wall_ns, active_ns) = match (by_perf.filter(|_| slow), running) {
            // Its running time is in perf's samples; the rest of the interval it was waiting
            // for a CPU (active) or blocked (its wall time only, which counts inside the
            // program's own marks: a waiter on a mutex woken since the previous tick was
            // blocked for part of the interval).
            (Some(ran), true) => {
                let not_running = wall_ns.saturating_sub(ran);
                let waiting = ((wall_ns as f64 * waiting) as u64).min(not_running);
                (not_running, waiting)
            }
            (_, false) => (wall_ns, 0),
            (None, true) => (wall_ns, wall_ns),
        };
        Weight {
            wall_ns,
            active_ns,
            if_gone_ns: (running && wall_ns < interval_ns).then_some(interval_ns),
        }
    }

    /// The share of runnable thread `tid`'s last `interval_ns` (between rare ticks, the tick's
    /// count `tick`) that it waited for a CPU, and the interval it stands for: the whole one,
    /// or for a thread born during it, its runnable time so far.
    ///
    /// Read only where used (a read is a few microseconds; at the full rate, per running
    /// thread, that adds up): the share since an older read is as good an estimate. Not at the
    /// full rate: the kernel brings a running thread's total up to date only at its CPU's
    /// scheduler tick, so it can lag a whole tick behind: threads that live a few milliseconds
    /// lost 0.4 ms each in some runs, 2.5 points of a recording (the ticks' own rule is
    /// unbiased there).
    fn waiting_share(&mut self, tid: u32, tick: u64, interval_ns: u64) -> (f64, u64) {
        let now = self.sched_times(tid);
        let state = self.threads.states.get_mut(&tid).expect("sampled");
        let before = std::mem::replace(&mut state.last_sched, now.map(|now| (tick, now)));
        let waiting = match (before, now) {
            // Runnable at the previous tick too: the kernel adds a wait for a CPU to the
            // totals only when it ends (a thread that waits 200 ms among 500 others showed
            // none at most ticks), but a thread cannot block while it waits, so its time on
            // no CPU since was waiting (unless it ran, blocked and woke in between: then
            // its blocked time counts, as it does between ticks at the full rate).
            (Some((at, before)), Some(now)) if at + 1 == tick && interval_ns > 0 => {
                let ran = now.run_ns.saturating_sub(before.run_ns);
                1.0 - (ran as f64 / interval_ns as f64).min(1.0)
            }
            (before, now) => process::wait_share(before.map(|(_, b)| b), now),
        };
        let wall_ns = match (state.born, now) {
            (true, Some(now)) => interval_ns.min(now.run_ns.saturating_add(now.wait_ns)),
            _ => interval_ns,
        };
        (waiting, wall_ns)
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
