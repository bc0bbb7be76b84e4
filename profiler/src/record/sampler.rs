//! The sampling loop: at jittered intervals, copy every thread's mark stack and CPU clock, and turn
//! them into weighted samples in a [`ProfileBuilder`].
//!
//! Per sample and thread the sampler records the wall interval since that thread's previous sample
//! and whether the thread was *active* (running, or runnable and waiting for a CPU) at the sample:
//! if so the interval also counts as active time. Which of the two counts is decided later, by the
//! analysis, so one recording serves every time view. Marks are read while the target runs (see
//! `region.rs` for the consistency protocol); native stacks, when asked for, come from `native/capture.rs`
//! (which way for each sample is `sampler/native_stacks.rs`),
//! which stops a thread only when nothing else can take its stack.
//!
//! With the perf backend, a running thread's CPU time comes instead from the kernel's samples of
//! it (one per period of its CPU time, each with its own marks and stack), and the ticks, rare
//! then, sample only the rest of its time (see [`Sampler::tick_period`] and `Sampler::tick`).
//!
//! Strings behind mark addresses are read once per unique address (cached here) while the target
//! is alive; nothing else is resolved in the loop.

use crate::native::capture::{self, NativeSampler, PerfTaken};
use crate::native::perf::{Following, Perf, PerfSampler, SharedPerf};
use crate::native::unwind::Captured;
use crate::native::unwind::UnwoundFrame;
use crate::profile::{ProfileBuilder, Stack, MAX_STACK_FRAMES};
use crate::program::process;
use crate::program::remote::Remote;
use crate::program::thread_status::{self, ThreadStatus};
use crate::record::announce::Registry;
use crate::record::clock::TickClock;
use crate::record::interner::{Interner, Target};
use crate::record::marks::MarkReader;
use crate::symbolize::call_sites::Callers;
use foldhash::{HashMap, HashMapExt};
use fsprof_shim::abi::RecordView;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long ticks stay at the full rate after one found a thread blocked inside a mark.
const FAST_HOLD: Duration = Duration::from_millis(250);
/// How long ticks stay brisk (see `TickClock::hold_brisk`) after one found a thread born since
/// the previous.
const BIRTH_HOLD: Duration = Duration::from_millis(50);
/// How long ticks stay brisk after a thread's anchors were set (`native/complete.rs`): its deep
/// samples taken before them could not be completed, and a sample read sooner finds more of its
/// image still its stack.
const ANCHORS_HOLD: Duration = Duration::from_millis(50);

struct ThreadState {
    status: ThreadStatus,
    id: u32,

    /// The thread's id as the target sees it (and writes in its slot): different from `tid` when
    /// the target runs in another PID namespace (a container) than fsprof; `None` until known.
    own_tid: Option<u32>,
    interval: weight::TickInterval,
    seen_at: u64,
    /// Its native stacks so far, for samples that reuse them.
    stacks: native_stacks::StackHistory,
    /// Its samples that wait for its late stop.
    pending: LateStop,
    /// Its scheduling totals at its previous sample while perf samples it (and once at its
    /// first rare tick, whatever it does: see `Sampler::weigh`), with that tick's count.
    last_sched: Option<(u64, thread_status::SchedTimes)>,
    /// Its waits for a CPU not yet counted, or counted ahead of its totals (where its switches
    /// are not followed).
    waits: weight::Waits,
    /// Born since the previous tick (not seen at the first).
    born: bool,
    /// Seen first at the recording's first tick, but born during the recording where perf saw
    /// a watched thread make it (a followed child's): that tick's sample stands for its life
    /// so far, which the recording of a process found a few milliseconds after its fork
    /// otherwise left out (twenty children of 10 ms of CPU read 70-83% of their time).
    from_birth: bool,
    /// A tick's sample of the thread taken after perf began to watch it and before perf's first
    /// sample of it, added with that sample (see `Sampler::perf_samples`) or when it ends.
    before_perf: Option<PendingSample>,
    /// Its switches, where perf follows them (see `off_cpu.rs`).
    followed: Option<off_cpu::Followed>,
}

/// A thread's native stack for one sample.
enum Native {
    /// No native stack (not recorded, not attached, or the marks moved before the stop).
    None,
    /// The thread did not stop in time; its stack comes when it does.
    Pending,
    /// Perf watches the running thread but has not sampled it yet (see
    /// `ThreadState::before_perf`).
    BeforePerf,
    /// Its latest perf sample: the stack and the marks of that instant (records, and the
    /// logical depth when deeper than recorded).
    Perf(Captured, Vec<RecordView>, Option<u32>),
    /// Its stack.
    Captured(Captured),
}

