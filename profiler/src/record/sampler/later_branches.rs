//! The later branches of each tick: alternatives a parser pushed after earlier branches at the
//! same offset failed, read from the threads' histories (see `fsprof_shim::abi`) rather than
//! sampled, kept for the backtracking analysis where a sample saw an alternative at that place.
//! Not here: reading the histories (`marks.rs`) or deciding what was wasted (the analysis).

use super::*;
use crate::profile::LaterBranch;

/// How long ticks keep the full rate after a history lost entries.
const HISTORY_HOLD: Duration = Duration::from_millis(500);

impl Sampler {
    /// Keeps this tick's later branches whose place (feature, choice, offset) a sample saw. Run
    /// after the tick's samples: a branch sampled just before it whose later branch followed is
    /// known by then; one whose later branch comes after the tick is matched at a later tick.
    /// If a history lost entries, ticks come at the full rate for a while: a history holds the
    /// latest `HISTORY_CAPACITY` later branches, which 10 ms between ticks can exceed.
    pub(super) fn take_later_branches(&mut self, now: Instant) {
        if self.reader.history_overflowed() {
            self.clock.hold_fast(now + HISTORY_HOLD);
        }
        if self.reader.later_branches().is_empty() {
            return;
        }
        let target = Target {
            pid: self.pid,
            via: self.via(),
            remote: &self.remote,
        };
        for record in self.reader.later_branches() {
            if !self.interner.sampled_place(record) {
                continue;
            }
            let frames =
                (self.interner).frames(target, &mut self.builder, std::slice::from_ref(record));
            if let Some(payload) = frames.first().and_then(|frame| frame.payload) {
                let feature = frames[0].feature;
                self.builder.later_branch(LaterBranch { feature, payload });
            }
        }
    }
}
