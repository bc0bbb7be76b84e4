//! Reads a small file of tracefs where tracefs is not mounted (a fresh virtual machine, a
//! minimal image: its mount point `/sys/kernel/tracing` is there, empty): a child process
//! mounts it in a mount namespace of its own, reads the file into a pipe and exits, so nothing
//! stays mounted and nothing changes for the rest of the system. Needs `CAP_SYS_ADMIN` (root);
//! elsewhere, or where the kernel has no tracefs, `None`. Not here: what is read there and why
//! (`native/cpu_wide/tick.rs`, a tracepoint's id).

use nix::libc;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Where tracefs is mounted when it is.
pub const ROOT: &str = "/sys/kernel/tracing";

/// Bytes read of the file at most (a tracepoint's id is a few digits).
const MOST: usize = 64;

/// How long the child may take before it is killed (mounting tracefs takes well under a
/// millisecond; a child stuck in the kernel must not hold fsprof's start).
const PATIENCE: Duration = Duration::from_secs(1);

/// The text of `relative` (a path under tracefs's root, such as
/// `events/timer/hrtimer_expire_entry/id`), at most 64 bytes of it, read through a
/// tracefs mounted in a mount namespace of a child's own; `None` where that cannot be done.
pub fn read_unmounted(relative: &str) -> Option<String> {
    if !std::path::Path::new(ROOT).is_dir() || relative.starts_with('/') {
        return None;
    }
    let path = CString::new(format!("{ROOT}/{relative}")).ok()?;
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    // SAFETY: the child makes only async-signal-safe system calls on memory prepared before
    // the fork (no allocation, no lock: other threads of fsprof may hold them) and ends with
    // `_exit`.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above; every pointer is a NUL-terminated string or a buffer of its length.
        unsafe { in_child(&path, writer.as_raw_fd()) }
    }
    drop(writer);
    if child < 0 {
        return None;
    }
    // The child's exit, not the pipe's end, says it is done: a process another thread of
    // fsprof forks meanwhile (a test harness's, say) holds the pipe's writing end too, and
    // waiting for the end of the pipe waited for that process (a suite run read nothing).
    if !exited_within(child, PATIENCE)? {
        // SAFETY: `child` is this process's child, not reaped yet.
        unsafe { libc::kill(child, libc::SIGKILL) };
        let _ = exited_within(child, PATIENCE);
        return None;
    }
    let text = read_written(&reader)?;
    let text = String::from_utf8(text).ok()?;
    Some(text.trim().to_owned())
}

/// Waits at most `patience` for `child` to exit, and reaps it: `Some(true)` where it exited
/// with status 0 (it wrote what it read), `Some(false)` where it is still running (a child in an
/// uninterruptible sleep, in the kernel's mount code say, is then left a zombie rather than
/// hold fsprof's start), `None` where it failed.
fn exited_within(child: libc::pid_t, patience: Duration) -> Option<bool> {
    let deadline = Instant::now() + patience;
    loop {
        let mut status = 0;
        // SAFETY: waitpid of this process's own child, with a valid status pointer.
        let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if done == child {
            return (libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0).then_some(true);
        }
        if done < 0 {
            return None;
        }
        if Instant::now() >= deadline {
            return Some(false);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The child: a mount namespace of its own, private (nothing it mounts shows elsewhere), tracefs
/// mounted there, `path` read into `out`; then it exits (status 0 where it wrote).
///
/// # Safety
/// Called only in a child just forked.
unsafe fn in_child(path: &CString, out: libc::c_int) -> ! {
    let null = std::ptr::null::<libc::c_char>();
    let root = c"/";
    let mount_point = c"/sys/kernel/tracing";
    let ok = libc::unshare(libc::CLONE_NEWNS) == 0
        && libc::mount(
            null,
            root.as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) == 0
        && (libc::mount(
            c"nodev".as_ptr(),
            mount_point.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        ) == 0
            // Mounted there already (since the parent looked, or by its caller's choice):
            // the namespace's copy of that mount is read.
            || *libc::__errno_location() == libc::EBUSY);
    if !ok {
        libc::_exit(1);
    }
    let file = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
    if file < 0 {
        libc::_exit(2);
    }
    let mut buffer = [0u8; MOST];
    let read = libc::read(file, buffer.as_mut_ptr().cast(), MOST);
    if read <= 0 || libc::write(out, buffer.as_ptr().cast(), read as usize) != read {
        libc::_exit(3);
    }
    libc::_exit(0)
}

/// What the child wrote into the pipe before it exited (one write of at most [`MOST`] bytes),
/// read without waiting; `None` if it wrote nothing.
fn read_written(reader: &OwnedFd) -> Option<Vec<u8>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(
        std::os::fd::AsFd::as_fd(reader),
        PollFlags::POLLIN,
    )];
    if poll(&mut fds, PollTimeout::ZERO).ok()? == 0 {
        return None;
    }
    let mut buffer = [0u8; MOST];
    match nix::unistd::read(reader.as_raw_fd(), &mut buffer) {
        Ok(n) if n > 0 => Some(buffer[..n].to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `CAP_SYS_ADMIN` where the kernel has tracefs, a tracepoint's id is read whether or not tracefs
    /// is mounted here, and it is the mounted one's where it is; elsewhere nothing is read.
    #[test]
    fn a_tracepoint_id_is_read_without_a_mount() {
        let relative = "events/timer/hrtimer_expire_entry/id";
        let read = read_unmounted(relative);
        let mounted = std::fs::read_to_string(format!("{ROOT}/{relative}")).ok();
        if let (Some(read), Some(mounted)) = (&read, &mounted) {
            assert_eq!(read, mounted.trim());
        }
        if may_mount() && std::path::Path::new(ROOT).is_dir() {
            let id = read.expect("root reads tracefs in a namespace of its own");
            assert!(id.parse::<u64>().is_ok(), "{id}");
        }
        assert_eq!(read_unmounted("/etc/passwd"), None);
    }

    /// Whether this process has `CAP_SYS_ADMIN` (bit 21 of `CapEff`): root in a container often
    /// has not, and there nothing can be mounted.
    fn may_mount() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        (status.lines())
            .find_map(|line| line.strip_prefix("CapEff:"))
            .and_then(|bits| u64::from_str_radix(bits.trim(), 16).ok())
            .is_some_and(|bits| bits & (1 << 21) != 0)
    }
}
