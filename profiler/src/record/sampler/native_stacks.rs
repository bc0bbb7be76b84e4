//! A sampled thread's native stack: from its latest perf sample (a running thread perf watches,
//! whose samples, each with the marks of its own instant, are taken here too), read without
//! stopping it (a blocked thread), or by a ptrace stop that copies its marks again in the same
//! stop. Which is used, and when a thread's previous stack still stands, is decided here; what
//! a sample weighs is `Sampler::sample_thread`'s business.

use super::off_cpu::LatestSample;
use super::*;
use crate::os::time::monotonic_ns;
use crate::record::marks::snapshot_records;

/// Most a departure's sample of the thread's stack comes before the departure's own record.
/// Both are written as the thread leaves its CPU, microseconds apart, but a loaded machine
/// can hold its CPU between the two (190 µs seen on a 2-vCPU VM beside two busy loops). A
/// departure sample is dropped at the thread's next switch record of any kind, so this bound
/// only keeps one whose own record was lost from standing for a later departure.
const DEPARTED_NS: u64 = 5_000_000;

impl Sampler {
    /// The thread's native stack at this sample: captured now if it is running, or has run since
    /// its previous sample; else the one captured last (its stack cannot have changed). A capture also copies the thread's marks again, in the
    /// same stop, so that marks and native stack describe the same instant.
    pub(super) fn native_stack(&mut self, tid: u32, own_tid: u32, running: bool) -> Native {
        let Some(native) = self.native.as_mut() else {
            return Native::None;
        };
        let Some(state) = self.threads.states.get_mut(&tid) else {
            return Native::None;
        };
        let in_mark = self.reader.of(own_tid).iter().any(|m| m.depth > 0);
        // A thread that is not running weighs something inside a mark, or with --idle: its
        // stack is read whenever it ran since. Elsewhere its blocked time is a rule's feature's
        // where its stack is in one (its waits in `write`, `pthread_mutex_lock`, as the agent's
        // marks had it): its stack is read once per block the ticks see it enter (at its first
        // sample, for a thread blocked from the start: a pool at rest), and no more (300 threads
        // asleep would cost a read of their scheduling counts each at every tick; a thread that
        // runs is followed by perf, whose departures carry its stacks).
        let matters = in_mark || self.options.count_idle;
        if !running && in_mark {
            // Its time is wall time, which only the ticks sample.
            self.clock.hold_fast(Instant::now() + FAST_HOLD);
        }
        let status = &mut state.status;
        let slices = || status.sched_times().map(|times| times.slices);
        if !(state.stacks).must_read(running, matters, slices) {
            return state.stacks.standing();
        }
        if running && native.perf_watches(tid) {
            // Its latest perf sample (see `Sampler::perf_samples`) stands for this instant too:
            // it has run less than a period since.
            return state.stacks.perf_standing();
        }
        if running {
            self.clock.needs_every_tick(); // sampled by ptrace at the ticks
        }
        if !running {
            if let Some(native) = self.blocked(tid, own_tid) {
                return native;
            }
        }
        self.capture(tid, own_tid, running)
    }

