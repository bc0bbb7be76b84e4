//! Which events a perf sampler opens: one per CPU (`cpu_wide.rs`), the default where the
//! kernel and fsprof's privilege allow, or one per thread; `FSPROF_PER_CPU` chooses (for
//! comparisons and tests). Not here: the events themselves (`perf_events.rs`, `cpu_wide.rs`).

use super::{PerfSampler, RING_PAGES};
use crate::native::cpu_wide::CpuWide;
use std::os::fd::AsRawFd;

impl PerfSampler {
    /// The per-CPU events and programs if `design` asks for them and they can be had; where
    /// they cannot, `None` (the per-thread events), said on stderr only if asked for by name.
    pub(super) fn open_design(&mut self, design: Design, capacity: u32) -> Option<CpuWide> {
        if design == Design::Threads {
            return None;
        }
        match self.open_wide(capacity) {
            Ok(events) => Some(events),
            Err(why) => {
                if design == Design::CpusAsked {
                    eprintln!("fsprof: {why}; sampling with per-thread events instead");
                }
                None
            }
        }
    }

    /// The per-CPU design's events and programs (`cpu_wide.rs`), over this sampler's maps.
    /// Not for a capable fsprof yet: its programs stop watching a thread at the start of an
    /// `exec` and at its end, but fsprof could watch it again in between, after the new
    /// program's credentials were set (to close: drop a thread whose `mm` changed, in the
    /// programs).
    fn open_wide(&mut self, capacity: u32) -> Result<CpuWide, String> {
        const ASKED: &str = "per-CPU events (FSPROF_PER_CPU=1) are not available";
        if crate::record::privilege::elevated() {
            return Err(format!(
                "{ASKED} to a capable copy of fsprof yet: run it as root"
            ));
        }
        CpuWide::new(
            self.map.as_raw_fd(),
            self.copies.fd(),
            self.programs.rules.hand_over(),
            self.period_ns,
            capacity,
            self.page,
            RING_PAGES,
        )
        .map_err(|why| format!("{ASKED}: {why}"))
    }
}

/// Which events a perf sampler opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::native) enum Design {
    /// One sampling event (and one context-switch event) per thread.
    Threads,
    /// One per CPU (`cpu_wide.rs`) where the kernel and fsprof's privilege allow, else per
    /// thread: the default.
    Cpus,
    /// Per CPU, asked for by name: where it cannot be had, per thread, with a line that says why.
    CpusAsked,
}

impl Design {
    /// The design `FSPROF_PER_CPU` asks for: `1` per CPU, `0` per thread (for comparisons and
    /// tests); unset or anything else, the default.
    pub(in crate::native) fn from_environment() -> Design {
        match std::env::var_os("FSPROF_PER_CPU") {
            Some(v) if v == "1" => Design::CpusAsked,
            Some(v) if v == "0" => Design::Threads,
            _ => Design::Cpus,
        }
    }
}

impl PerfSampler {
    /// Whether it samples with one event per CPU rather than per thread.
    pub fn per_cpu(&self) -> bool {
        self.wide.is_some()
    }
}
