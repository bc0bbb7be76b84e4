//! The tick clock: when the sampler's ticks came and how often the next ones must come. It keeps
//! the times of the first and the latest tick, decides between the full rate and the slow ticks
//! that perf allows (see [`TickClock::period`]), and counts the ticks that came late, were
//! stretched by their own cost, or followed a long interval, for the report's metadata. It
//! neither sleeps nor samples: the loop (`schedule.rs`) does.

use crate::profile::Meta;
use std::time::{Duration, Instant, SystemTime};

/// The longest mean interval between ticks while perf carries every thread's time (see
/// [`TickClock::period`]). Every 10 ms, the ticks of the followers of a build's processes
/// (one thread each) preempted its compilers some 400 times in 0.7 s of `make -j2` on two
/// CPUs: 40 ms took `fsprof run`'s cost to it from 12.9% to 5.5% (BENCHMARKS.md, issue 39,
/// twenty-ninth session).
const SLOW_TICK: Duration = Duration::from_millis(40);
/// The longest mean interval between ticks while a brisk hold lasts (see
/// [`TickClock::hold_brisk`]): the default rate's period.
const BRISK_TICK: Duration = Duration::from_millis(4);

/// The sampler's ticks, past and next.
#[derive(Debug)]
pub struct TickClock {
    first: Option<Instant>,
    /// The first tick's time on the system's clock.
    first_wall: Option<SystemTime>,
    last: Option<Instant>,
    ticks: u64,
    /// Ticks that came more than half an interval after their time.
    late: u64,
    /// Ticks whose cost made the next interval longer than drawn (too many threads for the rate).
    stretched: u64,
    /// Ticks after a long interval.
    slow_ticks: u64,
    /// Whether this tick found a thread whose time only the ticks can sample.
    every_tick: bool,
    /// Ticks come at the full rate until then.
    fast_until: Option<Instant>,
    /// Ticks come at least every [`BRISK_TICK`] until then.
    brisk_until: Option<Instant>,
    /// The mean interval chosen for the next tick, and whether it is a long one.
    planned: (Duration, bool),
    /// Whether the interval since the previous tick was a long one (chosen so, or late).
    slow_interval: bool,
}

impl Default for TickClock {
    fn default() -> Self {
        TickClock {
            first: None,
            first_wall: None,
            last: None,
            ticks: 0,
            late: 0,
            stretched: 0,
            slow_ticks: 0,
            every_tick: true,
            fast_until: None,
            brisk_until: None,
            planned: (Duration::ZERO, false),
            slow_interval: false,
        }
    }
}

impl TickClock {
    /// Whether no tick has completed yet.
    pub fn before_first(&self) -> bool {
        self.first.is_none()
    }

    /// When the latest tick completed.
    pub fn last(&self) -> Option<Instant> {
        self.last
    }

    /// Ticks completed.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// The mean interval chosen for the tick now ending (zero before the first choice).
    pub fn mean_period(&self) -> Duration {
        self.planned.0
    }

    /// Whether the interval that ended at this tick was a long one.
    pub fn slow_interval(&self) -> bool {
        self.slow_interval
    }

    /// A tick begins at `now`; `every_tick`: whether its threads' time can only be sampled by
    /// ticks whatever they turn out to do (the first tick, `--idle`, no perf).
    ///
    /// The interval that ends is a long one if it was chosen so or if the tick came late, more
    /// than twice the mean interval after the previous one (fsprof waited for a CPU, or its
    /// previous tick was slow: the first ones load the program's debug information): perf's
    /// samples then carry running threads' time, each with the marks of its own instant, rather
    /// than the marks read now standing for the whole interval.
    pub fn begin(&mut self, now: Instant, every_tick: bool) {
        self.every_tick = every_tick;
        self.closing(now);
        self.slow_ticks += u64::from(self.slow_interval);
    }

