//! Wake-ups at the forks of the processes fsprof follows (`fsprof run`, and `attach
//! --children`), in the per-CPU design: a program at `sched_process_fork` ([`fork_program`])
//! puts each new process whose parent is watched in a one-page ring that wakes its reader, a
//! thread here, which raises a flag and wakes the thread that records the program (a `SIGCHLD`
//! of its own, which its wait for the program's events returns on); the exec programs do the
//! same for a watched process that execs (whose forks wake nothing until fsprof watches it
//! again). The recording then looks for new processes soon after (`record/schedule.rs`), where
//! it looked every 5 ms whether any was made or not: a third of fsprof's CPU beside a program
//! at rest. While it looks that often anyway, no fork wakes it ([`wake`]'s quiet time). Not
//! here: when the recording looks, finding the processes (`record/children.rs`), the exec
//! programs (`programs.rs`).

use crate::native::asm::{
    insn, Asm, Insn, ADD64_IMM, CALL, EXIT, HELPER_GET_CURRENT_PID_TGID, HELPER_KTIME_GET_NS,
    HELPER_PROBE_READ_KERNEL, HELPER_RINGBUF_OUTPUT, JEQ_IMM, JEQ_REG, JLT_REG, JNE_IMM, LDX_DW,
    LDX_W, LD_IMM64, MOV64_IMM, MOV64_REG, OR64_IMM, PSEUDO_MAP_FD, RB_FORCE_WAKEUP, RSH64_IMM,
    STX_W, ST_DW, ST_W,
};
use crate::native::bpf::{
    attach_tracepoint, create_map, load_tracepoint_program, update_bytes, BPF_MAP_TYPE_ARRAY,
};
use crate::native::fragments::{lookup, watched_index};
use crate::native::layout::PROCESS_KEY;
use crate::native::ring::CopyRing;
use nix::libc;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// What the waking thread and the recording share.
pub(in crate::native) struct ForkWakes {
    /// A watched process made one since the flag was last taken.
    forked: AtomicBool,
    /// The thread to wake (0: none yet).
    waiter: AtomicI32,
    /// The programs' one-word array: until when (CLOCK_MONOTONIC ns) the recording looks
    /// often enough that no fork is to wake it.
    quiet: OwnedFd,
}

impl ForkWakes {
    /// Has the calling thread woken at each fork from now on.
    pub(in crate::native) fn wake_me(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.waiter.store(tid, Ordering::Release);
    }

    /// Whether a watched process made one since the last call.
    pub(in crate::native) fn take(&self) -> bool {
        self.forked.swap(false, Ordering::AcqRel)
    }

    /// No fork wakes the recording until `until` (CLOCK_MONOTONIC ns): it looks often enough
    /// until then. A wake costs the waking thread and the recording's each a wake-up (tens of
    /// us of CPU on a virtual machine): a wake at every fork and exec of `make -j2`'s
    /// processes cost fsprof 85 ms over three builds against 75 looking every 5 ms.
    pub(in crate::native) fn quiet_until(&self, until: u64) {
        let _ = update_bytes(
            self.quiet.as_raw_fd(),
            &0u32.to_ne_bytes(),
            &until.to_ne_bytes(),
        );
    }
}

/// The program, its ring and the thread that reads it, while the design lives.
pub(super) struct Forks {
    wakes: Arc<ForkWakes>,
    /// What the programs wake through (the thread owns the ring and lives as long as this;
    /// `wakes` holds the quiet map).
    wake: Wake,
    /// Written to stop the thread.
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
    _program: OwnedFd,
    _link: OwnedFd,
}

impl Forks {
    /// Loads and attaches the program over the map of watched threads `watched`, and starts
    /// the thread; `None` where the kernel refuses any of it (no `task_struct` description, no
    /// such tracepoint): the recording then looks for new processes every few milliseconds.
    pub(super) fn start(watched: RawFd, page: usize) -> Option<Forks> {
        let tgid_offset = crate::native::btf::task_tgid_offset()?;
        let mut ring = CopyRing::new(page, page).ok()?;
        let quiet = create_map(BPF_MAP_TYPE_ARRAY, 4, 8, 1).ok()?;
        let wake = Wake {
            ring: ring.fd(),
            quiet: quiet.as_raw_fd(),
        };
        let program = load_tracepoint_program(fork_program(watched, wake, tgid_offset)).ok()?;
        let link = attach_tracepoint(c"sched_process_fork", &program).ok()?;
        // SAFETY: eventfd with valid flags; the result is checked.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if stop < 0 {
            return None;
        }
        // SAFETY: a new descriptor we own.
        let stop = unsafe { OwnedFd::from_raw_fd(stop) };
        let wakes = Arc::new(ForkWakes {
            forked: AtomicBool::new(false),
            waiter: AtomicI32::new(0),
            quiet,
        });
        let (shared, stop_fd) = (Arc::clone(&wakes), stop.as_raw_fd());
        let thread = std::thread::Builder::new()
            .name("fsprof-forks".into())
            .spawn(move || wake_at_forks(&mut ring, stop_fd, &shared))
            .ok()?;
        Some(Forks {
            wakes,
            wake,
            stop,
            thread: Some(thread),
            _program: program,
            _link: link,
        })
    }

    pub(super) fn wakes(&self) -> Arc<ForkWakes> {
        Arc::clone(&self.wakes)
    }

    /// What a program wakes the recording through (the exec programs too: see
    /// `programs::exec_program`).
    pub(super) fn wake(&self) -> Wake {
        self.wake
    }
}

