//! Perf map files: the `/tmp/perf-PID.map` that node (`--perf-basic-prof`), the JVM's agents,
//! LuaJIT, .NET, wasmtime and others write, one line per function: `START SIZE NAME`, both
//! numbers hex; in a container, its own `/tmp` under its own pid. Not here: the table of names
//! (`jit_code.rs`), jitdump files (`jitdump.rs`).
//!
//! The file is the target's (anyone may write `/tmp`): it is looked at before it is opened
//! (`O_PATH`: a device node there is never opened) and taken only as a regular file, not
//! through a symbolic link, owned by root, by this fsprof's user (as `perf report` takes it) or
//! by the process's own, at most [`MAX_BYTES`] of it, names cut at
//! [`MAX_NAME`](super::jit_code::MAX_NAME) bytes.

use super::jit_code::{cut_name, JitFunction, MAX_FUNCTIONS};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// Most bytes of a perf map read.
const MAX_BYTES: u64 = 256 << 20;

/// The functions of process `pid`'s perf map, in the order written; none when it has none or
/// when the file may not be trusted. A process in a container (another PID or mount
/// namespace) writes its map in its own `/tmp` under its own pid: while it lives, that one is
/// read, through its root.
pub fn read(pid: u32) -> Vec<JitFunction> {
    let owners = owners(pid);
    let found = open_in_its_root(pid).or_else(|| {
        (std::fs::OpenOptions::new().read(true))
            .custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW)
            .open(format!("/tmp/perf-{pid}.map"))
            .ok()
    });
    match found.and_then(|found| reopen_if_trusted(&found, &owners)) {
        Some(file) => read_file(file),
        None => Vec::new(),
    }
}

/// The file `found` (opened with `O_PATH`: nothing opened yet, no device touched) opened for
/// reading, if it is a regular file owned by one of `owners`.
fn reopen_if_trusted(found: &std::fs::File, owners: &[u32]) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    let meta = found.metadata().ok()?;
    if !meta.is_file() || !owners.contains(&meta.uid()) {
        return None;
    }
    let file = (std::fs::OpenOptions::new().read(true))
        .custom_flags(nix::libc::O_NOCTTY | nix::libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", found.as_raw_fd()))
        .ok()?;
    let again = file.metadata().ok()?;
    ((again.dev(), again.ino()) == (meta.dev(), meta.ino())).then_some(file)
}

/// Who may own a perf map fsprof reads: root, fsprof's user, and the process's own user
/// (while it lives: the map is its own doing).
fn owners(pid: u32) -> Vec<u32> {
    let mut owners = vec![0, nix::unistd::geteuid().as_raw()];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let uid = (status.lines())
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1)?.parse::<u32>().ok());
    owners.extend(uid);
    owners
}

/// The perf map of process `pid` in its own root, by its own pid, where either differs from
/// fsprof's (a container), as an `O_PATH` descriptor; `None` otherwise, or where it has none.
/// Resolved inside that root (`openat2`'s `RESOLVE_IN_ROOT`): a link there cannot lead out of
/// it.
fn open_in_its_root(pid: u32) -> Option<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let own_pid = crate::program::process::namespace_tid(pid, pid)?;
    let mount_namespace = |of: &str| std::fs::read_link(format!("/proc/{of}/ns/mnt")).ok();
    if own_pid == pid && mount_namespace("self") == mount_namespace(&pid.to_string()) {
        return None;
    }
    let root = std::fs::File::open(format!("/proc/{pid}/root")).ok()?;
    let path = std::ffi::CString::new(format!("tmp/perf-{own_pid}.map")).ok()?;
    use nix::libc;
    // SAFETY: `open_how` is plain data, zeroed then filled.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: the path is a valid C string, `how` lives through the call and its size is given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    // SAFETY: a descriptor openat2 just returned, owned by no one else.
    (fd >= 0).then(|| unsafe { std::fs::File::from_raw_fd(fd as i32) })
}

/// The functions of an opened perf map (at most [`MAX_BYTES`] of it).
fn read_file(file: std::fs::File) -> Vec<JitFunction> {
    let mut bytes = Vec::new();
    if file.take(MAX_BYTES).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    parse(&String::from_utf8_lossy(&bytes))
}

/// The functions of a perf map's text, lines that do not parse skipped.
fn parse(text: &str) -> Vec<JitFunction> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim_start().splitn(3, ' ');
            let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16);
            let start = hex(fields.next()?).ok()?;
            let size = hex(fields.next()?).ok()?;
            let name = fields.next()?.trim();
            let end = start.checked_add(size).filter(|end| *end > start)?;
            (!name.is_empty()).then(|| JitFunction {
                start,
                end,
                name: cut_name(name).to_owned(),
            })
        })
        .take(MAX_FUNCTIONS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::jit_code::{JitCode, MAX_NAME};
    use std::path::Path;

    fn read_path(path: &Path) -> Vec<JitFunction> {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW)
            .open(path);
        match opened {
            Ok(file) => reopen_if_trusted(&file, &[0, nix::unistd::geteuid().as_raw()])
                .map_or(Vec::new(), read_file),
            Err(_) => Vec::new(),
        }
    }

    #[test]
    fn lines_name_their_ranges() {
        let code = JitCode::from_functions(parse(
            "3ef414c0 398 LazyCompile:~hot /a.js:3\n\
             bad line\n\
             10 0 empty\n\
             ffffffffffffffff 10 overflows\n\
             1000 20 first\n\
             1000 10 again at 1000\n\
             0x2000 8 Builtin:Add\n",
        ));
        assert_eq!(code.lookup(0x3ef414c0), Some("LazyCompile:~hot /a.js:3"));
        assert_eq!(
            code.lookup(0x3ef414c0 + 0x397),
            Some("LazyCompile:~hot /a.js:3")
        );
        assert_eq!(code.lookup(0x3ef414c0 + 0x398), None);
        assert_eq!(code.lookup(0x1008), Some("again at 1000"));
        assert_eq!(code.lookup(0x2004), Some("Builtin:Add"));
        assert_eq!(code.lookup(0x10), None);
    }

    #[test]
    fn a_long_name_is_cut_and_a_link_is_not_followed() {
        let long = format!("1000 10 {}\n", "é".repeat(5000));
        assert!(parse(&long)[0].name.len() <= MAX_NAME);
        let dir = std::env::temp_dir().join(format!("fsprof-perf-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (real, link) = (dir.join("real.map"), dir.join("link.map"));
        std::fs::write(&real, "1000 10 named\n").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(read_path(&real)[0].name, "named");
        assert!(read_path(&link).is_empty());
        // Not a regular file: looked at, never opened (a FIFO would block an open for reading).
        let fifo = dir.join("fifo.map");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_path(&fifo).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
