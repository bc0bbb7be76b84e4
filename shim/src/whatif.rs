//! The control page of a what-if experiment (`fsprof what-if`): the contract between `fsprof`,
//! which writes an experiment's selection into it, and the agent preloaded into the program, which
//! inserts the experiment's delays and counts them there. Constants and the layout only: the
//! shim itself never reads or writes a control page (the agent does, `agent/src/builtin/
//! whatif.rs`; `fsprof` in `commands/what_if.rs`).
//!
//! # Finding it
//! `fsprof` creates a memfd of [`CONTROL_SIZE`] bytes, writes a [`Control`] at its start and
//! starts the program with the descriptor open and its number in [`CONTROL_VARIABLE`]. The agent's
//! constructor maps it shared, removes the variable from the environment and closes the
//! descriptor on `exec` (a child process is no part of the experiment).
//!
//! # What an experiment is
//! Every [`Control::period_ns`] of a thread's CPU time the agent looks at the thread's marks and
//! at [`Control::current`], the experiment now running: a candidate (one of
//! [`Control::candidates`]: a feature, or one instance of it) and a speedup. While the thread's
//! innermost mark of the candidate's feature (of its instance, if it names one) is a mark, not
//! an antimark, the thread adds the speedup's share of that CPU time to
//! [`Control::global_delay_ns`] and to its own count; any thread whose own count is behind the
//! global one sleeps the difference at its next look and before it wakes another thread; what
//! accrues while a thread is blocked waiting for another is forgiven. The program then runs as
//! if the selected code were that much faster, stretched by the global delay: its time less
//! the delay is its time with the code faster.
//!
//! # Experiments in turn
//! `fsprof` may change [`Control::current`] while the program runs (`what-if --progress`: one
//! run, the experiments in turn, each for a stretch of it). The word changes at once, with a new
//! epoch: a thread that sees a new epoch forgives itself what it owed from the experiment
//! before (that experiment's delays belong to its own stretch), and counts from there.

use core::sync::atomic::AtomicU64;

/// The environment variable holding the control page's descriptor number.
pub const CONTROL_VARIABLE: &str = "FSPROF_WHATIF";
/// First eight bytes of a control page.
pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"FSPROFWI");
/// Incremented on any layout change; the agent ignores a page of another version.
pub const CONTROL_VERSION: u64 = 3;
/// Size of the memfd (17 pages).
pub const CONTROL_SIZE: usize = 17 * 4096;
/// Bytes of a feature's name, and of an instance's text, that a control page holds at most.
pub const NAME_CAPACITY: usize = 1024;
/// Candidates a control page holds at most.
pub const MAX_CANDIDATES: usize = 32;
/// [`Candidate::instance_len`] when any instance of the feature is selected.
pub const ANY_INSTANCE: u64 = u64::MAX;

