//! Native stacks for the sampler, taken one of three ways:
//! * perf (`perf.rs`), for running threads: the kernel samples each running thread every period
//!   of its CPU time without stopping it, registers, stack and mark slots at the same instant;
//!   the sampler takes every such sample, each standing for one period of the thread's CPU time
//!   (taken from the rings and unwound in `capture/perf_samples.rs`);
//! * blocked threads: the stack and instruction pointers that `/proc/PID/task/TID/syscall`
//!   gives for a thread off its CPU, and its stack copied while it stays off;
//! * ptrace (`tracer.rs`), for the rest (everything where perf is refused, a blocked stack that
//!   does not unwind without the frame pointer): the thread is stopped, its registers and the
//!   top of its stack are copied, the caller copies its marks in the same stop, and it runs again.
//!
//! Every copy is unwound (`unwind.rs`) while the thread runs, and each mark is placed between
//! the native frames where it was pushed.
//!
//! The target's memory map is `memory_map.rs`'s; the reads of the target that wait for its
//! memory map's lock (blocked threads' stacks, the map) are made by `off_thread.rs`'s worker.
//! Symbolization is not done here.

use crate::native::complete::Completer;
use crate::native::memory_map::MemoryMap;
use crate::native::off_thread::{self, OffThread};
use crate::native::perf::{LabelFormat, Perf, SharedPerf};
use crate::native::stream::CopiedLabels;
use crate::native::tracer::{Pauses, Tracer};
use crate::native::unwind::{Captured, Registers, StackCopy, StackView, Unwinder, Unwound};
use crate::profile::RawNativeStack;
use crate::program::custom_labels::Label;
use crate::program::modules::{JitDump, Module};
use crate::program::process;
use crate::program::remote::Remote;
use fsprof_shim::abi::RecordView;
use labels::LabelsSearch;
pub use perf_samples::PerfTaken;
use std::time::Instant;

/// Counters for the profile's metadata.
#[derive(Clone, Debug, Default)]
pub struct NativeStats {
    /// Thread samples with a freshly captured stack.
    pub captured: u64,
    /// Of those, stacks that reached the thread's root.
    pub complete: u64,
    /// Thread samples whose thread did not stop in time (no native stack for them).
    pub not_stopped: u64,
    /// Threads that could not be attached.
    pub attach_failures: u64,
    /// Thread samples taken by perf (the rest of `captured` by ptrace or from blocked threads).
    pub perf_captured: u64,
    /// Thread samples of blocked threads taken without stopping them.
    pub blocked: u64,
    /// Thread samples of blocked threads left without a stack rather than stopped.
    pub blocked_skipped: u64,
    /// Perf samples unwound to the root beyond the copy through the words the BPF walk read
    /// at the sample (`walk.rs`).
    pub walked: u64,
    /// Perf samples for which the kernel copied none of the stack (no native stack for them).
    pub uncopied: u64,
}

/// What [`NativeSampler::blocked_stack`] could do.
pub enum Blocked {
    /// The stack, taken without stopping the thread.
    Taken(Captured),
    /// No stack this time (and no stop).
    Skip,
    /// Only a stop can take it.
    Stop,
}

/// The native side of a sampler.
pub struct NativeSampler {
    pid: u32,
    tracer: Tracer,
    unwinder: Unwinder,
    maps: MemoryMap,
    copy: StackCopy,
    unwound: Unwound,
    late: Vec<(u32, Captured, Option<Vec<Label>>)>,
    perf: Option<Perf>,
    /// Perf samples of deep stacks completed beyond the copy (`complete.rs`).
    pub completer: Completer,
    /// Why perf is not used, when it was wanted.
    pub perf_refused: Option<String>,
    /// Counters.
    pub stats: NativeStats,
    /// The first attach error, for the report.
    pub attach_error: Option<nix::errno::Errno>,
    /// The worker that reads the target where that waits for its memory map's lock, once one
    /// was needed (`Err`: it could not be started, and the reads are made here).
    reads: Option<Result<OffThread, ()>>,
    /// Whether the process publishes labels that perf's program reads at each sample
    /// (see [`NativeSampler::look_for_labels`]).
    labels: LabelsSearch,
    /// What wakes this sampler's thread at each fork of a watched process, once it asked
    /// ([`NativeSampler::wake_on_forks`]).
    forks: Option<std::sync::Arc<crate::native::cpu_wide::ForkWakes>>,
    /// Whether the kernel refused to follow the threads' switches, or to stop (said once).
    follow_refused: bool,
}

