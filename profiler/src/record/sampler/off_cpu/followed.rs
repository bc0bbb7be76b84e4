//! One followed thread's off-CPU accounting as a state of its own: the stretch it is off its
//! CPU now, what it blocked with (for the blocks and preemptions the kernel copied no stack at),
//! its waits for a CPU after wake-ups not yet shared out, and the CPU time its samples were
//! credited. Each method takes what the switches, samples and ticks tell and returns what to add
//! to the profile ([`Addition`]s, with stacks already interned); nothing here reads the target,
//! interns marks or writes the profile (the sampler's glue in `off_cpu.rs` and
//! `short_stretches.rs` does). Each rule says why it is as it is where it is kept: here for the
//! stacks a departure borrows and the time a sample stands for, in the glue for what a tick
//! reads.

use crate::native::layout::JUST_BACK_NS;
use crate::native::stream::Folded;
use crate::native::unwind::Captured;

/// Blocked stretches remembered between two reads; the waits of more go to these.
const MAX_WOKEN: usize = 64;
/// The most of a thread's run time a return to its CPU may add beyond its switches' count (see
/// [`Followed::switch_path`]): on the Intel VM they added 7 to 11 µs a sleep.
const SWITCH_PATH_MOST_NS: u64 = 50_000;

/// Time to add to the profile: `ns` with marks `stack` and native stack `native`, active (a
/// wait for a CPU) or blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addition {
    pub ns: u64,
    pub stack: u32,
    pub native: Option<u32>,
    pub active: bool,
}

/// What a followed thread's end adds (see [`Followed::last_run`]).
pub struct LastRun {
    /// Its running time since its last sample, with its latest marks.
    pub last: Option<(u32, u64)>,
    /// The running time its samples of CPUs' ticks were still to add, by their marks.
    pub owed_to: Vec<(u32, u64)>,
    /// The running time lost in a gap before its end.
    pub lost_ns: u64,
}

/// A thread whose switches are followed.
pub struct Followed {
    /// The tick at which following began: the ticks after it add nothing for the thread.
    since_tick: u64,
    /// Where the thread is off its CPU now, if it is.
    off: Option<Stretch>,
    /// Its latest known marks at a sample or a departure (their stack, and when: CLOCK_MONOTONIC,
    /// ns), for its running time after its last sample, unless a tick read it later.
    latest: Option<(u32, u64)>,
    /// The marks the latest tick read (see [`Followed::ticked_again`]).
    ticked: Option<Ticked>,
    /// The marks and native stack of its latest departure that blocked with the stack the
    /// kernel copied then, for those of its blocks that came too soon after it for a copy of
    /// their own (see [`Followed::left`]).
    blocked_with: Option<(u32, u32)>,
    /// Since its latest return from a block, until a sample or its next block (see
    /// [`Followed::left`]).
    back: Option<Back>,
    credit: Credit,
    wakeups: Wakeups,
    /// Where it was as following began (runnable or not, and when), until the tick's end
    /// opens its stretch off the CPU (see [`Followed::open_seeded`]).
    seed: Option<(bool, u64)>,
}

/// The CPU time a followed thread's samples stand for.
struct Credit {
    /// Its CPU time (task-clock count) up to which its running time is added.
    credited_ns: u64,
    /// Whether its records had a gap since (see [`Followed::gap`]).
    gap: bool,
    /// Running time of samples lost in gaps, not yet shared among the samples after them.
    owed_ns: u64,
    /// For samples of a CPU's ticks (see `Credit::calibrate`): the running time they were
    /// credited, and what was added for them.
    ran_ns: u64,
    added_ns: u64,
    /// The running time and tick lengths of the latest samples of a CPU's ticks, each older
    /// one weighing less by a factor of `1 - 1 / RECENT_SAMPLES`.
    recent_ran_ns: u64,
    recent_ticks_ns: u64,
    /// The marks of the latest of those samples, newest last, at most `RECENT_SAMPLES`: what
    /// they did not yet add of their running time at the thread's end goes to these.
    recent_stacks: std::collections::VecDeque<u32>,
}

/// How many of a thread's latest samples of CPUs' ticks its ratio of running time to tick
/// length is taken over, about (see `Credit::calibrate`).
const RECENT_SAMPLES: u64 = 64;

/// A followed thread's marks as the ticks read them.
struct Ticked {
    /// Its slots' `seq`s then, folded: the same at the next tick, its marks are the same.
    generation: u64,
    stack: u32,
    /// When the latest tick that found them read them (CLOCK_MONOTONIC, ns).
    read_ns: u64,
}

/// The waits for a CPU that follow a thread's wake-ups, not yet added.
struct Wakeups {
    /// The kernel's total of the thread's waits for a CPU, when last read, and when.
    run_delay_ns: Option<u64>,
    read_at: u64,
    /// That total's growth not yet accounted for, less the preempted stretches added as
    /// active (negative while one added up to a tick has not reached the total yet: the
    /// kernel counts a wait when it ends).
    balance: i64,
    /// The blocked stretches that ended since the read (their marks and native stack).
    /// Each with the longest its wait for a CPU may have been (see `Stretch::blocked_seen`).
    woken: Vec<(u32, Option<u32>, u64)>,
    /// Its run time in the kernel's totals, its time on a CPU as its switches count it and
    /// their count, at the latest read while it was off its CPU (see [`Followed::switch_path`]).
    path: Option<(u64, u64, u64)>,
}

