//! What `/proc` tells about a target process: whether it is alive, its threads (when blocked,
//! their stack and instruction pointers), their names, and where its fsprof regions are mapped.
//! A thread's state and scheduling totals, read at every tick, are `thread_status.rs`'s.
//!
//! Only `/proc` reads (and a pidfd polled for whether a process lives) live here. Reading the
//! target's memory is `remote.rs`; deciding what to do with the answers is the sampler's job.

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

/// The `/proc` directory of a process.
pub fn proc_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}"))
}

/// Whether `pid` names a process that has not exited. A zombie leader whose other threads still
/// run (the main thread called `pthread_exit`) is alive; a zombie process is not.
pub fn is_alive(pid: u32) -> bool {
    let running = |stat: &str| !matches!(state_from_stat(stat), Some('Z' | 'X' | 'x'));
    match fs::read_to_string(proc_dir(pid).join("stat")) {
        Ok(stat) if running(&stat) => true,
        Ok(_) => {
            let mut tids = Vec::new();
            threads(pid, &mut tids).is_ok()
                && tids.iter().any(|tid| {
                    fs::read_to_string(proc_dir(pid).join(format!("task/{tid}/stat")))
                        .is_ok_and(|s| running(&s))
                })
        }
        Err(_) => false,
    }
}

/// [`is_alive`] asked again and again of one process, for a loop that must notice its end: a
/// pidfd polled (no `/proc` read; reading the process's `stat` every 50 ms was 17% of what
/// fsprof spent following a sleeping child), `/proc` where the kernel has no pidfds. The pidfd
/// names the process itself, so a process id used again is not taken for it.
pub struct Liveness {
    pid: u32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Liveness {
    /// Watches `pid` from now on.
    pub fn new(pid: u32) -> Liveness {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as i32, 0) };
        // SAFETY: a descriptor the call just made, owned by nothing else.
        let pidfd = (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) });
        Liveness { pid, pidfd }
    }

    /// Whether the process has not exited, as [`is_alive`] says: a pidfd becomes readable once
    /// the whole process has exited (a zombie whose threads are all gone), not when only its
    /// main thread has.
    pub fn alive(&self) -> bool {
        use std::os::fd::AsFd;
        let Some(pidfd) = &self.pidfd else {
            return is_alive(self.pid);
        };
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(0) => true,
            Ok(_) => false,
            Err(_) => is_alive(self.pid),
        }
    }
}

pub(super) fn state_from_stat(stat: &str) -> Option<char> {
    // The command name is in parentheses and may itself contain spaces or ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The size of a process's address space, in pages (`/proc/PID/statm`'s first field, `stat`'s
/// `vsize` in pages): it changes with every mapping made or removed, so a scanner can skip
/// reading the whole map while it stays. The file stays open and is read again from its start
/// (opening a `/proc` file took most of the time of a read: a young process is looked at every
/// millisecond); once the process has exited, reads fail, whatever takes its id.
pub struct AddressSpaceSize {
    file: Option<fs::File>,
}

impl AddressSpaceSize {
    pub fn new(pid: u32) -> AddressSpaceSize {
        AddressSpaceSize {
            file: fs::File::open(format!("/proc/{pid}/statm")).ok(),
        }
    }

    /// The size now (`None`: unreadable, the process gone).
    pub fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        // Seven numbers: well under the buffer (what the kernel writes is bounded anyway).
        let mut buffer = [0u8; 128];
        let length = self.file.as_ref()?.read_at(&mut buffer, 0).ok()?;
        let text = std::str::from_utf8(&buffer[..length]).ok()?;
        text.split_ascii_whitespace().next()?.parse().ok()
    }
}

/// The command line of `pid`, for the report (empty if unreadable).
pub fn command_line(pid: u32) -> Vec<String> {
    fs::read(proc_dir(pid).join("cmdline"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| crate::profile::clean(&String::from_utf8_lossy(arg)))
                .collect()
        })
        .unwrap_or_default()
}

