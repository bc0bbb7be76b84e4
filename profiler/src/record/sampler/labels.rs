//! Custom labels (`program/custom_labels.rs`) as features: each label a mark of the feature its
//! key names, its value the instance, outermost in the sample's mark stack (as the program's own
//! marks count: its time, blocked or not, is the label's), read from the label set whose
//! pointer perf's program copied at the sample. Not here: finding the labels (`native/capture.rs`)
//! or copying the pointer (`native/sampling.rs`).

use super::Sampler;
use crate::profile::{Frame, Payload, PayloadKind, Stack};

impl Sampler {
    /// Mark stack `stack` with the labels of the set at `set` (the pointer a sample copied; 0 or
    /// `None`: none) outermost, and how many labels it gained.
    pub(super) fn with_labels(&mut self, stack: u32, set: Option<u64>) -> (u32, usize) {
        let Some(set) = set.filter(|set| *set != 0) else {
            return (stack, 0);
        };
        let labels = crate::program::custom_labels::read_set(&self.remote, set);
        if labels.is_empty() {
            return (stack, 0);
        }
        let mut frames: Vec<Frame> = labels
            .into_iter()
            .map(|label| Frame {
                feature: self.builder.feature(crate::profile::clean(&label.key)),
                payload: Some(self.builder.payload(Payload {
                    kind: PayloadKind::Label,
                    text: crate::profile::clean(&label.value),
                    detail: None,
                })),
                builtin: false,
            })
            .collect();
        let added = frames.len();
        let marks = self.builder.stack_by_id(stack);
        frames.extend_from_slice(&marks.frames);
        let labelled = Stack {
            frames,
            truncated_depth: marks.truncated_depth,
        };
        (self.builder.stack(labelled), added)
    }
}
