//! The system calls the shim makes. Two that glibc wraps only in recent versions, made raw:
//! `gettid` (glibc 2.30) and `memfd_create` (2.27). Calling the wrappers would make every program
//! that links the shim need that glibc; raw system calls need none (the kernel has had both
//! since 3.17), on x86-64 and aarch64. And the libc calls that make a mapping, which the region
//! (`region.rs`) and the fleet's process context (`fleet/process_context.rs`) share, with their
//! constants. Not here: the calls only the region makes (its seals, `pthread` keys and fork
//! handlers).

use std::ffi::{c_char, c_int, c_long, c_uint, c_void};

extern "C" {
    pub(crate) fn ftruncate(fd: c_int, length: i64) -> c_int;
    pub(crate) fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    pub(crate) fn munmap(addr: *mut c_void, len: usize) -> c_int;
    pub(crate) fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    pub(crate) fn close(fd: c_int) -> c_int;
}

pub(crate) const MFD_CLOEXEC: c_uint = 1;
pub(crate) const PROT_READ_WRITE: c_int = 0x1 | 0x2;
pub(crate) const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
pub(crate) const MADV_DONTFORK: c_int = 10;

/// The calling thread's id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { imp::syscall2(imp::SYS_GETTID, 0, 0) as u32 }
}

/// `memfd_create(name, flags)`: a descriptor, or a negative value on failure.
///
/// # Safety
/// `name` is NUL-terminated.
pub(crate) unsafe fn memfd_create(name: *const c_char, flags: c_uint) -> c_int {
    let ret = imp::syscall2(imp::SYS_MEMFD_CREATE, name as c_long, flags as c_long);
    if ret < 0 {
        -1
    } else {
        ret as c_int
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::ffi::c_long;
    pub(super) const SYS_GETTID: c_long = 186;
    pub(super) const SYS_MEMFD_CREATE: c_long = 319;

    pub(super) unsafe fn syscall2(number: c_long, a: c_long, b: c_long) -> c_long {
        let ret: c_long;
        core::arch::asm!("syscall", inlateout("rax") number => ret, in("rdi") a, in("rsi") b,
            lateout("rcx") _, lateout("r11") _, options(nostack));
        ret
    }
}

#[cfg(target_arch = "aarch64")]
mod imp {
    use std::ffi::c_long;
    pub(super) const SYS_GETTID: c_long = 178;
    pub(super) const SYS_MEMFD_CREATE: c_long = 279;

    pub(super) unsafe fn syscall2(number: c_long, a: c_long, b: c_long) -> c_long {
        let ret: c_long;
        core::arch::asm!("svc 0", in("x8") number, inlateout("x0") a => ret, in("x1") b,
            options(nostack));
        ret
    }
}

/// Elsewhere: the system-call numbers are not written down here, so the glibc wrappers after all
/// (which need glibc 2.30 and 2.27 there).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    use std::ffi::{c_char, c_int, c_long, c_uint};
    pub(super) const SYS_GETTID: c_long = 0;
    pub(super) const SYS_MEMFD_CREATE: c_long = 1;
    extern "C" {
        fn gettid() -> c_int;
        fn memfd_create(name: *const c_char, flags: c_uint) -> c_int;
    }

    pub(super) unsafe fn syscall2(number: c_long, a: c_long, b: c_long) -> c_long {
        if number == SYS_GETTID {
            gettid() as c_long
        } else {
            memfd_create(a as *const c_char, b as c_uint) as c_long
        }
    }
}