/// What a sampler records besides marks.
#[derive(Clone, Debug, Default)]
pub struct SamplerOptions {
    /// Native stacks.
    pub native: bool,
    /// Running threads' stacks by perf events where the kernel allows, sampling each every
    /// this much of its CPU time (else ptrace, which stops each running thread for an instant
    /// per sample).
    pub perf: Option<Duration>,
    /// Whether idle time counts (then idle threads' stacks matter too).
    pub count_idle: bool,
    /// Where to look for separate debug files first (then `/usr/lib/debug`).
    pub debug_dirs: Vec<std::path::PathBuf>,
    /// Where to fetch the debug files found nowhere else from, once recording has ended.
    pub debuginfod: Option<Arc<crate::symbolize::debuginfod::Debuginfod>>,
    /// Threads perf samples at once, at most `perf::MAX_THREADS` (the rest by ptrace); 0 for
    /// that many.
    pub perf_threads: u32,
    /// The per-CPU perf sampler of the process whose recording follows this one, to join
    /// rather than make one (`perf/shared.rs`).
    pub shared_perf: Option<SharedPerf>,
    /// Where the processes `fsprof run` started announce their regions (`announce.rs`).
    pub announcements: Option<Arc<Registry>>,
    /// Span ids as instances of the feature `span_id` (OpenTelemetry thread contexts).
    pub span_ids: bool,
}

impl SamplerOptions {
    /// The perf sampler these options ask for (or why there is none), if any: made before the
    /// program starts by `fsprof run` (see `Rules::walk_ready`).
    pub fn perf_sampler(&self) -> Option<Result<Perf, String>> {
        let period = self.perf.filter(|_| self.native)?;
        if let Some(shared) = &self.shared_perf {
            return Some(Ok(Perf::join(shared)));
        }
        let threads = (self.perf_threads > 0).then_some(self.perf_threads);
        let threads = threads.unwrap_or(crate::native::perf::MAX_THREADS);
        // Every thread's blocked time counts with `--idle`: its switches tell it from the start.
        let following = match self.count_idle {
            true => Following::Always,
            false => Following::WhileCheap,
        };
        let sampler = PerfSampler::new(period.as_nanos() as u64, threads, following);
        Some(sampler.map(Perf::own))
    }
}

/// The threads being sampled.
struct Threads {
    states: HashMap<u32, ThreadState>,
    /// How many more thread status files may be kept open (see `process::raise_open_file_limit`).
    descriptor_budget: usize,
    /// Whether the target is in another PID namespace, so thread ids need translating.
    other_namespace: bool,
}

/// What the report's metadata and notes say of the recording, counted as it goes.
#[derive(Default)]
struct Tally {
    /// How the sampler's thread was scheduled.
    priority: &'static str,
    /// Why real-time scheduling was refused to it, where it was.
    realtime_refused: Option<String>,
    notes: Vec<String>,
    /// Thread samples whose marks changed between the tick and the thread's stop (no stack).
    native_moved: u64,
    /// Stretches off the CPU whose departure's marks were not copied (see `off_cpu.rs`).
    departures_unmarked: u64,
    /// Thread samples whose stack came from a stop after the tick (the thread had no CPU).
    native_late: u64,
    /// Time threads waited for a CPU with no native stack (perf: marks changed since), ns.
    unplaced_ns: u64,
    /// Time threads were blocked with no native stack (no built-in feature can claim it), ns.
    blocked_unplaced_ns: u64,
    /// Running time of followed threads in perf samples lost or not added, ns.
    lost_cpu_ns: u64,
}