/// A stretch off the CPU not yet added.
struct Stretch {
    /// Since when (CLOCK_MONOTONIC, ns): its departure, or the tick up to which it was added.
    since: u64,
    /// When it left.
    left: u64,
    /// Blocked, the latest instant it was known blocked (its departure, or a tick that found
    /// it so): a wait for a CPU after its wake-up came after that.
    blocked_seen: u64,
    preempted: bool,
    /// Seeded as following began, the thread runnable (see [`Followed::open_seeded`]): not
    /// added until the thread's next switch, a return, tells that it was off its CPU.
    tentative: bool,
    stack: u32,
    native: Option<u32>,
    /// Its native stack is the one the kernel copied as it left (no tick need read it).
    left_with_stack: bool,
    /// Its stack, read at a tick while it was blocked (see [`Followed::refresh_due`]): it
    /// stands until the thread runs again.
    captured: Option<Captured>,
}

/// A thread back from a block: what it blocked with, for a preemption that comes before it has
/// run on from there.
#[derive(Clone, Copy)]
struct Back {
    /// Its latest return to a CPU (from the block, or from a preemption since).
    returned: u64,
    /// How long it has run since the block ended.
    ran_ns: u64,
    /// The marks and native stack of the block, or of a preemption since that the kernel
    /// copied a stack at (`preempted`).
    stack: u32,
    native: Option<u32>,
    preempted: bool,
}

/// A departure as the sampler resolved it: when, whether preempted, its marks' stack, the
/// native stack it got (its own copy, or the latest sample's), and whether the kernel copied a
/// stack as it left.
pub struct Departure {
    pub time: u64,
    pub preempted: bool,
    pub stack: u32,
    pub native: Option<u32>,
    pub copied: bool,
}

/// What a tick should read for a thread off its CPU (see [`Followed::refresh_due`]).
pub enum Refresh {
    /// Nothing: not off its CPU since before the read, or running again.
    Nothing,
    /// Preempted: its marks again (the native stack stands while they do).
    Marks,
    /// Blocked: its marks, with the stack read while blocked (`captured`), or to read now
    /// (`read`: none yet, and it left with none of its own).
    Blocked {
        captured: Option<Captured>,
        read: bool,
    },
}

impl Followed {
    /// Following a thread from tick `tick` on, running then, with `cpu_ns` of CPU time so far
    /// (counted by the tick). Its waits for a CPU so far are `run_delay_ns` (`schedstat`, if
    /// the kernel keeps it), read at `now` (CLOCK_MONOTONIC, ns).
    pub fn new(tick: u64, cpu_ns: u64, run_delay_ns: Option<u64>, now: u64) -> Followed {
        Followed {
            since_tick: tick,
            off: None,
            latest: None,
            ticked: None,
            blocked_with: None,
            back: None,
            credit: Credit {
                credited_ns: cpu_ns,
                gap: false,
                owed_ns: 0,
                ran_ns: 0,
                added_ns: 0,
                recent_ran_ns: 0,
                recent_ticks_ns: 0,
                recent_stacks: std::collections::VecDeque::new(),
            },
            wakeups: Wakeups {
                run_delay_ns,
                read_at: now,
                balance: 0,
                woken: Vec::new(),
                path: None,
            },
            seed: None,
        }
    }

    /// Notes that following began with the thread runnable (`running`: on a CPU or waiting for
    /// one) or blocked, at `now` (CLOCK_MONOTONIC, ns), for [`Followed::open_seeded`].
    pub fn began(&mut self, running: bool, now: u64) {
        self.seed = Some((running, now));
    }

    /// Whether ticks after tick `tick` add nothing for the thread (following began before).
    pub fn began_before(&self, tick: u64) -> bool {
        self.since_tick < tick
    }

    /// Whether its switches say it is on a CPU or waiting for one (not off it, or preempted);
    /// otherwise it blocked, and may have been woken since.
    pub fn runnable_by_switches(&self) -> bool {
        self.off.as_ref().is_none_or(|off| off.preempted)
    }

    /// Whether a stretch off its CPU is open (a tentative one included).
    pub fn is_off(&self) -> bool {
        self.off.is_some()
    }

    /// Whether a stretch off its CPU is open and known (not tentative).
    pub fn is_surely_off(&self) -> bool {
        self.off.as_ref().is_some_and(|off| !off.tentative)
    }

