//! Which events a perf sampler opens: one per CPU (`cpu_wide.rs`) for the process `run` starts
//! or `attach` names, where the kernel and fsprof's privilege allow (the processes it starts
//! then share them: `shared.rs`), and one per thread wherever per CPU cannot be had; `FSPROF_PER_CPU=1` asks for per
//! CPU everywhere, `FSPROF_PER_CPU=0` for per thread. Not here: the events themselves
//! (`perf_events.rs`, `cpu_wide.rs`).

use super::{PerfSampler, CHILD_THREADS, RING_PAGES};
use crate::native::cpu_wide::CpuWide;
use std::os::fd::AsRawFd;

impl PerfSampler {
    /// The per-CPU events and programs if `design` asks for them (by default, for a sampler
    /// of more than [`CHILD_THREADS`]: the process `run` starts or `attach` names) and they can
    /// be had; where they cannot, `None` (the per-thread events), and, if they were asked for
    /// by name, a line on stderr that says why.
    pub(super) fn open_design(&mut self, design: Design, capacity: u32) -> Option<CpuWide> {
        match design {
            Design::Threads => None,
            Design::Default if capacity <= CHILD_THREADS => None,
            Design::Default => self.open_wide(capacity).ok(),
            Design::Cpus => match self.open_wide(capacity) {
                Ok(events) => Some(events),
                Err(why) => {
                    say!("fsprof: {why}; sampling with per-thread events instead");
                    None
                }
            },
        }
    }

    /// The per-CPU design's events and programs (`cpu_wide.rs`), over this sampler's maps.
    /// Not for a capable fsprof yet: its programs stop watching a thread at the start of an
    /// `exec` and at its end, but fsprof could watch it again in between, after the new
    /// program's credentials were set (to close: drop a thread whose `mm` changed, in the
    /// programs).
    fn open_wide(&mut self, capacity: u32) -> Result<CpuWide, String> {
        const ASKED: &str = "per-CPU events (FSPROF_PER_CPU=1) are not available";
        if crate::os::privilege::elevated() {
            return Err(format!(
                "{ASKED} to a capable copy of fsprof yet: run it as root"
            ));
        }
        let mut events = CpuWide::new(
            self.map.as_raw_fd(),
            (self.copies.fd(), self.copies.size()),
            self.programs.rules.hand_over(),
            self.period_ns,
            capacity,
            self.page,
            RING_PAGES,
        )
        .map_err(|why| format!("{ASKED}: {why}"))?;
        // At the tick, the walk its program calls is a tracepoint's program too.
        if let Some(stack) = crate::native::btf::task_stack_offset().filter(|_| events.at_tick()) {
            let copies = self.copies.fd();
            self.programs.rules.walk_at_tick(stack, copies);
        }
        // Switches are followed from the start (`following.rs` may stop that later).
        events
            .follow_switches()
            .map_err(|why| format!("{ASKED}: {why}"))?;
        Ok(events)
    }
}

/// Which events a perf sampler opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::native) enum Design {
    /// One sampling event (and one context-switch event) per thread (`FSPROF_PER_CPU=0`).
    Threads,
    /// One per CPU (`cpu_wide.rs`), asked for (`FSPROF_PER_CPU=1`): where it cannot be had,
    /// per thread, with a line that says why.
    Cpus,
    /// Per CPU for the process `run` starts or `attach` names where it can be had (the
    /// processes it starts join that set: `shared.rs`), per thread elsewhere. A process of its
    /// own set would tick on every CPU whether it runs or not and cost fsprof about 20 ms to
    /// open (its events, its programs through the verifier): more than most of a build's
    /// processes live (`make -j2` of 12 files, 31 processes: 98-116% slower with a set each
    /// against 84-100% per thread), while a thread's own events cost each of its switches
    /// about 4 us (python3 with four threads handing work around: 27-36% slower per CPU against
    /// 58-71% per thread; BENCHMARKS.md, issue 39, twenty-third session).
    Default,
}

impl Design {
    /// The design `FSPROF_PER_CPU` asks for: `1` per CPU, `0` per thread, else the default.
    /// Per CPU, ticks come on a CPU's clock, not on the thread's CPU time, and in a
    /// thread that runs and sleeps in a steady rhythm they misplaced time with one tick a
    /// period. `sleepy` (700 us of
    /// `hashing`, a 500 us sleep, 300 us unmarked) read `hashing` 1.9 to 2.8 points high per
    /// CPU (three runs alone, and twice over the bound of 2.5 in the whole suite), -0.7 to +0.1
    /// per thread. With two ticks a period, one kept at random, it read 0 to +0.8 (BENCHMARKS.md,
    /// issue 39, twenty-third session). The samples' weights were the cause, each the thread's
    /// CPU time since the one before: a C loop of the same rhythm, its ticks counted from
    /// `profile.json`, read -0.6 with one tick a period (5 runs of 10 s; `perf record -a` of it,
    /// +0.1 to +0.5), by those weights -3.9. A sample of a CPU's tick now stands for the tick's
    /// length, scaled to the thread's running time (`Credit::calibrate`), with one tick a
    /// period (twenty-eighth session).
    pub(in crate::native) fn from_environment() -> Design {
        match std::env::var_os("FSPROF_PER_CPU") {
            Some(v) if v == "1" => Design::Cpus,
            Some(v) if v == "0" => Design::Threads,
            _ => Design::Default,
        }
    }
}

impl PerfSampler {
    /// Whether it samples with one event per CPU rather than per thread.
    pub fn per_cpu(&self) -> bool {
        self.wide.is_some()
    }

    /// Whether its events per CPU sample at the scheduler's tick (`cpu_wide/tick.rs`).
    pub fn at_tick(&self) -> bool {
        self.wide.as_ref().is_some_and(CpuWide::at_tick)
    }

    /// What wakes a thread at each fork of a watched process, where it samples per CPU and
    /// the kernel allows it (`cpu_wide/forks.rs`).
    pub(in crate::native) fn fork_wakes(
        &self,
    ) -> Option<std::sync::Arc<crate::native::cpu_wide::ForkWakes>> {
        self.wide.as_ref()?.fork_wakes()
    }
}

/// For tests that asked for per-CPU events and got per-thread ones: skipped (and said) where
/// the kernel does not describe itself in BTF, which `CpuWide::new` needs; elsewhere a failure
/// (they run as root): the design would be off for every user of such a kernel.
#[cfg(test)]
pub(in crate::native) fn per_cpu_refused() {
    assert!(
        !std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
        "per-CPU events refused as root on a kernel with BTF (the line above says why)"
    );
    eprintln!("skipped: the kernel has no BTF, so no per-CPU events");
}