/// Samples one target process.
pub struct Sampler {
    pid: u32,
    remote: Remote,
    clock: TickClock,
    /// The regions, and this tick's marks copied from them.
    reader: MarkReader,
    threads: Threads,
    builder: ProfileBuilder,
    /// Feature names, payloads, built-ins and call sites, read once each.
    interner: Interner,
    /// See [`Sampler::via`].
    via: std::cell::Cell<Option<u32>>,
    tally: Tally,
    /// The target's threads, listed again at each tick.
    tasks: process::TaskList,
    // Buffers reused across ticks.
    records: Vec<RecordView>,
    native: Option<NativeSampler>,
    options: SamplerOptions,
    /// The process's current program image, as [`ThreadStatus::image_token`] tells it.
    image_token: Option<u64>,
    /// Whether fsprof's user may still trace the process, decided again at each `exec`.
    gate: exec::ExecGate,
    /// The custom labels' keys and values seen, within their bounds (`labels.rs`).
    labels: labels::Seen,
    /// Threads no tick saw (`unseen.rs`).
    unseen: unseen::Unseen,
}

impl Sampler {
    /// A sampler for process `pid` that may keep `descriptor_budget` files open, with the
    /// perf sampler `perf` (see [`SamplerOptions::perf_sampler`]). Nothing is read until the
    /// first [`Sampler::tick`].
    pub fn new(
        pid: u32,
        descriptor_budget: usize,
        options: SamplerOptions,
        perf: Option<Result<Perf, String>>,
    ) -> Sampler {
        Sampler {
            pid,
            remote: Remote::new(pid),
            clock: TickClock::default(),
            reader: MarkReader::start(pid, options.announcements.as_deref()),
            threads: Threads {
                states: HashMap::new(),
                descriptor_budget,
                other_namespace: process::in_other_pid_namespace(pid),
            },
            builder: ProfileBuilder::new(),
            interner: Interner::default(),
            via: std::cell::Cell::new(None),
            tally: Tally {
                priority: "normal",
                ..Tally::default()
            },
            tasks: process::TaskList::new(pid),
            records: Vec::new(),
            native: (options.native).then(|| NativeSampler::new(pid, perf, options.span_ids)),
            options,
            image_token: None,
            gate: exec::ExecGate::new(pid),
            labels: labels::Seen::default(),
            unseen: unseen::Unseen::default(),
        }
    }

    /// The tick clock, for the loop.
    pub(super) fn clock(&mut self) -> &mut TickClock {
        &mut self.clock
    }

    /// The profile so far and the number of threads followed (for the status line).
    pub(crate) fn progress(&self) -> (&ProfileBuilder, usize) {
        (&self.builder, self.threads.states.len())
    }

    /// Whether perf takes the running threads' samples (at the timer's instants, in the
    /// kernel), so that a tick that comes late delays only their reading.
    pub(super) fn kernel_takes_samples(&self) -> bool {
        self.native.as_ref().is_some_and(NativeSampler::uses_perf)
    }

    /// Says how the sampler's thread is scheduled (for the report).
    pub(super) fn set_priority(&mut self, raised: &crate::os::priority::Raised) {
        self.tally.priority = raised.how();
        if self.tally.realtime_refused.is_none() {
            self.tally.realtime_refused = raised.refused().map(str::to_owned);
        }
    }

    /// Its perf sampler for the recordings of the processes it follows to join, where it
    /// samples per CPU (see `native/perf/shared.rs`).
    pub fn share_perf(&self) -> Option<SharedPerf> {
        self.native.as_ref()?.share_perf()
    }

