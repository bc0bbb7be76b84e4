//! Reading another process's memory with `process_vm_readv`.
//!
//! The target keeps running while we read; this module only copies bytes. It does not interpret
//! them (that is `region.rs` and `names.rs`), and it never trusts a length it did not choose: every
//! read is bounded by [`MAX_READ`].

use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;

/// The largest single read we ever make, whatever the target claims.
pub const MAX_READ: usize = 1 << 20;
/// `process_vm_readv` accepts at most this many iovecs per call (IOV_MAX).
const MAX_IOVECS: usize = 1024;

/// A handle for reading one process's memory.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pid: Pid,
}

impl Remote {
    /// A reader for process `pid`.
    pub fn new(pid: u32) -> Remote {
        Remote {
            pid: Pid::from_raw(pid as i32),
        }
    }

    /// Fills `buf` from `address`. Fails with the errno, or `EFAULT` on a short read.
    pub fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.read_many(&mut [(address, buf)])
    }

    /// Fills `buf` from `address` as far as memory is readable; returns how many bytes were read.
    pub fn read_partial(&self, address: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let len = buf.len().min(MAX_READ);
        let remote = [RemoteIoVec {
            base: address as usize,
            len,
        }];
        process_vm_readv(self.pid, &mut [IoSliceMut::new(&mut buf[..len])], &remote)
    }

    /// Like [`Remote::read_partial`] for a buffer longer than one read ([`MAX_READ`]): reads
    /// one after the other until `buf` is full or one comes back short; returns how many bytes
    /// were read.
    pub fn read_long(&self, address: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut got = 0;
        while got < buf.len() {
            let wanted = (buf.len() - got).min(MAX_READ);
            let n = match self.read_partial(address.saturating_add(got as u64), &mut buf[got..]) {
                Ok(n) => n,
                Err(_) if got > 0 => break,
                Err(errno) => return Err(errno),
            };
            got += n;
            if n < wanted {
                break;
            }
        }
        Ok(got)
    }

    /// Fills every buffer from its address, in order, in as few system calls as possible.
    /// Fails unless every byte was read.
    pub fn read_many(&self, parts: &mut [(u64, &mut [u8])]) -> Result<(), Errno> {
        for chunk in parts.chunks_mut(MAX_IOVECS) {
            let remote: Vec<RemoteIoVec> = chunk
                .iter()
                .map(|(address, buf)| RemoteIoVec {
                    base: *address as usize,
                    len: buf.len().min(MAX_READ),
                })
                .collect();
            let wanted: usize = remote.iter().map(|r| r.len).sum();
            let mut local: Vec<IoSliceMut> = chunk
                .iter_mut()
                .map(|(_, buf)| IoSliceMut::new(buf))
                .collect();
            let got = process_vm_readv(self.pid, &mut local, &remote)?;
            if got != wanted {
                return Err(Errno::EFAULT);
            }
        }
        Ok(())
    }
}

/// Where a target's memory is read from: the live process ([`Remote`]), or what is known of it
/// once it is gone (`static_data.rs`).
pub trait Memory {
    /// Fills `buf` from `address`, entirely or not at all.
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Errno>;
}

impl Memory for Remote {
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Errno> {
        Remote::read(self, address, buf)
    }
}
