//! What a thread's stream of perf records gives the sampler, oldest first ([`Taken`]): samples
//! ([`PerfSample`]), departures and returns ([`Switch`]), short stretches off its CPU folded in
//! the kernel ([`Folded`]), and gaps. Read from the rings by `ring.rs`, `perf.rs` and
//! `cpu_wide.rs`; used by `capture.rs`. Types only.

use crate::native::layout::SLOTS;
use crate::native::unwind::{Registers, StackView};

/// One sample of one thread, as its ring holds it.
#[derive(Debug)]
pub struct PerfSample<'a> {
    /// When it was taken (CLOCK_MONOTONIC, ns).
    pub time: u64,
    /// The thread's time on a CPU when it was taken (its task-clock count, ns): what it ran
    /// since its previous sample is the difference.
    pub cpu_ns: u64,
    /// Registers at the sample.
    pub regs: Registers,
    /// The top of its stack (in the ring: not copied).
    pub stack: StackView<'a>,
    /// The raw bytes of each of the thread's slots, copied at the sample: its state and the
    /// records below its depth. `None` where the thread had no slot (or its address was not yet
    /// given), and all `None` when the marks are unknown.
    pub slots: [Option<Vec<u8>>; SLOTS],
    /// Whether `slots` are this sample's (else its marks are unknown: a copy failed, or was lost).
    pub marks_known: bool,
    /// The anchors read at the sample: (address, word there), for the addresses set then.
    pub anchors: Vec<(u64, u64)>,
    /// The words the walk read beyond the copy at the sample (`walk.rs`): (address, word),
    /// by address.
    pub instant: Vec<(u64, u64)>,
    /// The thread's labels at the sample, for a process whose labels are read
    /// (`native/capture/labels.rs`), as perf's program copied them.
    pub labels: Option<CopiedLabels>,
    /// The length of the tick that took it, for a CPU's timer (`cpu_wide.rs`), which samples
    /// whatever runs on the CPU: the running time a sample stands for. 0 for a thread's own
    /// timer, whose samples are a period of the thread's CPU time apart.
    pub tick_ns: u64,
    /// Whether `stack` was cut short of the kernel's copy where the thread's stacks reach their
    /// root (`cpu_wide.rs`): if it does not unwind to its root, it was cut here, not by the copy.
    pub trimmed: bool,
}

/// What a thread's ring gave, oldest first.
pub enum Taken<'a> {
    /// A sample of its CPU time.
    Sample(PerfSample<'a>),
    /// Its registers and stack as it left its CPU, preempted or blocked (see `sampling::Departure`),
    /// just before the departure that follows it; its slots are that departure's.
    Departure(PerfSample<'a>),
    /// It left its CPU or came back to one.
    Switch(Switch),
    /// Its short stretches off its CPU, folded (per CPU only, see `layout::FOLD_MOST_NS`).
    Folded(Folded),
    /// Records may be missing here: the kernel dropped what did not fit in the thread's full
    /// ring (a lost record says so), or the ring was nearly full when read, so what came after
    /// its last record may have been dropped. What was recorded before is complete up to `at`,
    /// the time of the latest record before it (0 if none was read this time).
    Gap { at: u64 },
}

/// The thread left its CPU (`out`) or came back to one, at `time` (CLOCK_MONOTONIC, ns). Leaving,
/// it was either preempted (still runnable: waiting for a CPU from then on) or blocked; its slots
/// are the copies made as it left (`marks_known` as for a sample; never for a return).
#[derive(Debug)]
pub struct Switch {
    pub time: u64,
    pub out: bool,
    pub preempted: bool,
    pub slots: [Option<Vec<u8>>; SLOTS],
    pub marks_known: bool,
}

/// A thread's stretches off its CPU folded up to `time` (see `layout::FOLD_MOST_NS`), in ns: blocked;
/// preempted within `layout::JUST_BACK_NS` of running after a block ended, or after a preemption
/// whose stack was copied (no sample since); preempted elsewhere. It left each with no marks
/// and no stack copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub time: u64,
    pub blocked_ns: u64,
    pub near_ns: u64,
    pub far_ns: u64,
}

/// Labels as perf's program copied them at a sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopiedLabels {
    /// A custom-labels set's labels.
    Set(Vec<crate::program::custom_labels::Label>),
    /// An OpenTelemetry record's bytes (its keys are indexes: `program/otel_context.rs`).
    Otel(Vec<u8>),
}