/// Most children a [`ChildList`] gives for one process (what `/proc` says is the target's word:
/// bounded).
pub const MAX_CHILDREN: usize = 4096;

/// Most threads of a process whose `children` files a [`ChildList`] keeps open; those of
/// further threads are opened at each read.
const MOST_KEPT_CHILDREN_FILES: usize = 64;

/// The child processes of a process, from each of its threads' `children` file (a process made
/// by any thread), read again at each [`ChildList::read`] through descriptors kept open (its
/// task directory as [`TaskList`] keeps it, and each thread's file): the tree of a build is
/// looked at every few milliseconds, and opening each of its processes' files anew each time
/// (a path walk through `/proc` per file) was most of the `open` calls fsprof made.
pub struct ChildList {
    pid: u32,
    tasks: TaskList,
    files: std::collections::HashMap<u32, File>,
    buf: Vec<u8>,
}

impl ChildList {
    /// The children of `pid`, not read yet.
    pub fn new(pid: u32) -> ChildList {
        ChildList {
            pid,
            tasks: TaskList::new(pid),
            files: std::collections::HashMap::new(),
            buf: Vec::new(),
        }
    }

    /// The process whose children these are.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The ids of the process's children now. Empty when the process is gone; `None` when the
    /// kernel has no such files (built without `CONFIG_PROC_CHILDREN`).
    pub fn read(&mut self) -> Option<Vec<u32>> {
        let pid = self.pid;
        if self.tasks.read().is_err() {
            return Some(Vec::new());
        }
        let tids = self.tasks.tids();
        self.files.retain(|tid, _| tids.contains(tid));
        let mut found = Vec::new();
        for &tid in tids {
            let path = proc_dir(pid).join(format!("task/{tid}/children"));
            let read = match self.files.get(&tid) {
                Some(file) => read_whole(file, &mut self.buf),
                None => File::open(&path).and_then(|file| {
                    read_whole(&file, &mut self.buf)?;
                    if self.files.len() < MOST_KEPT_CHILDREN_FILES {
                        self.files.insert(tid, file);
                    }
                    Ok(())
                }),
            };
            match read {
                Ok(()) => {
                    let room = MAX_CHILDREN - found.len();
                    let text = String::from_utf8_lossy(&self.buf);
                    found.extend(
                        text.split_ascii_whitespace()
                            .filter_map(|id| id.parse::<u32>().ok())
                            .take(room),
                    );
                }
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        && tid == pid
                        && proc_dir(pid).join("task").exists()
                        && !path.exists()
                        && proc_dir(pid).join("task").join(tid.to_string()).exists() =>
                {
                    return None
                }
                Err(_) => {}
            }
        }
        found.sort_unstable();
        found.dedup();
        Some(found)
    }
}

/// Most bytes of a `children` file read: [`MAX_CHILDREN`] ids of up to 10 digits and a space.
const MAX_CHILDREN_BYTES: usize = MAX_CHILDREN * 11;

