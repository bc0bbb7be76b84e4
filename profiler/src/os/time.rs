//! The clock fsprof and the kernel's records share: CLOCK_MONOTONIC in nanoseconds; and
//! fsprof's own CPU time. Not here: the tick clock of a recording (`record/clock.rs`).

/// CLOCK_MONOTONIC now, in ns: the clock of perf's records (and of `Instant`).
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The CPU time fsprof has used so far, all its threads together (those ended too), in ns:
/// CLOCK_PROCESS_CPUTIME_ID, exact where `/proc`'s counts are in 10 ms ticks.
pub fn own_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}
