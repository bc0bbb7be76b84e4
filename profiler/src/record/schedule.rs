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
    /// Whether `stop` is asked between ticks too, every `BETWEEN_TICKS` or at each fork of a
    /// process followed (see `Asking`): where it looks for the program's new processes
    /// (`children.rs`).
    pub asks_between_ticks: bool,
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
/// Ticks on time (none of them late), after which a sampler whose samples the kernel
/// takes goes back to fsprof's own nice value (see `priority::Raised::calm`): the first ticks,
/// which load the program's modules and admit its threads, keep the raised priority.
const CALM_TICKS: u64 = 8;
/// A wait for a CPU within one tick that makes the sampler real-time at once: no hiccup of a
/// busy CPU (its competitors' slices are a few milliseconds) lasts this long.
const STALL_BEFORE_REAL_TIME: Duration = Duration::from_millis(25);

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
    sampler.set_priority(&raised);
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
    let mut preemptions = involuntary_switches();
    // Fault injection for tests: a panic in the middle of recording, to prove that the target is
    // released (detached, running) when fsprof fails.
    let panic_after: Option<u64> = std::env::var("FSPROF_TEST_PANIC_AFTER_TICKS")
        .ok()
        .and_then(|ticks| ticks.parse().ok());
    // What `stop` said between two ticks (see below), for the loop's top.
    let mut between: Option<End> = None;
    let mut asking = Asking {
        forks: schedule.asks_between_ticks && sampler.wake_on_forks(),
        busy_until: start + BUSY_AFTER_FORK,
    };
    sampler.quiet_forks_until(asking.busy_until);
    loop {
        let end = between.take().or_else(|| stop(sampler)).or_else(|| {
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
        // The sampler waited for a CPU, or would at its share of one: from now on it takes one
        // before the program's threads (see `priority::Raised::gently`).
        if !raised.ahead() && (late_ticks.count_ones() >= LATE_BEFORE_REAL_TIME || crowded()) {
            raised.escalate();
            sampler.set_priority(raised);
        } else if raised.how() == "raised"
            && late_ticks == 0
            && sampler.clock().ticks() >= CALM_TICKS
            && sampler.kernel_takes_samples()
        {
            // Calm, and the kernel takes the samples at their instants: a late tick would only
            // read them later (see `priority::Raised::calm`).
            raised.calm();
            sampler.set_priority(raised);
        }
        if schedule
            .suspend
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            suspend(sampler);
            next = Instant::now();
        }
        let (cpu_before, began) = (thread_cpu_time(), Instant::now());
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
        // Preempted in the middle of the tick (runnable, on no CPU): late too, the next
        // tick's wake-up tells nothing of it. Beside 1000 busy threads on 2 CPUs the sampler,
        // at its lower nice value, waited 223 ms in a tick while the CPUs' rings lasted about
        // 120, and they lost samples: one such wait makes it real-time at once. (A wait that
        // blocked, for a file's first read from disk say, is no sign of busy CPUs: it counts
        // only where the thread was switched out while runnable.)
        let waited = began.elapsed().saturating_sub(cost);
        let preempted = std::mem::replace(&mut preemptions, involuntary_switches());
        if waited > current / 2 && preemptions > preempted {
            if late_ticks & 1 == 0 {
                sampler.clock().count_late(); // not counted at its wake-up already
            }
            late_ticks |= 1;
            if waited >= STALL_BEFORE_REAL_TIME && !raised.ahead() {
                raised.escalate();
                sampler.set_priority(raised);
            }
        }
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
        if schedule.asks_between_ticks {
            between = sleep_asking(sampler, next, stop, &mut asking);
        } else {
            sampler.sleep_until(next);
        }
    }
}

/// How often `stop` is asked between two ticks at most. It looks for the program's new
/// processes (`children.rs`), which a tick every 40 ms, while perf's samples carry the threads'
/// time (`clock.rs`), found too late: of twenty children of a shell that each ran 30 ms of CPU
/// one after the other, six were never found and the others were found late, 75 of their 600 ms
/// counted (2026-12-03). A look that finds no process created since the last costs a read of
/// `/proc/loadavg`; the wake-up itself, about 9 us of fsprof's CPU on a virtual machine (two
/// threads busy 3 s: 12.9 -> 18.2 ms, medians of six), which only a recording that follows
/// children pays.
const BETWEEN_TICKS: Duration = Duration::from_millis(5);

