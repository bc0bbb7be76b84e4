//! Native stacks for the sampler, taken one of three ways:
//! * perf (`perf.rs`), for running threads: the kernel samples each running thread every period
//!   of its CPU time without stopping it, registers, stack and mark slots at the same instant;
//!   the sampler takes every such sample, each standing for one period of the thread's CPU time;
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
use crate::native::cpu_wide::Held;
use crate::native::layout::{ANCHORS, SLOTS};
use crate::native::memory_map::MemoryMap;
use crate::native::off_thread::{self, OffThread};
use crate::native::perf::{LabelFormat, Perf, SharedPerf, WatchError};
use crate::native::stream::CopiedLabels;
use crate::native::stream::Folded;
use crate::native::stream::{PerfSample, Switch, Taken};
use crate::native::tracer::{Pauses, Tracer};
use crate::native::unwind::{
    Captured, Registers, StackCopy, StackView, Unwinder, Unwound, UnwoundFrame,
};
use crate::os::privilege::Refusal;
use crate::profile::RawNativeStack;
use crate::program::custom_labels::Label;
use crate::program::modules::{JitDump, Module};
use crate::program::process;
use crate::program::remote::Remote;
use fsprof_shim::abi::RecordView;
use labels::LabelsSearch;
use std::time::{Duration, Instant};

/// What perf gave of a thread (see [`NativeSampler::perf_samples`]), oldest first.
pub enum PerfTaken {
    /// A sample of its CPU time: its stack, the raw bytes of its slots at that instant
    /// (`None`: unknown), the thread's CPU time then (ns since perf began to sample it), when
    /// it was taken (CLOCK_MONOTONIC, ns), and the length of a CPU's tick that took it (0: the
    /// thread's own timer, see `PerfSample::tick_ns`).
    Sample {
        captured: Captured,
        slots: Option<[Option<Vec<u8>>; SLOTS]>,
        cpu_ns: u64,
        time: u64,
        tick_ns: u64,
        /// The thread's labels then (see `PerfSample::labels`), their keys named.
        labels: Option<Vec<crate::program::custom_labels::Label>>,
    },
    /// Its stack as it left its CPU (preempted or blocked), taken at `time` (CLOCK_MONOTONIC,
    /// ns), just before the departure that follows it.
    Departure { captured: Captured, time: u64 },
    /// It left its CPU, or came back to one.
    Switch(Switch),
    /// Its short stretches off its CPU, folded (see `layout::FOLD_MOST_NS`).
    Folded(Folded),
    /// Records may be missing here (see `Taken::Gap`); those before are complete up to `at`.
    Gap { at: u64 },
}

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

/// Bytes kept beyond the outermost frame's CFA of a stack unwound to its root.
const ROOT_MARGIN: u64 = 64;

/// Where a stack unwound to its root stops being read: past its outermost frame (the largest
/// CFA known), with a margin; 0 if no frame's CFA is known.
fn root_end(captured: &Captured) -> u64 {
    (captured.frames.iter())
        .map(|frame| frame.cfa)
        .filter(|cfa| *cfa != u64::MAX)
        .max()
        .map_or(0, |cfa| cfa.saturating_add(ROOT_MARGIN))
}