impl NativeSampler {
    /// A native sampler for process `pid` (its memory map is read at once), sampling running
    /// threads with `perf` (a perf sampler, or why there is none), if given; `span_ids`: the
    /// span ids of OpenTelemetry records as labels too (`LabelsSearch::name`).
    pub fn new(pid: u32, perf: Option<Result<Perf, String>>, span_ids: bool) -> NativeSampler {
        let (perf, perf_refused) = match perf {
            Some(Ok(sampler)) => (Some(sampler), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        if perf.is_none() {
            crate::os::privilege::drop_all(); // nothing else needs it
        }
        // Whole where fsprof copies every stack (no perf): a late stop's copy needs its thread's
        // stack mapping known, and cannot look it up; perf's samples carry their stacks, and a
        // blocked thread's copy looks up the mapping that holds it (`MemoryMap::refresh`).
        let whole = perf.is_none();
        let mut sampler = NativeSampler {
            pid,
            tracer: Tracer::new(pid),
            unwinder: Unwinder::new(),
            maps: MemoryMap::new(pid, whole),
            copy: StackCopy::default(),
            unwound: Unwound::default(),
            late: Vec::new(),
            perf,
            completer: Completer::default(),
            perf_refused,
            stats: NativeStats::default(),
            attach_error: None,
            reads: None,
            labels: LabelsSearch::new(span_ids),
            forks: None,
            follow_refused: false,
        };
        // Here, not by the worker: nothing is sampled yet. The main thread's stack's mapping
        // is known from the start (its samples' stacks are measured against its top).
        let stack = crate::program::process::start_stack(pid);
        sampler
            .maps
            .refresh(pid, &mut sampler.unwinder, None, stack);
        sampler.look_for_labels();
        sampler
    }

    /// Re-reads the memory map for an instruction at `ip` that no module known holds (see
    /// [`MemoryMap::refresh_for_code`]).
    fn refresh_for_code(&mut self, via: u32, ip: u64) {
        (self.maps).refresh_for_code(via, &mut self.unwinder, worker(&mut self.reads), ip);
        self.look_for_labels();
    }

    /// Whether `ip` is in a module known or in an executable mapping known (a JIT's code).
    fn knows_code(&self, ip: u64) -> bool {
        self.unwinder.knows(ip) || self.maps.code_holds(ip)
    }

    /// Re-reads the memory map's modules, and the mapping that holds `stack` (see
    /// [`MemoryMap::refresh`]).
    fn refresh(&mut self, via: u32, stack: Option<u64>) {
        self.maps
            .refresh(via, &mut self.unwinder, worker(&mut self.reads), stack);
        self.look_for_labels();
    }

    /// How the process's labels are read at its samples, if it publishes some.
    pub fn label_format(&self) -> Option<LabelFormat> {
        self.labels.format()
    }

    /// Why the process's labels could not be named, if they could not.
    pub fn labels_note(&self) -> Option<String> {
        self.labels.note()
    }

    /// Has perf's program read the process's labels at each sample, once its modules show
    /// them (`capture/labels.rs`).
    fn look_for_labels(&mut self) {
        let modules = self.unwinder.modules();
        self.labels.look(self.pid, modules, self.perf.as_ref());
    }

    /// Handles the target's pending events (signals, exits) without blocking. Threads that
    /// stopped late for an earlier sample have their stack copied now (they have not run since
    /// they were asked to stop, so it is the stack they had then); see [`NativeSampler::take_late`].
    pub fn poll(&mut self) {
        let (maps, labels) = (&self.maps, &self.labels);
        let mut copies = Vec::new();
        self.tracer.poll(|tid, regs| {
            let mut copy = StackCopy::default();
            copy_stack(Remote::new(tid), maps, regs, &mut copy);
            let copied = labels.read_at_stop(&Remote::new(tid), regs.tp);
            copies.push((tid, regs, copy, copied));
        });
        for (tid, regs, copy, copied) in copies {
            self.unwinder.unwind(regs, copy.view(), &mut self.unwound);
            let captured = Captured {
                frames: self.unwound.frames.clone(),
                complete: self.unwound.complete,
            };
            let labels = self.name_labels(copied, tid);
            self.late.push((tid, captured, labels));
        }
    }

    /// [`NativeSampler::poll`], where a wait took a SIGCHLD since the latest poll (during a
    /// tick, or a sleep): else no event can wait (SIGCHLD is blocked in all of fsprof's
    /// threads, and only the tracers' waits take it). Three polls a tick (a `waitid` and a
    /// `wait4` each) were about 5% of fsprof's CPU beside a two-thread program by a profile.
    pub fn poll_if_signalled(&mut self) {
        if self.tracer.signalled() {
            self.poll();
        }
    }

    /// Labels read at a stop of thread `tid`, their keys named; `None` where none were read
    /// (the process publishes none).
    fn name_labels(&mut self, copied: Option<CopiedLabels>, tid: u32) -> Option<Vec<Label>> {
        copied.map(|copied| self.labels.name(copied, self.pid, tid))
    }

    /// Stacks copied by [`NativeSampler::poll`] from threads that stopped late, with their
    /// labels then.
    pub fn take_late(&mut self) -> Vec<(u32, Captured, Option<Vec<Label>>)> {
        std::mem::take(&mut self.late)
    }

    /// Sleeps until `deadline`, handling the target's events as they come (signals for it are
    /// passed on at once, late stops ended at once); or, once the calling thread asked to wake
    /// at forks ([`NativeSampler::wake_on_forks`]), until a watched process makes one or the
    /// program exits (its end is then seen at once, as when the loop looked every few
    /// milliseconds). Whether a fork or the exit woke it.
    pub fn sleep_until(&mut self, deadline: Instant) -> bool {
        self.poll_if_signalled();
        loop {
            if let Some(forks) = &self.forks {
                if forks.take() || self.tracer.exit_status().is_some() {
                    return true;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            self.tracer.wait_for_event(deadline - now);
            self.poll_if_signalled();
        }
    }

    /// No fork ends the calling thread's sleeps before `until` (it looks for new processes
    /// often enough until then: see `cpu_wide/forks.rs`).
    pub fn quiet_forks_until(&self, until: Instant) {
        if let Some(forks) = &self.forks {
            let ahead = until.saturating_duration_since(Instant::now()).as_nanos() as u64;
            forks.quiet_until(crate::os::time::monotonic_ns() + ahead);
        }
    }

    /// Has the calling thread's sleeps end at each fork of a process the perf sampler watches
    /// (the processes followed: `record/children.rs`); false where nothing can wake it so
    /// (not per CPU, or the kernel refuses the program).
    pub fn wake_on_forks(&mut self) -> bool {
        let wakes = self.perf.as_ref().and_then(|perf| perf.lock().fork_wakes());
        if let Some(wakes) = &wakes {
            wakes.wake_me();
        }
        self.forks = wakes;
        self.forks.is_some()
    }

    /// Whether every process the perf sampler serves is watched by its per-CPU programs now, so
    /// that each one's forks end the sleeps of [`NativeSampler::wake_on_forks`] (see
    /// `PerfSampler::every_process_watched`).
    pub fn every_process_watched(&self) -> bool {
        (self.perf.as_ref()).is_some_and(|perf| perf.lock().every_process_watched())
    }

    /// Whether `tid` is attached: for a sample now, or waiting for a stop asked for earlier.
    pub fn is_attached(&self, tid: u32) -> bool {
        self.tracer.is_attached(tid)
    }

    /// Attaches to `tid` for a sample (which detaches it again: see `tracer.rs`), if not yet done; whether it is attached. `running`: the thread was running at the tick.
    pub fn attach(&mut self, tid: u32, running: bool) -> bool {
        if self.tracer.is_attached(tid) {
            return true;
        }
        // Not a thread off its CPU inside an `exec`: traced there, it would run a set-user-id
        // program without its privilege (see `tracer.rs`). A running one cannot be told apart
        // (the file says only `running`), and is not looked at: every microsecond between the
        // tick's marks and the stop is a chance for them to move (the sample then has no stack).
        if !running && process::in_exec(self.pid, tid) {
            return false;
        }
        // Threads that exited are reaped first when the thread is off its CPU (an `exec` may
        // be waiting, holding the lock that PTRACE_SEIZE takes, until its other threads are
        // gone, and a traced one is gone only once fsprof reaps it). Any other that exits
        // before the seize is reaped by the seize's watcher (`seize.rs`), 20 to 40 ms later.
        if !running {
            self.poll();
        }
        match self.tracer.seize(tid) {
            Ok(()) => true,
            Err(nix::errno::Errno::ESRCH) => false, // it exited
            Err(errno) => {
                self.stats.attach_failures += 1;
                self.attach_error.get_or_insert(errno);
                false
            }
        }
    }

    /// Stops `tid`, copies its stack (and its labels, where the process publishes some), runs
    /// `during_stop` (to copy its marks) while it is still stopped, resumes it, and unwinds.
    /// `None` if it could not be stopped.
    pub fn capture<R>(
        &mut self,
        tid: u32,
        during_stop: impl FnOnce() -> R,
    ) -> Option<(Captured, R, Option<Vec<Label>>)> {
        let remote = Remote::new(tid);
        let (maps, labels) = (&self.maps, &self.labels);
        let copy = &mut self.copy;
        let sampled = self.tracer.sample(tid, |regs| {
            copy_stack(remote, maps, regs, copy);
            let copied = labels.read_at_stop(&remote, regs.tp);
            (regs, during_stop(), copied)
        });
        let Some((regs, result, copied)) = sampled else {
            self.stats.not_stopped += 1;
            return None;
        };
        let copy = std::mem::take(&mut self.copy);
        let captured = self.unwind(tid, regs, copy.view(), true);
        self.copy = copy;
        let labels = self.name_labels(copied, tid);
        Some((self.counted(captured), result, labels))
    }

    /// Whether some thread's anchors were set (`complete.rs`), or rules learnt for the walk
    /// (`walk.rs`), since the previous call: samples until then could not be completed, and the
    /// sooner they are read, the more images read for them are still the thread's stack and
    /// the sooner the walk knows the frames.
    pub fn learnt(&mut self) -> bool {
        std::mem::take(&mut self.completer.anchors_chosen)
    }

    /// Whether running threads are sampled with perf.
    pub fn uses_perf(&self) -> bool {
        self.perf.is_some()
    }

    /// Whether perf samples with one event per CPU rather than per thread.
    pub fn perf_per_cpu(&self) -> bool {
        self.perf.as_ref().is_some_and(|perf| perf.lock().per_cpu())
    }

    /// Whether perf's events per CPU sample at the scheduler's tick (`cpu_wide/tick.rs`).
    pub fn perf_at_tick(&self) -> bool {
        self.perf.as_ref().is_some_and(|perf| perf.lock().at_tick())
    }

    /// The perf sampler for the processes this one's recording follows to join, where it
    /// samples per CPU (see `perf/shared.rs`).
    pub fn share_perf(&self) -> Option<SharedPerf> {
        self.perf.as_ref()?.share()
    }

    /// Forgets a thread that is gone (closes its perf event).
    pub fn forget(&mut self, tid: u32) {
        if let Some(perf) = &self.perf {
            perf.lock().forget_for(perf.owner(), tid);
        }
        self.completer.forget(tid);
    }

    /// Unwinds `stack`, whose registers are `regs`, re-reading the memory map (through `tid`)
    /// when the stack runs through memory the map did not know.
    /// `copied_here`: the stack was copied by fsprof, which needs its mapping known (a copy by
    /// the kernel, perf's, does not: the memory map is then read for a new library only, not
    /// for each new thread's stack, for a read of it waits for the target's memory map's lock
    /// as `off_thread.rs` says; a thousand threads being born kept the sampler 30 ms in one).
    fn unwind(
        &mut self,
        tid: u32,
        regs: Registers,
        stack: StackView<'_>,
        copied_here: bool,
    ) -> Captured {
        let stack_unknown = copied_here && !self.maps.holds(regs.sp);
        if stack_unknown {
            // A new thread's stack since the last read.
            self.refresh(tid, Some(regs.sp));
        }
        if !self.unwinder.knows(regs.ip) {
            // A library loaded since the last read, or code without a file (a JIT's).
            self.refresh_for_code(tid, regs.ip);
        }
        if !self.knows_code(regs.ip) {
            // No mapping known holds the instruction (the map could not be read in time, or
            // no longer can be: the process is gone): its stack would be guessed (by the
            // frame pointer register, which libraries do not keep), so it has none.
            self.unwound.frames.clear();
            self.unwound.complete = false;
            return Captured::default();
        }
        self.unwinder.unwind(regs, stack, &mut self.unwound);
        if !self.unwound.complete {
            // The stack may run through a library loaded since the maps were read.
            let unknown = (self.unwound.frames.last())
                .map(|f| f.address)
                .filter(|&address| !self.unwinder.knows(address));
            if let Some(address) = unknown {
                self.refresh_for_code(tid, address);
                self.unwinder.unwind(regs, stack, &mut self.unwound);
            }
            // A return address into no code known (read from a frame whose rule was guessed)
            // is no frame.
            let last = self.unwound.frames.last().map(|f| f.address);
            if self.unwound.frames.len() > 1 && last.is_some_and(|a| !self.knows_code(a)) {
                self.unwound.frames.pop();
            }
        }
        Captured {
            frames: self.unwound.frames.clone(),
            complete: self.unwound.complete,
        }
    }

    /// Counts a stack taken for a sample.
    fn counted(&mut self, captured: Captured) -> Captured {
        self.stats.captured += 1;
        self.stats.complete += u64::from(captured.complete);
        captured
    }

    /// The stack of `tid`, blocked in the kernel, taken without stopping it: its stack and
    /// instruction pointers come from `/proc/PID/task/TID/syscall` (which the kernel fills only
    /// for a thread that is off its CPU) and its stack memory is copied while it stays blocked.
    /// [`Blocked::Skip`] when that cannot be done without waiting (see below) or it ran
    /// meanwhile (its scheduling count moved); [`Blocked::Stop`] when its stack does not unwind
    /// to its root: the frame pointer is not known this way, so a frame that needs it to unwind
    /// (Rust's standard library keeps frame pointers) is left to a ptrace stop, unless its size
    /// at that call was learnt from an earlier stack (see `unwind.rs`): a thread blocking again
    /// and again at the same place is stopped once. Not stopping a blocked thread matters: a stop extends
    /// the block it interrupts (a sleep that ends meanwhile resumes late), which the program's
    /// own clock sees and the samples did not.
    pub fn blocked_stack(&mut self, tid: u32, retry: bool) -> Blocked {
        // The kernel fills that file only once the thread is off its CPU, and waits for it
        // otherwise: by sleeping a whole scheduler tick when the thread was preempted on its way
        // to sleep, which a real-time sampler sharing its CPU may just have done. A stop would
        // lengthen its wait (see above): the sample goes without a stack, unless `retry` (it
        // was skipped at the previous sample too, and has had a whole interval to leave).
        // SAFETY: no arguments.
        let ours = unsafe { nix::libc::sched_getcpu() };
        if !retry && u32::try_from(ours).ok() == process::last_cpu(self.pid, tid) {
            self.stats.blocked_skipped += 1;
            return Blocked::Skip;
        }
        let Some(before) = crate::program::thread_status::times_scheduled(self.pid, tid) else {
            return Blocked::Stop;
        };
        let Some((sp, ip)) = process::blocked_registers(self.pid, tid) else {
            self.stats.blocked_skipped += 1;
            return Blocked::Skip; // running again
        };
        let regs = Registers {
            ip,
            sp,
            bp: None,
            tp: 0,
        };
        if !self.maps.holds(sp) {
            self.refresh(tid, Some(sp));
        }
        // By the worker (`off_thread.rs`): the sampler never waits long for the target's
        // memory map's lock.
        match worker(&mut self.reads) {
            Some(reads) => {
                let (sp, len) = (regs.sp, self.maps.stack_len(regs.sp));
                // The copy's buffer travels to the worker and back (lost if it comes late).
                let mut bytes = std::mem::take(&mut self.copy.bytes);
                let copy = move || {
                    bytes.resize(len, 0);
                    let got = Remote::new(tid).read_long(sp, &mut bytes).unwrap_or(0);
                    bytes.truncate(got);
                    bytes
                };
                let Some(bytes) = reads.run(copy, off_thread::WAIT) else {
                    self.stats.blocked_skipped += 1;
                    return Blocked::Skip;
                };
                (self.copy.start, self.copy.bytes) = (sp, bytes);
            }
            None => copy_stack(Remote::new(tid), &self.maps, regs, &mut self.copy),
        }
        if crate::program::thread_status::times_scheduled(self.pid, tid) != Some(before) {
            self.stats.blocked_skipped += 1;
            return Blocked::Skip;
        }
        let copy = std::mem::take(&mut self.copy);
        let captured = self.unwind(tid, regs, copy.view(), true);
        self.copy = copy;
        if !captured.complete {
            return Blocked::Stop;
        }
        self.stats.blocked += 1;
        Blocked::Taken(self.counted(captured))
    }

    /// Detaches from every thread (they keep running).
    pub fn detach(&mut self) {
        self.tracer.detach_all();
    }

    /// The program's exit, when the tracer collected it.
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.tracer.exit_status()
    }

    /// How long sampled threads stayed stopped.
    pub fn pauses(&self) -> &Pauses {
        self.tracer.pauses()
    }

    /// Every module loaded during the session, and the jitdump files mapped, for symbolization.
    pub fn into_modules(self) -> (Vec<Module>, Vec<JitDump>) {
        self.maps.into_modules()
    }
}

/// The worker in `slot`, started if not yet (`None` where it cannot be, or died: the reads are
/// then made in place).
fn worker(slot: &mut Option<Result<OffThread, ()>>) -> Option<&mut OffThread> {
    if slot
        .as_ref()
        .is_some_and(|w| w.as_ref().is_ok_and(OffThread::dead))
    {
        *slot = Some(Err(()));
    }
    slot.get_or_insert_with(|| OffThread::new(raise_priority).map_err(|_| ()))
        .as_mut()
        .ok()
}

/// The worker's priority: the sampler's (`os/priority.rs`).
fn raise_priority() {
    let _ = crate::os::priority::raise();
}

/// Copies the stack from `regs.sp` to the end of its mapping (see [`MemoryMap::stack_len`]).
fn copy_stack(remote: Remote, maps: &MemoryMap, regs: Registers, copy: &mut StackCopy) {
    let len = maps.stack_len(regs.sp);
    copy.start = regs.sp;
    copy.bytes.resize(len, 0);
    let got = remote.read_long(regs.sp, &mut copy.bytes).unwrap_or(0);
    copy.bytes.truncate(got);
}

/// The native stack of a sample, root first, with `marks` (outermost first) placed: each after the
/// innermost frame whose CFA lies above the stack address the mark was pushed at (the frame that
/// pushed it), a call-site mark after its call site's frame. Marks keep their order. `None` for a
/// stack not taken (no frames: a perf sample whose stack the kernel did not copy).
pub fn place(captured: &Captured, marks: &[RecordView]) -> Option<RawNativeStack> {
    let frames = &captured.frames;
    if frames.is_empty() {
        return None;
    }
    let n = frames.len();
    let mut stack = RawNativeStack {
        addresses: frames.iter().rev().map(|f| f.address).collect(),
        marks_at: Vec::with_capacity(marks.len()),
        truncated: !captured.complete,
        marks: None,
    };
    let mut previous = 0;
    for mark in marks {
        let pushed_by = frames.iter().position(|f| f.cfa > mark.sp);
        // A call-site mark goes after its call site's frame, which may be further out (the
        // program's frame above the runtime's that made the call: see `call_sites.rs`).
        let frame = match pushed_by {
            Some(innermost) if mark.kind == fsprof_shim::abi::KIND_CALL_SITE => frames[innermost..]
                .iter()
                .position(|f| f.address.wrapping_add(1) == mark.payload)
                .map_or(Some(innermost), |outward| Some(innermost + outward)),
            other => other,
        };
        let at = frame.map_or(0, |innermost| n - innermost);
        previous = at.max(previous);
        stack.marks_at.push(previous as u32);
    }
    Some(stack)
}

mod labels;
mod perf_samples;
#[cfg(test)]
mod tests;
