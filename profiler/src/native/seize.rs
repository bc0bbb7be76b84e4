//! `PTRACE_SEIZE` that cannot deadlock with the target's `exec`.
//!
//! A thread calling `execve` waits, holding its process's `cred_guard_mutex`, until every other
//! thread of its process is gone, and a traced thread that exited is gone only once its tracer
//! reaps it. `PTRACE_SEIZE` takes that same mutex. So when fsprof seizes any thread of a process
//! that is in `exec` while a thread it traces there has exited unreaped, the seize waits for the
//! exec, the exec for fsprof to reap, and fsprof is in the seize: the program hangs for good (seen
//! once with rustup's rustc, which execs with a second thread). So a seize is watched: once it has
//! waited [`GRACE`], a watcher thread reaps the process's threads that exited (any thread of the
//! tracer's process may reap its tracees; never the leader, whose exit is the program's), the
//! exec goes on, and so does the seize; its caller is told which threads were reaped, to forget
//! them. A tracee's ptrace stops are reported to any wait, whatever its flags: the watcher looks
//! first without taking (`WNOWAIT`) and takes only an exit, so a stop stays the tracer's.
//!
//! Not here: the rest of ptrace (`tracer.rs`).

use nix::errno::Errno;
use nix::libc;
use std::sync::{Condvar, Mutex, Once};
use std::time::{Duration, Instant};

/// How long a seize may wait before the watcher reaps exited threads (a seize returns in
/// microseconds, or once an exec that is not waiting on fsprof is through).
pub const GRACE: Duration = Duration::from_millis(20);

/// A seize in progress.
struct Seizing {
    id: u64,
    pid: u32,
    /// When the watcher is to look at it (again).
    due: Instant,
    /// Threads the watcher reaped for it.
    reaped: Vec<u32>,
}

static SEIZING: Mutex<(u64, Vec<Seizing>)> = Mutex::new((0, Vec::new()));
static WAKE: Condvar = Condvar::new();
static WATCHER: Once = Once::new();

/// Seizes thread `tid` of process `pid` (see the module header); also returns the threads of
/// `pid` the watcher reaped meanwhile (they exited; the caller no longer traces them).
pub fn seize(pid: u32, tid: u32) -> (Result<(), Errno>, Vec<u32>) {
    WATCHER.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("fsprof-seize".to_owned())
            .spawn(watch);
    });
    let id = {
        let mut seizing = lock();
        seizing.0 += 1;
        let id = seizing.0;
        let due = Instant::now() + GRACE;
        let reaped = Vec::new();
        seizing.1.push(Seizing {
            id,
            pid,
            due,
            reaped,
        });
        id
    };
    // The watcher is not woken (a seize per ptrace sample would wake it hundreds of times a
    // second for nothing): it looks every GRACE, so a seize that waits is seen within two.
    // SAFETY: ptrace with no pointers.
    let result = unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid as libc::pid_t, 0, 0) };
    let mut seizing = lock();
    let reaped = match seizing.1.iter().position(|s| s.id == id) {
        Some(index) => seizing.1.swap_remove(index).reaped,
        None => Vec::new(),
    };
    (Errno::result(result).map(drop), reaped)
}

fn lock() -> std::sync::MutexGuard<'static, (u64, Vec<Seizing>)> {
    SEIZING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watcher: looks every [`GRACE`] for a seize that is due, reaps for it, looks again a
