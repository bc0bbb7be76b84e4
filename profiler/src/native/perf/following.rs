//! Which threads' switches the perf backend follows (see `Taken::Switch`), and when it stops:
//! for all threads, while the machine switches more than [`MAX_MACHINE_SWITCH_RATE`] and no
//! watched process marks (unless asked to always, `perf::Following`); and for a thread that
//! leaves its CPU more often than a rate, over a window: each has its time off the CPU estimated
//! by the sampler's ticks instead, where following would cost the program, and fsprof, more
//! than the bounds below. Not here: the following itself (`perf.rs`, `cpu_wide.rs`), the
//! estimate (`record/sampler`).

use super::{Following, PerfSampler, VALUE_QUIET};
use crate::os::machine::Activity;

/// A thread that leaves its CPU more often than this (per second, over at least
/// `SWITCH_WINDOW_NS`) is no longer followed off its CPU: following a switch costs the thread
/// about 3 us (BENCHMARKS.md), so this bounds that cost to about 6% of its time, and its time off
/// the CPU is estimated instead, as where the kernel refuses the switch events.
pub const MAX_SWITCH_RATE: u64 = 20_000;
/// [`MAX_SWITCH_RATE`] per CPU (`cpu_wide.rs`), where following a switch costs less: the
/// `sched_switch` program's records (a few hundred ns) and fsprof's reading of them (0.4 us: its
/// main thread took 250 ms of CPU over 2.8 s following python3's four threads as they left
/// their CPUs 18 000 times a second each, 175 ms not following them; BENCHMARKS.md), so about
/// 4% of a thread's time at this rate. Not lower: the estimate that replaces following is far
/// less exact per thread (those four threads' time read 28% low to 72% high against their own
/// schedstat at 5000 a second, 5 to 9% low followed). Only recorded departures count: those
/// of a thread without marks are mostly folded (`layout::FOLD_MOST_NS`), a record every few
/// milliseconds whatever its rate, and it stays followed.
pub const MAX_WIDE_SWITCH_RATE: u64 = 50_000;
const SWITCH_WINDOW_NS: u64 = 200_000_000;

/// Context switches a second per busy CPU of the machine (see [`switch_rate`]) above which the
/// switches of a program that does not mark are not followed. Per CPU, every switch of the machine runs the
/// `sched_switch` program, watched thread or not: on a virtual machine of the AMD host about
/// 250 ns for the tracepoint's call of any program and 150 ns of the program's own (BENCHMARKS.md,
/// issue 39), so this bounds that to about 0.8% of each CPU. python3 with four threads passing
/// its lock around switches some 100 000 times a second per CPU of two: followed, it ran 1.08
/// to 1.10 times as long as alone; not, 1.03 to 1.06, as under `perf record` (1.05). What is
/// not followed then is estimated: the waits for a CPU from each thread's scheduling totals
/// (`record/sampler/weight.rs`), the blocked time (which counts only inside marks) from the
/// ticks' states and stacks. Followed again once a window reads under half of this, or the
/// program marks.
pub const MAX_MACHINE_SWITCH_RATE: u64 = 25_000;
/// The window over which the machine's switches are counted.
const MACHINE_WINDOW_NS: u64 = 200_000_000;

impl PerfSampler {
    /// Whether `tid`'s departures from its CPU are followed (see [`Taken::Switch`](crate::native::stream::Taken::Switch)).
    pub fn follows_switches(&self, tid: u32) -> bool {
        self.threads
            .get(&tid)
            .is_some_and(|thread| match &thread.own {
                Some(own) => own.switches.is_some(),
                None => self.following && !self.too_fast.contains(&tid),
            })
    }

