//! The perf way of taking native stacks (see `capture.rs`): the kernel's samples of the
//! process's running threads, taken from the rings and unwound, a stack the copy cut short
//! completed beyond it (`complete.rs`), and the perf sampler's state as the sampler asks for
//! it. Not here: the events and rings themselves (`perf.rs`), the stacks of blocked threads and
//! those ptrace takes (`capture.rs`).

use super::NativeSampler;
use crate::native::cpu_wide::Held;
use crate::native::layout::{ANCHORS, SLOTS};
use crate::native::perf::WatchError;
use crate::native::stream::{CopiedLabels, Folded, PerfSample, Switch, Taken};
use crate::native::unwind::{Captured, StackView, UnwoundFrame};
use crate::os::privilege::Refusal;
use std::time::Duration;

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

impl NativeSampler {
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
        let mut captured = self.unwind(self.pid, sample.regs, stack, false);
        // A stack not unwound whole may end in a word read as a return address that is in no
        // mapping of the process (a thread's bare sample is copied whole, past its root, where
        // a watched thread's is cut at the root its earlier samples showed): it is no frame. (A
        // rule's call site named `0x632f70756f726762`, the bytes of a path, in 1 suite run.)
        while !captured.complete
            && (captured.frames.last()).is_some_and(|f| !self.maps.holds(f.address))
            && captured.frames.len() > 1
        {
            captured.frames.pop();
        }
        captured
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
    /// [`PerfSampler::complete_until`](crate::native::perf::PerfSampler::complete_until)).
    pub fn perf_complete_until(&self) -> Option<u64> {
        self.perf.as_ref()?.lock().complete_until()
    }

    /// Per CPU, whether `tid`, not watched, ran since a tick saw it (see
    /// [`PerfSampler::ran_unwatched`](crate::native::perf::PerfSampler::ran_unwatched)); asked once a tick.
    pub fn perf_ran_unwatched(&self, tid: u32) -> bool {
        (self.perf.as_ref()).is_some_and(|perf| perf.lock().ran_unwatched(tid))
    }

    /// Per CPU, whether `tid` switched since its stream's latest switch (see
    /// [`PerfSampler::switched_unseen`](crate::native::perf::PerfSampler::switched_unseen)).
    pub fn perf_switched_unseen(&self, tid: u32) -> Option<bool> {
        self.perf.as_ref()?.lock().switched_unseen(tid)
    }

    /// When `tid` left its CPU, if it is blocked since a departure folded (see
    /// [`PerfSampler::folded_open`](crate::native::perf::PerfSampler::folded_open)).
    pub fn perf_folded_open(&self, tid: u32) -> Option<u64> {
        self.perf.as_ref()?.lock().folded_open(tid)
    }

    /// `tid`'s time on a CPU since perf began to sample it (see [`PerfSampler::cpu_ns`](crate::native::perf::PerfSampler::cpu_ns)).
    pub fn perf_cpu_ns(&self, tid: u32) -> Option<u64> {
        self.perf.as_ref()?.lock().cpu_ns(tid)
    }

    /// Per CPU, `tid`'s time on a CPU and count of switches while it is off its CPU (see
    /// [`PerfSampler::cpu_ns_off`](crate::native::perf::PerfSampler::cpu_ns_off)).
    pub fn perf_cpu_ns_off(&self, tid: u32) -> Option<(u64, u64)> {
        self.perf.as_ref()?.lock().cpu_ns_off(tid)
    }

    /// When thread `tid` was born, if perf saw a sampled thread make it (see
    /// [`PerfSampler::birth`](crate::native::perf::PerfSampler::birth)).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack unwound to its root is read no further than its outermost known CFA (and a margin);
    /// one with no CFA known says nothing.
    #[test]
    fn a_stacks_root_end_is_its_outermost_known_cfa() {
        let frame = |cfa| UnwoundFrame { address: 1, cfa };
        let captured = Captured {
            frames: vec![frame(800), frame(900), frame(u64::MAX)],
            complete: true,
        };
        assert_eq!(root_end(&captured), 900 + ROOT_MARGIN);
        let unknown = Captured {
            frames: vec![frame(u64::MAX)],
            complete: true,
        };
        assert_eq!(root_end(&unknown), 0);
    }
}
