//! The scheduling priority of fsprof's threads that must run when the target's threads want the
//! same CPUs: the sampler (`schedule.rs`: a lower nice value, back to its own once calm where
//! perf takes the samples; real-time once its ticks come late) and the region scanner
//! (`scanner.rs`: real-time), raised where the system allows it, and back; where real-time is
//! refused, a deadline task for the sampler, else the lowest nice value and short slices; and
//! normally scheduled for a while (`normally`: reaping the program). It does not decide when
//! they run.

/// Gives the calling thread priority over the target's threads where the system allows it, and
/// says how it is scheduled, with the nice value it had.
///
/// A sample must be taken when its timer says, not when a CPU happens to be free: on a busy
/// machine a normally scheduled sampler runs when the target blocks, so its samples cluster at
/// the moments the target sleeps inside a mark and overstate that feature (we measured 5 points on
/// two cores with two other busy processes). Real-time scheduling (`SCHED_FIFO`, lowest priority,
/// reset on fork so that programs we start never inherit it) removes the delay; failing that, the
/// lowest nice value and short slices shorten it (see [`Raised::escalate`]). The thread sleeps
/// almost all the time, but each wake-up takes the CPU it last ran on, the program's thread's
/// there (see [`Raised::gently`]).
pub fn raise() -> (&'static str, i32) {
    use nix::libc;
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain system calls on this process with a valid parameter block.
    unsafe {
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) == 0 {
            return ("real-time", nice);
        }
        match nearest_to_real_time(nice) {
            true => ("raised", nice),
            false => ("normal", nice),
        }
    }
}

/// Where real-time scheduling is refused: the calling thread (at `nice`) takes the lowest nice
/// value it may, -20 (else 10 below `nice`), and then short slices ([`slice()`]); `true` when its
/// nice value is lower now. A thread that may not lower its nice value (an unprivileged fsprof)
/// takes no short slices either: with a thread's weight, its wake-ups would preempt the
/// program's threads at every tick for little gain (see [`Raised::gently`]).
fn nearest_to_real_time(nice: i32) -> bool {
    use nix::libc;
    // SAFETY: plain system calls on the calling thread (the kernel clamps at -20).
    let lowered = unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, -20) == 0
            || libc::setpriority(libc::PRIO_PROCESS, 0, nice - 10) == 0
    };
    if lowered {
        // SAFETY: a plain query of the calling thread.
        slice(
            unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) },
            SHORT_SLICE,
        );
    }
    lowered
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
            // Normally scheduled again, at its nice value, with the kernel's slices.
            "deadline" if !slice(nice, std::time::Duration::ZERO) => {
                libc::sched_setscheduler(0, libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK, &param);
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
            // The kernel's slices again too (see `nearest_to_real_time`).
            "raised" if !slice(nice, std::time::Duration::ZERO) => {
                libc::setpriority(libc::PRIO_PROCESS, 0, nice);
            }
            _ => {}
        }
    }
}

/// The calling thread raised while this lives, lowered again when it is dropped (on every path
/// out of the scope that holds it). A thread already real-time (an outer guard holds it:
/// `attach`'s, over its recording and its finish) is left as it is, then and after.
pub struct Raised {
    how: &'static str,
    nice: i32,
    already: bool,
    /// Why real-time scheduling was refused, once it was (it is not asked for again).
    refused: Option<String>,
}

/// The slice a raised thread asks for where real-time is refused (see [`slice()`]): the shortest
/// the kernel gives.
const SHORT_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

/// Asks the kernel for slices of `length` for the calling thread, normally scheduled at `nice`
/// (`Duration::ZERO`: the kernel's own again); `true` when it took the request. Linux 6.12 and
/// later (EEVDF's `sched_attr.sched_runtime`, clamped to 0.1-100 ms): a woken thread whose slice
/// is shorter than the running thread's preempts it at once rather than at the end of that
/// slice (the running thread's 3 ms by default); earlier kernels ignore it.
fn slice(nice: i32, length: std::time::Duration) -> bool {
    set_attr(SchedAttr {
        policy: nix::libc::SCHED_OTHER as u32,
        nice,
        runtime: length.as_nanos() as u64,
        ..SchedAttr::default()
    })
}

/// The bandwidth a sampler refused real-time scheduling asks for as a deadline task
/// ([`deadline`]): up to `DEADLINE_RUNTIME` of CPU in every `DEADLINE_PERIOD`, half of a CPU, as
/// the sampler's loop allows itself (it is never busier than half the time); a tick that takes
/// more waits for the next period.
const DEADLINE_RUNTIME: std::time::Duration = std::time::Duration::from_millis(10);
const DEADLINE_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);