    /// Decides, at a tick, whether the threads' switches are followed (see
    /// `MAX_MACHINE_SWITCH_RATE`); `marks`: the caller's process marks (it has a region). The
    /// error says what the kernel refused as following began again.
    pub fn mind_following(&mut self, marks: bool) -> Result<(), String> {
        self.marked |= marks;
        if self.asked == Following::Always || self.marked {
            return self.follow_switches();
        }
        // `/proc/stat` is read once a window (tens of µs: at every tick, it was a fifth of
        // fsprof's CPU beside a two-thread program).
        let now = crate::os::time::monotonic_ns();
        if self
            .window
            .is_some_and(|(_, since)| now.saturating_sub(since) < MACHINE_WINDOW_NS)
        {
            return Ok(());
        }
        let Some(activity) = crate::os::machine::activity() else {
            return Ok(());
        };
        let Some((before, since)) = self.window.replace((activity, now)) else {
            return Ok(());
        };
        let elapsed = now.saturating_sub(since);
        let rate = switch_rate(before, activity, elapsed, crate::os::machine::clock_ticks());
        match (self.following, follows_at(self.following, rate)) {
            (true, false) => {
                self.stop_following()?;
                self.stopped_at_rate = Some(self.stopped_at_rate.unwrap_or(0).max(rate));
                Ok(())
            }
            (false, true) => self.follow_switches(),
            _ => Ok(()),
        }
    }

    /// Follows the threads' switches from now on, if it did not: per CPU, the `sched_switch`
    /// program is attached; each thread watched until now is watched again once its samples so
    /// far are taken (`hand_over`), with a map value (or, per thread, events) that counts its
    /// time on a CPU from then. The error says what the kernel refused; the threads' time off
    /// their CPU is then still the ticks' to tell.
    pub(in crate::native) fn follow_switches(&mut self) -> Result<(), String> {
        if self.following {
            return Ok(());
        }
        if let Some(wide) = &mut self.wide {
            wide.follow_switches()?;
        }
        self.following = true;
        self.threads
            .values_mut()
            .for_each(|thread| thread.handover = true);
        Ok(())
    }

    /// Follows no thread's switches from now on: per CPU, the `sched_switch` program is detached
    /// and each thread is made quiet once the records written until then are taken with its
    /// samples (`hand_over`); per thread, each is watched again without its context-switch event
    /// then. The error says what the kernel refused (the program at threads' exits, without which
    /// the switch program stays).
    pub(in crate::native) fn stop_following(&mut self) -> Result<(), String> {
        if !self.following {
            return Ok(());
        }
        if let Some(wide) = &mut self.wide {
            wide.stop_following()?;
        }
        self.following = false;
        self.threads
            .values_mut()
            .for_each(|thread| thread.handover = true);
        Ok(())
    }

    /// Hands `tid` over, once its samples and records until now are taken, if it waits for that
    /// since following began or ended: watched anew (per CPU, following again: a fresh map
    /// value, whose time on a CPU counts from now; per thread, its events opened again with or
    /// without the context-switch event), or, per CPU, made quiet (its switches' records, none
    /// written since the program was detached, are not handed out).
    pub(super) fn hand_over(&mut self, tid: u32) {
        let Some(thread) = self.threads.get_mut(&tid).filter(|thread| thread.handover) else {
            return;
        };
        if let (Some(wide), false) = (&mut self.wide, self.following) {
            thread.handover = false;
            wide.quiet(tid);
            return;
        }
        let (owner, addresses, running) = (thread.owner, thread.addresses, thread.running);
        self.forget(tid);
        let _ = self.watch_by(owner, tid, addresses, running);
    }