    /// Takes its return to a CPU at `time` (the stretch is then closed by
    /// [`Followed::take_stretch`]): back from a block, it keeps what it blocked with.
    pub fn returned(&mut self, time: u64) {
        self.back = match (&self.off, self.back) {
            (Some(off), _) if !off.preempted && !off.tentative => Some(Back {
                returned: time,
                ran_ns: 0,
                stack: off.stack,
                native: off.native,
                preempted: false,
            }),
            (Some(_), Some(back)) => Some(Back {
                returned: time,
                ..back
            }),
            _ => None,
        };
    }

    /// Whether a block that left at `time` is open already (opened by a tick as it lasted, see
    /// [`Followed::open_block`]).
    pub fn has_block_from(&self, time: u64) -> bool {
        (self.off.as_ref()).is_some_and(|off| off.left == time && !off.preempted)
    }

    /// Opens a stretch off the CPU at a departure. Blocked without a stack of its own, the
    /// latest block's stands for it where the marks are the same: the kernel copies a blocked
    /// thread's stack at most once per sampling period, so the blocks that got one are a sample
    /// of all of them, taken at times that do not depend on where the thread blocks. Preempted
    /// without a stack of its own soon after a block ended (the kernel copies one at most once
    /// per period, and the block took this period's), it is still on its way out of the blocking
    /// call: its wait for a CPU is that call's, as the block was, not the latest sample's code
    /// before the block. Preempted again without one, after a preemption that had one (no
    /// sample since), it resumed where it was then and ran less than a period: that stack is the
    /// later.
    pub fn left(&mut self, departure: Departure) {
        let Departure {
            time,
            preempted,
            stack,
            native,
            copied,
        } = departure;
        let blocked = !preempted;
        let left_with_stack = copied && native.is_some();
        let native = match (native, self.blocked_with) {
            (Some(native), _) if blocked => {
                self.blocked_with = Some((stack, native));
                Some(native)
            }
            (None, Some((with, native))) if blocked && with == stack => Some(native),
            (native, _) => native,
        };
        let native = match self.back.as_mut() {
            Some(back) if preempted => {
                back.ran_ns += time.saturating_sub(back.returned);
                let near = back.preempted || back.ran_ns <= JUST_BACK_NS;
                if !copied && near && back.stack == stack {
                    back.native
                } else {
                    native
                }
            }
            _ => native,
        };
        if blocked {
            self.back = None;
        } else if copied && native.is_some() {
            self.back = Some(Back {
                returned: time,
                ran_ns: 0,
                stack,
                native,
                preempted: true,
            });
        }
        self.latest = Some((stack, time));
        // A stretch seeded by `open_seeded` has been added up to its `since` (a tentative one
        // not at all).
        let since = self.off.as_ref().map_or(0, |off| off.since);
        self.off = Some(Stretch {
            since: time.max(since),
            left: time,
            blocked_seen: time,
            preempted,
            tentative: false,
            stack,
            native,
            left_with_stack,
            captured: None,
        });
    }

    /// Whether its stretch off the CPU from the instant following began is still to open.
    pub fn seeded(&self) -> bool {
        self.seed.is_some()
    }

    /// Takes where it was as following began, if its stretch is still to open.
    pub fn take_seed(&mut self) -> Option<(bool, u64)> {
        self.seed.take()
    }

    /// Opens the stretch off the CPU from the instant following began, `running` (then
    /// tentative) or blocked then, with marks `stack`, unless a departure opened one since.
    pub fn open_seeded(&mut self, running: bool, since: u64, stack: u32) {
        if self.off.is_none() {
            self.off = Some(Stretch {
                since,
                left: since,
                blocked_seen: since,
                preempted: running,
                tentative: running,
                stack,
                native: None,
                left_with_stack: false,
                captured: None,
            });
        }
    }

    /// Opens a block that the kernel folded at its departure (`left`), found lasting at a tick:
    /// with marks `stack`, the stack read then (`captured`, interned as `native`).
    pub fn open_block(
        &mut self,
        left: u64,
        stack: u32,
        native: Option<u32>,
        captured: Option<Captured>,
    ) {
        self.back = None;
        self.off = Some(Stretch {
            since: left,
            left,
            blocked_seen: left,
            preempted: false,
            tentative: false,
            stack,
            native,
            left_with_stack: false,
            captured,
        });
    }

    /// Takes a gap in its records: its waits for a CPU count from `run_delay_ns` (read at
    /// `now`) on, and its next sample stands for a period at most (see `Credit::credit`).
    /// A known stretch still open must have been added up to the gap and closed before (a
    /// tentative one stays open: the next switch tells whether it was one).
    pub fn gap(&mut self, run_delay_ns: Option<u64>, now: u64) {
        self.credit.gap = true;
        self.back = None;
        let wakeups = &mut self.wakeups;
        wakeups.woken.clear();
        wakeups.balance = 0;
        wakeups.run_delay_ns = run_delay_ns;
        wakeups.read_at = now;
    }

