//! A thread's state and scheduling totals from `/proc/<pid>/task/<tid>/stat` and `schedstat`,
//! read through descriptors kept open ([`ThreadStatus`]): a tick reads them for each of its
//! threads. Not here: the rest of what `/proc` tells about a process (`process.rs`), or what the
//! sampler makes of the answers.

use super::process::{proc_dir, state_from_stat};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

/// Reads whether a thread is running (or runnable, waiting for a CPU) from
/// `/proc/<pid>/task/<tid>/stat`. The file is kept open and re-read at offset 0.
///
/// The state at the moment of the sample is used rather than the scheduler's CPU clock
/// (`schedstat`): in a virtual machine that clock excludes time stolen by the hypervisor, so it
/// would undercount busy time relative to the wall time given to samples inside marks.
pub struct ThreadStatus {
    /// The open file, or `None` when fsprof ran out of descriptors (then it is opened each time).
    file: Option<File>,
    path: PathBuf,
    buf: Vec<u8>,
    /// Bytes of `buf` the last read filled.
    len: usize,
    /// Its `schedstat` file, opened at the first [`ThreadStatus::sched_times`] where `file` is
    /// kept open (else opened at each read).
    sched: Option<File>,
    /// The instant of the latest [`ThreadStatus::is_running_at`] that read, and what it read.
    read_for: Option<(Instant, Option<bool>)>,
}

impl ThreadStatus {
    /// The status of thread `tid` of `pid`; `None` if the thread is gone. With `keep_open` false
    /// (fsprof is short of descriptors) the file is opened at each read instead.
    pub fn open(pid: u32, tid: u32, keep_open: bool) -> Option<ThreadStatus> {
        let path = proc_dir(pid).join(format!("task/{tid}/stat"));
        let file = match File::open(&path) {
            Ok(file) => Some(file).filter(|_| keep_open),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(_) => None, // out of descriptors after all: open at each read
        };
        Some(ThreadStatus {
            file,
            path,
            buf: vec![0; 1024],
            len: 0,
            sched: None,
            read_for: None,
        })
    }

    /// How many descriptors its files kept open may hold: 2 (its `stat` and `schedstat`) where
    /// they are kept, else 0.
    pub fn descriptors(&self) -> usize {
        if self.file.is_some() {
            2
        } else {
            0
        }
    }

    /// The thread's scheduling totals now (see [`sched_times`]), read through a descriptor kept
    /// open where the status keeps one: a tick may read them for each of its threads.
    pub fn sched_times(&mut self) -> Option<SchedTimes> {
        let path = || self.path.with_file_name("schedstat");
        if self.file.is_none() {
            return parse_sched_times(&fs::read_to_string(path()).ok()?);
        }
        if self.sched.is_none() {
            self.sched = File::open(path()).ok();
        }
        let mut buf = [0u8; 128];
        let len = self.sched.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_sched_times(std::str::from_utf8(&buf[..len]).ok()?)
    }

    /// Whether the thread is running or runnable: `Ok(None)` once the thread is gone, `Err` if
    /// its state could not be read this time (out of descriptors, say).
    pub fn is_running(&mut self) -> io::Result<Option<bool>> {
        let gone = |e: &io::Error| {
            e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH)
        };
        let read = match &self.file {
            Some(file) => file.read_at(&mut self.buf, 0),
            None => File::open(&self.path).and_then(|file| file.read_at(&mut self.buf, 0)),
        };
        let len = match read {
            Ok(len) => len,
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        self.len = len;
        let stat = std::str::from_utf8(&self.buf[..len]).ok();
        Ok(stat.and_then(state_from_stat).map(|state| state == 'R'))
    }

