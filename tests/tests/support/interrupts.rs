//! How late this host delivers ptrace's interrupt to a thread that runs in user space, for the
//! ptrace backend's tests that rest on a stop coming at once. Not here: what those tests
//! measure.
//!
//! `PTRACE_INTERRUPT` of a running thread asks the kernel to stop it at its next entry into the
//! kernel, which an interprocessor interrupt makes happen at once. Some virtual machines deliver
//! that interrupt late: on a nested AMD guest (2026-12-04, fifty-sixth session) a thread spinning
//! in user space stopped 0.8 to 4.9 ms after the request (1.6 ms on average: its CPU's next
//! timer tick), where the same kernel elsewhere stopped it in tens of microseconds. A thread
//! that makes system calls stops at the next one instead, so ptrace's samples there lean toward
//! the program's system calls: `labels.c`'s labelled loops, which read the clock without one,
//! read 30% against 80%, and deep recursions whose leaves call the kernel were spliced.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The median wait, beyond which a host is said to deliver ptrace's interrupts late: a tenth
/// of fsprof's default sampling period; hosts that deliver them at once take tens of µs.
const LATE: Duration = Duration::from_micros(400);

/// Stops measured.
const STOPS: usize = 9;

/// `Some(median wait)` where this host delivers ptrace's interrupt to a thread spinning in
/// user space later than [`LATE`] (measured once per test binary), with a line saying that the
/// calling test's ptrace checks are skipped and why; `None` where the stops come at once.
pub fn ptrace_stops_late(test: &str) -> Option<Duration> {
    static MEDIAN: OnceLock<Option<Duration>> = OnceLock::new();
    let median = (*MEDIAN.get_or_init(measure)).filter(|median| *median > LATE)?;
    eprintln!(
        "skipped ({test}): this host delivers ptrace's interrupt to a running thread {:.2} ms \
         late (median of {STOPS}; at once elsewhere), so ptrace's samples land at the \
         program's next system call or timer tick (docs/limits.md)",
        median.as_secs_f64() * 1e3
    );
    Some(median)
}

/// The median time from `PTRACE_INTERRUPT` to the stop of a child spinning in user space, each
/// after a 2 ms run; `None` where ptrace is refused.
fn measure() -> Option<Duration> {
    // SAFETY: the child only spins (nothing that a fork of a threaded process may not do),
    // killed by its parent's death at the latest.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        // SAFETY: plain system calls; the loop never returns.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            let mut x = 0u64;
            loop {
                x = std::ptr::read_volatile(&x).wrapping_mul(31).wrapping_add(1);
                std::ptr::write_volatile(&mut x, x);
            }
        }
    }
    let waits = stops_of(child);
    // SAFETY: our own child, killed and reaped.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), libc::__WALL);
    }
    let mut waits = waits?;
    waits.sort_unstable();
    Some(waits[waits.len() / 2])
}

/// [`STOPS`] interrupts of spinning `child`, each let go again: how long each took.
fn stops_of(child: libc::pid_t) -> Option<Vec<Duration>> {
    std::thread::sleep(Duration::from_millis(20));
    let ptrace = |request, data: usize| {
        // SAFETY: ptrace of our own child with no address.
        unsafe { libc::ptrace(request, child, 0usize, data) }
    };
    if ptrace(libc::PTRACE_SEIZE, 0) != 0 {
        return None;
    }
    let mut waits = Vec::with_capacity(STOPS);
    for _ in 0..STOPS {
        std::thread::sleep(Duration::from_millis(2));
        let asked = Instant::now();
        if ptrace(libc::PTRACE_INTERRUPT, 0) != 0 {
            return None;
        }
        let mut status = 0;
        // SAFETY: a wait for our own traced child.
        if unsafe { libc::waitpid(child, &mut status, libc::__WALL) } != child {
            return None;
        }
        waits.push(asked.elapsed());
        ptrace(libc::PTRACE_CONT, 0);
    }
    Some(waits)
}
