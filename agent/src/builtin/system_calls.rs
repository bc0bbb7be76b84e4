//! The system-call wrappers (`write`, `read`, `open`, `poll`, `nanosleep`, `fork`, `execve`,
//! `waitpid`, ...), interposed by the trampolines of `syscall_wrappers.rs`, and `posix_spawn`.

use super::*;

// Functions of at most three arguments save four registers around `enter`, the others seven
// (see `syscall_wrappers.rs`).
interpose_syscall! {
    list SYSCALL_WRAPPERS_3;
    registers 4;
    OUTPUT fn write(fd: c_int, buf: *const c_void, count: SizeT) -> SsizeT;
    OUTPUT fn writev(fd: c_int, iov: *const c_void, count: c_int) -> SsizeT;
    OUTPUT fn sendmsg(fd: c_int, msg: *const c_void, flags: c_int) -> SsizeT;

    INPUT fn read(fd: c_int, buf: *mut c_void, count: SizeT) -> SsizeT;
    INPUT fn readv(fd: c_int, iov: *const c_void, count: c_int) -> SsizeT;
    INPUT fn recvmsg(fd: c_int, msg: *mut c_void, flags: c_int) -> SsizeT;

    SLEEP fn nanosleep(request: *const c_void, remaining: *mut c_void) -> c_int;

    POLL fn poll(fds: *mut c_void, n: u64, timeout: c_int) -> c_int;

    PROCESS fn fork() -> c_int;
    PROCESS_EXEC fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    PROCESS_EXEC fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    PROCESS_EXEC fn execv(path: *const c_char, argv: *const *const c_char) -> c_int;
    PROCESS_EXEC fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int;
    PROCESS_EXEC fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    PROCESS fn wait(status: *mut c_int) -> c_int;
    PROCESS fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    PROCESS fn wait3(status: *mut c_int, options: c_int, usage: *mut c_void) -> c_int;

    FILES fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    FILES fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    FILES fn __open_2(path: *const c_char, flags: c_int) -> c_int;
    FILES fn __open64_2(path: *const c_char, flags: c_int) -> c_int;
    FILES fn creat(path: *const c_char, mode: c_uint) -> c_int;
    FILES fn creat64(path: *const c_char, mode: c_uint) -> c_int;
    FILES fn stat(path: *const c_char, buf: *mut c_void) -> c_int;
    FILES fn stat64(path: *const c_char, buf: *mut c_void) -> c_int;
    FILES fn lstat(path: *const c_char, buf: *mut c_void) -> c_int;
    FILES fn lstat64(path: *const c_char, buf: *mut c_void) -> c_int;
    FILES fn fstat(fd: c_int, buf: *mut c_void) -> c_int;
    FILES fn fstat64(fd: c_int, buf: *mut c_void) -> c_int;
    FILES fn fsync(fd: c_int) -> c_int;
    FILES fn fdatasync(fd: c_int) -> c_int;
}

interpose_syscall! {
    list SYSCALL_WRAPPERS;
    registers 7;
    OUTPUT fn pwrite(fd: c_int, buf: *const c_void, count: SizeT, offset: i64) -> SsizeT;
    OUTPUT fn pwrite64(fd: c_int, buf: *const c_void, count: SizeT, offset: i64) -> SsizeT;
    OUTPUT fn pwritev(fd: c_int, iov: *const c_void, count: c_int, offset: i64) -> SsizeT;
    OUTPUT fn pwritev64(fd: c_int, iov: *const c_void, count: c_int, offset: i64) -> SsizeT;
    OUTPUT fn pwritev2(fd: c_int, iov: *const c_void, count: c_int, offset: i64, flags: c_int) -> SsizeT;
    OUTPUT fn send(fd: c_int, buf: *const c_void, len: SizeT, flags: c_int) -> SsizeT;
    OUTPUT fn sendmmsg(fd: c_int, msgs: *mut c_void, count: c_uint, flags: c_int) -> c_int;

    INPUT fn __read_chk(fd: c_int, buf: *mut c_void, count: SizeT, buflen: SizeT) -> SsizeT;
    INPUT fn pread(fd: c_int, buf: *mut c_void, count: SizeT, offset: i64) -> SsizeT;
    INPUT fn pread64(fd: c_int, buf: *mut c_void, count: SizeT, offset: i64) -> SsizeT;
    INPUT fn preadv(fd: c_int, iov: *const c_void, count: c_int, offset: i64) -> SsizeT;
    INPUT fn preadv64(fd: c_int, iov: *const c_void, count: c_int, offset: i64) -> SsizeT;
    INPUT fn preadv2(fd: c_int, iov: *const c_void, count: c_int, offset: i64, flags: c_int) -> SsizeT;
    INPUT fn recv(fd: c_int, buf: *mut c_void, len: SizeT, flags: c_int) -> SsizeT;
    INPUT fn recvmmsg(fd: c_int, msgs: *mut c_void, count: c_uint, flags: c_int, timeout: *mut c_void) -> c_int;

    SLEEP fn clock_nanosleep(clock: c_int, flags: c_int, request: *const c_void, remaining: *mut c_void) -> c_int;

    POLL fn ppoll(fds: *mut c_void, n: u64, timeout: *const c_void, sigmask: *const c_void) -> c_int;
    POLL fn select(n: c_int, read: *mut c_void, write: *mut c_void, except: *mut c_void, timeout: *mut c_void) -> c_int;
    POLL fn epoll_wait(epfd: c_int, events: *mut c_void, max: c_int, timeout: c_int) -> c_int;
    POLL fn epoll_pwait(epfd: c_int, events: *mut c_void, max: c_int, timeout: c_int, sigmask: *const c_void) -> c_int;

    PROCESS_EXEC fn execveat(dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int) -> c_int;
    PROCESS fn waitid(idtype: c_int, id: c_uint, info: *mut c_void, options: c_int) -> c_int;
    PROCESS fn wait4(pid: c_int, status: *mut c_int, options: c_int, usage: *mut c_void) -> c_int;

    FILES fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    FILES fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    FILES fn fstatat(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int;
    FILES fn fstatat64(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int;
    FILES fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut c_void) -> c_int;

    OUTPUT fn sendto(fd: c_int, buf: *const c_void, len: SizeT, flags: c_int, to: *const c_void, tolen: c_uint) -> SsizeT;

    INPUT fn recvfrom(fd: c_int, buf: *mut c_void, len: SizeT, flags: c_int, from: *mut c_void, fromlen: *mut c_uint) -> SsizeT;

    POLL fn pselect(n: c_int, read: *mut c_void, write: *mut c_void, except: *mut c_void, timeout: *const c_void, sigmask: *const c_void) -> c_int;
}

interpose6! {
    list SPAWN;
    PROCESS true fn posix_spawn(pid: *mut c_int, path: *const c_char, actions: *const c_void, attr: *const c_void, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    PROCESS true fn posix_spawnp(pid: *mut c_int, file: *const c_char, actions: *const c_void, attr: *const c_void, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
}