    /// Adds the samples perf took of thread `tid` (sample thread `thread`) since the previous
    /// tick, if `add` or its switches are followed (see `off_cpu.rs`, which takes those), each
    /// standing for one period of its CPU time with the marks the kernel copied at its
    /// instant; keeps the latest for the tick's sample. If perf sampled the thread
    /// since the previous tick (its CPU time since then is in those samples): the CPU time its
    /// samples stand for (those whose marks are unknown, a copy failed or was lost, are left out
    /// of the profile but counted here). A thread is sampled by perf from the first tick that
    /// finds it running.
    pub(super) fn perf_samples(
        &mut self,
        tid: u32,
        own_tid: u32,
        thread: u32,
        running: bool,
        add: bool,
    ) -> Option<u64> {
        let native = self.native.as_mut()?;
        // Per CPU, the process's main thread is watched blocked too: watching costs a map
        // entry, and a program that blocks nine tenths of its time after its `exec` (all of
        // them under `fsprof run`) was otherwise followed only once a tick found it running,
        // its blocks until then read once and the first stack standing for all (`folds.c`
        // without its first 100 ms of CPU: its `read` read 0 or all of the sleeps' time in 5
        // runs of 8).
        // So is a thread that perf sampled bare (unwatched) since a tick saw it: it runs, though
        // no tick found it running, and its time on a CPU would be in no sample (an echo
        // server's client thread, on a CPU 3% of the time, lost all its 77 ms in 1 run of 15).
        // Its samples since then, bare (perf read no marks of it: see `Sampler::add_bare`),
        // have its time until it is watched.
        let ran = !native.perf_watches(tid)
            && native.perf_per_cpu()
            && tid != self.pid
            && native.perf_ran_unwatched(tid);
        let watched = native.perf_watches(tid) || (native.perf_per_cpu() && tid == self.pid) || ran;
        if !native.uses_perf() || !(running || watched) {
            return None;
        }
        // Its bare samples are its running time since, whether it runs at this tick or not
        // (watching it drops those left). Where they are dropped instead (the process marks),
        // perf's samples carried none of it, and a thread running now is weighed as such (see
        // `Sampler::weigh`): weighed as carried, the rest of the interval counted as blocked
        // inside the marks it runs in now. An echo server's tokio worker, found running 112 ms
        // after a tick saw it parked, had 98 ms counted in its actor's poll, while the other
        // worker lost its bare samples' 80 ms (1 run in 10 beside a busy loop).
        let carried =
            watched && !(ran && running && Self::marks_unknown_to_bare(&self.reader, native));
        if ran {
            self.add_bare(tid, thread);
        }
        let native = self.native.as_mut()?;
        if !watched {
            // Its time since the previous tick is not in samples: this tick's sample has it.
            self.clock.needs_every_tick();
        }
        let addresses = self.reader.slot_addresses(self.reader.of(own_tid))?;
        // Where the thread marks is known now: a sample copied from no slot at all was taken
        // before it was (see below).
        let slot_known = addresses.iter().any(|&address| address != 0);
        let taken = native.perf_samples(tid, addresses, running)?;
        if native.learnt() {
            // Deep stacks that images complete, or that the walk follows: read them soon
            // (`native/complete.rs`, `native/walk.rs`).
            self.clock.hold_brisk(Instant::now() + ANCHORS_HOLD);
        }
        let follows = native.follows_switches(tid);
        let followed = self.followed_off_cpu(tid);
        let add = add || followed;
        let period = self.options.perf.map_or(0, |p| p.as_nanos() as u64);
        let mut covered = 0u64;
        let mut latest = None;
        let mut latest_labels = None;
        // The latest sample's stack and marks, for the time off the CPU that follows it.
        let mut before_switch = self.latest_sample(tid);
        // The stack of a thread leaving its CPU, for the departure that follows it.
        let mut departed: Option<(u64, Captured)> = None;
        for item in taken {
            let (captured, slots, cpu_ns, time, tick_ns, labels) = match item {
                PerfTaken::Sample {
                    captured,
                    slots,
                    cpu_ns,
                    time,
                    tick_ns,
                    labels,
                } => (captured, slots, cpu_ns, time, tick_ns, labels),
                PerfTaken::Departure { captured, time } => {
                    departed = Some((time, captured));
                    continue;
                }
                PerfTaken::Folded(folded) if followed => {
                    self.folded(tid, own_tid, thread, folded, before_switch.as_ref());
                    continue;
                }
                PerfTaken::Folded(_) => continue,
                PerfTaken::Gap { at } => {
                    departed = None;
                    if followed {
                        self.gap(tid, thread, at);
                    }
                    continue;
                }
                PerfTaken::Switch(switch) => {
                    let at = switch.time;
                    let departed = departed.take().filter(|(time, _)| {
                        switch.out && (*time..=time + DEPARTED_NS).contains(&at)
                    });
                    if followed {
                        let departed = departed.map(|(_, captured)| captured);
                        let latest = before_switch.as_ref();
                        self.switch(tid, own_tid, thread, switch, latest, departed);
                    }
                    continue;
                }
            };
            // Copied from no slot, though the thread's slot is known now: taken before fsprof
            // knew where it marks (a program's first region is found a tick after it was made,
            // 20 to 50 ms at slow ticks), so its marks are unknown, not none. It is left out:
            // a followed thread's running time goes to its next samples with marks, another's
            // to the tick's sample. (Counted as no feature, they took up to 50 ms from the
            // program's first mark: `growth`'s first instance read 5 to 19% low in 6 runs.)
            if slot_known
                && slots
                    .as_ref()
                    .is_some_and(|s| s.iter().all(Option::is_none))
            {
                continue;
            }
            covered = covered.saturating_add(period);
            let Some((mut records, truncated)) =
                slots.and_then(|slots| snapshot_records(own_tid, &slots))
            else {
                self.tally.native_moved += 1; // a copy failed, was lost, or caught a push half done
                latest = Some(None);
                continue;
            };
            self.resolve_captured(own_tid, &mut records, &captured.frames);
            let unlabelled = self.intern_records(records, truncated);
            let labels = labels.unwrap_or_default();
            let (stack, labelled) = self.with_labels(unlabelled, &labels);
            let before = self
                .threads
                .states
                .get_mut(&tid)
                .and_then(|state| state.before_perf.take());
            if add || before.is_some() {
                let placed = capture::place(&captured, &self.records);
                // The labels, outermost, are placed at the thread's root.
                let native = placed.map(|mut placed| {
                    (placed.marks_at).splice(0..0, std::iter::repeat_n(0, labelled));
                    self.builder.native_stack(placed)
                });
                if followed {
                    self.keep_sample(tid, thread, stack, native, (cpu_ns, time, tick_ns));
                } else if add {
                    self.builder
                        .add_sample(thread, stack, native, period, period);
                }
                if let Some(before) = before {
                    self.add_before_perf(before, stack, native);
                }
            }
            // Its marks without the labels: the stretch off the CPU after it is placed by them.
            before_switch = Some(LatestSample {
                captured: captured.clone(),
                records: self.records.clone(),
                stack: unlabelled,
                labels: labels.clone(),
            });
            latest_labels = Some(labels);
            latest = Some(Some(Native::Perf(
                captured,
                self.records.clone(),
                truncated,
            )));
        }
        if let (Some(labels), Some(state)) = (latest_labels, self.threads.states.get_mut(&tid)) {
            state.stacks.set_latest_labels(labels);
        }
        self.follow_from_now(tid, thread, follows, latest);
        carried.then_some(covered)
    }