    /// The stretch off its CPU up to `until`, to add (a tentative one only if `close`, when its
    /// return proves it was off its CPU); closed if `close` (it is back on a CPU), else kept
    /// open from `until` on. A preemption is active time; a block's wait for a CPU after its
    /// wake-up is shared out later (see [`Followed::share_wakeups`]).
    pub fn take_stretch(&mut self, until: u64, close: bool) -> Option<Addition> {
        let off = self.off.as_mut().filter(|off| close || !off.tentative)?;
        let ns = until.saturating_sub(off.since);
        let (stack, native, preempted) = (off.stack, off.native, off.preempted);
        let most_wait = until.saturating_sub(off.blocked_seen);
        off.since = off.since.max(until);
        if close {
            self.off = None;
        }
        let wakeups = &mut self.wakeups;
        if preempted {
            wakeups.balance = wakeups.balance.saturating_sub_unsigned(ns);
        } else if close && wakeups.woken.len() < MAX_WOKEN {
            wakeups.woken.push((stack, native, most_wait));
        }
        Some(Addition {
            ns,
            stack,
            native,
            active: preempted,
        })
    }

    /// Whether its waits for a CPU are to be read now (`time`): blocked stretches ended since
    /// the previous read, at least `every` ns ago unless `now`.
    pub fn wakeups_due(&self, time: u64, every: u64, now: bool) -> bool {
        let wakeups = &self.wakeups;
        !wakeups.woken.is_empty()
            && wakeups.run_delay_ns.is_some()
            && (now || time >= wakeups.read_at + every)
    }

    /// Its run time in the kernel's totals (`run_ns`) against its time on a CPU as its switches
    /// count it and their count (`counted`, read while it was off its CPU, both whole then):
    /// what the totals grew beyond the count since the previous such read, at most
    /// [`SWITCH_PATH_MOST_NS`] a return, is added to the waits its wake-ups share. The scheduler
    /// charges a thread for its own switch path, from being picked to running, before its
    /// `sched_switch` record (or a perf event's count) begins: on the Intel VM 7 to 11 µs a
    /// sleep, whatever the burst that followed, so that bursts of 100 µs after 1 ms sleeps read
    /// 8% under their CPU time (under perf as well), and an echo server's blocking clients 10
    /// to 15% under theirs. Like a wait after a wake-up, it is the cost of coming back from the
    /// block, with its marks and stack.
    pub fn switch_path(&mut self, run_ns: u64, counted: Option<(u64, u64)>) {
        let Some((cpu_ns, switches)) = counted else {
            return;
        };
        let wakeups = &mut self.wakeups;
        if let Some((run_before, cpu_before, switches_before)) = wakeups.path {
            let grown = run_ns.saturating_sub(run_before);
            let beyond = grown.saturating_sub(cpu_ns.saturating_sub(cpu_before));
            let returns = switches.saturating_sub(switches_before) / 2;
            let most = returns.saturating_mul(SWITCH_PATH_MOST_NS);
            wakeups.balance = (wakeups.balance).saturating_add_unsigned(beyond.min(most));
        }
        wakeups.path = Some((run_ns, cpu_ns, switches));
    }

    /// The kernel's total of its waits for a CPU read at `time` (`wait_ns`): its growth since
    /// the previous read, less the preempted stretches added as active since, shared among the
    /// blocked stretches that ended since, as active time with their marks and stacks. A
    /// stretch's share is at most its bound, and what it cannot take goes to the others, the
    /// smallest bounds served first.
    pub fn share_wakeups(&mut self, wait_ns: u64, time: u64) -> Vec<Addition> {
        let wakeups = &mut self.wakeups;
        let Some(previous) = wakeups.run_delay_ns else {
            return Vec::new();
        };
        wakeups.read_at = time;
        wakeups.run_delay_ns = Some(wait_ns);
        wakeups.balance =
            (wakeups.balance).saturating_add_unsigned(wait_ns.saturating_sub(previous));
        let mut woken = std::mem::take(&mut wakeups.woken);
        if wakeups.balance <= 0 {
            return Vec::new();
        }
        let (mut left, mut count) = (wakeups.balance as u64, woken.len() as u64);
        wakeups.balance = 0;
        woken.sort_unstable_by_key(|(_, _, most)| *most);
        let mut shares = Vec::with_capacity(woken.len());
        for (stack, native, most) in woken {
            let share = (left / count).min(most);
            (left, count) = (left - share, count - 1);
            shares.push(Addition {
                ns: share,
                stack,
                native,
                active: true,
            });
        }
        shares
    }

    /// The stretches the kernel folded up to `folded.time`, with marks `stack` (none: the
    /// thread had no slot) and `far` the native stack a preemption away from a block gets (the
    /// latest sample's, placed with these marks): blocked, the latest block's that had one;
    /// preempted near a block's end, that block's (or the preemption's that had one). Their
    /// wake-ups' waits for a CPU are shared as one stretch's.
    pub fn folded(&mut self, folded: &Folded, stack: u32, far: Option<u32>) -> [Addition; 3] {
        let blocked =
            (self.blocked_with).and_then(|(with, native)| (with == stack).then_some(native));
        let near = match self.back {
            Some(back) if back.stack == stack => back.native,
            _ => blocked,
        };
        self.latest = Some((stack, folded.time));
        let wakeups = &mut self.wakeups;
        let preempted_ns = folded.near_ns + folded.far_ns;
        wakeups.balance = wakeups.balance.saturating_sub_unsigned(preempted_ns);
        if folded.blocked_ns > 0 && wakeups.woken.len() < MAX_WOKEN {
            wakeups.woken.push((stack, blocked, folded.blocked_ns));
        }
        let addition = |ns, native, active| Addition {
            ns,
            stack,
            native,
            active,
        };
        [
            addition(folded.blocked_ns, blocked, false),
            addition(folded.near_ns, near, true),
            addition(folded.far_ns, far, true),
        ]
    }

