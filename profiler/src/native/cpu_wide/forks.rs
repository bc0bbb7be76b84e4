//! Wake-ups at the forks of the processes fsprof follows (`fsprof run`, and `attach
//! --children`), in the per-CPU design: a program at `sched_process_fork`
//! (`programs::fork_program`) puts each new process whose parent is watched in a small ring that
//! wakes its reader (as the exec programs put each watched process that execs, whose forks
//! wake nothing until fsprof watches it again), a thread here, which raises a flag and wakes the thread that records the
//! program (a `SIGCHLD` of its own, which its wait for the program's events returns on). The
//! recording then looks for the new process at once (`record/children.rs`), where it looked
//! every 5 ms whether any was made or not: most of fsprof's own CPU beside a program at rest
//! that makes none. Not here: what is done once woken (`record/schedule.rs`), finding the
//! processes (`record/children.rs`).

use super::programs::{fork_program, Wake};
use crate::native::bpf::{
    attach_tracepoint, create_map, load_tracepoint_program, update_bytes, BPF_MAP_TYPE_ARRAY,
};
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
