//! A thread's life in the sampler: admitted at the first tick that finds it, its time counted
//! from its birth where perf saw it born (else from the previous tick); found gone by /proc or
//! missing from a tick's list of threads, and then forgotten, after its last samples; born
//! and not yet followed by perf, sampled first at each tick. Not here: what each tick adds for
//! it (`sampler.rs`).

use super::*;

/// A tick's pass over its threads (see [`Sampler::sample_thread`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    First,
    /// The threads the first pass found blocked and left for after the others.
    Blocked,
}

impl Sampler {
    /// Samples every thread at the tick taken at `now` (see `Sampler::sample_thread`), in this
    /// order: the main thread (whose status tells of an exec), then the running threads perf
    /// does not follow yet, then the rest. Until perf follows a thread, its time is the tick's,
    /// with the tick's marks, and what is done for the others may take long: reading a blocked
    /// thread's stack, or a stretch off the CPU opened, may classify a call site, and the first
    /// classification parses the program's files (ripgrep's: 25 to 35 ms, after which a worker
    /// born as it started had 28 to 43 ms of the tick's marks, a `nanosleep` without a stack,
    /// in 1 run in 5 to 10). The stretches off the CPU of the threads perf follows from this
    /// tick on are opened last (see `Sampler::seed_off_cpu`).
    pub(super) fn sample_threads(&mut self, now: Instant, first: bool, tick: u64) {
        let (pid, states) = (self.pid, &self.threads.states);
        let (later, unfollowed): (Vec<u32>, Vec<u32>) = (self.tasks.tids().iter())
            .filter(|&&tid| tid != pid)
            .partition(|tid| states.get(tid).is_some_and(|s| s.followed.is_some()));
        let main = self.tasks.tids().iter().copied().find(|&tid| tid == pid);
        let mut blocked = Vec::new();
        for tid in main.into_iter().chain(unfollowed).chain(later) {
            if !self.sample_thread(tid, now, first, tick, Pass::First) {
                blocked.push(tid);
            }
        }
        for tid in blocked {
            self.sample_thread(tid, now, first, tick, Pass::Blocked);
        }
        self.seed_began();
    }

    /// Starts keeping thread `tid`, first seen at this tick; `false` if it is gone already.
    pub(super) fn admit(&mut self, tid: u32, now: Instant, first: bool, tick: u64) -> bool {
        // A thread born since the previous tick: perf does not sample it yet, and
        // the next ones may end before a rare tick could see them. Where their bare samples
        // cannot stand in (`unseen.rs`: the process marks), the ticks come at the full rate:
        // with ticks every 4 ms, a marking program's request threads (3 to 6 ms each) read 3.1
        // points low at 2 kHz (`e2e::short_lived_threads_beside_a_long_lived_one`). For as long
        // as a block inside a mark holds them: births 10 to 60 ms apart outlasted 50 ms, a slow
        // tick 22 to 57 ms later missed the threads born and gone meanwhile, and their samples
        // were dropped (`churn` at 2 kHz: 970 and 1149 of about 10 000, 19 threads of 252;
        // `e2e::threads_starting_and_exiting_during_sampling` read `validation` 2.66 points
        // low in a suite run); held so, 0 and 61.
        if !first {
            let dropped = (self.native.as_ref())
                .is_some_and(|native| Self::marks_unknown_to_bare(&self.reader, native));
            if dropped {
                self.clock.hold_fast(now + FAST_HOLD);
            } else {
                self.clock.hold_brisk(now + BIRTH_HOLD);
            }
        }
        let keep_open = self.threads.descriptor_budget >= 2;
        let Some(status) = ThreadStatus::open(self.pid, tid, keep_open) else {
            return false;
        };
        if let Some(native) = &mut self.native {
            // Its bare samples until now (per CPU): this tick's sample stands for that time.
            // (Their latest stack standing for it, in 971ecde, left a python3 program's ticks
            // at the full rate in 3 runs of 8, for a cause not found: reverted.)
            native.ignore_stranger(tid);
        }
        self.threads.descriptor_budget -= status.descriptors();
        let pid = self.pid;
        let id = self.builder.thread(tid, || process::thread_name(pid, tid));
        // A thread born since the previous tick stands for the time since its birth, when
        // perf saw a sampled thread make it (and this tick read that thread's ring first: it
        // usually has the lower id). Otherwise, for the time since the previous tick: that
        // credits the stretch before its birth and, symmetrically, the stretch after its last
        // sample is never credited without perf: on average the two balance. With perf,
        // whose samples cover the last stretch, a thread living 3 to 6 ms read 0.3 ms too
        // much each (`requests`' `handling` +1.3 to +1.9 points) until births were known.
        // At the first tick, a birth is known only of a process the recording found born (a
        // followed child, made by a watched thread of its parent's): its first sample stands
        // for its life so far (see `ThreadState::from_birth`).
        let born_ns = self.native.as_mut().and_then(|n| n.birth(tid));
        // Its birth as an instant: after `now` where it was born during this tick (a long one:
        // the first perf samples load the program's debug information), and then this tick's
        // sample of it is empty and its next one starts there (see `Sampler::sample_thread`).
        let born_at = born_ns.map(|born| {
            let age = crate::os::time::monotonic_ns().saturating_sub(born);
            Instant::now()
                .checked_sub(Duration::from_nanos(age))
                .unwrap_or(now)
        });
        let last_time = match (born_at, self.clock.last()) {
            (Some(born), Some(last)) => born.max(last),
            (Some(born), None) => born.min(now),
            (None, Some(last)) => last,
            (None, None) => now,
        };
        let state = ThreadState {
            status,
            id,
            own_tid: None,
            interval: weight::TickInterval::new(last_time),
            seen_at: tick,
            stacks: Default::default(),
            pending: LateStop::default(),
            last_sched: None,
            waits: Default::default(),
            born: !first && born_ns.is_none(),
            from_birth: first && born_ns.is_some(),
            before_perf: None,
            followed: None,
        };
        self.threads.states.insert(tid, state);
        true
    }