/// The control page (native-endian). `fsprof` writes the candidates before the program starts
/// or, at the latest, before it first sets an experiment (the agent reads them only while one
/// runs, after loading [`Control::current`] with `Acquire`), and [`Control::current`] then and
/// whenever the experiment changes; the agent writes the
/// counters. The counters are atomics: threads of the program add to them.
#[repr(C)]
pub struct Control {
    /// [`CONTROL_MAGIC`].
    pub magic: u64,
    /// [`CONTROL_VERSION`].
    pub version: u64,
    /// A thread's CPU time between two looks at its marks.
    pub period_ns: u64,
    /// How many of [`Control::candidates`] are filled in (at most [`MAX_CANDIDATES`]).
    pub candidate_count: u64,
    /// The experiment now running ([`Experiment::word`]); 0: none (a baseline).
    pub current: AtomicU64,
    /// Written by the agent once it runs the experiment: the signal its timers send.
    pub signal: AtomicU64,
    /// The global delay: the selected code's time the experiments removed so far, in ns.
    pub global_delay_ns: AtomicU64,
    /// What the program's threads slept, all together, in ns.
    pub paid_ns: AtomicU64,
    /// What blocked threads were forgiven, all together, in ns.
    pub forgiven_ns: AtomicU64,
    /// Looks at a thread's marks, and those that found it in the selected code.
    pub samples: AtomicU64,
    /// Looks that found the thread in the selected code.
    pub selected_samples: AtomicU64,
    /// Threads whose timer the agent armed.
    pub threads: AtomicU64,
    /// Threads whose timer could not be armed (their time is not looked at).
    pub failures: AtomicU64,
    /// The progress point's counts at the program's exit, of all its regions (see
    /// `abi::Progress`; `fsprof` names the feature in the program's `FSPROF_PROGRESS`): marks
    /// of the progress feature that ended.
    pub progress_ends: AtomicU64,
    /// Of those, the ones timed.
    pub progress_timed: AtomicU64,
    /// Their latencies in virtual time, added up, ns.
    pub progress_latency_ns: AtomicU64,
    /// Set by the agent at the program's exit, once the three counts above are written.
    pub exited: AtomicU64,
    /// The period the looks should have now, if not [`Control::period_ns`] (0): `fsprof` slows
    /// them for a quiet baseline stretch (`what-if --progress`), and each thread's timer takes
    /// the new period at its next look.
    pub looks_period_ns: AtomicU64,
    /// How much more than its period a look of the perf clock in the selected code credits,
    /// parts per million: the looks' own cost, which that clock does not count (a timer's
    /// interrupt and a signal, in the kernel) and which the selected code, made faster, would
    /// shed with its time. `fsprof` measures it by quiet baselines and writes at most 100 000
    /// (the agent takes at most 1 000 000); 0: none, as an agent older than the field reads it.
    pub credit_ppm: AtomicU64,
    /// Reserved, zero.
    pub reserved: [u64; 13],
    /// What the experiments may speed up.
    pub candidates: [Candidate; MAX_CANDIDATES],
}

/// What an experiment may speed up: a feature, or one instance of it.
#[repr(C)]
pub struct Candidate {
    /// Length of the feature's name in [`Candidate::feature`].
    pub feature_len: u64,
    /// Length of the instance's text in [`Candidate::instance`], or [`ANY_INSTANCE`].
    pub instance_len: u64,
    /// The feature's name (UTF-8, not NUL-terminated).
    pub feature: [u8; NAME_CAPACITY],
    /// The instance's text, as the report names it (a location `file:line:column`, a name);
    /// call sites and the other kinds cannot be selected.
    pub instance: [u8; NAME_CAPACITY],
}

/// The experiment in [`Control::current`]: which candidate, how much faster, and its epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experiment {
    /// Counts the experiments set (wrapping at 16 bits): a thread that sees a new one
    /// forgives itself what it owed.
    pub epoch: u16,
    /// An index into [`Control::candidates`]; `None`: a baseline (nothing selected).
    pub candidate: Option<u16>,
    /// Millionths of the selected code's time removed (at most 1 000 000).
    pub speedup_ppm: u32,
}

impl Experiment {
    /// The word [`Control::current`] holds: epoch, candidate plus one, speedup.
    pub fn word(self) -> u64 {
        (u64::from(self.epoch) << 48)
            | (self.candidate.map_or(0, |c| u64::from(c) + 1) << 32)
            | u64::from(self.speedup_ppm.min(1_000_000))
    }

    /// The experiment a word of [`Control::current`] holds.
    pub fn from_word(word: u64) -> Experiment {
        let candidate = ((word >> 32) & 0xffff) as u16;
        Experiment {
            epoch: (word >> 48) as u16,
            candidate: candidate.checked_sub(1),
            speedup_ppm: (word as u32).min(1_000_000),
        }
    }
}

const _: () = assert!(core::mem::size_of::<Control>() <= CONTROL_SIZE);
const _: () = assert!(core::mem::offset_of!(Control, candidates) == 256);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_experiment_survives_its_word() {
        for experiment in [
            Experiment {
                epoch: 0,
                candidate: None,
                speedup_ppm: 0,
            },
            Experiment {
                epoch: 65535,
                candidate: Some(31),
                speedup_ppm: 1_000_000,
            },
            Experiment {
                epoch: 7,
                candidate: Some(0),
                speedup_ppm: 250_000,
            },
        ] {
            assert_eq!(Experiment::from_word(experiment.word()), experiment);
        }
        assert_eq!(Experiment::from_word(0).candidate, None);
    }
}