    /// The interval ends at `now` without a tick (the process is gone): whether it was a long
    /// one is known as at a tick ([`TickClock::slow_interval`]), and nothing is counted.
    pub fn closing(&mut self, now: Instant) {
        let (period, slow) = self.planned;
        let late = self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) > 2 * period);
        self.slow_interval = slow || late;
    }

    /// This tick found a thread whose time only the ticks can sample.
    pub fn needs_every_tick(&mut self) {
        self.every_tick = true;
    }

    /// Keeps ticks at the full rate until at least `until`.
    pub fn hold_fast(&mut self, until: Instant) {
        self.every_tick = true;
        self.fast_until = self.fast_until.max(Some(until));
    }

    /// Keeps ticks at least every `BRISK_TICK` (or at the full rate, if slower) until at
    /// least `until`: where they are not samples but must come soon, to see a thread born after
    /// a birth, or to read a deep stack while its image is still on the stack. The default
    /// rate's period is soon enough for those; at 1 kHz, ticks at the full rate for 50 ms after
    /// each birth were most of a short program's ticks (48 of 65 in 0.63 s of `spin 2`), each
    /// waking fsprof on the program's CPUs.
    pub fn hold_brisk(&mut self, until: Instant) {
        self.brisk_until = self.brisk_until.max(Some(until));
    }

    /// The tick that began at `now` is complete.
    pub fn end(&mut self, now: Instant) {
        if self.first.is_none() {
            // The system's clock now, taken back to the tick's start.
            self.first_wall = SystemTime::now().checked_sub(now.elapsed());
        }
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.ticks += 1;
    }

    /// The next tick comes more than half an interval late.
    pub fn count_late(&mut self) {
        self.late += 1;
    }

    /// The next tick is put off by this one's cost.
    pub fn count_stretched(&mut self) {
        self.stretched += 1;
    }

    /// The mean interval to the next tick, for a sampler whose rate asks for `fast`, when perf
    /// can carry running threads' time for `patience` (the time its rings last). Ticks come at
    /// the full rate while some thread's time can only be sampled by them: a thread blocked
    /// inside a mark (its wall time counts), every thread with `--idle`, a running thread that
    /// perf does not sample. After a tick that found a thread blocked inside a mark they stay
    /// fast for a while (see [`TickClock::hold_fast`]), so that the intervals' lengths do not
    /// follow what each thread does from one tick to the next (short intervals right after a
    /// blocked thread was seen would understate blocked time); after a thread's birth they come
    /// at least every `BRISK_TICK` for a while (see [`TickClock::hold_brisk`]): a thread born
    /// and gone between two rare ticks would not be seen at all. Otherwise perf's
    /// samples carry the running threads' time and marks, and ticks need only come before their
    /// rings fill, at most every `SLOW_TICK`: each tick wakes fsprof, which on a machine without
    /// an idle core preempts the target.
    pub fn period(&mut self, fast: Duration, patience: Option<Duration>) -> Duration {
        let now = Instant::now();
        let hold = self.fast_until.is_some_and(|until| now < until);
        let longest = match self.brisk_until {
            Some(until) if now < until => BRISK_TICK,
            _ => SLOW_TICK,
        };
        let period = match patience {
            // The longest interval drawn is 1.5 times the mean; half the ring is left for
            // lateness.
            Some(patience) if !self.every_tick && !hold => (patience / 3).min(longest).max(fast),
            _ => fast,
        };
        self.planned = (period, period > fast);
        period
    }

    /// Fills `meta`'s timing fields: the recording's length and the tick counts.
    pub fn fill(&self, meta: &mut Meta) {
        meta.start_unix_ns = self
            .first_wall
            .and_then(|wall| wall.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos() as u64);
        meta.duration_ns = match (self.first, self.last) {
            (Some(first), Some(last)) => last.duration_since(first).as_nanos() as u64,
            _ => 0,
        };
        meta.sampling.late_ticks = self.late;
        meta.sampling.stretched_ticks = self.stretched;
        meta.sampling.ticks = self.ticks;
        meta.sampling.slow_ticks = self.slow_ticks;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock past its first tick, where perf carries the running threads' time.
    fn calm() -> TickClock {
        let mut clock = TickClock::default();
        let now = Instant::now();
        clock.begin(now, true);
        clock.end(now);
        clock.begin(now, false);
        clock
    }

    #[test]
    fn ticks_are_slow_where_perf_carries_the_time_and_brisk_or_fast_while_held() {
        let (fast, patience) = (Duration::from_millis(1), Some(Duration::from_secs(1)));
        let mut clock = calm();
        assert_eq!(clock.period(fast, patience), SLOW_TICK);
        // After a birth: the default rate's period, not 1 kHz's.
        clock.hold_brisk(Instant::now() + Duration::from_secs(60));
        assert_eq!(clock.period(fast, patience), BRISK_TICK);
        // A rate slower than the default keeps its own period.
        let slow_rate = Duration::from_millis(20);
        assert_eq!(clock.period(slow_rate, patience), slow_rate);
        // A thread blocked inside a mark: the ticks are its samples, at the full rate.
        clock.hold_fast(Instant::now() + Duration::from_secs(60));
        assert_eq!(clock.period(fast, patience), fast);
        // Without perf, every tick is a sample.
        let mut clock = calm();
        assert_eq!(clock.period(fast, None), fast);
    }
}