    /// What a tick that read marks at `read_ns` should read for the stretch off its CPU, the
    /// thread found `running` (on a CPU or waiting for one) or not. A block's stack read by an
    /// earlier tick is handed over, to stand again (see [`Followed::refreshed`]).
    pub fn refresh_due(&mut self, read_ns: u64, running: bool) -> Refresh {
        let Some(off) = self.off.as_mut() else {
            return Refresh::Nothing;
        };
        if off.left >= read_ns {
            return Refresh::Nothing;
        }
        if !running && !off.preempted {
            off.blocked_seen = off.blocked_seen.max(read_ns);
        }
        if off.preempted {
            return Refresh::Marks;
        }
        if running {
            return Refresh::Nothing;
        }
        let captured = off.captured.take();
        let read = captured.is_none() && !off.left_with_stack;
        Refresh::Blocked { captured, read }
    }

    /// The marks (`stack`) a tick read for the stretch off its CPU, with the native stack read
    /// while blocked (`native`, interned from `captured`) if any: without one, the stack it left
    /// with stands if it was placed with these marks.
    pub fn refreshed(&mut self, stack: u32, native: Option<u32>, captured: Option<Captured>) {
        if let Some(off) = self.off.as_mut() {
            off.native = native.or(off.native.filter(|_| off.stack == stack));
            off.stack = stack;
            off.captured = captured;
        }
    }

    /// Takes a perf sample with marks `stack` taken at `time` when the thread had run `cpu_ns`
    /// (a CPU's tick of `tick_ns` if not 0), each sample period `period_ns`: the running time it
    /// stands for (see `Credit::credit` and `Credit::calibrate`), and the running time lost
    /// in a gap before it.
    pub fn sampled(&mut self, stack: u32, at: (u64, u64, u64), period_ns: u64) -> (u64, u64) {
        let (cpu_ns, time, tick_ns) = at;
        self.latest = Some((stack, time));
        self.back = None;
        let (mut ns, lost) = self.credit.credit(cpu_ns, period_ns);
        if tick_ns > 0 {
            ns = self.credit.calibrate(ns, tick_ns);
            let recent = &mut self.credit.recent_stacks;
            if recent.len() as u64 >= RECENT_SAMPLES {
                recent.pop_front();
            }
            recent.push_back(stack);
        }
        (ns, lost)
    }

    /// Its running time since its last sample, the thread having run `cpu_ns` in all, with its
    /// latest marks (a tick's, where a tick read them after its last sample and departure), and
    /// the running time lost in a gap before. What its samples of CPUs' ticks added beyond the
    /// running time they were credited (see `Credit::calibrate`) comes off that; what they
    /// added short of it is made good to the marks of its latest such samples, in equal parts
    /// (the running time they were still to add was theirs, as the burst of steal it mostly
    /// is fell among them): given to the latest marks, it went where the thread ended.
    /// `full_pipe`'s producer, which ends waiting for its child, read 62 ms of its 1769 in
    /// `waitpid` (the built-in `process`) and its `produce` 4.5 to 6 points low with the
    /// hypervisor taking more than the CPUs ran; now 2 ms there and 1.5 to 3 points low, side
    /// by side (3 runs each).
    pub fn last_run(&mut self, cpu_ns: u64, period_ns: u64) -> LastRun {
        let (ns, lost_ns) = self.credit.credit(cpu_ns, period_ns);
        let owed = i128::from(self.credit.ran_ns) - i128::from(self.credit.added_ns);
        let ns = u64::try_from((i128::from(ns) + owed.min(0)).max(0)).unwrap_or(u64::MAX);
        let owed = u64::try_from(owed.max(0)).unwrap_or(u64::MAX);
        let latest = match (self.latest, &self.ticked) {
            (Some((_, at)), Some(ticked)) if ticked.read_ns > at => Some(ticked.stack),
            (None, Some(ticked)) => Some(ticked.stack),
            (latest, _) => latest.map(|(stack, _)| stack),
        };
        let mut recent: Vec<u32> = self.credit.recent_stacks.drain(..).collect();
        let mut owed_to = Vec::new();
        if recent.is_empty() {
            recent.extend(latest); // (samples of CPUs' ticks owe nothing then: none were taken)
        }
        recent.sort_unstable();
        let (parts, mut left) = (recent.len() as u128, owed);
        let groups: Vec<&[u32]> = recent.chunk_by(|a, b| a == b).collect();
        for (i, group) in groups.iter().enumerate() {
            // The last group takes what the divisions' rounding left.
            let share = match i + 1 == groups.len() {
                true => left,
                false => (u128::from(owed) * group.len() as u128 / parts) as u64,
            };
            left -= share;
            if share > 0 {
                owed_to.push((group[0], share));
            }
        }
        LastRun {
            last: latest.filter(|_| ns > 0).map(|stack| (stack, ns)),
            owed_to,
            lost_ns,
        }
    }

