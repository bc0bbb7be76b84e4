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
//! Every [`Control::period_ns`] of a thread's CPU time the agent looks at the thread's marks: while
//! its innermost mark of the feature named [`Control::feature`] (of the instance named
//! [`Control::instance`], if one is) is a mark, not an antimark, the thread adds
//! `speedup_ppm / 1e6` of that CPU time to [`Control::global_delay_ns`] and to its own count; any
//! thread whose own count is behind the global one sleeps the difference at its next look and
//! before it wakes another thread; what accrues while a thread is blocked waiting for another is
//! forgiven. The program then runs as if the selected code were that much faster, stretched by
//! the global delay: its time less [`Control::global_delay_ns`] is its time with the code faster.

use core::sync::atomic::AtomicU64;

/// The environment variable holding the control page's descriptor number.
pub const CONTROL_VARIABLE: &str = "FSPROF_WHATIF";
/// First eight bytes of a control page.
pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"FSPROFWI");
/// Incremented on any layout change; the agent ignores a page of another version.
pub const CONTROL_VERSION: u64 = 2;
/// Size of the memfd.
pub const CONTROL_SIZE: usize = 4096;
/// Bytes of a feature's name, and of an instance's text, that a control page holds at most.
pub const NAME_CAPACITY: usize = 1024;
/// [`Control::instance_len`] when any instance of the feature is selected.
pub const ANY_INSTANCE: u64 = u64::MAX;

/// The control page (native-endian). `fsprof` writes the selection before the program starts;
/// the agent writes the counters. The counters are atomics: threads of the program add to them.
#[repr(C)]
pub struct Control {
    /// [`CONTROL_MAGIC`].
    pub magic: u64,
    /// [`CONTROL_VERSION`].
    pub version: u64,
    /// Millionths of the selected code's time that the experiment removes (0 to 1 000 000).
    pub speedup_ppm: u64,
    /// A thread's CPU time between two looks at its marks.
    pub period_ns: u64,
    /// Length of the selected feature's name in [`Control::feature`].
    pub feature_len: u64,
    /// Length of the selected instance's text in [`Control::instance`], or [`ANY_INSTANCE`].
    pub instance_len: u64,
    /// Written by the agent once it runs the experiment: the signal its timers send.
    pub signal: AtomicU64,
    /// The global delay: the selected code's time the experiment removed, in ns.
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
    /// Reserved, zero.
    pub reserved: [u64; 15],
    /// The selected feature's name (UTF-8, not NUL-terminated).
    pub feature: [u8; NAME_CAPACITY],
    /// The selected instance's text, as the report names it (a location `file:line:column`, a
    /// name); call sites and the other kinds cannot be selected.
    pub instance: [u8; NAME_CAPACITY],
}

const _: () = assert!(core::mem::size_of::<Control>() <= CONTROL_SIZE);
const _: () = assert!(core::mem::offset_of!(Control, feature) == 256);
