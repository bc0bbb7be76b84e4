//! The machine fsprof runs on, asked once for all of fsprof's threads: how many CPUs this
//! process may use, and `/proc/loadavg` kept open. A follower of each process `run` follows
//! asked both anew: Rust's `available_parallelism` opens three cgroup files each time, and an
//! open of a `/proc` file costs about 7 us, more than its read; a build's processes paid it
//! about a hundred times a second. Not here: what the numbers are used for (`record/schedule.rs`,
//! `program/process.rs`).

use std::fs::File;
use std::sync::OnceLock;

/// The CPUs this process may use (its affinity and its cgroup's quota), at least 1; counted at
/// the first call.
pub fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `/proc/loadavg`, opened at the first call and kept (`None` where it cannot be opened); read
/// it from its start with `read_at`, which any thread may do at once.
pub fn loadavg() -> Option<&'static File> {
    static LOADAVG: OnceLock<Option<File>> = OnceLock::new();
    LOADAVG
        .get_or_init(|| File::open("/proc/loadavg").ok())
        .as_ref()
}