/// Whether unwinding `captured` read a return address beyond `end` (the copy's end).
fn beyond(captured: &Captured, end: u64) -> bool {
    (captured.frames.iter()).any(|frame| frame.cfa != u64::MAX && frame.cfa.wrapping_sub(8) >= end)
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
        self.poll(); // events whose SIGCHLD a wait during the tick consumed
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
            self.poll();
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

    /// The perf sampler for the processes this one's recording follows to join, where it
    /// samples per CPU (see `perf/shared.rs`).
    pub fn share_perf(&self) -> Option<SharedPerf> {
        self.perf.as_ref()?.share()
    }

    /// The samples perf took of thread `tid` since the previous call, oldest first, unwound;
    /// its slots are at `slots` (addresses in the target, 0 for none) from now on. Starts
    /// sampling the thread on first use (`running`: it runs now, as /proc said); `None` if perf
    /// cannot sample it.
    pub fn perf_samples(
        &mut self,
        tid: u32,
        slots: [u64; SLOTS],
        running: bool,
    ) -> Option<Vec<PerfTaken>> {
        // Out of `self` while its samples, which borrow its rings, are unwound.
        let mut holder = self.perf.take()?;
        let mut perf = holder.lock();
        let (lost, unmatched) = (perf.lost, perf.unmatched);
        match perf.watch_by(holder.owner(), tid, slots, running) {
            Ok(()) => perf.watch_process(holder.owner(), self.pid),
            Err(WatchError::Refused(_)) => {
                drop(perf);
                self.perf = Some(holder);
                return None;
            }
            Err(WatchError::Foreign { tid, why }) => {
                // Dropped whole, unread: see `WatchError::Foreign`.
                drop(perf);
                self.stop_perf(tid, why);
                return None;
            }
        }
        let mut taken = Vec::new();
        let mut anchors = None;
        let owns_rules = holder.owns_rules();
        let walks = owns_rules && perf.walks();
        let (mut cut, mut returns) = (false, Vec::new());
        // Where the thread's stacks reach their root, from its samples unwound whole; 0 after
        // a sample that did not unwind whole (see `PerfSampler::keep_stacks_below`).
        let mut stack_end = None;
        // The labels copied at each sample, named once perf is let go (by the sample's place).
        let mut copied: Vec<(usize, CopiedLabels)> = Vec::new();
        perf.take(tid, |item| match item {
            Taken::Sample(sample) => {
                self.stats.perf_captured += 1;
                let stack = StackView {
                    instant: &sample.instant,
                    ..sample.stack
                };
                let mut captured = self.unwind(tid, sample.regs, stack, false);
                if captured.complete && beyond(&captured, stack.end()) {
                    self.stats.walked += 1;
                }
                stack_end = Some(match captured.complete {
                    true => root_end(&captured).max(stack_end.unwrap_or(0)),
                    false => 0,
                });
                if !captured.complete && !sample.trimmed {
                    cut |= stack.end() < self.stack_top_of(tid, sample.regs.sp);
                    let learn = Some(&mut returns);
                    let (completed, new_anchors) = self.complete(tid, &sample, &captured, learn);
                    captured = completed.unwrap_or(captured);
                    anchors = new_anchors.or(anchors);
                }
                if walks || !captured.complete {
                    note_returns(&mut returns, &captured.frames);
                }
                if let Some(labels) = sample.labels {
                    copied.push((taken.len(), labels));
                }
                // The kernel copied none of the stack (it could not read the stack's memory at
                // that instant: a few samples a run, more under heavy preemption), and no image
                // completed it: the registers alone give the innermost function, which would be
                // drawn as a stack cut there. The sample goes without a native stack instead.
                let captured = if !captured.complete && sample.stack.bytes.is_empty() {
                    self.stats.uncopied += 1;
                    Captured::default()
                } else {
                    self.counted(captured)
                };
                taken.push(PerfTaken::Sample {
                    captured,
                    slots: sample.marks_known.then_some(sample.slots),
                    cpu_ns: sample.cpu_ns,
                    time: sample.time,
                    tick_ns: sample.tick_ns,
                    labels: None,
                });
            }
            Taken::Departure(sample) => {
                // Only a stack unwound to its root: one deeper than the copy is completed at
                // samples, with words read along it then (`complete.rs`, `walk.rs`), which a
                // departure lacks; the latest sample's stands for it instead.
                let captured = self.unwind(tid, sample.regs, sample.stack, false);
                if captured.complete {
                    taken.push(PerfTaken::Departure {
                        captured,
                        time: sample.time,
                    });
                }
            }
            Taken::Switch(switch) => taken.push(PerfTaken::Switch(switch)),
            Taken::Folded(folded) => taken.push(PerfTaken::Folded(folded)),
            Taken::Gap { at } => taken.push(PerfTaken::Gap { at }),
        });
        if let Some(anchors) = anchors {
            perf.set_anchors(tid, anchors);
        }
        if let Some(end) = stack_end {
            perf.keep_stacks_below(tid, end);
        }
        // The walk's rules are of the process the sampler was made for: another process's
        // stacks neither turn it on nor teach it.
        if owns_rules {
            perf.walk(cut);
            perf.rules().read_functions(self.unwinder.modules());
            perf.rules().poll();
            for return_address in returns {
                if !perf.rules().knows(return_address) {
                    let rule = self.unwinder.frame_rule(return_address);
                    // Read soon only where a stack was cut: the walk learns from stacks
                    // unwound whole too, and an interpreter's keep showing return addresses
                    // not seen before (python3's four threads: a new one every 20 ms or so),
                    // which kept the ticks at the full rate all along, each a wake-up of fsprof
                    // that preempts the program (python3 with threads 16% slower for it).
                    self.completer.anchors_chosen |= rule.is_some() && cut;
                    perf.rules().learn(return_address, rule);
                }
            }
        }
        let (lost, unmatched) = (perf.lost - lost, perf.unmatched - unmatched);
        drop(perf);
        holder.lost += lost;
        holder.unmatched += unmatched;
        match crate::os::privilege::still_traceable(self.pid) {
            Ok(()) => {}
            Err(Refusal::Unsettled(_)) => {
                // In the middle of an exec: what perf took is dropped unused (of which program
                // is not known yet); the gate decides at the next tick.
                self.perf = Some(holder);
                return None;
            }
            Err(why) => {
                // It ran a program its user may not trace (one with file capabilities): what
                // perf took may be of that program, and is dropped unused, and perf with it.
                drop(holder);
                self.stop_perf(tid, why.to_string());
                return None;
            }
        }
        self.perf = Some(holder);
        for (at, labels) in copied {
            let named = self.labels.name(labels, self.pid, tid);
            if let Some(PerfTaken::Sample { labels, .. }) = taken.get_mut(at) {
                *labels = Some(named);
            }
        }
        Some(taken)
    }

    /// The process's threads perf sampled bare, neither watched nor ignored (per CPU: see
    /// `PerfSampler::watch_process`); with `read`, the CPUs' rings are read first.
    pub fn perf_strangers(&mut self, read: bool) -> Vec<u32> {
        (self.perf.as_ref()).map_or_else(Vec::new, |perf| {
            perf.lock().strangers_of(perf.owner(), read)
        })
    }

    /// Has perf sample the process's threads it does not watch, bare (per CPU: see
    /// `PerfSampler::watch_process`), where it does not already; once per tick, past the exec
    /// gate, from the recording's first tick (which watches no thread: a thread born and gone
    /// before the second went unseen, a program's first thread 0.1 ms after its start).
    pub fn watch_process(&mut self) {
        if let Some(perf) = &self.perf {
            perf.lock().watch_process(perf.owner(), self.pid);
        }
    }

    /// Drops thread `tid`'s bare samples, held and to come: a tick saw it.
    pub fn ignore_stranger(&mut self, tid: u32) {
        if let Some(perf) = &self.perf {
            perf.lock().ignore_stranger(tid);
        }
    }

    /// Thread `tid`'s bare samples (see [`NativeSampler::perf_strangers`]), oldest first,
    /// unwound, each with the length of the tick that took it; none where the process may no
    /// longer be traced (they may be of a program it ran since).
    pub fn unseen_samples(&mut self, tid: u32) -> Vec<(Captured, u64)> {
        let mut unwound = Vec::new();
        for sample in self.take_bare(tid) {
            let captured = self.unwind_bare(&sample);
            let captured = if !captured.complete && sample.stack.is_empty() {
                self.stats.uncopied += 1;
                Captured::default()
            } else {
                self.counted(captured)
            };
            unwound.push((captured, sample.tick_ns));
        }
        unwound
    }

    /// Thread `tid`'s bare samples held, taken; none where the process may no longer be traced
    /// (they may be of a program it ran since).
    fn take_bare(&mut self, tid: u32) -> Vec<Held> {
        let Some(holder) = self.perf.take() else {
            return Vec::new();
        };
        let held = holder.lock().take_stranger(tid);
        self.perf = Some(holder);
        if held.is_empty() || crate::os::privilege::still_traceable(self.pid).is_err() {
            return Vec::new();
        }
        held
    }

    /// A bare sample's stack, unwound; its memory map read through the process (its thread
    /// may be gone).
    fn unwind_bare(&mut self, sample: &Held) -> Captured {
        let stack = StackView::new(sample.regs.sp, &sample.stack);
        self.unwind(self.pid, sample.regs, stack, false)
    }

    /// Drops the samples perf took of `tid` so far, unread, and stops copying its slots until
    /// the next [`NativeSampler::perf_samples`] gives their addresses again: after an `exec`,
    /// they are the old program's.
    pub fn drop_perf_samples(&mut self, tid: u32) {
        if let Some(holder) = &self.perf {
            let mut perf = holder.lock();
            if perf.watches_for(holder.owner(), tid) {
                perf.take(tid, |_| {});
                let _ = perf.watch_by(holder.owner(), tid, [0; SLOTS], false);
            }
        }
    }

    /// Ends perf sampling for good (perf is already out of `self`), because `tid` turned out not
    /// to be a thread this fsprof's user may trace (see `os/privilege.rs`).
    fn stop_perf(&mut self, tid: u32, why: String) {
        crate::os::privilege::drop_all();
        self.perf_refused = Some(format!(
            "perf sampling was stopped when thread {tid} turned out not to be one this fsprof's user may trace ({why})"
        ));
    }

    /// Whether perf samples `tid` (see [`NativeSampler::perf_samples`]).
    pub fn perf_watches(&self, tid: u32) -> bool {
        (self.perf.as_ref()).is_some_and(|perf| perf.lock().watches_for(perf.owner(), tid))
    }

    /// Up to when what perf handed out is complete, where earlier than the take (see
    /// [`PerfSampler::complete_until`]).
    pub fn perf_complete_until(&self) -> Option<u64> {
        self.perf.as_ref()?.lock().complete_until()
    }

    /// Per CPU, whether `tid` switched since its stream's latest switch (see
    /// [`PerfSampler::switched_unseen`]).
    pub fn perf_switched_unseen(&self, tid: u32) -> Option<bool> {
        self.perf.as_ref()?.lock().switched_unseen(tid)
    }

    /// When `tid` left its CPU, if it is blocked since a departure folded (see
    /// [`PerfSampler::folded_open`]).
    pub fn perf_folded_open(&self, tid: u32) -> Option<u64> {
        self.perf.as_ref()?.lock().folded_open(tid)
    }

    /// `tid`'s time on a CPU since perf began to sample it (see [`PerfSampler::cpu_ns`]).
    pub fn perf_cpu_ns(&self, tid: u32) -> Option<u64> {
        self.perf.as_ref()?.lock().cpu_ns(tid)
    }

    /// When thread `tid` was born, if perf saw a sampled thread make it (see
    /// [`PerfSampler::birth`]).
    pub fn birth(&mut self, tid: u32) -> Option<u64> {
        self.perf.as_ref()?.lock().birth(tid)
    }

    /// Threads perf stopped following off their CPU because they left it more often than the
    /// rate returned (see [`crate::native::perf::MAX_SWITCH_RATE`]).
    pub fn perf_too_fast(&self) -> (usize, u64) {
        self.perf.as_ref().map_or((0, 0), |perf| {
            let perf = perf.lock();
            (perf.too_fast(), perf.max_switch_rate())
        })
    }

    /// The most context switches a second per CPU that stopped perf following them, if any did
    /// (see `perf/following.rs`).
    pub fn perf_unfollowed_at(&self) -> Option<u64> {
        self.perf.as_ref()?.lock().stopped_at_rate
    }

    /// Has perf decide, at a tick, whether it follows the threads' switches (`marks`: the
    /// process marks; see `perf/following.rs`); where the kernel refuses a change, says so and
    /// asks no more.
    pub fn mind_following(&mut self, marks: bool) {
        let Some(perf) = self.perf.as_ref().filter(|_| !self.follow_refused) else {
            return;
        };
        if let Err(why) = perf.lock().mind_following(marks) {
            // Not asked again: whether switches are followed stays as it is.
            self.follow_refused = true;
            say!("fsprof: {why}; following switches or not stays as it was");
        }
    }

    /// Whether perf follows `tid` off its CPU too (its samples then include its switches).
    pub fn follows_switches(&self, tid: u32) -> bool {
        self.perf
            .as_ref()
            .is_some_and(|perf| perf.lock().follows_switches(tid))
    }

    /// The longest the sampler may wait between two calls of [`NativeSampler::perf_samples`]
    /// for a running thread without losing its samples; `None` without perf.
    pub fn perf_patience(&self) -> Option<Duration> {
        let perf = self.perf.as_ref()?.lock();
        Some(perf.ring_lasts())
    }

    /// Samples perf lost (rings full), and samples whose marks were not copied.
    pub fn perf_losses(&self) -> (u64, u64) {
        self.perf
            .as_ref()
            .map_or((0, 0), |perf| (perf.lost, perf.unmatched))
    }

    /// Forgets a thread that is gone (closes its perf event).
    pub fn forget(&mut self, tid: u32) {
        if let Some(perf) = &self.perf {
            perf.lock().forget_for(perf.owner(), tid);
        }
        self.completer.forget(tid);
    }

    /// A perf sample's stack that unwinding through its copy left `cut`, completed from an image
    /// of the thread's outer stack if one agrees with it (`complete.rs`); and new anchors.
    fn complete(
        &mut self,
        tid: u32,
        sample: &PerfSample<'_>,
        cut: &Captured,
        returns: Option<&mut Vec<u64>>,
    ) -> (Option<Captured>, Option<[u64; ANCHORS]>) {
        let regs = sample.regs;
        let top = self.stack_top_of(tid, regs.sp);
        if top == 0 {
            return (None, None);
        }
        let stack = StackView {
            instant: &sample.instant,
            ..sample.stack
        };
        let mut completer = std::mem::take(&mut self.completer);
        let mut returns = returns;
        let result = completer.complete(tid, (stack, cut, &sample.anchors), top, |view| {
            self.unwinder.unwind(regs, view, &mut self.unwound);
            // The frames of an image, used or not, are the thread's: the walk learns them.
            if let Some(returns) = returns.as_mut() {
                note_returns(returns, &self.unwound.frames);
            }
            Captured {
                frames: self.unwound.frames.clone(),
                complete: self.unwound.complete,
            }
        });
        self.completer = completer;
        result
    }

    /// The end of the mapping that holds `sp` (a thread's stack), 0 if none, the memory map read
    /// again (through `tid`) where no mapping known holds it (a thread born since it was read).
    fn stack_top_of(&mut self, tid: u32, sp: u64) -> u64 {
        if !self.maps.holds(sp) {
            self.refresh(tid, Some(sp));
        }
        self.maps.stack_top(sp)
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
        if !self.unwinder.knows(regs.ip) || stack_unknown {
            // A library loaded, or a new thread's stack, since the last read.
            self.refresh(tid, stack_unknown.then_some(regs.sp));
        }
        self.unwinder.unwind(regs, stack, &mut self.unwound);
        if !self.unwound.complete {
            // The stack may run through a library loaded since the maps were read.
            let unknown = self
                .unwound
                .frames
                .last()
                .is_some_and(|f| !self.unwinder.knows(f.address));
            if unknown {
                self.refresh(tid, None);
                self.unwinder.unwind(regs, stack, &mut self.unwound);
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
        let Some(before) = process::times_scheduled(self.pid, tid) else {
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
        if process::times_scheduled(self.pid, tid) != Some(before) {
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

/// Adds the return addresses of `frames`' callers to `returns` (for the walk to learn), each
/// once per run of frames returning to the same place: a recursion's 10,000 frames return to
/// one, and looking each up again at every sample cost fsprof more than its unwinding did.
fn note_returns(returns: &mut Vec<u64>, frames: &[UnwoundFrame]) {
    for frame in frames.iter().skip(1) {
        let address = frame.address.wrapping_add(1);
        if returns.last() != Some(&address) {
            returns.push(address);
        }
    }
}

mod labels;
#[cfg(test)]
mod tests;