    /// After thread `tid`'s samples were taken (sample thread `thread`; `latest`: its latest
    /// sample's stack, if one was taken): following its switches begins (from the next tick on)
    /// or ends, as perf's sampler `follows` them now.
    fn follow_from_now(
        &mut self,
        tid: u32,
        thread: u32,
        follows: bool,
        latest: Option<Option<Native>>,
    ) {
        // The thread's CPU time when following begins, from which its samples' shares count.
        let unfollowed = |state: &ThreadState| state.followed.is_none();
        let begins = follows && self.threads.states.get(&tid).is_some_and(unfollowed);
        let cpu_ns = begins
            .then(|| self.native.as_ref().and_then(|n| n.perf_cpu_ns(tid)))
            .flatten();
        if !follows
            && self
                .threads
                .states
                .get(&tid)
                .is_some_and(|s| s.followed.is_some())
        {
            // No longer followed (it left its CPU too often): its stretch off the CPU so far is
            // added; ticks estimate its time from now on.
            self.add_off_cpu(tid, thread, None, true);
        }
        if let Some(state) = self.threads.states.get_mut(&tid) {
            if let Some(latest) = latest {
                state.stacks.set_latest_perf(latest);
            }
            // Followed from the next tick on (this one's time is the tick's).
            match (follows, &state.followed) {
                (true, None) => {
                    let cpu_ns = cpu_ns.unwrap_or(0);
                    let run_delay = state.status.sched_times().map(|t| t.wait_ns);
                    let now = monotonic_ns();
                    let mut followed =
                        off_cpu::Followed::new(self.clock.ticks(), cpu_ns, run_delay, now);
                    // Its event was enabled only now: if it is off its CPU, the kernel
                    // recorded no departure (see `seed_off_cpu`, at the tick's end).
                    if let Ok(Some(running)) = state.status.is_running() {
                        followed.began(running, monotonic_ns());
                    }
                    state.followed = Some(followed);
                }
                (false, Some(_)) => state.followed = None,
                _ => {}
            }
        }
    }