/// How long after a fork `stop` is still asked every [`BETWEEN_TICKS`] where forks wake the
/// loop, at most: a child found may make its own children before fsprof watches its process
/// (at once, or after an `exec`, which unwatches it in the kernel until its next tick, as `sh
/// -c` makes its command), and those forks wake nothing. Asking stops sooner once the kernel
/// watches every process followed (their forks wake the loop again): in a shell's loop of
/// `rg` runs, one every 60 ms, it asked 200 times a second throughout.
const BUSY_AFTER_FORK: Duration = Duration::from_millis(100);

/// When `stop` is asked between ticks.
struct Asking {
    /// A fork of a process followed ends a sleep (`Sampler::wake_on_forks`): past
    /// [`BUSY_AFTER_FORK`] after the latest that did, `stop` is asked only at ticks, and
    /// [`BETWEEN_TICKS`] after the next fork. Within it, no fork wakes the loop (it asks every
    /// [`BETWEEN_TICKS`] anyway).
    forks: bool,
    /// Until when it is asked every [`BETWEEN_TICKS`] (the recording's start counts as a fork).
    busy_until: Instant,
}

/// Sleeps until `next`, asking `stop` every [`BETWEEN_TICKS`] meanwhile, or, where forks wake
/// the loop and none came for [`BUSY_AFTER_FORK`], only from [`BETWEEN_TICKS`] after the next
/// fork on; what it said, if it said to stop (the sleep ends then, and at the program's exit).
/// Beside a program that makes no process, a look every 5 ms was a third of fsprof's CPU (two
/// threads busy: 4.2 ms against 2.7 with `--no-follow`). A look at the fork itself found the
/// child before its `exec`, and followed it as a copy of its parent first: `make -j2` 1.123 of
/// its time alone against 1.095 looking every 5 ms.
fn sleep_asking(
    sampler: &mut Sampler,
    next: Instant,
    stop: &mut impl FnMut(&Sampler) -> Option<End>,
    asking: &mut Asking,
) -> Option<End> {
    loop {
        let now = Instant::now();
        let mut busy = !asking.forks || now < asking.busy_until;
        let mut wake = match busy {
            true => next.min(now + BETWEEN_TICKS),
            false => next,
        };
        // Woken by a fork (or the exit) before `wake`.
        while sampler.sleep_until(wake) && sampler.exit_status().is_none() {
            let now = Instant::now();
            asking.busy_until = now + BUSY_AFTER_FORK;
            sampler.quiet_forks_until(asking.busy_until);
            if !busy {
                (busy, wake) = (true, next.min(now + BETWEEN_TICKS));
            }
        }
        if wake >= next && sampler.exit_status().is_none() {
            return None;
        }
        // Where the kernel watches every process followed, each one's fork wakes the loop: no
        // need to ask until the next. Forks wake it from before this look on (a fork meanwhile
        // is found by the look, or ends the next sleep at once).
        let settled = asking.forks && sampler.every_process_watched();
        if settled {
            sampler.quiet_forks_until(Instant::now());
        }
        if let Some(end) = stop(sampler) {
            return Some(end);
        }
        if settled && sampler.every_process_watched() {
            asking.busy_until = Instant::now();
        }
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

/// Runnable threads per CPU, machine-wide, beyond which the sampler is made real-time before it
/// waits: at its lower nice value (weight 9548 against 1024 for each thread at nice 0) it has
/// a sixth of a CPU beside 48 busy threads, and beside 500 (1000 busy threads on 2 CPUs) less
/// than 2%: a tick's 5 ms of CPU (admitting 135 threads just born) took it 223 to 280 ms, and
/// the CPUs' rings, which last about 120 ms there, lost samples.
const CROWD_PER_CPU: u32 = 48;

/// How old a count of the runnable threads may be (a read of `/proc/loadavg`, ~1.5 us, shared
/// by all of fsprof's samplers: see `os::machine::runnable_threads`).
const CROWD_EVERY: Duration = Duration::from_millis(10);

/// Whether more than [`CROWD_PER_CPU`] threads per CPU are runnable, as counted at most
/// [`CROWD_EVERY`] ago (`false` where unreadable).
fn crowded() -> bool {
    let cpus = crate::os::machine::cpus() as u32;
    crate::os::machine::runnable_threads(CROWD_EVERY)
        .is_some_and(|runnable| runnable > CROWD_PER_CPU.saturating_mul(cpus))
}

/// Times this thread was switched out while runnable, so far.
fn involuntary_switches() -> i64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0, |usage| usage.involuntary_context_switches())
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}