    /// Whether a tick that read the thread's marks at `read_ns`, their slots' `seq`s folded to
    /// `generation`, found the marks the previous tick did (then noted as read again).
    pub fn ticked_again(&mut self, generation: u64, read_ns: u64) -> bool {
        match self.ticked.as_mut() {
            Some(ticked) if ticked.generation == generation => {
                ticked.read_ns = read_ns;
                true
            }
            _ => false,
        }
    }

    /// Keeps the marks (`stack`) a tick read at `read_ns`, their `generation` new.
    pub fn ticked(&mut self, generation: u64, stack: u32, read_ns: u64) {
        self.ticked = Some(Ticked {
            generation,
            stack,
            read_ns,
        });
    }
}

impl Credit {
    /// The running time that a sample (or its end) at `cpu_ns` of the thread's CPU time stands
    /// for (each period `period_ns`), and the running time lost in a gap before it: what it ran
    /// since the previous sample added (a sample not added, its marks not copied, leaves its time to the next, a period later, which carries it well:
    /// 13% of an unstarved run's samples follow one missing), except after a gap in its
    /// records (see [`Followed::gap`]): there the samples of many periods were lost, and the
    /// sample stands for one period, the rest owed and shared among the samples that follow
    /// (each carries at most its own time again), a sample of what the thread does over the
    /// next periods. Given whole to the first sample after the gap, it went to where the
    /// thread was when fsprof read its ring again, which on a starved machine is where the
    /// program blocks: an event loop's 8 ms of handling per request read 3 to 7 points low,
    /// its `epoll_wait`, `read` and `write` high, with fsprof stopped 60 to 100 ms in every
    /// 300 ms (a CI run read it 84.6% against 88.4-90.6%); to the sample before the gap, 0.5 to
    /// 2.5 points low (the ring fills as the thread blocks, when the kernel copies its whole
    /// stack); left out, the shares leaned to the time recorded exactly, the blocks (a
    /// program's condition-variable waits +5 to +7 points).
    fn credit(&mut self, cpu_ns: u64, period_ns: u64) -> (u64, u64) {
        let mut ns = cpu_ns.saturating_sub(self.credited_ns);
        self.credited_ns = self.credited_ns.max(cpu_ns);
        let mut lost = 0;
        if std::mem::take(&mut self.gap) && ns > period_ns + period_ns / 2 {
            lost = ns - period_ns;
            self.owed_ns += lost;
            ns = period_ns;
        }
        let paid = self.owed_ns.min(ns);
        self.owed_ns -= paid;
        (ns + paid, lost)
    }