/// Makes the calling thread a deadline task (`SCHED_DEADLINE`, reset on fork: its bandwidth is
/// [`DEADLINE_RUNTIME`] in every [`DEADLINE_PERIOD`]); `true` when it is now. Where real-time
/// group scheduling (`CONFIG_RT_GROUP_SCHED`) gives fsprof's cgroup no real-time time, the kernel
/// refuses `SCHED_FIFO` but not a deadline: that check is the real-time policies' only. A deadline
/// task wakes ahead of every normally scheduled thread, as a real-time one does, but only within
/// its bandwidth, which the kernel admits against every CPU's (`kernel.sched_rt_runtime_us`, 95%
/// of each): refused where that is spent, or where the thread may not run on every CPU
/// (`taskset`).
fn deadline() -> bool {
    set_attr(SchedAttr {
        policy: SCHED_DEADLINE,
        runtime: DEADLINE_RUNTIME.as_nanos() as u64,
        deadline: DEADLINE_PERIOD.as_nanos() as u64,
        period: DEADLINE_PERIOD.as_nanos() as u64,
        ..SchedAttr::default()
    })
}

/// `SCHED_DEADLINE` (not in the libc crate's Linux constants for every target).
const SCHED_DEADLINE: u32 = 6;

/// `struct sched_attr` as the kernel's first version has it (48 bytes), for `sched_setattr`.
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

impl Default for SchedAttr {
    /// Sized, reset on fork (programs fsprof starts never inherit what it asks), the rest zero.
    fn default() -> SchedAttr {
        SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: 0,
            flags: 0x01, // SCHED_FLAG_RESET_ON_FORK
            nice: 0,
            priority: 0,
            runtime: 0,
            deadline: 0,
            period: 0,
        }
    }
}

/// Runs `f` with the calling thread normally scheduled where it is real-time or a deadline
/// task, then schedules it as before: for a system call whose kernel work may wait on a
/// normally scheduled thread of the same CPU. Reaping the program is one: `release_task` prunes
/// the process's `/proc` dentries, and where its last thread, still exiting on that CPU, was
/// pruning its own, the pruning loop (`shrink_dcache_parent`, which yields with
/// `cond_resched`, never to a lower class) spun until the kernel's real-time throttling let
/// that thread run: about 1 s of fsprof's CPU in 1 run of 16 to 24 beside busy loops, counted
/// as the program's threads waiting for a CPU (a two-thread `pair 4` read 8.95 s for 8.0).
pub fn normally<R>(f: impl FnOnce() -> R) -> R {
    use nix::libc;
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as libc::c_uint;
    // SAFETY: a plain query of the calling thread into a sized attribute block.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        ) == 0
    };
    let ahead = got
        && (attr.policy == libc::SCHED_FIFO as u32
            || attr.policy == libc::SCHED_RR as u32
            || attr.policy == SCHED_DEADLINE);
    if !ahead {
        return f();
    }
    let before = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        ..attr
    };
    set_attr(SchedAttr {
        nice: before.nice,
        ..SchedAttr::default()
    });
    let result = f();
    set_attr(before);
    result
}

/// Sets the calling thread's scheduling to `attr`; `true` when the kernel took it.
fn set_attr(attr: SchedAttr) -> bool {
    use nix::libc;
    // SAFETY: a plain system call on the calling thread with a valid, sized attribute block.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) == 0 }
}

