//! Stopping target threads for an instant: ptrace, one thread at a time.
//!
//! A thread is traced only for its sample: it is *seized* (`PTRACE_SEIZE`, which neither stops
//! it nor changes its signals), interrupted, its registers handed to the caller (who copies what
//! must describe the same instant: the top of the stack, the mark slot) while it is stopped, and
//! detached, which lets it run again. A thread that does not stop in time stays attached until
//! its stop comes ([`Tracer::poll`]). While attached, a signal sent to the thread passes through
//! us and is re-injected at once; a job-control stop is left in place (a thread detached in one
//! stays stopped).
//!
//! Why not stay attached for the session (one system call less per sample, and a shorter
//! time between the tick's marks and the stop): a traced thread that `exec`s a set-user-id or
//! file-capability program runs it without its privilege, unless its tracer holds
//! `CAP_SYS_PTRACE` (a capable fsprof holds none, nor does a user's): `sudo` in a recorded build
//! would fail. Between samples nothing of the program is traced: its signals, its `exec`s and
//! its exits are its own, and its signals never wait for fsprof: a thread kept attached between
//! samples (root's fsprof did that with `--backend ptrace`) stopped at every signal it was sent
//! until fsprof passed it on, and a program taking a timer signal every 100 us ran 6 times
//! slower (issue 40's `sigreal.c`; BENCHMARKS.md).
//!
//! The target is never left stopped or traced: [`Tracer::detach_all`] (also run on drop, so on
//! errors and panics) stops each thread still attached once more only to detach it, passing on
//! any signal that was being delivered; if fsprof is killed outright, the kernel detaches
//! everything. This module knows nothing of marks or unwinding.

use crate::native::unwind::Registers;
use nix::errno::Errno;
use nix::libc;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a sample waits for a thread to stop. A thread on a CPU stops within microseconds; one
/// that is runnable but waiting for a CPU stops only when it gets one. The sampler must not wait
/// for that: its samples would then cluster at the moments the target gets a CPU back (which, in
/// a program with deadline-driven work, are the starts of new work items: we measured short
/// features overstated by 5 points on a loaded machine). Such a stop is left pending and handled
/// when it arrives ([`Tracer::poll`]), between samples.
const STOP_TIMEOUT: Duration = Duration::from_micros(500);
/// How long detaching waits for a thread to stop before giving up on it (fsprof's exit then
/// detaches it).
const DETACH_TIMEOUT: Duration = Duration::from_millis(500);
/// Rounds of detaching threads that did not stop in time.
const DETACH_ROUNDS: usize = 3;
/// The threads of fsprof that trace, by thread id (one per process recorded, each on its own
/// thread: see `record/children.rs`). Each waits only for its own thread's tracees (`__WNOTHREAD`),
/// but SIGCHLD goes to the process, and one tracer's wait may take the signal another's tracee
/// raised: the tracer that takes a SIGCHLD from the kernel passes it on to every other as a
/// signal of their own (`tgkill`), so that each looks at its tracees at once ([`wait_for_sigchld`]).
/// Each tracer so sleeps until its next tick where it used to wake every millisecond to look
/// (with five processes followed, `g++`'s, fsprof's sampling threads woke about 800 times a
/// second each: BENCHMARKS.md, issue 39).
static TRACERS: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

fn tracers() -> std::sync::MutexGuard<'static, Vec<libc::pid_t>> {
    TRACERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Default)]
struct Traced {
    /// An interrupt was sent but its stop not yet seen (the sample gave up waiting).
    interrupt_pending: bool,
}

/// Pause lengths: how long sampled threads stayed stopped, in microsecond buckets.
#[derive(Clone, Debug)]
pub struct Pauses {
    buckets: Vec<u64>,
}

impl Default for Pauses {
    fn default() -> Self {
        Pauses {
            buckets: vec![0; 10_001],
        }
    }
}

impl Pauses {
    fn add(&mut self, pause: Duration) {
        let us = (pause.as_micros() as usize).min(self.buckets.len() - 1);
        self.buckets[us] += 1;
    }

