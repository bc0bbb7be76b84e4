//! Reads of the target that wait for its memory map's lock, made on a thread of its own, so
//! that the sampling thread never waits long for the target. Reading another process's memory
//! (`process_vm_readv`) or its memory map (`/proc/PID/maps`) takes that lock, which the target
//! holds for writing through every `mmap`, `munmap` and `fork`, and which new readers wait for
//! while a writer waits. A writer that cannot get a CPU (one of 1000 busy threads, creating and
//! ending threads) kept fsprof's real-time sampler waiting 170 to 210 ms at a blocked thread's
//! stack and 41 ms at the memory map (`perf record -e sched:sched_switch -g`: `down_read` in
//! `process_vm_rw_core`, `proc_get_vma`), and the CPUs' perf rings overflowed meanwhile.
//!
//! Here a worker does the read; the sampler waits for it at most a few milliseconds (longer,
//! once per read, for a memory map that must say where a sample's code is: [`CODE_WAIT`]),
//! then goes on without it (a blocked thread's sample is skipped and tried again, as where the thread ran
//! meanwhile; the memory map stays as it was read last), and asks nothing more until the worker
//! has finished. Its late answer is kept for [`OffThread::late`] (a memory map read late is still
//! newer than the one held; a stack copied late is not asked for: the thread may have run). A
//! worker that died (a read panicked) is [`OffThread::dead`]: its caller reads in place again.
//! Not here: which reads are made, and what is checked around them (`capture.rs`,
//! `memory_map.rs`).

use std::any::Any;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// How long the sampler waits for a read: an unhindered copy of a blocked thread's stack, or of
/// a memory map of a few thousand lines, takes microseconds to a millisecond.
pub const WAIT: Duration = Duration::from_millis(3);

/// How long the sampler waits for a memory map that must say where a sample's instruction is
/// (a library just loaded): the target's threads mapping memory while they wait for a CPU kept
/// the read of a starting `rg` beside a busy loop longer than [`WAIT`], and its samples in
/// `libc.so.6`, unwound without its tables, were guessed by the frame pointer, whose register
/// that code does not keep (a frame named by the bytes of a path on the stack, standing for 50
/// ms of `open`). Rare: once per library, while a program maps them.
pub const CODE_WAIT: Duration = Duration::from_millis(50);

type Job = Box<dyn FnOnce() -> Box<dyn Any + Send> + Send>;

/// The sampler's side of the worker.
pub struct OffThread {
    jobs: Sender<(u64, Job)>,
    answers: Receiver<(u64, Box<dyn Any + Send>)>,
    /// The job the worker has not answered yet.
    pending: Option<u64>,
    /// Whether [`OffThread::late_within`] waited for the pending job in vain already: it is not
    /// waited for again (callers at each of a thousand samples would wait at each).
    outwaited: bool,
    next: u64,
    /// The answer of a read that outlasted its wait, until taken or another read's replaces it.
    late: Option<Box<dyn Any + Send>>,
    dead: bool,
}

impl OffThread {
    /// Starts the worker, which first calls `prepare` (to raise its priority: it must run as
    /// soon as the target lets it, as the sampler does).
    pub fn new(prepare: fn()) -> std::io::Result<OffThread> {
        let (jobs, asked) = channel::<(u64, Job)>();
        let (answer, answers) = channel();
        // On a thread of the pool (`os/threads.rs`), given back when the sampler drops `jobs`.
        crate::os::threads::spawn("fsprof-reads", move || {
            prepare();
            for (id, job) in asked {
                if answer.send((id, job())).is_err() {
                    return;
                }
            }
        })?;
        Ok(OffThread {
            jobs,
            answers,
            pending: None,
            outwaited: false,
            next: 0,
            late: None,
            dead: false,
        })
    }

