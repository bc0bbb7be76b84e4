//! Copying a blocked thread's stack on a thread of its own, so that the sampling thread never
//! waits long for the target. Reading another process's memory (`process_vm_readv`) takes its
//! memory map's lock, which the target holds for writing through every `mmap`, `munmap` and
//! `fork`, and which new readers wait for while a writer waits. A writer that cannot get a CPU
//! (one of 1000 busy threads, creating and ending threads) kept fsprof's real-time sampler
//! waiting 170 to 210 ms at a blocked thread's stack (`perf record -e sched:sched_switch -g`:
//! `down_read` in `process_vm_rw_core`), and the CPUs' perf rings overflowed meanwhile.
//!
//! Here the copy is made by a worker; the sampler waits for it at most a few milliseconds,
//! then goes on without the stack (the sample is skipped and tried again, as where the thread
//! ran meanwhile), and asks nothing more until the worker has finished. Not here: which
//! threads' stacks are read and what is checked around the copy (`capture.rs`).

use crate::target::remote::Remote;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// How long the sampler waits for a copy: an unhindered copy of a blocked thread's stack takes
/// microseconds.
pub const WAIT: Duration = Duration::from_millis(3);

/// A copy asked of the worker: `len` bytes of thread `tid`'s memory at `start`.
struct Request {
    id: u64,
    tid: u32,
    start: u64,
    len: usize,
}

/// The worker's answer: the bytes it could read (fewer than asked where the memory ended).
struct Reply {
    id: u64,
    bytes: Vec<u8>,
}

/// The sampler's side of the worker.
pub struct StackReader {
    requests: Sender<Request>,
    replies: Receiver<Reply>,
    /// The request the worker has not answered yet.
    pending: Option<u64>,
    next: u64,
}

impl StackReader {
    /// Starts the worker, which first calls `prepare` (to raise its priority: it must run as
    /// soon as the target lets it, as the sampler does).
    pub fn new(prepare: fn()) -> std::io::Result<StackReader> {
        let (requests, asked) = channel::<Request>();
        let (answer, replies) = channel();
        std::thread::Builder::new()
            .name("fsprof-stacks".into())
            .spawn(move || {
                prepare();
                for request in asked {
                    let mut bytes = vec![0; request.len];
                    let got = (Remote::new(request.tid).read_long(request.start, &mut bytes))
                        .unwrap_or(0);
                    bytes.truncate(got);
                    if answer
                        .send(Reply {
                            id: request.id,
                            bytes,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
            })?;
        Ok(StackReader {
            requests,
            replies,
            pending: None,
            next: 0,
        })
    }

    /// `len` bytes of thread `tid`'s memory from `start`, as far as it could be read, if the
    /// worker copied them within `wait`; `None` otherwise, and while an earlier copy that
    /// outlasted its wait has not ended (its bytes are dropped).
    pub fn read(&mut self, tid: u32, start: u64, len: usize, wait: Duration) -> Option<Vec<u8>> {
        while let Ok(reply) = self.replies.try_recv() {
            if self.pending == Some(reply.id) {
                self.pending = None;
            }
        }
        if self.pending.is_some() {
            return None;
        }
        let id = self.next;
        self.next += 1;
        let request = Request {
            id,
            tid,
            start,
            len,
        };
        self.requests.send(request).ok()?;
        self.pending = Some(id);
        loop {
            match self.replies.recv_timeout(wait) {
                Ok(reply) if reply.id == id => {
                    self.pending = None;
                    return Some(reply.bytes);
                }
                Ok(_) => continue, // an older copy's, dropped
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_the_memory_read_by_the_worker() {
        let memory: Vec<u8> = (0..=255).collect();
        let mut reader = StackReader::new(|| {}).unwrap();
        let tid = std::process::id();
        let got = reader.read(tid, memory.as_ptr() as u64, 256, Duration::from_secs(10));
        assert_eq!(got.as_deref(), Some(&memory[..]));
    }

    #[test]
    fn a_worker_still_copying_is_not_asked_again_and_its_late_copy_is_dropped() {
        let memory = [7u8; 64];
        let mut reader = StackReader::new(|| {}).unwrap();
        let tid = std::process::id();
        // A wait of zero: the copy is not back in time (or just is); either way the reader
        // answers, and a later read with time to wait gets its own copy.
        let _ = reader.read(tid, memory.as_ptr() as u64, 64, Duration::ZERO);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Some(got) = reader.read(tid, memory.as_ptr() as u64, 32, Duration::from_secs(1))
            {
                break got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the worker never answered"
            );
        };
        assert_eq!(got, vec![7u8; 32]);
    }
}