/// The whole of `file` (a `/proc` file, generated anew when read from its start) into `buf`,
/// at most [`MAX_CHILDREN_BYTES`].
fn read_whole(file: &File, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = file.read_at(&mut chunk, buf.len() as u64)?;
        if n == 0 || buf.len() >= MAX_CHILDREN_BYTES {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The threads of a process, from its `/proc/PID/task` directory, kept open and read again from
/// its start at each [`TaskList::read`]: a `getdents64` and an `lseek` a tick, where reading it
/// anew added an `open`, a `statx` and a `close` (with the tick's other `/proc` walks, 18% of
/// fsprof's own CPU beside a two-thread program: BENCHMARKS.md, issue 39). The descriptor
/// names the process, not its number: once the process is gone the list is empty, even if
/// its number is reused.
pub struct TaskList {
    pid: u32,
    dir: Option<nix::dir::Dir>,
    tids: Vec<u32>,
}

impl TaskList {
    /// The threads of `pid`, not read yet.
    pub fn new(pid: u32) -> TaskList {
        TaskList {
            pid,
            dir: None,
            tids: Vec::new(),
        }
    }

    /// Reads the thread ids again. Fails when the process is gone before the first read, or
    /// when the directory cannot be read (out of descriptors, say: tried again at the next).
    pub fn read(&mut self) -> io::Result<()> {
        self.tids.clear();
        if self.dir.is_none() {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let path = proc_dir(self.pid).join("task");
            self.dir = Some(nix::dir::Dir::open(&path, flags, Mode::empty())?);
        }
        let dir = self.dir.as_mut().expect("opened");
        // The iterator rewinds the directory when dropped.
        for entry in dir.iter() {
            let entry = entry?;
            if let Some(tid) = entry.file_name().to_str().ok().and_then(|n| n.parse().ok()) {
                self.tids.push(tid);
            }
        }
        Ok(())
    }

    /// The thread ids as last read.
    pub fn tids(&self) -> &[u32] {
        &self.tids
    }
}

/// The thread ids of `pid`. Fails when the process is gone.
pub fn threads(pid: u32, into: &mut Vec<u32>) -> io::Result<()> {
    into.clear();
    for entry in fs::read_dir(proc_dir(pid).join("task"))? {
        if let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        {
            into.push(tid);
        }
    }
    Ok(())
}

/// Whether `pid` lives in another PID namespace than fsprof (a container seen from its host).
/// fsprof's own is read once.
pub fn in_other_pid_namespace(pid: u32) -> bool {
    static OURS: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let ours = OURS.get_or_init(|| fs::read_link("/proc/self/ns/pid").ok());
    match (ours, fs::read_link(proc_dir(pid).join("ns/pid"))) {
        (Some(ours), Ok(theirs)) => *ours != theirs,
        _ => false,
    }
}

/// The id thread `tid` of `pid` has in its own (innermost) PID namespace, from the `NSpid` line
/// of its status; `None` when that cannot be read now.
pub fn namespace_tid(pid: u32, tid: u32) -> Option<u32> {
    let status = fs::read_to_string(proc_dir(pid).join(format!("task/{tid}/status"))).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_ascii_whitespace().last()?.parse().ok()
}

/// A thread's name (`comm`), or an empty string.
pub fn thread_name(pid: u32, tid: u32) -> String {
    fs::read_to_string(proc_dir(pid).join(format!("task/{tid}/comm")))
        .map(|name| crate::profile::clean(name.trim_end()))
        .unwrap_or_default()
}

/// The stack and instruction pointers of thread `tid` of `pid` while it is blocked in the
/// kernel, from `/proc/PID/task/TID/syscall` (`NR ARGS... SP PC`, or `-1 SP PC` outside a system
/// call); `None` if it is running (the file then says `running`) or cannot be read.
pub fn blocked_registers(pid: u32, tid: u32) -> Option<(u64, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    parse_syscall(&text)
}

/// Whether thread `tid` of `pid` is off its CPU inside `execve` or `execveat` (from
/// `/proc/PID/task/TID/syscall`; a thread on a CPU says only `running`).
pub fn in_exec(pid: u32, tid: u32) -> bool {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) else {
        return false;
    };
    is_exec_syscall(&text)
}

/// Whether a `/proc/PID/task/TID/syscall` text is of a thread in `execve` or `execveat`.
fn is_exec_syscall(text: &str) -> bool {
    const EXECS: [i64; 2] = [nix::libc::SYS_execve, nix::libc::SYS_execveat];
    let number = text.split_ascii_whitespace().next();
    number
        .and_then(|n| n.parse::<i64>().ok())
        .is_some_and(|n| EXECS.contains(&n))
}

/// Whether fsprof's process group is orphaned as far as fsprof can tell: its parent is not in
/// another process group of the same session (as a shell that could resume a stopped job is).
pub fn own_group_is_orphaned() -> bool {
    let (ours, session) = (nix::unistd::getpgrp(), nix::unistd::getsid(None));
    let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", nix::unistd::getppid())) else {
        return true;
    };
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| {
        rest.split_ascii_whitespace().collect()
    });
    // After the command name: state, ppid, pgrp, session.
    let (Some(group), Some(parent_session)) = (
        fields.get(2).and_then(|f| f.parse::<i32>().ok()),
        fields.get(3).and_then(|f| f.parse::<i32>().ok()),
    ) else {
        return true;
    };
    !(session.is_ok_and(|s| s.as_raw() == parent_session) && group != ours.as_raw())
}