impl Drop for Forks {
    fn drop(&mut self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a u64 of our own to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&raw const one).cast(), 8) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: waits for the ring (or `stop`), empties it, raises the flag and wakes the
/// waiter.
fn wake_at_forks(ring: &mut CopyRing, stop: RawFd, wakes: &ForkWakes) {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: ring.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll over two valid pollfds of our own.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            if nix::errno::Errno::last() == nix::errno::Errno::EINTR {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        let mut made = false;
        ring.drain(|_| made = true);
        if !made {
            continue;
        }
        wakes.forked.store(true, Ordering::Release);
        let waiter = wakes.waiter.load(Ordering::Acquire);
        if waiter != 0 {
            // SAFETY: tgkill to a thread of this process (one that ended since is refused).
            unsafe {
                libc::syscall(libc::SYS_tgkill, libc::getpid(), waiter, libc::SIGCHLD);
            }
        }
    }
}

/// The rings and map through which the fork and exec programs wake the recording (see
/// below): the ring, and a one-word array holding when the recording looks often enough
/// that a wake is not needed (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy)]
pub(super) struct Wake {
    pub(super) ring: RawFd,
    pub(super) quiet: RawFd,
}

/// Part of a program: puts the 8 bytes at stack word `at` in the wake ring, waking its reader,
/// unless the time in `time` is before the quiet map's. Uses r0-r5.
pub(super) fn wake(p: &mut Asm, wake: Wake, at: i16, time: u8) {
    const QUIET_KEY: i16 = -72;
    let skip = p.label();
    p.push(insn(ST_W, 10, 0, QUIET_KEY, 0));
    lookup(p, wake.quiet, QUIET_KEY);
    p.jump(JEQ_IMM, 0, 0, 0, skip);
    p.push(insn(LDX_DW, 1, 0, 0, 0));
    p.jump(JLT_REG, time, 1, 0, skip); // the recording looks often enough now
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, wake.ring),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(at)),
        insn(MOV64_IMM, 3, 0, 0, 8),
        insn(MOV64_IMM, 4, 0, 0, RB_FORCE_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
    ]);
    p.bind(skip);
}

/// The program at `sched_process_fork` (a raw tracepoint: its arguments the task forking and
/// the task made): where the task made is a process (its `tgid`, at `tgid_offset` in its
/// `task_struct`, not the current one's) and the current process is watched (its
/// `layout::PROCESS_KEY`), the new process's id goes into the ring `forks`, waking its reader:
/// fsprof then looks for the program's new processes soon after (`record/children.rs`) rather
/// than every few milliseconds whether any was made or not; not while it looks that often
/// anyway (see [`wake`]). A new thread, or a process forked by one fsprof does not follow, costs
/// a map lookup.
fn fork_program(watched: RawFd, forks: Wake, tgid_offset: u32) -> Vec<Insn> {
    const KEY: i16 = -8;
    const CHILD: i16 = -16;
    let mut p = Asm::new();
    let done = p.label();
    p.extend([
        insn(MOV64_REG, 6, 1, 0, 0), // r6: the context
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(RSH64_IMM, 0, 0, 0, 32),
        insn(MOV64_REG, 7, 0, 0, 0), // r7: the current process's id
        insn(OR64_IMM, 0, 0, 0, PROCESS_KEY as i32),
        insn(STX_W, 10, 0, KEY, 0),
    ]);
    watched_index(&mut p, watched, KEY);
    p.jump(JEQ_IMM, 0, 0, 0, done);
    p.extend([
        insn(ST_DW, 10, 0, CHILD, 0),
        insn(LDX_DW, 3, 6, 8, 0), // the task made
        insn(ADD64_IMM, 3, 0, 0, tgid_offset as i32),
        insn(MOV64_REG, 1, 10, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, i32::from(CHILD)),
        insn(MOV64_IMM, 2, 0, 0, 4),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, done);
    p.push(insn(LDX_W, 1, 10, CHILD, 0));
    p.jump(JEQ_REG, 1, 7, 0, done); // a thread of the same process
    p.extend([
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 8, 0, 0, 0),
    ]);
    wake(&mut p, forks, CHILD, 8);
    p.bind(done);
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}
