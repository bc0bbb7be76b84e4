//! Which threads' switches the perf backend follows (see `Taken::Switch`), and when it stops:
//! a thread that leaves its CPU more often than a rate, over a window, has its time off the CPU
//! estimated by the sampler's ticks instead, where following it would cost it, and fsprof, more
//! than the bound below. Not here: the following itself (`perf.rs`, `cpu_wide.rs`), the
//! estimate (`record/sampler`).

use super::{PerfSampler, VALUE_QUIET};

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

impl PerfSampler {
    /// Whether `tid`'s departures from its CPU are followed (see [`Taken::Switch`]).
    pub fn follows_switches(&self, tid: u32) -> bool {
        self.threads
            .get(&tid)
            .is_some_and(|thread| match &thread.own {
                Some(own) => own.switches.is_some(),
                None => !self.too_fast.contains(&tid),
            })
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
