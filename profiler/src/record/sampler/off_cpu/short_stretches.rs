//! A followed thread's stretches off its CPU that the kernel folded rather than recorded (see
//! `layout::FOLD_MOST_NS`: short ones, of a thread without marks, that left with no stack copied):
//! their totals by kind, added with the native stacks such stretches get when recorded one by
//! one (`off_cpu.rs`), and the stack of a long block that began folded, read at a tick. Not
//! here: the stretches recorded one by one.

use super::super::*;
use super::{same_places, LatestSample};
use crate::native::layout::FOLD_MOST_NS;
use crate::native::stream::Folded;
use crate::os::time::monotonic_ns;
use crate::record::marks::snapshot_records;

impl Sampler {
    /// Takes thread `tid`'s short stretches off its CPU, folded by the kernel (see
    /// `layout::FOLD_MOST_NS`; sample thread `thread`, `latest` its latest perf sample): each kind
    /// is added as one stretch of its total length, with no marks (the thread had no slot), and
    /// the native stack a stretch of its kind gets in [`Sampler::switch`] where the kernel
    /// copied none: blocked, the latest block's that had one; preempted near a block's end,
    /// that block's (or the preemption's that had one); preempted elsewhere, the latest
    /// sample's. Their wake-ups' waits for a CPU are shared as one stretch's.
    pub(in crate::record::sampler) fn folded(
        &mut self,
        tid: u32,
        own_tid: u32,
        thread: u32,
        folded: Folded,
        latest: Option<&LatestSample>,
    ) {
        let Some((records, truncated)) = snapshot_records(own_tid, &Default::default()) else {
            return;
        };
        let stack = self.intern_records(records, truncated);
        let placed = latest
            .filter(|l| l.stack == stack && same_places(&l.records, &self.records))
            .and_then(|latest| capture::place(&latest.captured, &self.records));
        // With the labels of the latest sample, as a departure recorded whole has them.
        let labels = latest.map_or(&[][..], |l| l.labels.as_slice());
        let (stack, far) = self.labelled(stack, placed, labels);
        let Some(followed) = self.followed_mut(tid) else {
            return;
        };
        for addition in followed.folded(&folded, stack, far) {
            self.add(thread, addition);
        }
    }

    /// At a tick, for followed thread `tid` (own thread id `own_tid`) blocked since a departure
    /// that the kernel folded (see `layout::FOLD_MOST_NS`: it left without marks or a stack
    /// copied) for longer than a folded stretch may last: the stretch is opened here, as if its
    /// departure had been recorded, with no marks and its stack read now (it has not run since),
    /// and the ticks add it as it lasts; the departure the kernel records as the block ends is
    /// then that stretch's (see [`Sampler::switch`]). Left to that record, a block had the stack
    /// of the latest one that had its own, which may be another call (the thread's short waits
    /// before a long `read`), and a thread that exited before its records were read lost its
    /// last block whole (python's 1 s sleep just before its exit, 1 recording in 40).
    pub(in crate::record::sampler) fn refresh_folded(&mut self, tid: u32, own_tid: u32) {
        if self.followed_mut(tid).is_none_or(|f| f.is_off()) {
            return;
        }
        let Some(left) = self.native.as_ref().and_then(|n| n.perf_folded_open(tid)) else {
            return;
        };
        if monotonic_ns() < left.saturating_add(FOLD_MOST_NS) {
            return;
        }
        let captured = match self.blocked(tid, own_tid) {
            Some(Native::Captured(captured)) => Some(captured),
            _ => None,
        };
        let Some((records, truncated)) = snapshot_records(own_tid, &Default::default()) else {
            return;
        };
        let stack = self.intern_records(records, truncated);
        let placed =
            (captured.as_ref()).and_then(|captured| capture::place(captured, &self.records));
        let (stack, native) = self.with_latest_labels(tid, stack, placed);
        if let Some(followed) = self.followed_mut(tid) {
            followed.open_block(left, stack, native, captured);
        }
    }
}