/// Where process `pid`'s main thread's stack starts (`stat`'s `startstack`, field 28): an
/// address in its stack's mapping. `None` if unknown (0 where fsprof may not read it).
pub fn start_stack(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(proc_dir(pid).join("stat")).ok()?;
    let field = stat
        .rsplit_once(')')?
        .1
        .split_ascii_whitespace()
        .nth(28 - 3)?;
    field.parse().ok().filter(|&address| address != 0)
}

/// The CPU thread `tid` of `pid` last ran on (field 39 of its `stat`).
pub fn last_cpu(pid: u32, tid: u32) -> Option<u32> {
    let stat = fs::read_to_string(proc_dir(pid).join(format!("task/{tid}/stat"))).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_ascii_whitespace()
        .nth(36)?
        .parse()
        .ok()
}

fn parse_syscall(text: &str) -> Option<(u64, u64)> {
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    if !matches!(fields.len(), 3 | 9) {
        return None; // "running", or a format this fsprof does not know
    }
    let hex = |field: &str| u64::from_str_radix(field.strip_prefix("0x")?, 16).ok();
    let (sp, pc) = (
        hex(fields[fields.len() - 2])?,
        hex(fields[fields.len() - 1])?,
    );
    (sp != 0 && pc != 0).then_some((sp, pc))
}

/// [`memory_thread`], remembered in `cache` once found.
pub fn memory_thread_cached(cache: &std::cell::Cell<Option<u32>>, pid: u32, tids: &[u32]) -> u32 {
    match cache.get() {
        Some(via) => via,
        None => {
            let via = memory_thread(pid, tids);
            cache.set(Some(via));
            via
        }
    }
}

/// A thread of `pid` through which its memory can be read: the leader, unless it has exited
/// before the other threads (a zombie leader has no memory map), then another of `tids`.
pub fn memory_thread(pid: u32, tids: &[u32]) -> u32 {
    let leader_running = fs::read_to_string(proc_dir(pid).join("stat"))
        .is_ok_and(|stat| !matches!(state_from_stat(&stat), Some('Z' | 'X' | 'x')));
    if leader_running {
        return pid;
    }
    tids.iter().copied().find(|tid| *tid != pid).unwrap_or(pid)
}

/// The start of some readable mapping of `pid`, to probe whether its memory can be read at all.
pub fn some_readable_address(pid: u32) -> io::Result<Option<u64>> {
    let maps = fs::read_to_string(proc_dir(pid).join("maps"))?;
    Ok(maps.lines().find_map(|line| {
        let mut fields = line.split_ascii_whitespace();
        let (start, _) = fields.next()?.split_once('-')?;
        let perms = fields.next()?;
        (perms.starts_with('r') && !line.ends_with("[vvar]") && !line.ends_with("[vsyscall]"))
            .then(|| u64::from_str_radix(start, 16).ok())
            .flatten()
    }))
}

