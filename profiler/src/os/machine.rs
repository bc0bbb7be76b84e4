//! The machine fsprof runs on, asked once for all of fsprof's threads: how many CPUs this
//! process may use, `/proc/loadavg` kept open, and the runnable threads it counts, read at most
//! so often whatever the number of threads that ask. A follower of each process `run` follows
//! asked all three anew: Rust's `available_parallelism` opens three cgroup files each time, an
//! open of a `/proc` file costs about 7 us, more than its read, and each follower read the
//! runnable threads before each of its ticks (4% of the followers' CPU over a build). Not here:
//! what the numbers are used for (`record/schedule.rs`, `program/process.rs`).

use std::fs::File;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// The machine's runnable threads (running or waiting for a CPU: the fourth field of
/// `/proc/loadavg`, "3/250"), as read at most `max_age` ago by any of fsprof's threads, else
/// read now; `None` where unreadable.
pub fn runnable_threads(max_age: Duration) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    static LATEST: Mutex<Option<(Instant, Option<u32>)>> = Mutex::new(None);
    let mut latest = LATEST
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((at, runnable)) = *latest {
        if at.elapsed() < max_age {
            return runnable;
        }
    }
    let mut bytes = [0u8; 128];
    let runnable = loadavg()
        .and_then(|file| file.read_at(&mut bytes, 0).ok())
        .and_then(|read| std::str::from_utf8(&bytes[..read]).ok())
        .and_then(|text| text.split_ascii_whitespace().nth(3))
        .and_then(|field| field.split('/').next()?.parse().ok());
    *latest = Some((Instant::now(), runnable));
    runnable
}