    /// The running time a sample of a CPU's tick of `tick_ns` stands for, `ran_ns` the thread's
    /// running time since its previous sample: the tick's length, scaled by the thread's
    /// running time over its latest samples' ticks (ticks are lost where the kernel's timer
    /// interrupt comes late, in a virtual machine 7-8% of them, and time the hypervisor takes
    /// is running time that holds no tick), so that its samples add up to its running time;
    /// never more than a tick beyond it.
    ///
    /// Not `ran_ns` itself, as for a thread's own timer: a CPU's ticks come on the CPU's clock,
    /// not on the thread's time, and a thread that sleeps between two has run less between
    /// them, by an amount that depends on where in its rhythm the sample fell. A loop of 700 us
    /// of `spin_hashing`, a 500 us sleep and 300 us of `spin_unmarked` (10 s, one tick a
    /// period at 250 Hz) read `spin_hashing` 2.2 to 7.1 points low by running time since the
    /// previous sample (mean -3.9 in 5 runs), +0.22 on average this way (sd 0.79), as the
    /// samples' count does; with two ticks a period, one kept at random, +2.81 (sd 1.55;
    /// `tests/benches/tick-bias.sh`, BENCHMARKS.md, issue 39, twenty-eighth session).
    ///
    /// The ratio is of the latest samples, not of all since the thread was followed: where it
    /// falls over a run, a ratio of all lags behind, and every sample after a stretch of
    /// running time without ticks (a burst of steal) carried some of it again, a
    /// harmonic sum of it in all. Beside three busy loops on two vCPUs whose hypervisor took
    /// 15-25% of their time, the ratio fell from 2.8 in a recording's first quarter to 1.2 in
    /// its last, and a thread's samples added 1218 ms for its 969 ms of running time
    /// (`fsprof-chain`'s two threads read up to 3325 ms each in a 3 s run).
    fn calibrate(&mut self, ran_ns: u64, tick_ns: u64) -> u64 {
        self.ran_ns = self.ran_ns.saturating_add(ran_ns);
        let decayed = |sum: u64| sum - sum / RECENT_SAMPLES;
        self.recent_ran_ns = decayed(self.recent_ran_ns).saturating_add(ran_ns);
        self.recent_ticks_ns = decayed(self.recent_ticks_ns).saturating_add(tick_ns);
        // Four ticks' worth of the ratio's prior, 1, for the first samples.
        let prior = 4 * u128::from(tick_ns);
        let scaled = u128::from(tick_ns) * (u128::from(self.recent_ran_ns) + prior)
            / (u128::from(self.recent_ticks_ns) + prior);
        let room = (self.ran_ns.saturating_add(tick_ns)).saturating_sub(self.added_ns);
        let ns = u64::try_from(scaled).unwrap_or(u64::MAX).min(room);
        self.added_ns = self.added_ns.saturating_add(ns);
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn departure(time: u64, preempted: bool, stack: u32, native: Option<u32>) -> Departure {
        Departure {
            time,
            preempted,
            stack,
            native,
            copied: native.is_some(),
        }
    }

    #[test]
    fn after_a_gap_a_sample_stands_for_one_period_and_the_rest_is_shared_later() {
        let mut f = Followed::new(0, 0, None, 0);
        assert_eq!(f.sampled(1, (4 * MS, 10, 0), 4 * MS), (4 * MS, 0));
        f.gap(None, 20);
        // 40 ms ran in the gap: the first sample after it carries a period and its own time
        // again from what is owed, the rest waits for the next samples.
        assert_eq!(f.sampled(1, (44 * MS, 30, 0), 4 * MS), (8 * MS, 36 * MS));
        assert_eq!(f.sampled(1, (48 * MS, 40, 0), 4 * MS), (8 * MS, 0));
        // Without a gap a long stretch is the sample's own.
        assert_eq!(
            f.sampled(1, (60 * MS, 50, 0), 4 * MS),
            (12 * MS + 12 * MS, 0)
        );
    }

    #[test]
    fn run_time_beyond_the_switches_count_is_shared_with_the_waits_at_most_per_return() {
        let mut f = Followed::new(0, 0, Some(0), 0);
        let block = |f: &mut Followed, stack, left, back| {
            f.left(departure(left, false, stack, None));
            f.returned(back);
            f.take_stretch(back, true);
        };
        // The first read off the CPU sets where the totals are compared from.
        f.switch_path(5 * MS, Some((4 * MS, 10)));
        block(&mut f, 1, 10 * MS, 20 * MS);
        // The totals grew 0.03 ms beyond the count over one block (two switches), no waits.
        f.switch_path(6 * MS + 30_000, Some((5 * MS, 12)));
        let shares = f.share_wakeups(0, 21 * MS);
        assert_eq!(shares.len(), 1);
        assert_eq!(
            (shares[0].ns, shares[0].stack, shares[0].active),
            (30_000, 1, true)
        );
        // Read while it runs (no count), nothing; beyond the most a return may add, the most.
        f.switch_path(9 * MS, None);
        block(&mut f, 2, 30 * MS, 31 * MS);
        f.switch_path(9 * MS, Some((7 * MS, 14)));
        let shares = f.share_wakeups(0, 32 * MS);
        assert_eq!(shares[0].ns, SWITCH_PATH_MOST_NS);
    }

    #[test]
    fn wake_up_waits_go_to_the_smallest_bounds_first_and_the_rest_to_the_others() {
        let mut f = Followed::new(0, 0, Some(100), 0);
        for (stack, left, back) in [
            (1, 0, 10 * MS),
            (2, 20 * MS, 21 * MS),
            (3, 30 * MS, 40 * MS),
        ] {
            f.left(departure(left, false, stack, None));
            f.returned(back);
            let stretch = f.take_stretch(back, true).unwrap();
            assert!(!stretch.active);
        }
        assert!(f.wakeups_due(41 * MS, 20 * MS, true));
        // 9 ms of waits grew: stack 2's block lasted 1 ms, so it takes 1 ms and the other two
        // 4 ms each.
        let shares = f.share_wakeups(100 + 9 * MS, 41 * MS);
        let mut by_stack: Vec<(u32, u64)> = shares.iter().map(|a| (a.stack, a.ns)).collect();
        by_stack.sort();
        assert_eq!(by_stack, [(1, 4 * MS), (2, MS), (3, 4 * MS)]);
        assert!(shares.iter().all(|a| a.active));
        assert!(
            !f.wakeups_due(42 * MS, 20 * MS, true),
            "nothing left to share"
        );
    }

    #[test]
    fn a_block_without_a_stack_of_its_own_takes_the_latest_blocks_with_the_same_marks() {
        let mut f = Followed::new(0, 0, None, 0);
        f.left(departure(0, false, 7, Some(70)));
        f.returned(MS);
        f.take_stretch(MS, true);
        f.left(departure(2 * MS, false, 7, None));
        f.returned(3 * MS);
        let with_same = f.take_stretch(3 * MS, true).unwrap();
        assert_eq!((with_same.stack, with_same.native), (7, Some(70)));
        f.left(departure(4 * MS, false, 8, None));
        f.returned(5 * MS);
        let other = f.take_stretch(5 * MS, true).unwrap();
        assert_eq!((other.stack, other.native, other.ns), (8, None, MS));
    }

    #[test]
    fn a_preemption_just_after_a_block_ends_takes_the_blocks_stack() {
        let mut f = Followed::new(0, 0, None, 0);
        f.left(departure(0, false, 7, Some(70)));
        f.returned(MS);
        f.take_stretch(MS, true);
        f.left(departure(MS + JUST_BACK_NS / 2, true, 7, None));
        let near = f.take_stretch(2 * MS, true).unwrap();
        assert_eq!((near.native, near.active), (Some(70), true));
    }

    #[test]
    fn a_tentative_stretch_counts_only_when_a_return_proves_it() {
        let mut f = Followed::new(0, 0, None, 0);
        f.open_seeded(true, 0, 3);
        assert!(f.is_off() && !f.is_surely_off());
        assert_eq!(f.take_stretch(MS, false), None, "a tick adds nothing of it");
        f.returned(2 * MS);
        let proved = f.take_stretch(2 * MS, true).unwrap();
        assert_eq!((proved.ns, proved.stack, proved.active), (2 * MS, 3, true));
        assert!(!f.is_off());
    }

    #[test]
    fn samples_of_a_cpus_ticks_add_up_to_the_running_time() {
        // Ticks of 3.6 ms, each sample after 4 ms of running (a tick in ten lost): each sample
        // is scaled up towards 4 ms, and the end makes good what the early ones lacked.
        let mut f = Followed::new(0, 0, None, 0);
        let (mut cpu, mut added, mut last) = (0, 0, 0);
        for i in 1..=200u64 {
            cpu += 4 * MS;
            last = f.sampled(1, (cpu, i, 3_600_000), 4 * MS).0;
            added += last;
        }
        assert!(last > 3_950_000 && last <= 4 * MS, "{last}");
        let end = f.last_run(cpu, 4 * MS);
        let owed: u64 = end.owed_to.iter().map(|(_, ns)| ns).sum();
        assert_eq!(added + end.last.map_or(0, |(_, ns)| ns) + owed, cpu);
    }

    #[test]
    fn running_time_the_samples_still_owe_at_the_end_goes_to_their_marks_not_the_last() {
        // Ticks of 1 ms, a sample after each ms of running in marks 1 (9 in 10) or 2, and near
        // the end 100 ms run between two samples (a hypervisor's burst) that the ratio has not
        // paid out yet; the thread ends in other marks, 9, which a tick read last.
        let mut f = Followed::new(0, 0, None, 0);
        let (mut cpu, mut added) = (0, 0);
        for i in 1..=2000u64 {
            cpu += if i == 1990 { 100 * MS } else { MS };
            let stack = if i % 10 == 0 { 2 } else { 1 };
            added += f.sampled(stack, (cpu, i, MS), MS).0;
        }
        f.ticked(1, 9, 10_000);
        let end = f.last_run(cpu, MS);
        let owed: u64 = end.owed_to.iter().map(|(_, ns)| ns).sum();
        assert!(owed > 50 * MS, "{owed} ns owed");
        assert_eq!(added + end.last.map_or(0, |(_, ns)| ns) + owed, cpu);
        // To the samples' marks, in their proportions (7 of the latest 64 in marks 2).
        let to = |stack| (end.owed_to.iter().find(|(s, _)| *s == stack)).map_or(0, |(_, ns)| *ns);
        assert_eq!(to(9), 0);
        assert_eq!(to(1), owed * 57 / 64);
        assert_eq!(to(1) + to(2), owed);
    }

    #[test]
    fn samples_of_a_cpus_ticks_do_not_carry_a_burst_of_running_time_again_and_again() {
        // Ticks of 1 ms, a sample after each ms of running, but for 100 ms run early between
        // two samples (a hypervisor's burst): the samples add the running time, a tick more at
        // most (a ratio of all samples carried the burst again in each: 341 ms more).
        let mut f = Followed::new(0, 0, None, 0);
        let (mut cpu, mut added) = (0, 0);
        for i in 1..=2000u64 {
            cpu += if i == 20 { 100 * MS } else { MS };
            added += f.sampled(1, (cpu, i, MS), MS).0;
        }
        let end = f.last_run(cpu, MS);
        let owed: u64 = end.owed_to.iter().map(|(_, ns)| ns).sum();
        let added = added + end.last.map_or(0, |(_, ns)| ns) + owed;
        assert!(
            (cpu..=cpu + MS).contains(&added),
            "{added} ns added for {cpu} ns of running time"
        );
        // The burst's time went to the samples near it: the last ones stand for a tick each.
        assert_eq!(f.sampled(1, (cpu + MS, 2001, MS), MS).0, MS);
    }
}