impl Raised {
    /// Raises the calling thread now by its nice value only (10 below what it had), until
    /// [`Raised::escalate`]: a sampler that keeps its time.
    ///
    /// A real-time thread that wakes on the CPU of the program's thread preempts it even when
    /// another CPU is idle (the kernel places a woken real-time thread on the CPU it last ran
    /// on unless a real-time thread holds it): under `fsprof run`, awk (one thread, a second
    /// CPU idle) was switched out 289 and 428 times in 7 s against 24 alone, 30 and 35 with the
    /// sampler normally scheduled, which a woken thread finds an idle CPU for. A lower nice
    /// value keeps most of the priority's effect where the CPUs are busy. Not short slices
    /// (`slice()`) as well: with them a sampler taking its samples itself (`--no-native`, never
    /// calmed) cost python3 with four threads 1.075 of its time alone against 1.002 without
    /// (8 rounds, interleaved, the sixtieth session), its wake-ups preempting the thread that
    /// held the interpreter's lock.
    pub fn gently() -> Raised {
        use nix::libc;
        Raised::already().unwrap_or_else(|| {
            // SAFETY: plain system calls on the calling thread.
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            // SAFETY: as above.
            let niced = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice - 10) } == 0;
            Raised {
                how: if niced { "raised" } else { "normal" },
                nice,
                already: false,
                refused: None,
            }
        })
    }

    /// A guard for a thread that is real-time already, if it is.
    fn already() -> Option<Raised> {
        // SAFETY: a plain query of the calling thread.
        let policy = unsafe { nix::libc::sched_getscheduler(0) } & !nix::libc::SCHED_RESET_ON_FORK;
        (policy == nix::libc::SCHED_FIFO).then_some(Raised {
            how: "real-time",
            nice: 0,
            already: true,
            refused: None,
        })
    }

    /// Makes the thread real-time where the system allows it (its ticks came late); `true`
    /// when it is now, or a deadline task instead. Where real-time is refused (see
    /// [`Raised::refused`]), the thread becomes a deadline task (`deadline`: ahead of the
    /// program's threads within half a CPU's time) where the kernel allows that, else takes the
    /// lowest nice value it may, "nice -20", and short slices; either for the rest of its life
    /// (not calmed again, as a real-time one is not), and real-time is not asked for again.
    ///
    /// Among busy threads a normally scheduled thread gets its weight's share of a CPU (by the
    /// kernel's weights, at nice -10 beside 500 busy threads a CPU, 1.8%; at -20, 15%): beside
    /// 1000 busy threads on two CPUs, in a cgroup without real-time time, 6 runs each lost 142
    /// to 1127 perf samples at nice -10 and 0 to 130 at nice -20, their ticks 12-76 against
    /// 72-120 (BENCHMARKS.md, the fifty-ninth session). Late ticks stay: a tick that takes more
    /// than its share of the CPU leaves the thread behind the others (the kernel's lag), and the
    /// next waits until they catch up (waits of 300 ms were seen). Short slices (see `slice()`)
    /// let a woken thread preempt at once where it is not behind: late ticks 23-33% (median 27%)
    /// against 23-51% (38%) at nice -20 alone (the sixtieth session). As a deadline task, in the
    /// same cgroup: 0.9-1.9% late, none lost, against 18-31% at nice -20 and short slices (6
    /// interleaved runs each, the sixty-first session), as real-time keeps them.
    pub fn escalate(&mut self) -> bool {
        use nix::libc;
        if self.ahead() {
            return true;
        }
        if self.refused.is_none() {
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: a plain system call on the calling thread with a valid parameter block.
            let set = unsafe {
                libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
            } == 0;
            if set {
                self.how = "real-time";
                return true;
            }
            self.refused = Some(refusal(nix::errno::Errno::last()));
            if deadline() {
                self.how = "deadline";
                return true;
            }
            if nearest_to_real_time(self.nice) {
                // SAFETY: a plain query of the calling thread.
                let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
                self.how = if now == -20 { "nice -20" } else { "raised" };
            }
        }
        false
    }

    /// Why real-time scheduling was refused to the thread, in words for the report, once
    /// [`Raised::escalate`] asked for it and was refused.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Puts a thread raised by its nice value alone back to the nice value it had, and the
    /// kernel's slices, until
    /// [`Raised::escalate`]: a sampler whose samples the kernel takes at their instants (perf),
    /// for which a tick that waits for a CPU delays only their reading, once its ticks have
    /// come on time for a while. At nice -10 such a sampler cost python3 with four threads (two
    /// ping-pong pairs on two CPUs) 1 to 4 points more than at its own nice value, its
    /// wake-ups preempting the program's threads; the shares beside two busy loops were as
    /// close to the truth either way (BENCHMARKS.md, the fifty-sixth session). Not from the
    /// start: at its own nice value from the first tick, beside a program starting 1000 busy
    /// threads on two CPUs, it saw all of them in 4 runs of 17 (9 raised) and lost samples in 7
    /// (4 raised).
    pub fn calm(&mut self) {
        if self.how != "raised" {
            return;
        }
        lower("raised", self.nice);
        self.how = "normal";
    }

    /// How the thread is scheduled (see [`raise`]; "deadline" where [`Raised::escalate`] made
    /// it a deadline task).
    pub fn how(&self) -> &'static str {
        self.how
    }

    /// Whether the thread is scheduled ahead of every normally scheduled thread: real-time, or
    /// a deadline task within its bandwidth.
    pub fn ahead(&self) -> bool {
        matches!(self.how, "real-time" | "deadline")
    }
}