/// Why we may not read `pid`'s memory, and what to do about it: one line, for an error message.
pub fn permission_advice(pid: u32) -> String {
    let our_uid = nix::unistd::geteuid().as_raw();
    let target_uid = fs::read_to_string(proc_dir(pid).join("status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_ascii_whitespace().nth(2)?.parse::<u32>().ok() // effective uid
        });
    if let Some(uid) = target_uid.filter(|uid| *uid != our_uid && our_uid != 0) {
        return format!(
            "the process belongs to another user (uid {uid}, you are uid {our_uid}); run fsprof as that user or with sudo"
        );
    }
    // The files of a process that is not dumpable belong to root, whoever it runs as.
    let status_owner = fs::metadata(proc_dir(pid).join("status")).map(|m| m.uid());
    if target_uid == Some(our_uid) && status_owner.is_ok_and(|owner| owner != our_uid) {
        return "the process is not dumpable (it called prctl(PR_SET_DUMPABLE, 0), or runs a setuid or \
            file-capability program), so only root may read it: run fsprof with sudo"
            .to_owned();
    }
    let scope = fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match scope {
        Some(1) => "kernel.yama.ptrace_scope is 1, so only a parent may read a process's memory: \
            run `sudo sysctl kernel.yama.ptrace_scope=0`, run fsprof with sudo, or use `fsprof run` to start the program under fsprof"
            .to_owned(),
        Some(2) => "kernel.yama.ptrace_scope is 2 (admin only): run fsprof with sudo (CAP_SYS_PTRACE), \
            or use `fsprof run` to start the program under fsprof"
            .to_owned(),
        Some(3) => "kernel.yama.ptrace_scope is 3 (no attaching at all, until reboot): use `fsprof run` \
            to start the program under fsprof"
            .to_owned(),
        _ if in_container() => "in a container, reading another process's memory needs CAP_SYS_PTRACE: \
            start the container with `--cap-add SYS_PTRACE`, or use `fsprof run`"
            .to_owned(),
        _ => "the kernel refused (is the target setuid, or are you missing CAP_SYS_PTRACE?): try sudo, \
            or use `fsprof run` to start the program under fsprof"
            .to_owned(),
    }
}