    /// Whether thread `tid` is running or runnable, as /proc says now; `None` if it is gone
    /// (then it is forgotten at the tick's end) or could not be read this time (out of
    /// descriptors, say: its time is carried to its next sample).
    pub(super) fn proc_running(&mut self, tid: u32) -> Option<bool> {
        self.proc_running_at(tid, Instant::now())
    }

    /// [`Sampler::proc_running`] as of the tick's instant `at`: /proc is read once for it
    /// however often asked (see `ThreadStatus::is_running_at`).
    pub(super) fn proc_running_at(&mut self, tid: u32, at: Instant) -> Option<bool> {
        let state = self.threads.states.get_mut(&tid)?;
        match state.status.is_running_at(at) {
            Ok(Some(running)) => Some(running),
            Ok(None) => {
                state.seen_at = u64::MAX; // gone (or its id reused): forget it below
                None
            }
            Err(_) => None,
        }
    }

    /// Forgets the threads not seen at this tick (`tick`), after taking their last perf samples.
    pub(super) fn forget_gone(&mut self, tick: u64) {
        // A thread gone since the previous tick left its last samples in its ring.
        let gone: Vec<(u32, u32, Option<u32>)> = self
            .threads
            .states
            .iter()
            .filter(|(_, state)| state.seen_at != tick)
            .map(|(tid, state)| (*tid, state.id, state.own_tid))
            .collect();
        for (tid, thread, own_tid) in gone {
            if let Some(own_tid) = own_tid {
                // All taken since its last tick, which no tick will count; after ticks at the
                // full rate, its last stretch is left out, as the stretch before its birth was
                // counted (see `tick`).
                let slow = self.clock.slow_interval();
                self.perf_samples(tid, own_tid, thread, false, slow);
                self.add_last_run(tid, thread);
            }
        }
        let budget = &mut self.threads.descriptor_budget;
        let native = &mut self.native;
        let builder = &mut self.builder;
        self.threads.states.retain(|tid, state| {
            let keep = state.seen_at == tick;
            if !keep {
                *budget += state.status.descriptors();
            }
            if !keep {
                for pending in state.pending.take() {
                    pending.add(builder, None);
                }
                if let Some(pending) = state.before_perf.take() {
                    pending.add_gone(builder);
                }
                if let Some(native) = native {
                    native.forget(*tid);
                }
            }
            keep
        });
    }
}
