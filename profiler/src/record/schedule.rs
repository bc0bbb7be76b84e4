//! The recording loop: when the sampler ticks. Ticks come at jittered intervals (uniform from 0.5
//! to 1.5 times the mean period the tick clock asks for, so that periodic behaviour in the target
//! cannot alias with the sampling), with the sampler's thread raised to real-time priority where
//! the system allows it (`os/priority.rs`), until the target exits, the caller stops it or the duration elapses;
//! Ctrl-Z suspends fsprof without leaving the target stuck; a [`Live`] view the caller gives
//! shows progress. What a tick reads is the sampler's business (`sampler.rs`), how often
//! the next comes the clock's (`clock.rs`).

use crate::os::priority;
use crate::profile::ProfileBuilder;
use crate::program::process;
use crate::record::sampler::Sampler;
use std::time::{Duration, Instant};

/// Why recording stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// The target exited (the text says how, when known).
    TargetExited(String),
    /// Ctrl-C, SIGTERM or SIGHUP.
    Interrupted,
    /// `--duration` elapsed.
    Duration,
    /// The target ran a program this fsprof's user may not trace (the text says why): it runs
    /// on, unrecorded from then on.
    Refused(String),
}

impl End {
    /// A sentence for the profile's metadata and the report.
    pub fn describe(&self) -> String {
        match self {
            End::TargetExited(how) => how.clone(),
            End::Interrupted => "recording was interrupted (Ctrl-C, SIGTERM or SIGHUP)".to_owned(),
            End::Duration => "the requested duration elapsed".to_owned(),
            End::Refused(why) => format!(
                "recording stopped when this fsprof's user could no longer trace the process ({why}; it ran a privileged program, say); what was recorded before stays"
            ),
        }
    }
}

/// How long to record and how often.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Mean samples per second.
    pub rate_hz: f64,
    /// Stop after this long, if set.
    pub duration: Option<Duration>,
    /// Set by SIGTSTP (Ctrl-Z): fsprof is to suspend itself, see [`suspend`].
    pub suspend: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What shows progress while recording (the session chooses: a status line, `fsprof top`'s
/// view, or nothing for a follower).
pub trait Live {
    /// After each tick, with the profile built so far and the number of threads known; false
    /// when the user asked to stop.
    fn update(&mut self, builder: &ProfileBuilder, threads: usize) -> bool;
    /// When recording stops.
    fn clear(&mut self);
}

/// No live view.
impl Live for () {
    fn update(&mut self, _: &ProfileBuilder, _: usize) -> bool {
        true
    }
    fn clear(&mut self) {}
}

/// Late ticks among the latest 32 that make the sampler real-time (where the system allows
/// it): one is a hiccup (a page fault, a stolen moment), two say the CPUs are busy.
const LATE_BEFORE_REAL_TIME: u32 = 2;

/// Samples until the target exits, `stop` returns a reason, or the duration elapses. Intervals are
/// drawn uniformly from 0.5 to 1.5 times the mean period, so periodic behaviour in the target
/// cannot alias with the sampling.
pub fn record(
    sampler: &mut Sampler,
    schedule: Schedule,
    live: &mut dyn Live,
    mut stop: impl FnMut(&Sampler) -> Option<End>,
) -> End {
    let period = Duration::from_secs_f64(1.0 / schedule.rate_hz);
    let mut raised = priority::Raised::gently();
    sampler.set_priority(raised.how());
    // With the default 50 µs timer slack our wake-ups would be batched with the target's own
    // timers; one nanosecond keeps the sampling times independent of the target's.
    let _ = nix::sys::prctl::set_timerslack(1);
    let end = sample_until_stopped(sampler, schedule, period, live, &mut stop, &mut raised);
    sampler.end_recording();
    sampler.stop_tracing();
    drop(raised);
    end
}

fn sample_until_stopped(
    sampler: &mut Sampler,
    schedule: Schedule,
    period: Duration,
    live: &mut dyn Live,
    stop: &mut impl FnMut(&Sampler) -> Option<End>,
    raised: &mut priority::Raised,
) -> End {
    let start = Instant::now();
    // Which of the latest ticks came late, a bit each (the newest lowest).
    let mut late_ticks: u32 = 0;
    let mut next = start;
    let mut current = period;
    // Fault injection for tests: a panic in the middle of recording, to prove that the target is
    // released (detached, running) when fsprof fails.
    let panic_after: Option<u64> = std::env::var("FSPROF_TEST_PANIC_AFTER_TICKS")
        .ok()
        .and_then(|ticks| ticks.parse().ok());
    loop {
        let end = stop(sampler).or_else(|| {
            (schedule.duration)
                .is_some_and(|d| start.elapsed() >= d)
                .then_some(End::Duration)
        });
        if let Some(end) = end {
            live.clear();
            // A last tick takes what perf sampled since the previous one: recording ends now.
            sampler.tick();
            return end;
        }
        if panic_after.is_some_and(|ticks| sampler.clock().ticks() >= ticks) {
            panic!("FSPROF_TEST_PANIC_AFTER_TICKS: panicking on purpose");
        }
        let late = Instant::now().duration_since(next) > current / 2;
        if late {
            sampler.clock().count_late();
        }
        late_ticks = (late_ticks << 1) | u32::from(late);
        // The sampler waited for a CPU: from now on it takes one before the program's
        // threads (see `priority::Raised::gently`).
        if late_ticks.count_ones() >= LATE_BEFORE_REAL_TIME && raised.how() != "real-time" {
            raised.escalate();
            sampler.set_priority(raised.how());
        }
        if schedule
            .suspend
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            suspend(sampler);
            next = Instant::now();
        }
        let cpu_before = thread_cpu_time();
        if !sampler.tick() {
            live.clear();
            return match sampler.refused() {
                Some(why) => End::Refused(why.to_owned()),
                None => End::TargetExited("the program exited".to_owned()),
            };
        }
        // The tick's CPU time, not its wall time: a tick that was preempted or stopped must not
        // make the next wait longer.
        let cost = thread_cpu_time().saturating_sub(cpu_before);
        let (builder, threads) = sampler.progress();
        if !live.update(builder, threads) {
            live.clear();
            sampler.tick();
            return End::Interrupted;
        }
        let now = Instant::now();
        current = sampler.tick_period(period);
        next += current.mul_f64(0.5 + fastrand::f64());
        // Never busier than half the time: with many threads a tick can take longer than half
        // the period, and a real-time sampler that never slept would starve the target.
        let floor = now + cost.min(current * 10);
        if next < floor {
            next = floor;
            sampler.clock().count_stretched();
        }
        sampler.sleep_until(next);
    }
}

/// Ctrl-Z while recording: fsprof and the program both got SIGTSTP. The program's signal waits
/// for its tracer where fsprof traces a thread (every signal to a traced thread does: a thread
/// is traced only for its sample, or until a late stop comes), so fsprof first lets its events
/// through (the program stops: a group stop) and only then stops itself. On
/// `fg` both get SIGCONT and run on. Stopping at once, as SIGTSTP's default would, left the
/// program's SIGTSTP to be delivered after `fg`: the program stayed stopped.
///
/// As the kernel does for SIGTSTP's default action, nothing is done when fsprof's process group
/// is orphaned (no parent in another group of its session, such as a shell, could resume it):
/// fsprof would stay stopped, and the program's signals would wait for it.
pub fn suspend(sampler: &mut Sampler) {
    if process::own_group_is_orphaned() {
        return;
    }
    sampler.sleep_until(Instant::now() + Duration::from_millis(20));
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}