    /// Number of pauses.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The pause at quantile `q` (0–1), to the microsecond (10 ms means 10 ms or more).
    pub fn quantile(&self, q: f64) -> Duration {
        let total = self.count();
        let rank = ((total as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (us, count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_micros(us as u64);
            }
        }
        Duration::ZERO
    }
}

/// The ptrace side of a session with one target process.
pub struct Tracer {
    pid: u32,
    threads: HashMap<u32, Traced>,
    exit: Option<std::process::ExitStatus>,
    pauses: Pauses,
    old_mask: libc::sigset_t,
    /// A wait took a SIGCHLD since the latest [`Tracer::poll`] began: events may wait.
    signalled: std::cell::Cell<bool>,
}

impl Tracer {
    /// A tracer for process `pid`, attached to nothing yet. Must be used from one thread only
    /// (ptrace ties a tracee to the thread that attached): the one that creates it. It blocks
    /// SIGCHLD in that thread (to wait for stops with a timeout) until dropped.
    pub fn new(pid: u32) -> Tracer {
        let old_mask = block_sigchld();
        tracers().push(gettid());
        Tracer {
            pid,
            threads: HashMap::new(),
            exit: None,
            pauses: Pauses::default(),
            old_mask,
            signalled: std::cell::Cell::new(true),
        }
    }

    /// Whether thread `tid` is attached (seized for a sample that has not ended yet).
    pub fn is_attached(&self, tid: u32) -> bool {
        self.threads.contains_key(&tid)
    }

    /// Attaches to thread `tid` without stopping it, for one sample (never waiting on an exec
    /// that waits on fsprof: see `seize.rs`).
    pub fn seize(&mut self, tid: u32) -> Result<(), Errno> {
        let (result, reaped) = crate::native::seize::seize(self.pid, tid);
        for gone in reaped {
            self.threads.remove(&gone);
        }
        result?;
        self.threads.insert(tid, Traced::default());
        Ok(())
    }

    /// How the program ended, if the tracer collected its exit (only when fsprof is its parent).
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.exit
    }

    /// Pause lengths so far.
    pub fn pauses(&self) -> &Pauses {
        &self.pauses
    }

    /// Handles every pending event without blocking: signals are passed on, exited threads
    /// forgotten, and the stops of earlier samples that did not stop in time handed to `late`
    /// (with the thread's registers, while it is stopped) and detached.
    pub fn poll(&mut self, mut late: impl FnMut(u32, Registers)) {
        self.signalled.set(false);
        loop {
            let mut status = 0;
            let flags = libc::__WALL | libc::__WNOTHREAD | libc::WNOHANG;
            // SAFETY: waitpid with a valid status pointer.
            let mut wait = || unsafe { libc::waitpid(-1, &mut status, flags) };
            // Reaping an exited thread or process is done normally scheduled (see
            // `priority::normally`).
            let tid = match exit_waiting() {
                true => crate::os::priority::normally(wait),
                false => wait(),
            };
            if tid <= 0 {
                return;
            }
            let tid = tid as u32;
            let ours = libc::WIFSTOPPED(status)
                && status >> 16 == libc::PTRACE_EVENT_STOP
                && !is_job_stop(libc::WSTOPSIG(status))
                && self.threads.get(&tid).is_some_and(|t| t.interrupt_pending);
            if ours {
                if let Some(regs) = registers(tid) {
                    late(tid, regs);
                }
            }
            self.handle(tid, status);
        }
    }

    /// Sleeps until a tracee changes state (then [`Tracer::poll`] has work) or `timeout` passes.
    pub fn wait_for_event(&self, timeout: Duration) {
        if wait_for_sigchld(timeout) {
            self.signalled.set(true);
        }
    }

    /// Whether a wait of this tracer took a SIGCHLD since the latest [`Tracer::poll`] began:
    /// only then can a tracee's change of state (or the program's exit) wait to be handled. A
    /// SIGCHLD is pending until a wait takes it (it is blocked in every thread of fsprof, and
    /// one that another tracer's wait takes is passed on to the others).
    pub fn signalled(&self) -> bool {
        self.signalled.get()
    }