    /// Stops following `tid`'s switches if it left its CPU more than
    /// [`PerfSampler::max_switch_rate`] times a second in the window now closing (its records
    /// were just read: nothing in them is lost): its own event is reopened without them (if it
    /// cannot be, the thread is no longer sampled), or, per CPU, its map value tells the
    /// programs to count its switches only.
    pub(super) fn stop_following_if_too_fast(&mut self, tid: u32) {
        let (follows, most) = (self.follows_switches(tid), self.max_switch_rate());
        let Some(thread) = self.threads.get_mut(&tid) else {
            return;
        };
        let now = crate::os::time::monotonic_ns();
        let elapsed = now.saturating_sub(thread.window_start);
        if !follows || elapsed < SWITCH_WINDOW_NS {
            return;
        }
        let rate = thread.departures.saturating_mul(1_000_000_000) / elapsed;
        (thread.departures, thread.window_start) = (0, now);
        if rate <= most {
            return;
        }
        self.too_fast.insert(tid);
        if let Some(wide) = &mut self.wide {
            // Its switches from now on only count into its time on a CPU.
            self.values.write(thread.index, VALUE_QUIET, &[1]);
            wide.quiet(tid);
            return;
        }
        let (addresses, owner) = (thread.addresses, thread.owner);
        self.forget(tid);
        let _ = self.watch_by(owner, tid, addresses, false);
    }

    /// The most departures a second a thread's switches are followed at, in this design.
    pub fn max_switch_rate(&self) -> u64 {
        match self.wide {
            Some(_) => MAX_WIDE_SWITCH_RATE,
            None => MAX_SWITCH_RATE,
        }
    }

    /// How many threads are no longer followed off their CPU (see [`MAX_SWITCH_RATE`]).
    pub fn too_fast(&self) -> usize {
        self.too_fast.len()
    }
}

/// Whether a program that does not mark is followed after a window in which the machine
/// switched `rate` times a second per busy CPU, `following` before it: not past
/// [`MAX_MACHINE_SWITCH_RATE`], and again only under half of it (a rate near the bound does not
/// make it stop and start at every window, each start watching every thread anew).
fn follows_at(following: bool, rate: u64) -> bool {
    match following {
        true => rate <= MAX_MACHINE_SWITCH_RATE,
        false => rate < MAX_MACHINE_SWITCH_RATE / 2,
    }
}

/// Context switches a second per busy CPU between two reads of the machine's activity
/// `elapsed_ns` apart (`clock_ticks` a second in its busy time): the switches of a program
/// fall on the CPUs it keeps busy, whose time the `sched_switch` program takes; an idle CPU
/// switches seldom and costs nothing (16 CPUs, 4 of them busy with a program's threads: the
/// rate is that of those 4).
fn switch_rate(before: Activity, now: Activity, elapsed_ns: u64, clock_ticks: u64) -> u64 {
    let elapsed_s = elapsed_ns.max(1) as f64 / 1e9;
    let switches = now.switches.saturating_sub(before.switches) as f64;
    let busy_ticks = now.busy_ticks.saturating_sub(before.busy_ticks) as f64;
    let busy_cpus = (busy_ticks / clock_ticks.max(1) as f64 / elapsed_s).max(1.0);
    (switches / elapsed_s / busy_cpus) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn following_stops_past_the_bound_and_starts_again_under_half() {
        let most = MAX_MACHINE_SWITCH_RATE;
        assert!(follows_at(true, most));
        assert!(!follows_at(true, most + 1));
        assert!(!follows_at(false, most));
        assert!(!follows_at(false, most / 2));
        assert!(follows_at(false, most / 2 - 1));
    }

    #[test]
    fn the_switch_rate_is_per_busy_cpu() {
        let at = |switches, busy_ticks| Activity {
            switches,
            busy_ticks,
        };
        // 200 000 switches in a second on 4 busy CPUs (of any number): 50 000 each.
        assert_eq!(
            switch_rate(at(0, 0), at(200_000, 400), 1_000_000_000, 100),
            50_000
        );
        // Half a second, all idle: at least one CPU.
        assert_eq!(
            switch_rate(at(10, 5), at(1_010, 5), 500_000_000, 100),
            2_000
        );
        // Counts that went backwards read as none.
        assert_eq!(switch_rate(at(10, 5), at(0, 0), 500_000_000, 100), 0);
    }
}