    /// What `read` returns, if the worker ran it within `wait`; `None` otherwise, and while an
    /// earlier read that outlasted its wait has not ended.
    pub fn run<T: Send + 'static>(
        &mut self,
        read: impl FnOnce() -> T + Send + 'static,
        wait: Duration,
    ) -> Option<T> {
        self.collect();
        if self.pending.is_some() || self.dead {
            return None;
        }
        let id = self.next;
        self.next += 1;
        let job: Job = Box::new(move || Box::new(read()) as Box<dyn Any + Send>);
        if self.jobs.send((id, job)).is_err() {
            self.dead = true;
            return None;
        }
        (self.pending, self.outwaited) = (Some(id), false);
        match self.answers.recv_timeout(wait) {
            // One read at a time: the answer is this one's.
            Ok((_, value)) => {
                self.pending = None;
                value.downcast::<T>().ok().map(|value| *value)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.dead = true;
                None
            }
        }
    }

    /// [`OffThread::late`], waiting up to `wait` for a read still being made, unless a wait
    /// for it ended in vain already.
    pub fn late_within<T: 'static>(&mut self, wait: Duration) -> Option<T> {
        self.collect();
        if self.pending.is_some() && self.late.is_none() && !self.outwaited {
            match self.answers.recv_timeout(wait) {
                Ok((_, value)) => {
                    self.pending = None;
                    self.late = Some(value);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.outwaited = true;
                    return None;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.dead = true;
                    return None;
                }
            }
        }
        self.late()
    }

    /// The answer of the read that outlasted its wait, if it has come since and is a `T`.
    pub fn late<T: 'static>(&mut self) -> Option<T> {
        self.collect();
        match self.late.take()?.downcast::<T>() {
            Ok(value) => Some(*value),
            Err(other) => {
                self.late = Some(other);
                None
            }
        }
    }

    /// Whether the worker is gone (a read panicked): nothing more can be asked of it.
    pub fn dead(&self) -> bool {
        self.dead
    }

    /// Takes the answer of a read that outlasted its wait, if it has come.
    fn collect(&mut self) {
        match self.answers.try_recv() {
            Ok((_, value)) => {
                self.pending = None;
                self.late = Some(value);
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
            Err(std::sync::mpsc::TryRecvError::Disconnected) => self.dead = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::remote::Remote;

    #[test]
    fn a_read_is_made_by_the_worker() {
        let memory: Vec<u8> = (0..=255).collect();
        let mut worker = OffThread::new(|| {}).unwrap();
        let (tid, at) = (std::process::id(), memory.as_ptr() as u64);
        let got = worker.run(
            move || {
                let mut bytes = vec![0u8; 256];
                Remote::new(tid)
                    .read_long(at, &mut bytes)
                    .map(|_| bytes)
                    .ok()
            },
            Duration::from_secs(10),
        );
        assert_eq!(got.flatten().as_deref(), Some(&memory[..]));
        assert_ne!(
            worker.run(|| std::thread::current().id(), Duration::from_secs(10)),
            Some(std::thread::current().id())
        );
    }

    #[test]
    fn a_worker_still_reading_is_not_asked_again_and_its_late_answer_is_dropped() {
        let mut worker = OffThread::new(|| {}).unwrap();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        // A read held until released: its wait ends first, and the worker is busy.
        let held = worker.run(move || hold.recv().is_ok(), Duration::from_millis(10));
        assert_eq!(held, None);
        assert_eq!(
            worker.run(|| 1, Duration::from_secs(1)),
            None,
            "asked while busy"
        );
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Some(got) = worker.run(|| 2, Duration::from_secs(1)) {
                break got;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the worker never came back"
            );
        };
        assert_eq!(got, 2);
    }

    #[test]
    fn a_late_answer_is_kept_for_its_type() {
        let mut worker = OffThread::new(|| {}).unwrap();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let held = worker.run(
            move || hold.recv().map(|_| String::from("late")).ok(),
            Duration::ZERO,
        );
        assert_eq!(held, None);
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while worker.pending.is_some() {
            worker.collect();
            assert!(
                std::time::Instant::now() < deadline,
                "the worker never answered"
            );
            std::thread::yield_now();
        }
        assert_eq!(worker.late::<u32>(), None, "taken as another type");
        assert_eq!(worker.late::<Option<String>>(), Some(Some("late".into())));
        assert_eq!(worker.late::<Option<String>>(), None, "taken twice");
    }

    #[test]
    fn a_read_still_being_made_is_waited_for_once() {
        let mut worker = OffThread::new(|| {}).unwrap();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let held = worker.run(move || hold.recv().map(|_| 7u32).ok(), Duration::ZERO);
        assert_eq!(held, None);
        // Waited for in vain: the next call does not wait, even for an answer on its way.
        let begun = std::time::Instant::now();
        assert_eq!(
            worker.late_within::<Option<u32>>(Duration::from_millis(20)),
            None
        );
        assert!(begun.elapsed() >= Duration::from_millis(20), "did not wait");
        release.send(()).unwrap();
        let begun = std::time::Instant::now();
        let _ = worker.late_within::<Option<u32>>(Duration::from_secs(10));
        assert!(begun.elapsed() < Duration::from_secs(5), "waited again");
        // A new read is waited for, and its answer taken.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while worker.pending.is_some() {
            worker.collect();
            assert!(std::time::Instant::now() < deadline, "never answered");
            std::thread::yield_now();
        }
        let _ = worker.late::<Option<u32>>();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        assert_eq!(
            worker.run(move || hold.recv().map(|_| 8u32).ok(), Duration::ZERO),
            None
        );
        release.send(()).unwrap();
        let late = worker.late_within::<Option<u32>>(Duration::from_secs(10));
        assert_eq!(late, Some(Some(8)));
    }

    #[test]
    fn a_worker_whose_read_panicked_is_dead() {
        let mut worker = OffThread::new(|| {}).unwrap();
        let _ = worker.run(|| panic!("on purpose"), Duration::from_secs(10));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !worker.dead() {
            let _ = worker.run(|| 1, Duration::from_millis(10));
            assert!(std::time::Instant::now() < deadline, "not noticed");
        }
        assert_eq!(worker.run(|| 1, Duration::from_secs(1)), None);
    }
}