    /// Handles one event of a thread outside a sample.
    fn handle(&mut self, tid: u32, status: i32) {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            self.threads.remove(&tid);
            if tid == self.pid {
                use std::os::unix::process::ExitStatusExt;
                self.exit = Some(std::process::ExitStatus::from_raw(status));
            }
            return;
        }
        if !libc::WIFSTOPPED(status) {
            return;
        }
        let signal = libc::WSTOPSIG(status);
        let event = status >> 16;
        if event == libc::PTRACE_EVENT_STOP {
            // Any trap stop consumes a pending interrupt (a group stop included): the thread is
            // let go. Detached in a group stop (SIGSTOP, Ctrl-Z), it stays stopped, as without us.
            ptrace(libc::PTRACE_DETACH, tid, 0);
            self.threads.remove(&tid);
        } else if event == 0 {
            // Signal-delivery stop: deliver the signal as if we were not here.
            ptrace(libc::PTRACE_CONT, tid, signal as usize);
        } else {
            ptrace(libc::PTRACE_CONT, tid, 0);
        }
    }

    /// Stops thread `tid` (seized by [`Tracer::seize`]), calls `copy` with its registers while it
    /// is stopped, and lets it run again, detached. `None` if it could not be stopped in
    /// time (it stays attached, and is detached when its stop arrives), is in a job-control stop
    /// (detached, it stays in it), or is gone.
    pub fn sample<R>(&mut self, tid: u32, copy: impl FnOnce(Registers) -> R) -> Option<R> {
        let thread = self.threads.get_mut(&tid)?;
        if thread.interrupt_pending {
            return None;
        }
        let started = Instant::now();
        if !ptrace(libc::PTRACE_INTERRUPT, tid, 0) {
            self.threads.remove(&tid);
            return None;
        }
        let deadline = started + STOP_TIMEOUT;
        loop {
            let Some(status) = self.wait(tid, deadline) else {
                if let Some(thread) = self.threads.get_mut(&tid) {
                    thread.interrupt_pending = true;
                }
                return None;
            };
            let stopped_by_us = libc::WIFSTOPPED(status)
                && status >> 16 == libc::PTRACE_EVENT_STOP
                && !is_job_stop(libc::WSTOPSIG(status));
            if !stopped_by_us {
                self.handle(tid, status); // a signal on its way, an exit, a job stop
                if !self.threads.contains_key(&tid)
                    || (libc::WIFSTOPPED(status) && is_job_stop(libc::WSTOPSIG(status)))
                {
                    return None;
                }
                continue;
            }
            let result = registers(tid).map(copy);
            self.release(tid);
            self.pauses.add(started.elapsed());
            return result;
        }
    }

    /// Lets thread `tid`, stopped for a sample, run again, detached.
    fn release(&mut self, tid: u32) {
        ptrace(libc::PTRACE_DETACH, tid, 0);
        self.threads.remove(&tid);
    }

    /// Waits for an event of `tid` until `deadline`; other threads' events are handled meanwhile.
    /// (Events of other threads are handled as they come, so that the SIGCHLD they raise, which
    /// this wait consumes, delays nothing: their signals are passed on and their stops ended.)
    fn wait(&mut self, tid: u32, deadline: Instant) -> Option<i32> {
        loop {
            loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid status pointer.
                let got = unsafe {
                    libc::waitpid(
                        -1,
                        &mut status,
                        libc::__WALL | libc::__WNOTHREAD | libc::WNOHANG,
                    )
                };
                if got == tid as libc::pid_t {
                    return Some(status);
                }
                if got < 0 {
                    self.threads.remove(&tid);
                    return None;
                }
                if got == 0 {
                    break;
                }
                self.handle(got as u32, status);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if wait_for_sigchld(deadline - now) {
                self.signalled.set(true);
            }
        }
    }

    /// Detaches from every thread, leaving each running (or in the job-control stop it was in),
    /// with any signal that was being delivered passed on.
    /// A thread that cannot be stopped in time (uninterruptible sleep) is tried again, a few
    /// rounds; one still attached after that is detached by the kernel when fsprof exits.
    pub fn detach_all(&mut self) {
        if self.threads.is_empty() {
            return; // never wait again once detached: the program's exit is not ours to reap
        }
        self.poll(|_, _| {});
        for _ in 0..DETACH_ROUNDS {
            let tids: Vec<u32> = self.threads.keys().copied().collect();
            for tid in tids {
                self.detach(tid);
            }
            if self.threads.is_empty() {
                break;
            }
        }
    }

    /// Stops `tid` and detaches it; it stays in `threads` if it could not be stopped.
    fn detach(&mut self, tid: u32) {
        // A thread must be stopped to be detached. Interrupting again is harmless when an
        // interrupt is pending.
        if !ptrace(libc::PTRACE_INTERRUPT, tid, 0) {
            self.threads.remove(&tid);
            return;
        }
        let deadline = Instant::now() + DETACH_TIMEOUT;
        loop {
            let Some(status) = self.wait(tid, deadline) else {
                // Not stopped in time: try anyway; if that fails it is tried again.
                if ptrace(libc::PTRACE_DETACH, tid, 0) || !self.threads.contains_key(&tid) {
                    break;
                }
                return;
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.handle(tid, status);
                break;
            }
            if libc::WIFSTOPPED(status) {
                let signal = libc::WSTOPSIG(status);
                let event = status >> 16;
                // A signal being delivered goes with the detach; any other stop is ours (or a
                // job-control stop, which the thread keeps after the detach).
                let pass = if event == 0 { signal as usize } else { 0 };
                ptrace(libc::PTRACE_DETACH, tid, pass);
                break;
            }
        }
        self.threads.remove(&tid);
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.detach_all();
        if !self.threads.is_empty() {
            // Only this thread's end detaches them: it is not kept for another process.
            crate::os::threads::end_with_job();
        }
        let me = gettid();
        tracers().retain(|tid| *tid != me);
        // SAFETY: restores the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut());
        }
    }
}