    /// [`ThreadStatus::is_running`] as of `at` (a tick's instant): the file is read at the
    /// first call for an instant, and what it said is given again to the others (the main
    /// thread's, asked whether it exited and whether it runs, was read twice a tick).
    pub fn is_running_at(&mut self, at: Instant) -> io::Result<Option<bool>> {
        if let Some((read_for, running)) = self.read_for {
            if read_for == at {
                return Ok(running);
            }
        }
        let running = self.is_running()?;
        self.read_for = Some((at, running));
        Ok(running)
    }

    /// Whether the thread had exited at the last [`ThreadStatus::is_running`] (a zombie: a
    /// leader that ended before the process's other threads has no memory map left).
    pub fn exited(&self) -> bool {
        let stat = std::str::from_utf8(&self.buf[..self.len]).ok();
        matches!(stat.and_then(state_from_stat), Some('Z' | 'X' | 'x'))
    }

    /// Where the process's arguments start in its memory (`arg_start`, field 48 of the stat
    /// last read by [`ThreadStatus::is_running`]): a new value means a new program image (each
    /// `exec` builds a new stack). `None` if unknown, or 0: an exiting process (no memory left)
    /// or one fsprof may not read shows 0.
    pub fn image_token(&self) -> Option<u64> {
        let stat = std::str::from_utf8(&self.buf[..self.len]).ok()?;
        let fields = stat.rsplit_once(')')?.1;
        let token = fields.split_ascii_whitespace().nth(48 - 3)?.parse().ok()?;
        (token != 0).then_some(token)
    }
}

/// How many times thread `tid` has been scheduled onto a CPU (`/proc/.../schedstat`), if known:
/// unchanged between two reads means the thread has not run in between.
pub fn times_scheduled(pid: u32, tid: u32) -> Option<u64> {
    sched_times(pid, tid).map(|times| times.slices)
}

/// A thread's scheduling totals since it started (`/proc/.../schedstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedTimes {
    /// Time on a CPU, ns.
    pub run_ns: u64,
    /// Time runnable and waiting for a CPU, ns.
    pub wait_ns: u64,
    /// Times scheduled onto a CPU.
    pub slices: u64,
}

/// Thread `tid`'s scheduling totals, if the kernel keeps them.
pub fn sched_times(pid: u32, tid: u32) -> Option<SchedTimes> {
    parse_sched_times(&fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
}

/// The totals of a `schedstat` file's text.
fn parse_sched_times(text: &str) -> Option<SchedTimes> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some(SchedTimes {
        run_ns: fields.next()??,
        wait_ns: fields.next()??,
        slices: fields.next()??,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status asked again for the same instant is not read again; for a later one it is.
    #[test]
    fn a_status_is_read_once_for_an_instant() {
        let dir = std::env::temp_dir().join(format!("fsprof-status-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stat");
        fs::write(&path, "7 (a b) R 1 2 3").unwrap();
        let mut status = ThreadStatus {
            file: None, // opened at each read
            path: path.clone(),
            buf: vec![0; 1024],
            len: 0,
            sched: None,
            read_for: None,
        };
        let (tick, next) = (
            Instant::now(),
            Instant::now() + std::time::Duration::from_millis(1),
        );
        assert_eq!(status.is_running_at(tick).unwrap(), Some(true));
        fs::write(&path, "7 (a b) S 1 2 3").unwrap();
        assert_eq!(
            status.is_running_at(tick).unwrap(),
            Some(true),
            "read again"
        );
        assert_eq!(status.is_running_at(next).unwrap(), Some(false));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_exiting_process_has_no_image_token() {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let stat = |fields: &[String]| format!("7 (a (b) c) {}", fields.join(" "));
        let status = |text: String| ThreadStatus {
            file: None,
            path: PathBuf::new(),
            len: text.len(),
            buf: text.into_bytes(),
            sched: None,
            read_for: None,
        };
        assert_eq!(status(stat(&fields)).image_token(), Some(48));
        fields[48 - 3] = "0".into(); // no memory left, or not ours to read
        assert_eq!(status(stat(&fields)).image_token(), None);
    }
}
