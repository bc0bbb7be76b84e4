//! The scheduling priority of fsprof's threads that must run when the target's threads want the
//! same CPUs: the sampler (`schedule.rs`) and the region scanner (`scanner.rs`). Raised to
//! real-time where the system allows it, and back. It does not decide when they run.

/// Gives the calling thread priority over the target's threads where the system allows it, and
/// says how it is scheduled, with the nice value it had.
///
/// A sample must be taken when its timer says, not when a CPU happens to be free: on a busy
/// machine a normally scheduled sampler runs when the target blocks, so its samples cluster at
/// the moments the target sleeps inside a mark and overstate that feature (we measured 5 points on
/// two cores with two other busy processes). Real-time scheduling (`SCHED_FIFO`, lowest priority,
/// reset on fork so that programs we start never inherit it) removes the delay; failing that, a
/// lower nice value shortens it. The sampler sleeps almost all the time, so this costs the
/// machine nothing.
pub fn raise() -> (&'static str, i32) {
    use nix::libc;
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain system calls on this process with a valid parameter block.
    unsafe {
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) == 0 {
            return ("real-time", nice);
        }
        if libc::setpriority(libc::PRIO_PROCESS, 0, nice - 10) == 0 {
            return ("raised", nice);
        }
        ("normal", nice)
    }
}

/// Back to normal scheduling for the calling thread, raised by [`raise`] (`nice`: the value it
/// had), once recording is over (writing the profile needs no priority).
pub fn lower(raised: &str, nice: i32) {
    use nix::libc;
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system calls on this process with valid arguments. Keeping the reset-on-fork
    // flag matters: an unprivileged process (real-time through RLIMIT_RTPRIO) may not clear it.
    unsafe {
        match raised {
            "real-time" => {
                libc::sched_setscheduler(0, libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK, &param);
            }
            "raised" => {
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
            _ => {}
        }
    }
}

/// The calling thread raised by [`raise`] while this lives, lowered again when it is dropped
/// (on every path out of the scope that holds it). A thread already real-time (an outer guard
/// holds it: `attach`'s, over its recording and its finish) is left as it is, then and after.
pub struct Raised {
    how: &'static str,
    nice: i32,
    already: bool,
}

impl Raised {
    /// Raises the calling thread now.
    pub fn now() -> Raised {
        use nix::libc;
        // SAFETY: a plain query of the calling thread.
        let policy = unsafe { libc::sched_getscheduler(0) } & !libc::SCHED_RESET_ON_FORK;
        if policy == libc::SCHED_FIFO {
            return Raised {
                how: "real-time",
                nice: 0,
                already: true,
            };
        }
        let (how, nice) = raise();
        Raised {
            how,
            nice,
            already: false,
        }
    }

    /// How the thread is scheduled (see [`raise`]).
    pub fn how(&self) -> &'static str {
        self.how
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        if !self.already {
            lower(self.how, self.nice);
        }
    }
}