    /// Thread `tid`'s latest perf sample: its stack and marks (interned, and in `self.records`).
    fn latest_sample(&mut self, tid: u32) -> Option<LatestSample> {
        let state = self.threads.states.get(&tid)?;
        let (captured, records, truncated) = state.stacks.latest_perf()?;
        let (captured, records, truncated) = (captured.clone(), records.to_vec(), truncated);
        let labels = state.stacks.latest_labels().to_vec();
        let stack = self.intern_records(records, truncated);
        Some(LatestSample {
            captured,
            records: self.records.clone(),
            stack,
            labels,
        })
    }

    /// Adds the tick's sample taken before perf's first sample of its thread
    /// (`ThreadState::before_perf`), with the stack `stack` and native stack `native` of that
    /// first sample if its marks are the same (in `self.records`): its call sites are then
    /// found in a stack of the same instant, not in the live stack, which has moved on.
    /// Otherwise the tick's marks stand for it (with the sample's, threads of `requests` that
    /// waited milliseconds for a CPU before they marked counted that wait in their mark),
    /// unless they were read before fsprof knew where the thread marks: the first sample with
    /// its slot known stands for its active time then (the first tick of `fsprof run` comes
    /// before the program's first region is found, and its sample has the program's first 10
    /// to 25 ms). Not for its blocked time: a thread blocked at the tick is not where a later
    /// sample runs (a parked worker's block would count inside the mark its first sample
    /// runs in); with its marks unknown, the blocked part stays with the tick's (none).
    fn add_before_perf(&mut self, before: PendingSample, stack: u32, native: Option<u32>) {
        let Weight {
            wall_ns, active_ns, ..
        } = before.weight;
        let same = same_marks(&before.records, &self.records);
        if same || !before.marks_unknown {
            let (stack, native) = match same {
                true => (stack, native),
                false => (before.stack, None),
            };
            self.builder
                .add_sample(before.thread, stack, native, wall_ns, active_ns);
            return;
        }
        if active_ns > 0 {
            (self.builder).add_sample(before.thread, stack, native, active_ns, active_ns);
        }
        let blocked_ns = wall_ns.saturating_sub(active_ns);
        if blocked_ns > 0 {
            (self.builder).add_sample(before.thread, before.stack, None, blocked_ns, 0);
        }
    }

    /// The native stack of a blocked thread without stopping it, when its marks are still the
    /// tick's once its stack is copied; `None` when only a stop can take it.
    pub(super) fn blocked(&mut self, tid: u32, own_tid: u32) -> Option<Native> {
        let state = self.threads.states.get_mut(&tid)?;
        let retry = state.stacks.take_skipped();
        let captured = match self.native.as_mut()?.blocked_stack(tid, retry) {
            capture::Blocked::Taken(captured) => captured,
            capture::Blocked::Skip => {
                // Its previous stack may be from before it last ran (another image, even, after
                // an exec): never reuse it; the next sample tries again, and reads it then even
                // on fsprof's CPU (a thread preempted on its way to sleep has long got there).
                self.threads.states.get_mut(&tid)?.stacks.skip();
                return Some(Native::None);
            }
            capture::Blocked::Stop => return None,
        };
        let reader = &self.reader;
        let unchanged = reader
            .of(own_tid)
            .iter()
            .all(|old| reader.again(old).is_some_and(|new| new.same_marks(old)));
        // The stack is the thread's now (it did not run while it was copied), whatever its
        // marks: later samples of the same block may reuse it.
        let state = self.threads.states.get_mut(&tid)?;
        let scheduled = state.status.sched_times().map(|times| times.slices);
        state.stacks.read(captured.clone(), Some(scheduled));
        if !unchanged {
            self.tally.native_moved += 1; // it ran, and marked, between the tick and the copy
            return Some(Native::None);
        }
        Some(Native::Captured(captured))
    }

