//! The machine fsprof runs on, asked once for all of fsprof's threads: how many CPUs this
//! process may use; `/proc/loadavg`, kept open, for the runnable threads it counts (read at
//! most so often whatever the number of threads that ask) and the newest process id; and its
//! CPUs' switches and busy time so far. A follower of each process `run` follows asked all three
//! anew: Rust's `available_parallelism` opens three cgroup files each time, an open of a `/proc`
//! file costs about 7 us, more than its read, and each follower read the runnable threads
//! before each of its ticks (4% of the followers' CPU over a build). Not here: what the numbers
//! are used for (`record/schedule.rs`, `record/children.rs`, `native/perf/following.rs`).

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
/// from its start each time (opening it cost 7 us, three times the read).
fn loadavg() -> Option<&'static File> {
    static LOADAVG: OnceLock<Option<File>> = OnceLock::new();
    LOADAVG
        .get_or_init(|| File::open("/proc/loadavg").ok())
        .as_ref()
}

/// What `/proc/loadavg` said at the latest read by any of fsprof's threads, and when.
static LATEST: Mutex<Option<(Instant, Option<LoadAvg>)>> = Mutex::new(None);

/// The two fields of `/proc/loadavg` fsprof uses ("0.52 0.58 0.59 3/250 4711").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LoadAvg {
    /// The machine's runnable threads (running or waiting for a CPU: "3" of "3/250").
    runnable: u32,
    /// The id the kernel gave last to a process or thread created in fsprof's PID namespace.
    newest_pid: u32,
}

/// Reads `/proc/loadavg` now, and keeps what it said for [`runnable_threads`].
fn read_loadavg() -> Option<LoadAvg> {
    use std::os::unix::fs::FileExt;
    let mut bytes = [0u8; 128]; // five short fields
    let loadavg = loadavg()
        .and_then(|file| file.read_at(&mut bytes, 0).ok())
        .and_then(|read| parse_loadavg(std::str::from_utf8(&bytes[..read]).ok()?));
    *LATEST.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), loadavg));
    loadavg
}

fn parse_loadavg(text: &str) -> Option<LoadAvg> {
    let mut fields = text.split_ascii_whitespace().skip(3);
    let runnable = fields.next()?.split('/').next()?.parse().ok()?;
    let newest_pid = fields.next()?.parse().ok()?;
    Some(LoadAvg {
        runnable,
        newest_pid,
    })
}

/// The machine's runnable threads (running or waiting for a CPU), as `/proc/loadavg` said at
/// most `max_age` ago to any of fsprof's threads (a look for new processes reads it at each
/// tick: [`newest_pid`]), else read now; `None` where unreadable.
pub fn runnable_threads(max_age: Duration) -> Option<u32> {
    let latest = *LATEST.lock().unwrap_or_else(|p| p.into_inner());
    match latest {
        Some((at, loadavg)) if at.elapsed() < max_age => loadavg,
        _ => read_loadavg(),
    }
    .map(|loadavg| loadavg.runnable)
}

/// The id the kernel gave last to a process or thread created in fsprof's PID namespace (a
/// child in a nested namespace has an id here too), read now: unchanged since an earlier look,
/// no process has been created since. `None` where unreadable. The same read tells
/// [`runnable_threads`] (the look's own read was 7% of fsprof's CPU beside a two-thread
/// program by a profile, and the count's a second read a tick; one read saved nothing that
/// fsprof's CPU showed, 2026-12-05).
pub fn newest_pid() -> Option<u32> {
    read_loadavg().map(|loadavg| loadavg.newest_pid)
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

/// The machine's [`Activity`] so far; `None` where `/proc/stat` is unreadable. The file is
/// kept open and read whole from its start by one `pread` into a buffer kept at the size it
/// needed (opened and read to a string each time, it was an open, a `statx`, eight reads and a
/// close, four times a second: 3% of fsprof's CPU beside a two-thread program, issue 39).
pub fn activity() -> Option<Activity> {
    use std::os::unix::fs::FileExt;
    /// The file, once opened, and the buffer it is read into.
    static STAT: Mutex<Option<(File, Vec<u8>)>> = Mutex::new(None);
    /// What one read takes at most (a machine's interrupt counts make the file long).
    const MOST: usize = 1 << 20;
    let mut stat = STAT.lock().unwrap_or_else(|p| p.into_inner());
    if stat.is_none() {
        *stat = Some((File::open("/proc/stat").ok()?, vec![0; 4096]));
    }
    let (file, buf) = stat.as_mut()?;
    loop {
        let read = file.read_at(buf, 0).ok()?;
        if read < buf.len() || buf.len() >= MOST {
            return parse_activity(std::str::from_utf8(&buf[..read]).ok()?);
        }
        let longer = buf.len() * 2;
        buf.resize(longer, 0); // filled: the file may be longer, read it again whole
    }
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

    /// The file kept open tells what it says now at each read, not what it said at the first.
    #[test]
    fn the_machines_activity_is_read_anew_each_time() {
        let first = activity().expect("/proc/stat read");
        assert!(first.switches > 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while activity().expect("read again").switches == first.switches {
            assert!(
                Instant::now() < deadline,
                "the switches did not move in 10 s"
            );
            std::thread::sleep(Duration::from_millis(5)); // a switch of this thread
        }
    }

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

    #[test]
    fn the_runnable_threads_and_newest_pid_are_read_from_proc_loadavg() {
        let expected = LoadAvg {
            runnable: 3,
            newest_pid: 4711,
        };
        assert_eq!(parse_loadavg("0.52 0.58 0.59 3/250 4711\n"), Some(expected));
        assert_eq!(parse_loadavg("0.52 0.58 0.59 3/250"), None);
        let before = newest_pid().expect("/proc/loadavg names the newest id");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        // Read again from the start of the file kept open: a new value, not the first one's.
        assert_ne!(newest_pid(), Some(before));
        assert!(runnable_threads(Duration::from_secs(1)).is_some_and(|n| n >= 1));
    }
}
