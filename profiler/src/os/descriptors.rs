//! fsprof's own file descriptors: its limit raised for the recording, and its table of
//! descriptors sized once, at its start. Not here: which files are kept open (the sampler keeps
//! two per target thread while the limit allows: `record/sampler/lifecycle.rs`).

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use std::os::fd::AsRawFd;

/// Descriptors the table is sized for at the start (two per thread of a 2000-thread program).
const PRESIZED: u64 = 4096;

/// Sizes this process's table of file descriptors for `PRESIZED` descriptors (or its hard
/// limit), while it has a single thread. The kernel grows the table by doubling it, and once
/// the process has several threads each growth waits for an RCU grace period: beside 1000 busy
/// threads on 2 CPUs, one took 165 ms of the sampler's tick that admitted 135 threads (each
/// keeps two files open), and the CPUs' rings, which last about 120 ms there, lost samples. The
/// soft limit is raised for the moment and put back, for a program fsprof runs inherits it.
/// Best effort: nothing is said of a failure (the table then grows as it did).
pub fn presize_table() {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let wanted = PRESIZED.min(hard);
    if wanted < 2 || setrlimit(Resource::RLIMIT_NOFILE, wanted.max(soft), hard).is_err() {
        return;
    }
    if let Ok(null) = std::fs::File::open("/dev/null") {
        // The lowest free descriptor at or above the last the table must hold: it grows to fit.
        let last = i32::try_from(wanted - 1).unwrap_or(i32::MAX);
        if let Ok(fd) = fcntl(null.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(last)) {
            let _ = nix::unistd::close(fd);
        }
    }
    let _ = setrlimit(Resource::RLIMIT_NOFILE, soft, hard);
}

/// Raises this process's limit on open files to the hard limit, and returns how many more files
/// fsprof may keep open while leaving a reserve for everything else it opens. fsprof keeps one
/// file open per target thread up to that number, and opens the others at each read.
pub fn raise_limit() -> usize {
    const RESERVE: u64 = 64;
    let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    let limit = getrlimit(Resource::RLIMIT_NOFILE).map_or(0, |(soft, _)| soft);
    let in_use = std::fs::read_dir("/proc/self/fd").map_or(RESERVE, |dir| dir.count() as u64);
    limit
        .saturating_sub(in_use + RESERVE)
        .min(usize::MAX as u64) as usize
}