    /// The thread's native stack by a ptrace stop, with its marks copied in the same stop.
    pub(super) fn capture(&mut self, tid: u32, own_tid: u32, running: bool) -> Native {
        // Samples still waiting for a stop of a thread no longer attached: that stop came and
        // was ended while another thread's stop was waited for (`Tracer::wait`), and the thread
        // has run since. They get no stack, not that of the stop asked for now.
        let attached = self.native.as_ref().is_some_and(|n| n.is_attached(tid));
        if let Some(state) = self.threads.states.get_mut(&tid).filter(|_| !attached) {
            for pending in state.pending.take() {
                pending.add(&mut self.builder, None);
            }
        }
        let Some(native) = self.native.as_mut() else {
            return Native::None;
        };
        // Attached for this stop alone (`native/tracer.rs`).
        if !native.attach(tid, running) {
            return Native::None;
        }
        let reader = &self.reader;
        let marks = reader.of(own_tid);
        let captured = native.capture(tid, || {
            marks.iter().map(|m| reader.again(m)).collect::<Vec<_>>()
        });
        let Some(state) = self.threads.states.get_mut(&tid) else {
            return Native::None;
        };
        // Not stopped in time (it had no CPU): its stack is copied when it stops.
        let Some((captured, fresh, labels)) = captured else {
            return Native::Pending;
        };
        let scheduled = (!running).then(|| state.status.sched_times().map(|times| times.slices));
        state.stacks.read(captured.clone(), scheduled);
        if let Some(labels) = labels {
            // Read in the stop (the process publishes labels; perf is not used): this sample's.
            state.stacks.set_latest_labels(labels);
        }
        // The sample is the marks read at the tick. A thread stops at its next return to user
        // space, which in a busy thread on a virtual machine (slow inter-processor interrupts)
        // is often its next system call rather than the instant it was asked to: a sample taken
        // at the stop would overstate features that make system calls (we measured `output` at
        // 99% instead of 90% in the fizzbuzz demo). So the stack is kept only if the marks
        // are the same at the stop; otherwise the sample has marks only.
        let unchanged = self
            .reader
            .of(own_tid)
            .iter()
            .zip(&fresh)
            .all(|(old, new)| new.as_ref().is_some_and(|new| new.same_marks(old)));
        if !unchanged {
            self.tally.native_moved += 1;
            return Native::None;
        }
        Native::Captured(captured)
    }
}

/// Whether two copies of a thread's records are of the same marks (call sites aside, which one
/// may have found and the other not yet).
fn same_marks(a: &[RecordView], b: &[RecordView]) -> bool {
    let key = |r: &RecordView| (r.feature, r.kind, r.payload, r.sp, r.position);
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| key(a) == key(b))
}

mod history;
pub(super) use history::StackHistory;

#[cfg(test)]
mod tests {
    use super::*;
    use fsprof_shim::abi;

    /// A copied slot of thread `tid` holding `depth` records (zeroed).
    fn slot(tid: u32, depth: u32) -> Option<Vec<u8>> {
        let mut bytes = vec![0u8; abi::RECORDS_OFFSET + depth as usize * abi::RECORD_SIZE];
        bytes[4..8].copy_from_slice(&tid.to_ne_bytes());
        bytes[8..12].copy_from_slice(&depth.to_ne_bytes());
        Some(bytes)
    }

    #[test]
    fn a_copy_of_a_slot_the_thread_does_not_hold_has_none_of_its_marks() {
        let depth = |slots| snapshot_records(7, &slots).map(|(records, _)| records.len());
        assert_eq!(depth([slot(7, 2), None]), Some(2));
        // A free slot it had not claimed by then, or another thread's.
        assert_eq!(depth([slot(0, 0), None]), Some(0));
        assert_eq!(depth([slot(9, 3), slot(7, 1)]), Some(1));
        // A copy too short to hold what its state says is not read.
        let mut short = slot(7, 2);
        short
            .as_mut()
            .unwrap()
            .truncate(abi::RECORDS_OFFSET + abi::RECORD_SIZE);
        assert_eq!(depth([short, None]), None);
    }
}