fn in_container() -> bool {
    fs::metadata("/.dockerenv").is_ok()
        || fs::read_to_string("/proc/1/cgroup")
            .map(|c| c.contains("docker") || c.contains("kubepods") || c.contains("containerd"))
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::thread_status::ThreadStatus;

    #[test]
    fn a_task_list_kept_open_sees_threads_come_and_go_and_a_gone_process_has_none() {
        let mut tasks = TaskList::new(std::process::id());
        tasks.read().unwrap();
        let before = tasks.tids().to_vec();
        assert!(before.contains(&std::process::id()), "{before:?}");
        let (started, stop) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let (started_tx, stop_rx) = (started.0, stop.1);
        let thread = std::thread::spawn(move || {
            started_tx
                .send(nix::unistd::gettid().as_raw() as u32)
                .unwrap();
            stop_rx.recv().ok();
        });
        let tid = started.1.recv().unwrap();
        tasks.read().unwrap();
        assert!(
            tasks.tids().contains(&tid),
            "{:?} lacks {tid}",
            tasks.tids()
        );
        stop.0.send(()).unwrap();
        thread.join().unwrap();
        // join returns when the kernel clears the thread's id word, which it does on the way
        // out, a moment before the task leaves /proc: poll for that, with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            tasks.read().unwrap();
            if !tasks.tids().contains(&tid) || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!tasks.tids().contains(&tid), "{:?} has {tid}", tasks.tids());

        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let mut theirs = TaskList::new(child.id());
        theirs.read().unwrap();
        assert_eq!(theirs.tids(), [child.id()]);
        child.kill().unwrap();
        child.wait().unwrap();
        theirs.read().unwrap();
        assert!(theirs.tids().is_empty(), "{:?}", theirs.tids());
    }

    #[test]
    fn a_child_list_kept_open_sees_children_come_and_go() {
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let mut list = ChildList::new(shell.id());
        let mut until = |count: usize| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                let children = list.read().expect("children files");
                if children.len() == count || std::time::Instant::now() > deadline {
                    return children;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        };
        let children = until(2);
        assert_eq!(children.len(), 2, "{children:?}");
        let kill = |pid: u32| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
        };
        kill(children[0]).unwrap();
        assert_eq!(until(1), [children[1]]); // read again through the files kept open
        kill(children[1]).unwrap();
        shell.wait().unwrap();
        assert_eq!(list.read(), Some(Vec::new()));
    }

    #[test]
    fn a_thread_in_exec_is_told_by_its_syscall_file() {
        assert!(is_exec_syscall(
            "59 0x55d0 0x7ffc 0x7ffc 0x0 0x0 0x0 0x7ffd1b0 0x7fe3a7e\n"
        ));
        assert!(is_exec_syscall(
            "322 0x3 0x55d0 0x7ffc 0x7ffc 0x0 0x0 0x7ffd1b0 0x7fe3a7e\n"
        ));
        assert!(!is_exec_syscall(
            "230 0x1 0x0 0x7ffc 0x0 0x0 0x0 0x7ffd1b0 0x7fe3a7e\n"
        ));
        assert!(!is_exec_syscall("running\n"));
        assert!(!is_exec_syscall("-1 0x7ffd1b0 0x7fe3a7e\n"));
        assert!(!in_exec(std::process::id(), std::process::id()));
    }

    #[test]
    fn blocked_registers_come_from_the_syscall_file() {
        let in_call = "230 0x1 0x0 0x7ffc 0x0 0x0 0x0 0x7ffd1b42f10 0x7fe3a7eb6aec\n";
        assert_eq!(
            parse_syscall(in_call),
            Some((0x7ffd1b42f10, 0x7fe3a7eb6aec))
        );
        assert_eq!(
            parse_syscall("-1 0x7ffd10 0x401000\n"),
            Some((0x7ffd10, 0x401000))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("230 0x1 0x0 0x0 0x0 0x0 0x0 0x0 0x0\n"), None);
        assert_eq!(parse_syscall("230 1 2 3\n"), None);
        assert_eq!(parse_syscall(""), None);
    }

    #[test]
    fn state_survives_odd_command_names() {
        assert_eq!(state_from_stat("12 (a) b) R 1 2"), Some('R'));
        assert_eq!(state_from_stat("12 (x) Z 1"), Some('Z'));
        assert_eq!(state_from_stat("garbage"), None);
    }

    #[test]
    fn own_process_is_alive_with_threads_and_a_clock() {
        let pid = std::process::id();
        assert!(is_alive(pid));
        let mut tids = Vec::new();
        threads(pid, &mut tids).unwrap();
        assert!(tids.contains(&pid));
        let tid = nix::unistd::gettid().as_raw() as u32;
        let mut status = ThreadStatus::open(pid, tid, true).unwrap();
        assert_eq!(status.descriptors(), 2);
        // Its scheduling totals, read again through the descriptor kept open, move as it runs
        // (brought up to date at its CPU's scheduler ticks: a few milliseconds apart).
        let first = status.sched_times().expect("schedstat");
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(30) {}
        let second = status.sched_times().expect("schedstat");
        assert!(second.run_ns > first.run_ns, "{first:?} then {second:?}");
        // The main thread's stack starts above anything of this test's on it.
        let start = start_stack(pid).expect("startstack");
        let on_stack = &pid as *const u32 as u64;
        if tid == pid {
            assert!(start > on_stack);
        }
        assert!(ThreadStatus::open(pid, u32::MAX, true).is_none());
        assert_eq!(
            status.is_running().unwrap(),
            Some(true),
            "this thread is running the test"
        );
        assert!(!is_alive(u32::MAX / 2));
        assert!(Liveness::new(pid).alive());
        assert!(!Liveness::new(u32::MAX / 2).alive());
        // This process's arguments are somewhere: its image token is known and stays put.
        let token = status.image_token();
        assert!(token.is_some());
        status.is_running().unwrap();
        assert_eq!(status.image_token(), token);
    }
}
