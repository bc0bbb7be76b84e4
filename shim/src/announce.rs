//! Telling a profiler that started this program that its region now exists, so that the
//! profiler need not look at the program's memory map every few milliseconds to find it
//! (see "Finding a region" in `abi.rs`).
//!
//! When the environment holds [`abi::ANNOUNCE_VARIABLE`] (set by `fsprof run` for the program
//! and inherited by its children), the process that created a region sends one datagram to the
//! abstract Unix socket it names. The datagram says nothing the profiler trusts (it holds the
//! region's address, for a person reading a trace): the kernel attaches the sender's process id,
//! and the profiler then scans that process's map as it would have. A process whose environment
//! lost the variable, or whose datagram was dropped (the socket's queue full, another network
//! namespace), is found by the profiler's slower scans.
//!
//! Never blocks and never fails the mark that created the region: one `getenv`, a
//! non-blocking send and two descriptors' worth of system calls, once per region. Only system
//! calls the C library has always had, and `getenv`, which takes no lock; all of them are
//! async-signal-safe but `getenv`, which is as long as nothing changes the environment meanwhile
//! (what `setenv` from another thread would break in any program).
//! Not here: creating the region (`region.rs`).

use crate::abi;
use std::ffi::{c_char, c_int, c_void};

extern "C" {
    fn getenv(name: *const c_char) -> *const c_char;
    fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
    fn sendto(
        fd: c_int,
        buf: *const c_void,
        len: usize,
        flags: c_int,
        addr: *const SockaddrUn,
        addr_len: u32,
    ) -> isize;
    fn close(fd: c_int) -> c_int;
}

const AF_UNIX: c_int = 1;
const SOCK_DGRAM: c_int = 2;
const SOCK_NONBLOCK: c_int = 0o4000;
const SOCK_CLOEXEC: c_int = 0o2000000;
const MSG_DONTWAIT: c_int = 0x40;
const MSG_NOSIGNAL: c_int = 0x4000;

#[repr(C)]
struct SockaddrUn {
    family: u16,
    path: [u8; 108],
}

/// Announces the region created at `address`, if the environment names a profiler's socket.
pub(crate) fn region_created(address: u64) {
    // SAFETY: the name is NUL-terminated; a non-null result is a NUL-terminated string that
    // lives as long as the environment is not changed.
    let value = unsafe { getenv(abi::ANNOUNCE_VARIABLE_C.as_ptr()) };
    if value.is_null() {
        return;
    }
    let mut addr = SockaddrUn {
        family: AF_UNIX as u16,
        path: [0; 108],
    };
    // An abstract address: a NUL, then the name (at most MAX_ANNOUNCE_NAME bytes, not
    // NUL-terminated). A longer or empty value is not one fsprof sets: nothing is sent.
    let mut len = 0;
    // SAFETY: reads stop at the string's NUL or after MAX_ANNOUNCE_NAME + 1 bytes.
    while len <= abi::MAX_ANNOUNCE_NAME && unsafe { *value.add(len) } != 0 {
        addr.path[1 + len] = unsafe { *value.add(len) } as u8;
        len += 1;
    }
    if len == 0 || len > abi::MAX_ANNOUNCE_NAME {
        return;
    }
    let bytes = address.to_ne_bytes();
    // SAFETY: plain system calls on a descriptor we own and buffers that outlive them.
    unsafe {
        let fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if fd < 0 {
            return;
        }
        let addr_len = (core::mem::size_of::<u16>() + 1 + len) as u32;
        sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            MSG_DONTWAIT | MSG_NOSIGNAL,
            &addr,
            addr_len,
        );
        close(fd);
    }
}
