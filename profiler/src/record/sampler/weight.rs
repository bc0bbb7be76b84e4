//! What a thread's sample at a tick weighs ([`Weight`]), and a sample that waits to be added
//! ([`PendingSample`]: for its thread's late stop, or its first perf sample). How much a sample
//! weighs is decided in `sampler.rs`; this file only carries it.

use crate::profile::ProfileBuilder;
use fsprof_shim::abi::RecordView;

/// What a thread's sample at a tick stands for.
#[derive(Clone, Copy)]
pub(super) struct Weight {
    pub(super) wall_ns: u64,
    pub(super) active_ns: u64,
    /// For a running thread born during a long interval, which stands for its runnable time so
    /// far: the whole interval, which it stands for instead if it is gone before it is sampled
    /// again. A thread seen at one tick only is sampled in proportion to its life, and so
    /// stands for the interval (as at the full rate); its age would favour what it does late
    /// in its life (seen then, it weighs more).
    pub(super) if_gone_ns: Option<u64>,
}

/// A sample waiting for its thread's late stop, or for its first perf sample.
pub(super) struct PendingSample {
    pub(super) thread: u32,
    pub(super) stack: u32,
    pub(super) records: Vec<RecordView>,
    pub(super) weight: Weight,
}

impl PendingSample {
    pub(super) fn add(self, builder: &mut ProfileBuilder, native: Option<u32>) {
        let Weight {
            wall_ns, active_ns, ..
        } = self.weight;
        builder.add_sample(self.thread, self.stack, native, wall_ns, active_ns);
    }

    /// Adds it for a thread that is gone (see [`Weight::if_gone_ns`]).
    pub(super) fn add_gone(mut self, builder: &mut ProfileBuilder) {
        if let Some(interval) = self.weight.if_gone_ns {
            (self.weight.wall_ns, self.weight.active_ns) = (interval, interval);
        }
        self.add(builder, None);
    }
}
