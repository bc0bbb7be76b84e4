//! The machine fsprof runs on, asked once for all of fsprof's threads: how many CPUs this
//! process may use, `/proc/loadavg` kept open, and the runnable threads it counts, read at most
//! so often whatever the number of threads that ask; and its CPUs' switches and busy time so far. A follower of each process `run` follows
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
/// What the machine's CPUs have done since it booted (`/proc/stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    /// Context switches, on all CPUs.
    pub switches: u64,
    /// Time the CPUs were busy (neither idle nor waiting for I/O), all together, in clock
    /// ticks (`sysconf(_SC_CLK_TCK)` a second).
    pub busy_ticks: u64,
}

/// The machine's [`Activity`] so far; `None` where `/proc/stat` is unreadable.
pub fn activity() -> Option<Activity> {
    parse_activity(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Clock ticks a second in `/proc/stat`'s times.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

fn parse_activity(stat: &str) -> Option<Activity> {
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
    let all = stat.lines().find(|line| line.starts_with("cpu "))?;
    let times: Vec<u64> = (all.split_ascii_whitespace().skip(1))
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    let field = |n: usize| times.get(n).copied().unwrap_or(0);
    // Guest time is counted in user time already.
    let total: u64 = (0..8).map(field).sum();
    let busy_ticks = total.saturating_sub(field(3) + field(4));
    let line = stat.lines().find(|line| line.starts_with("ctxt "))?;
    let switches = line["ctxt ".len()..].trim().parse().ok()?;
    Some(Activity {
        switches,
        busy_ticks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_switches_and_busy_time_are_read_from_proc_stat() {
        let stat = "cpu  10 1 5 100 7 2 3 4 0 0\ncpu0 5 0 2 50 0 0 0 0 0 0\ncpu1 5 0 3 50 0 0 0 0 0 0\nintr 123 4 5\nctxt 987654\nbtime 1700000000\n";
        let expected = Activity {
            switches: 987_654,
            busy_ticks: 10 + 1 + 5 + 2 + 3 + 4,
        };
        assert_eq!(parse_activity(stat), Some(expected));
        assert_eq!(parse_activity("cpu  1 2 3\nintr 4\n"), None);
        assert!(activity().is_some());
    }
}