    /// How the program ended, when native sampling (as the program's tracer) collected it.
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.native.as_ref().and_then(NativeSampler::exit_status)
    }

    /// Sleeps until `deadline` (handling the target's events meanwhile, when tracing it), or
    /// until a process followed makes one or the program exits, once
    /// [`Sampler::wake_on_forks`] said it would. Whether a fork or the exit woke it.
    pub(super) fn sleep_until(&mut self, deadline: Instant) -> bool {
        match &mut self.native {
            Some(native) => native.sleep_until(deadline),
            None => {
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                false
            }
        }
    }

    /// No fork ends the calling thread's sleeps before `until` (see
    /// `NativeSampler::quiet_forks_until`).
    pub(super) fn quiet_forks_until(&self, until: Instant) {
        if let Some(native) = &self.native {
            native.quiet_forks_until(until);
        }
    }

    /// Has the calling thread's sleeps end at each fork of a process followed; false where
    /// nothing can wake it so (see `NativeSampler::wake_on_forks`).
    pub(super) fn wake_on_forks(&mut self) -> bool {
        self.native
            .as_mut()
            .is_some_and(NativeSampler::wake_on_forks)
    }

    /// Whether every process followed is watched in the kernel now, so that each one's forks
    /// end the sleeps of [`Sampler::wake_on_forks`] (see `NativeSampler::every_process_watched`).
    pub(super) fn every_process_watched(&self) -> bool {
        (self.native.as_ref()).is_some_and(NativeSampler::every_process_watched)
    }

    /// Detaches from the target's threads (native sampling), leaving them running. Done by
    /// [`Sampler::finish`] too, and on drop.
    pub fn stop_tracing(&mut self) {
        if let Some(native) = &mut self.native {
            native.detach();
        }
    }

    /// The process's current program image (changed by each `exec`), once a tick has seen it.
    pub fn image(&self) -> Option<u64> {
        self.image_token
    }

    /// Why recording stopped early, if it did: the process ran a program this fsprof's user may
    /// not trace (see `exec.rs`).
    pub fn refused(&self) -> Option<&str> {
        self.gate.refused()
    }

    /// Takes one sample of every thread (none mid-`exec`). Returns `false` when the target is
    /// gone, or may no longer be read ([`Sampler::refused`]).
    pub fn tick(&mut self) -> bool {
        match self.gate.look() {
            exec::Look::Read => {}
            exec::Look::Skip => return true,
            exec::Look::Refused => return false,
        }
        self.take_late_stacks();
        if let Some(native) = &mut self.native {
            native.watch_process();
        }
        if self.clock.before_first() {
            // Attached to a program that has marked already: its regions count from the start.
            self.reader.wait_for_first_scan(Duration::from_millis(200));
        }
        let now = Instant::now();
        match self.tasks.read() {
            Ok(()) if self.tasks.tids().is_empty() => return self.gone(now),
            Ok(()) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(nix::libc::ESRCH) =>
            {
                return self.gone(now);
            }
            Err(_) => return true, // e.g. out of descriptors: try again at the next tick
        }
        // The thread through which memory is read stays while it is listed and the leader has
        // not exited, as its stat file (kept open) says now: finding it again at every tick (an
        // open, two reads and a close of /proc/PID/stat) was a quarter of fsprof's own CPU
        // beside a two-thread program (BENCHMARKS.md, issue 39).
        let leader = self.threads.states.get_mut(&self.pid);
        let leader_exited = leader.is_none_or(|state| {
            !matches!(state.status.is_running_at(now), Ok(Some(_))) || state.status.exited()
        });
        let via_gone = (self.via.get()).is_some_and(|via| !self.tasks.tids().contains(&via));
        if leader_exited || via_gone {
            self.via.set(None);
        }
        self.take_regions();
        let (cache, pid, tids) = (&self.via, self.pid, self.tasks.tids());
        self.interner
            .settle(pid, || process::memory_thread_cached(cache, pid, tids));
        self.read_marks();
        self.flush_pending(Some(now));
        // Set again below by any thread whose time only the ticks can see.
        let first = self.clock.before_first();
        self.clock.begin(
            now,
            first
                || self.options.count_idle
                || !self.native.as_ref().is_some_and(NativeSampler::uses_perf),
        );
        let tick = self.clock.ticks();
        self.sample_threads(now, first, tick);
        self.take_later_branches(now);
        self.forget_gone(tick);
        self.take_unseen(false);
        self.clock.end(now);
        true
    }

    /// The process is gone (found at the tick beginning at `now`): what perf sampled of its
    /// threads since the previous tick is taken, as for a thread gone before its process
    /// (`forget_gone`). Left in the rings, it was lost: a followed child that ran 30 ms of CPU,
    /// found at its first milliseconds and gone before its second tick (40 ms later, perf's
    /// samples carrying its time), counted 4 to 6 ms (2026-12-03). Returns `false` (the
    /// recording ends).
    fn gone(&mut self, now: Instant) -> bool {
        self.clock.closing(now);
        // No thread was seen at this tick (its count is given at its end): all are forgotten.
        self.forget_gone(self.clock.ticks());
        false
    }

    /// Adds the samples that waited for their thread's late stop, now that it stopped.
    fn take_late_stacks(&mut self) {
        if let Some(native) = &mut self.native {
            native.poll_if_signalled();
            for (tid, captured, labels) in native.take_late() {
                let Some(state) = self.threads.states.get_mut(&tid) else {
                    continue;
                };
                let pending = state.pending.take();
                state.stacks.read(captured.clone(), None);
                // Labels read in the stop, where the process publishes some and perf is not
                // used: every waiting sample's, as its stack is.
                let read = labels.as_deref().unwrap_or_default();
                for mut sample in pending {
                    let placed = capture::place(&captured, &sample.records);
                    let (stack, id) = self.labelled(sample.stack, placed, read);
                    sample.stack = stack;
                    sample.add(&mut self.builder, id);
                    self.tally.native_late += 1;
                }
                if let (Some(labels), Some(state)) = (labels, self.threads.states.get_mut(&tid)) {
                    state.stacks.set_latest_labels(labels);
                }
            }
        }
    }

    /// Samples thread `tid` at the tick taken at `now` (the recording's first tick if `first`;
    /// the clock's count `tick`). In the tick's first pass, a thread other than the main one that
    /// perf does not follow and that is blocked is left for the second: `false`. In the second,
    /// it is known blocked (its status is not read again).
    fn sample_thread(
        &mut self,
        tid: u32,
        now: Instant,
        first: bool,
        tick: u64,
        pass: Pass,
    ) -> bool {
        if !self.threads.states.contains_key(&tid) && !self.admit(tid, now, first, tick) {
            return true;
        }
        let state = self.threads.states.get_mut(&tid).expect("admitted");
        state.seen_at = tick;
        if state.own_tid.is_none() {
            // Read once; retried at the next tick if /proc could not tell now.
            state.own_tid = if self.threads.other_namespace {
                process::namespace_tid(self.pid, tid)
            } else {
                Some(tid)
            };
        }
        // Until its own id is known its marks cannot be found: carry its time.
        let Some(own_tid) = state.own_tid else {
            return true;
        };
        if self.reader.missing(own_tid) {
            return true; // its time is carried to its next sample: its state is not advanced
        }
        // A thread whose switches are followed tells its state by them (its ring is read
        // below): /proc is read for it only where they cannot tell (see `running_by_switches`),
        // except for the main thread, whose stat also tells of an exec.
        let known = match (pass, tid != self.pid && self.followed_off_cpu(tid)) {
            (Pass::Blocked, _) => Some(false),
            (Pass::First, true) => None,
            (Pass::First, false) => match self.proc_running_at(tid, now) {
                Some(running) => Some(running),
                None => return true,
            },
        };
        if pass == Pass::First && tid != self.pid && known == Some(false) {
            return false;
        }
        if tid == self.pid {
            let state = self.threads.states.get_mut(&tid).expect("sampled");
            let token = state.status.image_token();
            if self.new_image(tid, token, now) {
                return true;
            }
        }
        let state = self.threads.states.get_mut(&tid).expect("sampled");
        // Where the thread was born during this tick, after `now`, the tick's sample is empty
        // and its time counts from its birth (see `Sampler::admit`).
        let since = state.interval.since();
        let wall_ns = state.interval.end(now);
        if first && !std::mem::take(&mut state.from_birth) {
            return true;
        }
        let thread = state.id;
        // Between ticks at the full rate, the tick's marks stand for the whole interval, as
        // without perf (perf's latest sample gives the stack). Between rare ticks, a thread
        // that perf samples has its CPU time in those samples (each one period, with the
        // marks and stack of its own instant), and the tick samples the rest of its time:
        // if it is blocked, the tick's marks stand for the whole interval (the tick came at
        // a moment that does not depend on what the thread does, so that is unbiased for its
        // blocked time); if it is runnable, for the interval less its running time, of which
        // the time it waited for a CPU is active (see below).
        let slow = self.clock.slow_interval();
        // Every switch before this instant is in the records perf_samples reads: a thread off
        // its CPU then was off until at least then, and no later instant is known (taken
        // later, a return between the two was counted twice: blocked, and in its samples).
        let known_until = crate::os::time::monotonic_ns();
        let unfollowed = |s: &ThreadState| s.followed.is_none();
        let was_unfollowed = self.threads.states.get(&tid).is_some_and(unfollowed);
        let by_perf = self.perf_samples(tid, own_tid, thread, known.unwrap_or(true), slow);
        // Or, per CPU, up to where its records are complete (the last few hundred µs are held).
        let complete = self.native.as_ref().and_then(|n| n.perf_complete_until());
        let known_until = complete.map_or(known_until, |at| at.min(known_until));
        // Following began now: perf counts the thread's CPU time from the moment its event was
        // enabled, the tick up to `now`, and opening the event took hundreds of µs in between
        // (two BPF programs loaded and checked), which the thread spent running: this tick's
        // sample has them too. Without them, threads that live 3 to 6 ms lost 0.9 ms each
        // (`requests`' `handling` read 2 to 4 points low). From its birth where it was born
        // after `now`: a tick that took 500 ms (the first perf samples load the program's
        // debug information) gave threads born in it up to 500 ms from before their birth
        // (`queue` beside a busy process: 4.1 s of 121 counted that no thread lived, its share
        // 6.4 points low, in 1 of 5 fresh-clone runs; threads so overcounted in 4 of 30 runs).
        let began = was_unfollowed && !self.threads.states.get(&tid).is_some_and(unfollowed);
        let wall_ns = match began {
            true => {
                let from = now.max(since);
                wall_ns + Instant::now().saturating_duration_since(from).as_nanos() as u64
            }
            false => wall_ns,
        };
        if self.followed_off_cpu(tid) {
            // Its running time is in perf's samples, its time off the CPU in its switches.
            let running = known.unwrap_or_else(|| self.running_by_switches(tid));
            self.refresh_off_cpu(tid, own_tid, running);
            self.refresh_folded(tid, own_tid);
            self.add_off_cpu(tid, thread, Some(known_until), false);
            self.add_wakeups(tid, thread, false);
            self.note_ticked(tid, own_tid);
            return true;
        }
        // Followed until its ring was read just now (it left its CPU too often): read now.
        let Some(running) = known.or_else(|| self.proc_running(tid)) else {
            return true;
        };
        let weight = self.weigh(tid, tick, running, slow, by_perf, wall_ns);
        // Where the tick alone samples the thread (perf carries no time of it), a late tick
        // knows only the end of its interval (see `TickInterval`).
        // Blocked and not scheduled since its count was last read (at the previous tick or
        // before: as its block began), it was where the tick finds it all along: its marks
        // stand for the whole interval. (Readers blocked 40 ms in `read` while a throttled
        // fsprof's ticks came 20 ms apart had 5 to 15 ms of it: the rest was owed to samples
        // that perf took instead once they ran.)
        let cap = 2 * self.clock.mean_period().as_nanos() as u64;
        let most_ns = match by_perf {
            None if !running && weight.wall_ns > cap && self.not_run_since_read(tid) => 0,
            None => cap,
            Some(_) => 0,
        };
        let state = self.threads.states.get_mut(&tid).expect("sampled");
        let weight = state.interval.settle(weight, most_ns);
        self.add_sample(tid, own_tid, thread, running, weight);
        true
    }

    /// Whether thread `tid` has not been scheduled since its count of times scheduled was last
    /// read (when its blocked stack was, or at a tick that reused it); false where unknown.
    fn not_run_since_read(&mut self, tid: u32) -> bool {
        let Some(state) = self.threads.states.get_mut(&tid) else {
            return false;
        };
        let status = &mut state.status;
        (state.stacks).not_run_since(|| status.sched_times().map(|times| times.slices))
    }

    /// Adds thread `tid`'s sample of this tick, `(wall_ns, active_ns)` long, with its marks and
    /// (when recorded) its native stack; or leaves it pending until the thread stops.
    fn add_sample(&mut self, tid: u32, own_tid: u32, thread: u32, running: bool, weight: Weight) {
        let Weight {
            wall_ns, active_ns, ..
        } = weight;
        let captured = self.native_stack(tid, own_tid, running);
        // A stack captured in the same stop as the marks (or, for a thread that has not run
        // since, earlier) shows their callers; a perf sample's is of another instant.
        let frames = match &captured {
            Native::Captured(captured) => Some(captured.frames.as_slice()),
            _ => None,
        };
        let mut stack = self.stack_of(own_tid, frames);
        let unsettled = self.reader.unsettled(own_tid);
        let native = match captured {
            Native::Captured(captured) => {
                let placed = capture::place(&captured, &self.records);
                // Without perf, with the labels read in the thread's latest stop, outermost.
                let labels = (self.native.as_ref())
                    .filter(|native| !native.uses_perf())
                    .and(self.threads.states.get(&tid))
                    .map(|state| state.stacks.latest_labels().to_vec())
                    .unwrap_or_default();
                let (labelled, native) = self.labelled(stack, placed, &labels);
                stack = labelled;
                native
            }
            Native::Perf(captured, records, truncated_depth) => {
                // The tables count the marks read at the tick; the stack is drawn with the
                // marks of its own instant, carried with it when they differ. When the
                // tick's copies of several regions disagree, the sample's marks count.
                let mut records = records;
                self.resolve_captured(own_tid, &mut records, &captured.frames);
                let own = self.intern_records(records, truncated_depth);
                if unsettled {
                    stack = own;
                    self.reader.settled(own_tid);
                }
                let placed = capture::place(&captured, &self.records);
                // With the labels of the thread's latest perf sample, outermost.
                let labels = (self.threads.states.get(&tid))
                    .map(|state| state.stacks.latest_labels().to_vec())
                    .unwrap_or_default();
                let (own, _) = self.with_labels(own, &labels);
                let added;
                (stack, added) = self.with_labels(stack, &labels);
                placed.map(|mut placed| {
                    placed.marks_at.splice(0..0, std::iter::repeat_n(0, added));
                    placed.marks = (own != stack).then_some(own);
                    self.builder.native_stack(placed)
                })
            }
            Native::Pending => {
                self.clock.needs_every_tick();
                // Completed when the thread stops (it has not run since this instant, so
                // its stack and marks are still this sample's), with the samples of the
                // ticks in between; without a stack if that takes too long (`LateStop`).
                if let Some(state) = self.threads.states.get_mut(&tid) {
                    let sample = PendingSample {
                        thread,
                        stack,
                        records: self.records.clone(),
                        weight,
                        marks_unknown: false,
                    };
                    state.pending.push(sample);
                }
                return;
            }
            Native::BeforePerf => {
                let state = self.threads.states.get_mut(&tid);
                match state {
                    // One sample at most: a thread whose perf copies keep failing must not
                    // have its time gathered onto one instant.
                    Some(state) if state.before_perf.is_none() => {
                        state.before_perf = Some(PendingSample {
                            thread,
                            stack,
                            records: self.records.clone(),
                            weight,
                            marks_unknown: !self.reader.knows_regions(),
                        });
                        return;
                    }
                    _ => None,
                }
            }
            Native::None => None,
        };
        if unsettled && self.reader.unsettled(own_tid) {
            self.reader.count_unsettled(); // no perf sample to take the marks from
        }
        self.builder
            .add_sample(thread, stack, native, wall_ns, active_ns);
    }

    /// The mean interval to the next tick, for a sampler whose rate asks for `fast` (see
    /// [`TickClock::period`]).
    pub fn tick_period(&mut self, fast: Duration) -> Duration {
        // Before perf's rings fill, and before the histories of later branches do.
        let patience = self.native.as_ref().and_then(NativeSampler::perf_patience);
        let patience = match (patience, self.reader.history_patience()) {
            (Some(rings), Some(histories)) => Some(rings.min(histories)),
            (rings, _) => rings,
        };
        self.clock.period(fast, patience)
    }

    /// Thread `tid`'s scheduling totals now: through its status's descriptor where it is kept.
    fn sched_times(&mut self, tid: u32) -> Option<thread_status::SchedTimes> {
        match self.threads.states.get_mut(&tid) {
            Some(state) => state.status.sched_times(),
            None => thread_status::sched_times(self.pid, tid),
        }
    }

    /// Takes the regions the scanner found, and forgets those no longer mapped.
    fn take_regions(&mut self) {
        let taken = self.reader.take_regions();
        // A program that marks (or will: a region is made with its first mark or its
        // library's start) has its threads' switches followed whatever they cost: its blocked
        // time inside marks counts, and they tell it.
        let marks = self.reader.knows_regions();
        if let Some(native) = &mut self.native {
            native.mind_following(marks);
        }
        if let Some(via) = taken.via {
            self.remote = Remote::new(via);
        }
        if taken.dropped {
            self.forget_names_unless_gone();
        }
        for note in taken.notes {
            if !self.tally.notes.contains(&note) {
                self.tally.notes.push(note);
            }
        }
    }

    /// Forgets cached strings: after an `exec` the same addresses may hold other strings.
    fn forget_names(&mut self) {
        self.interner.forget();
    }

    /// Forgets cached strings when a region is gone (an `exec` the image's change may not show),
    /// unless the program's memory went with it: an exiting program's last samples, handled
    /// after, must keep the names read while it ran (forgotten, they were unreadable).
    fn forget_names_unless_gone(&mut self) {
        let (cache, pid, tids) = (&self.via, self.pid, self.tasks.tids());
        let via = process::memory_thread_cached(cache, pid, tids);
        if let Ok(Some(_)) = process::some_readable_address(via) {
            self.forget_names();
        }
    }

    /// Copies every thread's marks (see [`MarkReader::read`]).
    fn read_marks(&mut self) {
        if !self.reader.read() {
            self.forget_names_unless_gone();
        }
    }

    /// Adds, without a native stack, the samples that waited too long for their thread to stop
    /// at `now` (see `weight::LATE_STOP_MOST`), or all still waiting if `now` is `None`.
    fn flush_pending(&mut self, now: Option<Instant>) {
        for state in self.threads.states.values_mut() {
            let expired = match now {
                Some(now) => state.pending.take_expired(now),
                None => state.pending.take(),
            };
            for pending in expired {
                pending.add(&mut self.builder, None);
            }
        }
    }

    /// The interned mark stack of the thread whose own id (see `ThreadState::own_tid`) is `tid`;
    /// its records are left in `self.records`, in the stack's order. `frames`: its native stack,
    /// if taken at the instant of these marks (else its call sites are found on its live stack).
    fn stack_of(&mut self, tid: u32, frames: Option<&[UnwoundFrame]>) -> u32 {
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        let mut truncated_depth = None;
        let reader = &self.reader;
        let marks = reader.of(tid);
        for marks in marks {
            records.extend_from_slice(&marks.records);
            if marks.depth as usize > marks.records.len() {
                truncated_depth = Some(marks.depth);
            }
        }
        // The marks are unchanged while no slot of the thread was pushed to or popped.
        let mut unchanged = || {
            marks.iter().all(|old| {
                reader
                    .again(old)
                    .is_some_and(|new| (new.seq, new.depth) == (old.seq, old.depth))
            })
        };
        let generation = marks
            .iter()
            .fold(0u64, |g, m| g.rotate_left(32) ^ u64::from(m.seq));
        let mut callers = match frames {
            Some(frames) => Callers::Captured { tid, frames },
            None => Callers::Live {
                tid,
                generation,
                unchanged: &mut unchanged,
            },
        };
        let target = Target {
            pid: self.pid,
            via: self.via(),
            remote: &self.remote,
        };
        self.interner
            .resolve_sites(target, &mut records, &mut callers);
        self.intern_records(records, truncated_depth)
    }

    /// The interned mark stack of `records` (a thread's, from all its slots in region order);
    /// they are left in `self.records`, in the stack's order.
    fn intern_records(
        &mut self,
        mut records: Vec<RecordView>,
        mut truncated_depth: Option<u32>,
    ) -> u32 {
        if records.len() > MAX_STACK_FRAMES {
            // Only a corrupt region gives one thread this many slots' worth of marks.
            truncated_depth = Some(records.len().min(u32::MAX as usize) as u32);
            records.truncate(MAX_STACK_FRAMES);
        }
        if self.reader.several_regions() {
            // Marks from several regions: order them by the stack address at which they were
            // pushed (the stack grows down, so outer marks have higher addresses).
            records.sort_by_key(|record| std::cmp::Reverse(record.sp));
        }
        let target = Target {
            pid: self.pid,
            via: self.via(),
            remote: &self.remote,
        };
        let frames = self.interner.frames(target, &mut self.builder, &records);
        self.records = records;
        self.builder.stack(Stack {
            frames,
            truncated_depth,
        })
    }

    /// Finds the call sites of `records`, marks copied with the native stack `frames`.
    fn resolve_captured(&mut self, tid: u32, records: &mut [RecordView], frames: &[UnwoundFrame]) {
        let target = Target {
            pid: self.pid,
            via: self.via(),
            remote: &self.remote,
        };
        let callers = &mut Callers::Captured { tid, frames };
        self.interner.resolve_sites(target, records, callers);
    }

    /// A live thread of the target whose memory map can be read, found when first needed (a
    /// read of `/proc`) and kept while it is (see `tick`).
    fn via(&self) -> u32 {
        process::memory_thread_cached(&self.via, self.pid, self.tasks.tids())
    }
}

mod ending;
mod exec;
mod labels;
mod later_branches;
mod lifecycle;
mod native_stacks;
mod off_cpu;
mod unseen;
mod weight;
pub use ending::Recorded;
use lifecycle::Pass;
use weight::{LateStop, PendingSample, Weight};