fn is_job_stop(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

/// A ptrace request without pointers; whether it succeeded.
fn ptrace(request: libc::c_uint, tid: u32, data: usize) -> bool {
    // SAFETY: requests that take no pointer (`data` is a signal number or 0).
    unsafe { libc::ptrace(request, tid as libc::pid_t, 0usize, data) == 0 }
}

/// The registers of a stopped thread.
fn registers(tid: u32) -> Option<Registers> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: PTRACE_GETREGS fills a user_regs_struct.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        let result = unsafe {
            libc::ptrace(
                libc::PTRACE_GETREGS,
                tid as libc::pid_t,
                0usize,
                &mut regs as *mut libc::user_regs_struct,
            )
        };
        (result == 0).then_some(Registers {
            ip: regs.rip,
            sp: regs.rsp,
            bp: Some(regs.rbp),
            tp: regs.fs_base,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = tid;
        None
    }
}

/// Sleeps until a SIGCHLD arrives (a tracee changed state) or `timeout` passes; whether one
/// came. A SIGCHLD from the kernel (sent to the process: the tracee may be another tracer's)
/// is passed on to the other tracers (see [`TRACERS`]); one passed on is not passed on again.
fn wait_for_sigchld(timeout: Duration) -> bool {
    // SAFETY: sigtimedwait with a valid set, siginfo and timespec; SIGCHLD is blocked in this
    // thread.
    let (got, info) = unsafe {
        let set = sigchld_set();
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let got = libc::sigtimedwait(&set, &mut info, &timeout);
        (got, info)
    };
    // The kernel's SIGCHLD says how the child changed (`CLD_*`, all above 0); one passed on by
    // another tracer carries `SI_TKILL` or, on Linux 6.18, `SI_USER` (0).
    if got != libc::SIGCHLD || info.si_code <= 0 {
        return got == libc::SIGCHLD;
    }
    let me = gettid();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for &tid in tracers().iter().filter(|tid| **tid != me) {
        // SAFETY: tgkill with this process's id and one of its threads' (one that ended since is
        // refused, ESRCH: a thread id is only ever another process's under another group id).
        unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGCHLD) };
    }
    true
}

/// The signal mask fsprof started with, before [`block_sigchld_from_start`].
static STARTING_MASK: std::sync::OnceLock<libc::sigset_t> = std::sync::OnceLock::new();

