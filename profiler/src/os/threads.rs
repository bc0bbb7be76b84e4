//! Threads for fsprof's work per followed process, kept for the next process when one ends:
//! a build starts a process every few milliseconds, and each followed process had a thread of
//! its own (its sampler) and one for reads that wait for the target (`native/off_thread.rs`);
//! starting and ending two threads each (their stacks mapped, guarded and unmapped with a TLB
//! flush that interrupts the other CPUs, a malloc arena warmed again) was a tenth of what
//! fsprof spent following `make -j2`.
//!
//! [`spawn`] runs a job on an idle thread, or on a new one where none is idle; a thread waits
//! [`IDLE`] for its next job, then ends. A job sees what a thread started for it would: the
//! caller's signal mask (set again for each job), normal scheduling at the thread's first nice
//! value (a job that raised its priority has it put back). A thread is kept for another job only
//! if the job left it as a new one would be: a thread that gave up fsprof's capabilities (they
//! cannot be taken back) or that still traces a thread (the ptrace tie would outlive the job:
//! only a thread's end undoes it) ends instead. Not here: what the jobs do.

use nix::libc;
use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long an idle thread waits for another job before it ends.
pub const IDLE: Duration = Duration::from_secs(1);
/// Most threads kept idle at once; others end with their job.
const MOST_IDLE: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

/// Jobs given to idle threads, and how many threads wait for one.
struct Pool {
    state: Mutex<State>,
    ready: Condvar,
}

struct State {
    jobs: VecDeque<(Job, libc::sigset_t, String)>,
    /// Threads waiting for a job and not yet promised one (each job queued took one).
    idle: usize,
}

// SAFETY: `sigset_t` is plain data (an array of words).
unsafe impl Send for State {}

static POOL: Pool = Pool {
    state: Mutex::new(State {
        jobs: VecDeque::new(),
        idle: 0,
    }),
    ready: Condvar::new(),
};

/// A job's result, as [`std::thread::JoinHandle`] gives a thread's.
pub struct Handle<T> {
    result: Receiver<std::thread::Result<T>>,
}

impl<T> Handle<T> {
    /// Waits for the job to end; `Err` with the panic's payload if it panicked.
    pub fn join(self) -> std::thread::Result<T> {
        (self.result.recv()).unwrap_or_else(|_| Err(Box::new("the job's thread ended") as _))
    }
}

/// Runs `job` on a thread named `name` (at most 15 bytes are shown): an idle one of the pool, or
/// a new one. Fails only where a thread cannot be started.
pub fn spawn<T: Send + 'static>(
    name: &str,
    job: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<Handle<T>> {
    let (answer, result) = sync_channel(1);
    let job: Job = Box::new(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        let _ = answer.send(outcome);
    });
    let mask = signal_mask();
    let mut state = POOL.lock();
    if state.idle > 0 {
        state.idle -= 1;
        state.jobs.push_back((job, mask, name.to_owned()));
        drop(state);
        POOL.ready.notify_one();
    } else {
        drop(state);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || serve(job))?;
    }
    Ok(Handle { result })
}