/// [`GRACE`] later.
fn watch() {
    crate::os::privilege::drop_all(); // it reads /proc and reaps its own tracees only
    let mut seizing = lock();
    loop {
        let now = Instant::now();
        let Some(due) = seizing.1.iter().map(|s| s.due).min() else {
            seizing = (WAKE.wait_timeout(seizing, GRACE))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            continue;
        };
        if due > now {
            seizing = (WAKE.wait_timeout(seizing, due - now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            continue;
        }
        for waiting in seizing.1.iter_mut().filter(|s| s.due <= now) {
            waiting.reaped.extend(reap_exited(waiting.pid));
            waiting.due = now + GRACE;
        }
    }
}

/// Reaps the threads of process `pid` (but its leader) that exited and that this process
/// traces; returns them.
fn reap_exited(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let tids = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok());
    let mut reaped = Vec::new();
    for tid in tids.filter(|tid| *tid != pid) {
        let flags = libc::WEXITED | libc::WNOHANG | libc::__WALL;
        // An exit stays until taken: looked at, then taken if it is one.
        if exited(tid, flags | libc::WNOWAIT) && exited(tid, flags) {
            reaped.push(tid);
        }
    }
    reaped
}

/// Whether `waitid(P_PID, tid, flags)` reports thread `tid`'s exit (not a stop, not nothing).
fn exited(tid: u32, flags: i32) -> bool {
    // SAFETY: waitid with a valid siginfo.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let reported = libc::waitid(libc::P_PID, tid, &mut info, flags) == 0;
        let code = info.si_code;
        reported
            && info.si_pid() == tid as i32
            && matches!(code, libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Write};

    /// The state letter of thread `tid` of `pid` (`/proc/PID/task/TID/stat`), if it is there.
    fn state(pid: u32, tid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    }

    /// python3 with a second thread that reads one byte of its standard input and ends, then
    /// `after` (Python lines run once that thread is joined); the program and that thread's id.
    fn python_with_a_thread(after: &str) -> (std::process::Child, u32) {
        let script = format!(
            "import os, sys, threading\n\
             t = threading.Thread(target=lambda: sys.stdin.read(1))\n\
             t.start()\n\
             print(t.native_id, flush=True)\n\
             t.join()\n{after}"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let thread = line.trim().parse().unwrap();
        (child, thread)
    }

    /// A thread in a ptrace stop is not taken for an exited one: its stop stays the tracer's.
    #[test]
    fn the_watcher_leaves_a_stop_to_the_tracer() {
        let (mut child, thread) = python_with_a_thread("");
        let (pid, thread) = (child.id(), thread as i32);
        // SAFETY: ptrace and waitpid with valid arguments.
        unsafe {
            assert_eq!(libc::ptrace(libc::PTRACE_SEIZE, thread, 0, 0), 0);
            assert_eq!(libc::ptrace(libc::PTRACE_INTERRUPT, thread, 0, 0), 0);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while state(pid, thread as u32) != Some('t') {
            assert!(Instant::now() < deadline, "the thread never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(reap_exited(pid), Vec::<u32>::new());
        let mut status = 0;
        // SAFETY: as above.
        let stopped = unsafe { libc::waitpid(thread, &mut status, libc::__WALL | libc::WNOHANG) };
        assert_eq!(stopped, thread, "the stop was taken");
        assert!(libc::WIFSTOPPED(status));
        // SAFETY: as above (it is stopped: detach lets it go).
        unsafe { libc::ptrace(libc::PTRACE_DETACH, thread, 0, 0) };
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The deadlock, made on purpose: a traced thread exits unreaped while its process execs,
    /// and then another of its threads is seized. Without the watcher the seize never returns
    /// (the test then fails at its deadline, killing the program to free itself).
    #[test]
    fn a_seize_during_an_exec_waiting_for_a_traced_thread_returns() {
        let (mut child, thread) = python_with_a_thread("os.execv('/bin/sleep', ['sleep', '30'])\n");
        let pid = child.id();
        let (done, result) = std::sync::mpsc::channel();
        let mut stdin = child.stdin.take().unwrap();
        let tracer = std::thread::spawn(move || {
            // The tracer: seizes the thread, lets it exit, and does not reap it.
            // SAFETY: ptrace with no pointers.
            let seized = unsafe { libc::ptrace(libc::PTRACE_SEIZE, thread as i32, 0, 0) };
            assert_eq!(seized, 0, "{}", Errno::last());
            stdin.write_all(b"x").unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let in_exec = || {
                let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall"));
                let execve = format!("{} ", libc::SYS_execve);
                state(pid, thread) == Some('Z') && syscall.is_ok_and(|s| s.starts_with(&execve))
            };
            while !in_exec() {
                assert!(
                    Instant::now() < deadline,
                    "the program never reached its exec"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            let started = Instant::now();
            let (result, reaped) = seize(pid, pid);
            done.send((result, reaped, started.elapsed())).unwrap();
            // SAFETY: ptrace with no pointers (fails harmlessly if not attached).
            unsafe { libc::ptrace(libc::PTRACE_DETACH, pid as i32, 0, 0) };
        });
        let outcome = result.recv_timeout(Duration::from_secs(10));
        let _ = child.kill();
        let _ = tracer.join(); // its end detaches the program, if it is still attached
        let _ = child.wait();
        let (result, reaped, took) = outcome.expect("the seize never returned: deadlocked");
        assert_eq!(reaped, vec![thread]);
        assert!(result.is_ok(), "{result:?}");
        assert!(took >= GRACE, "{took:?}: it did not wait for the exec");
    }
}