/// Why `sched_setscheduler` refused real-time scheduling with `errno`, and what would allow it.
fn refusal(errno: nix::errno::Errno) -> String {
    // The calling thread's capabilities: fsprof's threads drop theirs one by one.
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    // SAFETY: a plain query of this process's limits into a valid structure.
    let rtprio = unsafe {
        let mut limit = std::mem::zeroed::<nix::libc::rlimit>();
        (nix::libc::getrlimit(nix::libc::RLIMIT_RTPRIO, &mut limit) == 0).then_some(limit.rlim_cur)
    };
    refusal_words(errno, may_be_real_time(&status, rtprio), &cgroups)
}

/// Whether a thread with this `/proc/thread-self/status` and real-time limit (`RLIMIT_RTPRIO`)
/// may make itself real-time by its privileges: `CAP_SYS_NICE` (bit 23 of the effective set) or
/// a limit of at least 1.
fn may_be_real_time(status: &str, rtprio: Option<u64>) -> bool {
    const CAP_SYS_NICE: u32 = 23;
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    effective & (1 << CAP_SYS_NICE) != 0 || rtprio.is_some_and(|limit| limit >= 1)
}

/// The words of [`refusal`]: `privileged` where the process may be real-time by its
/// privileges (then a cgroup without real-time time refused it: the kernel's real-time group
/// scheduling, `CONFIG_RT_GROUP_SCHED`), `cgroups` the text of `/proc/self/cgroup`.
fn refusal_words(errno: nix::errno::Errno, privileged: bool, cgroups: &str) -> String {
    if errno != nix::errno::Errno::EPERM {
        return format!("real-time scheduling refused: {}", errno.desc());
    }
    if !privileged {
        return "real-time scheduling refused: fsprof has neither CAP_SYS_NICE nor a real-time limit (`ulimit -r`); run it as root or with CAP_SYS_NICE".to_owned();
    }
    // A version 1 hierarchy's line with the cpu controller, else the unified hierarchy's.
    let line = |cpu: bool| {
        cgroups.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let has = match cpu {
                true => controllers.split(',').any(|c| c == "cpu"),
                false => controllers.is_empty(),
            };
            has.then_some(path)
        })
    };
    let (path, unified) = match line(true) {
        Some(path) => (Some(path), false),
        None => (line(false), true),
    };
    let root = match unified {
        true => "the root cgroup (as root: `echo $$ > /sys/fs/cgroup/cgroup.procs` in its shell)",
        false => "the root of the cpu controller's hierarchy (its cgroup.procs)",
    };
    match path {
        Some(path) if path != "/" => format!(
            "real-time scheduling refused: the kernel's real-time group scheduling gives fsprof's cgroup ({path}) no real-time time; run fsprof from {root}, or give that cgroup real-time time (cpu.rt_runtime_us)"
        ),
        _ => "real-time scheduling refused, though fsprof may use it (kernel.sched_rt_runtime_us, or a security module?)".to_owned(),
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        if self.already {
            return;
        }
        if self.ahead() {
            lower(self.how, self.nice);
        }
        // Its nice value and the kernel's slices back (where neither changed, nothing changes).
        lower("raised", self.nice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::libc;

    fn policy() -> i32 {
        // SAFETY: a plain query of the calling thread.
        unsafe { libc::sched_getscheduler(0) & !libc::SCHED_RESET_ON_FORK }
    }

    fn nice() -> i32 {
        // SAFETY: as above.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    /// Gently is a lower nice value only; escalated, the thread is real-time; dropped, it is as
    /// it was, both ways (where this test may raise at all).
    #[test]
    fn a_gently_raised_thread_escalates_and_comes_back() {
        std::thread::spawn(|| {
            let (before, policy_before) = (nice(), policy());
            {
                let mut raised = Raised::gently();
                if raised.how() == "raised" {
                    assert_eq!(nice(), before - 10);
                }
                assert_eq!(policy(), policy_before, "not real-time yet");
                if raised.escalate() {
                    assert_eq!(raised.how(), "real-time");
                    assert_eq!(policy(), libc::SCHED_FIFO);
                }
            }
            assert_eq!((nice(), policy()), (before, policy_before));
        })
        .join()
        .unwrap();
    }

    /// A real-time thread runs a closure normally scheduled, and is real-time again after it
    /// (where this test may raise at all).
    #[test]
    fn a_real_time_thread_runs_normally_for_a_while() {
        std::thread::spawn(|| {
            let mut raised = Raised::gently();
            if !raised.escalate() || raised.how() != "real-time" {
                eprintln!("skipped: real-time refused here");
                return;
            }
            assert_eq!(normally(policy), libc::SCHED_OTHER);
            assert_eq!(policy(), libc::SCHED_FIFO);
            // Reset on fork still: a program fsprof starts never inherits it.
            // SAFETY: a plain query of the calling thread.
            let flags = unsafe { libc::sched_getscheduler(0) };
            assert_ne!(flags & libc::SCHED_RESET_ON_FORK, 0);
        })
        .join()
        .unwrap();
    }

    /// What a refusal says: the error where it is not a permission's, the privilege where the
    /// process has none, the cgroup where it has one (real-time group scheduling).
    #[test]
    fn a_refusal_names_its_cause_and_what_would_allow_real_time() {
        use nix::errno::Errno;
        let nice = "Name:\tfsprof\nCapEff:\t0000000000800000\n";
        let none = "Name:\tfsprof\nCapEff:\t0000000000000000\n";
        assert!(may_be_real_time(nice, Some(0)));
        assert!(may_be_real_time(none, Some(1)));
        assert!(!may_be_real_time(none, Some(0)) && !may_be_real_time("", None));
        let v2 = "0::/process_api/eabc\n";
        let words = refusal_words(Errno::EPERM, true, v2);
        assert!(words.contains("cgroup (/process_api/eabc)"), "{words}");
        assert!(words.contains("/sys/fs/cgroup/cgroup.procs"), "{words}");
        let v1 = "12:pids:/a\n4:cpu,cpuacct:/docker/x\n0::/\n";
        let words = refusal_words(Errno::EPERM, true, v1);
        assert!(words.contains("cgroup (/docker/x)"), "{words}");
        assert!(words.contains("the cpu controller's hierarchy"), "{words}");
        assert!(refusal_words(Errno::EPERM, true, "0::/\n").contains("though fsprof may use it"));
        assert!(refusal_words(Errno::EPERM, false, v2).contains("neither CAP_SYS_NICE"));
        assert!(refusal_words(Errno::EBUSY, true, v2).ends_with(Errno::EBUSY.desc()));
    }

    /// Calmed, a gently raised thread is at its own nice value again, may still escalate, and is
    /// as it was once dropped.
    #[test]
    fn a_calmed_thread_is_back_at_its_nice_value_and_may_still_escalate() {
        std::thread::spawn(|| {
            let (before, policy_before) = (nice(), policy());
            {
                let mut raised = Raised::gently();
                if raised.how() != "raised" {
                    return; // this test may not lower its nice value
                }
                raised.calm();
                assert_eq!((raised.how(), nice()), ("normal", before));
                if raised.escalate() {
                    assert_eq!(policy(), libc::SCHED_FIFO);
                }
            }
            assert_eq!((nice(), policy()), (before, policy_before));
        })
        .join()
        .unwrap();
    }

    /// A deadline task (where the kernel admits one: root, every CPU allowed) starts threads
    /// that are normally scheduled (reset on fork: a deadline task's fork fails without it),
    /// and lowered is normally scheduled again at the nice value it had.
    #[test]
    fn a_deadline_task_starts_normal_threads_and_comes_back() {
        std::thread::spawn(|| {
            let before = nice();
            if !deadline() {
                return; // this test may not make a deadline task
            }
            assert_eq!(policy(), SCHED_DEADLINE as i32);
            let child = std::thread::spawn(policy).join().expect("a thread started");
            assert_eq!(child, libc::SCHED_OTHER);
            lower("deadline", before);
            assert_eq!((policy(), nice()), (libc::SCHED_OTHER, before));
        })
        .join()
        .unwrap();
    }

    /// The kernel's slice for the calling thread, in ns (`se.slice` of its `sched`), where shown.
    fn kernel_slice() -> Option<u64> {
        let sched = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let line = sched.lines().find(|line| line.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    /// Whether the running kernel is at least Linux 6.12 (a slice per thread).
    fn slices_per_thread() -> bool {
        let release = nix::sys::utsname::uname().unwrap();
        let release = release.release().to_string_lossy().into_owned();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (major, minor) >= (6, 12)
    }

    /// A short slice asked for is the thread's (on kernels that give one per thread), and
    /// lowering the thread gives the kernel's back, its nice value unchanged.
    #[test]
    fn a_short_slice_is_taken_and_given_back() {
        std::thread::spawn(|| {
            let (before, slice_before) = (nice(), kernel_slice());
            let took = slice(before, SHORT_SLICE);
            if slices_per_thread() && slice_before.is_some() {
                assert!(took, "sched_setattr refused a slice");
                assert_eq!(kernel_slice(), Some(SHORT_SLICE.as_nanos() as u64));
            }
            assert_eq!(nice(), before);
            lower("raised", before);
            assert_eq!((nice(), kernel_slice()), (before, slice_before));
        })
        .join()
        .unwrap();
    }
}