/// A pool thread: runs `first`, then the jobs it is given, while it is fit to and they come.
fn serve(first: Job) {
    let scheduling = Scheduling::now();
    first();
    loop {
        if !fit(&scheduling) {
            return;
        }
        let Some((job, mask, name)) = POOL.next() else {
            return;
        };
        set_signal_mask(&mask);
        set_name(&name);
        job();
    }
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next job for an idle thread, or `None` after [`IDLE`] without one (or when enough
    /// threads wait already).
    fn next(&self) -> Option<(Job, libc::sigset_t, String)> {
        let mut state = self.lock();
        if state.idle >= MOST_IDLE {
            return None;
        }
        state.idle += 1;
        let (mut state, _) = self
            .ready
            .wait_timeout_while(state, IDLE, |state| state.jobs.is_empty())
            .unwrap_or_else(|e| e.into_inner());
        match state.jobs.pop_front() {
            Some(job) => Some(job), // its caller took this thread off `idle`
            None => {
                state.idle -= 1;
                None
            }
        }
    }
}

/// Whether the calling thread is as a new one would be, after a job (see the module header);
/// puts its scheduling back.
fn fit(scheduling: &Scheduling) -> bool {
    !UNFIT.get() && scheduling.restore() && crate::os::privilege::thread_intact()
}

thread_local! {
    /// The calling thread's job left it with something only its end undoes.
    static UNFIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Ends the calling thread with its job rather than keeping it for another: it holds what only
/// its end undoes (a tracer that could not detach a thread: the thread stays traced by this
/// one until it ends).
pub fn end_with_job() {
    UNFIT.set(true);
}

/// The calling thread's scheduling policy and nice value.
struct Scheduling {
    policy: i32,
    nice: i32,
}

impl Scheduling {
    fn now() -> Scheduling {
        // SAFETY: plain system calls about the calling thread.
        unsafe {
            Scheduling {
                policy: libc::sched_getscheduler(0),
                nice: libc::getpriority(libc::PRIO_PROCESS, 0),
            }
        }
    }

    /// Puts the calling thread's scheduling back to `self`; false if it cannot be.
    fn restore(&self) -> bool {
        let now = Scheduling::now();
        if now.policy == self.policy && now.nice == self.nice {
            return true;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain system calls about the calling thread, with a valid parameter block.
        unsafe {
            if now.policy != self.policy && libc::sched_setscheduler(0, self.policy, &param) != 0 {
                return false;
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, self.nice) == 0
        }
    }
}

fn signal_mask() -> libc::sigset_t {
    // SAFETY: reads the calling thread's mask into a set of our own.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask);
        mask
    }
}

fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: sets the calling thread's mask from a valid set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
    }
}

/// Names the calling thread (as `top -H` and `/proc/PID/task/TID/comm` show it).
fn set_name(name: &str) {
    let mut bytes: Vec<u8> = name.bytes().filter(|&b| b != 0).take(15).collect();
    bytes.push(0);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, bytes.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gettid() -> i32 {
        nix::unistd::gettid().as_raw()
    }

    #[test]
    fn a_job_gives_its_result_and_a_panic_its_payload() {
        assert_eq!(spawn("t", || 7).unwrap().join().unwrap(), 7);
        let panicked = spawn("t", || -> u32 { panic!("boom") }).unwrap().join();
        assert_eq!(panicked.unwrap_err().downcast_ref::<&str>(), Some(&"boom"));
    }

    #[test]
    fn an_idle_thread_takes_the_next_job_with_the_callers_name() {
        let first = spawn("fsprof-a", gettid).unwrap().join().unwrap();
        // The thread that ran it waits for another job (IDLE is a second): the next runs there
        // unless another test's job took it meanwhile, so several are tried.
        let reused = (0..20).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            let (tid, name) = spawn("fsprof-b", || {
                let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
                (gettid(), name)
            })
            .unwrap()
            .join()
            .unwrap();
            assert_eq!(name.trim(), "fsprof-b");
            tid == first
        });
        assert!(reused, "no job ran on the idle thread");
    }

    #[test]
    fn a_thread_whose_job_asked_to_end_with_it_ends() {
        let tid = spawn("t", || {
            end_with_job();
            gettid()
        })
        .unwrap()
        .join()
        .unwrap();
        let task = format!("/proc/self/task/{tid}");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::path::Path::new(&task).exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            !std::path::Path::new(&task).exists(),
            "thread {tid} was kept"
        );
    }

    #[test]
    fn a_job_has_its_callers_signal_mask_and_normal_scheduling() {
        // SAFETY: blocks SIGUSR2 in this test's thread, and restores the mask after.
        let old = signal_mask();
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let blocked = spawn("t", || {
            let mask = signal_mask();
            // SAFETY: reads a set of our own.
            let blocked = unsafe { libc::sigismember(&mask, libc::SIGUSR2) } == 1;
            // SAFETY: a nice value above the current one is always allowed.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) };
            blocked
        })
        .unwrap()
        .join()
        .unwrap();
        set_signal_mask(&old);
        assert!(blocked);
        let not_blocked = spawn("t", || {
            let mask = signal_mask();
            // SAFETY: reads a set of our own.
            unsafe { libc::sigismember(&mask, libc::SIGUSR2) == 0 }
        })
        .unwrap()
        .join()
        .unwrap();
        assert!(not_blocked);
    }
}