/// Blocks SIGCHLD in the calling thread, and so in every thread it starts from now on: called
/// first thing in `main`, so that no thread of fsprof that is not waiting for the signal takes
/// it (its default action discards it) from the tracers that are. The mask before is kept for
/// the program fsprof starts ([`with_starting_mask`]).
pub fn block_sigchld_from_start() {
    let _ = STARTING_MASK.set(block_sigchld());
}

/// Has `command`'s child start with the signal mask fsprof started with (a signal mask is
/// inherited through `fork` and `exec`, and `std::process::Command` keeps it): the program's
/// SIGCHLD is not blocked because fsprof's is.
pub fn with_starting_mask(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    if let Some(mask) = STARTING_MASK.get().copied() {
        // SAFETY: only pthread_sigmask, which is async-signal-safe, runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
                Ok(())
            });
        }
    }
}

/// Blocks SIGCHLD in the calling thread (and the threads it starts from now on); the mask
/// before.
fn block_sigchld() -> libc::sigset_t {
    // SAFETY: a signal-mask call on valid sets.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigchld_set(), &mut old);
        old
    }
}

/// The signal set of SIGCHLD alone.
fn sigchld_set() -> libc::sigset_t {
    // SAFETY: plain calls on a set of our own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    }
}

/// The calling thread's id.
fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// Whether a child or tracee of the calling thread has exited and waits to be reaped (looked
/// at without reaping it).
fn exit_waiting() -> bool {
    // SAFETY: an all-zero siginfo_t is valid; waitid fills it (its pid stays 0 where none waits).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL | libc::__WNOTHREAD;
    // SAFETY: waitid with a valid siginfo pointer; WNOWAIT leaves the child waitable.
    let found = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) } == 0;
    // SAFETY: si_pid is valid for the SIGCHLD information waitid writes.
    found && unsafe { info.si_pid() } != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// Sleeps in `tracer`'s waits for `span`; how many times a signal cut a wait short.
    fn wakes(tracer: &Tracer, span: Duration) -> usize {
        let deadline = Instant::now() + span;
        let mut woken = 0;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            tracer.wait_for_event(left);
            woken += usize::from(Instant::now() < deadline);
        }
        woken
    }

    /// A SIGCHLD from the kernel (a child's exit raises one) taken by one tracer is passed on
    /// to the other, which wakes, and no further: a signal passed on is not passed on again
    /// (when it was, the two passed it back and forth thousands of times a second). The
    /// kernel sends a child's SIGCHLD to the process, and any thread of it that does not block
    /// the signal may take it and drop it: the test harness's own threads (fsprof blocks it in
    /// all of its threads from `main`) took it in about 1 run in 12 under load. So the signal
    /// here is the kernel's kind (`CLD_EXITED`) sent to this tracer's thread alone, which only
    /// it can take. Other tests' children may add a wake or two.
    #[test]
    fn a_sigchld_taken_by_one_tracer_wakes_the_other_once() {
        let ready = Arc::new(Barrier::new(2));
        let other = {
            let ready = ready.clone();
            std::thread::spawn(move || {
                let tracer = Tracer::new(std::process::id());
                ready.wait();
                wakes(&tracer, Duration::from_millis(400))
            })
        };
        let tracer = Tracer::new(std::process::id());
        ready.wait();
        // SAFETY: a zeroed siginfo with its number and code set, queued to this thread of this
        // process (a code the kernel uses is allowed only there).
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            info.si_signo = libc::SIGCHLD;
            info.si_code = libc::CLD_EXITED;
            let sent = libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                libc::getpid(),
                gettid(),
                libc::SIGCHLD,
                &info,
            );
            assert_eq!(sent, 0, "{}", std::io::Error::last_os_error());
        }
        let mine = wakes(&tracer, Duration::from_millis(400));
        let theirs = other.join().unwrap();
        assert!((1..=10).contains(&mine), "this tracer woke {mine} times");
        assert!(
            (1..=10).contains(&theirs),
            "the other tracer woke {theirs} times"
        );
    }
}
