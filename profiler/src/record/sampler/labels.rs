//! Custom labels (`program/custom_labels.rs`) as features: each label a mark of the feature its
//! key names, its value the instance, outermost in the mark stack of a sample taken on a CPU,
//! as perf's program copied them at the sample (`native/sampling.rs`). The labels are
//! the target's: at most [`MAX_KEYS`] keys and [`MAX_VALUES`] values over a recording (a label
//! per request id would grow the profile without end), later ones counted under
//! [`OTHER_VALUES`]. The labels fsprof's own shim publishes for the fleet (`fsprof.feature`,
//! `fsprof.instance`) are left out: they repeat the marks. Not here: the time off the CPU
//! after a sample (placed by the thread's marks alone), finding the labels
//! (`native/capture.rs`), copying them (`native/sampling.rs`).

use super::Sampler;
use crate::profile::{Frame, Payload, PayloadKind, RawNativeStack, Stack};
use crate::program::custom_labels::Label;
use std::collections::HashSet;

/// Most distinct label keys (features) over a recording.
const MAX_KEYS: usize = 64;
/// Most distinct label values (instances) over a recording.
const MAX_VALUES: usize = 4096;
/// The instance of a value past [`MAX_VALUES`].
const OTHER_VALUES: &str = "[other values]";

/// Whether a label is one of fsprof's own marks, published for the fleet's profilers (the
/// shim's `fleet` feature): its process's marks are read from its region already.
fn is_fsprofs_own(key: &str) -> bool {
    key == fsprof_shim::fleet::FEATURE_KEY || key == fsprof_shim::fleet::INSTANCE_KEY
}

/// The labels seen so far.
#[derive(Default)]
pub(super) struct Seen {
    keys: HashSet<String>,
    values: HashSet<(String, String)>,
}

impl Sampler {
    /// Mark stack `stack` and native stack `placed` (placed by those marks) with `labels`
    /// outermost, the native stack interned.
    pub(super) fn labelled(
        &mut self,
        stack: u32,
        placed: Option<RawNativeStack>,
        labels: &[Label],
    ) -> (u32, Option<u32>) {
        let (stack, added) = self.with_labels(stack, labels);
        let native = placed.map(|mut placed| {
            placed.marks_at.splice(0..0, std::iter::repeat_n(0, added));
            self.builder.native_stack(placed)
        });
        (stack, native)
    }

    /// As [`Sampler::labelled`], with thread `tid`'s latest labels (its latest perf sample's:
    /// they hold while it is off its CPU, and are the best known for its time since).
    pub(super) fn with_latest_labels(
        &mut self,
        tid: u32,
        stack: u32,
        placed: Option<RawNativeStack>,
    ) -> (u32, Option<u32>) {
        let labels = (self.threads.states.get(&tid))
            .map(|state| state.stacks.latest_labels().to_vec())
            .unwrap_or_default();
        self.labelled(stack, placed, &labels)
    }

    /// Mark stack `stack` with `labels` (those a sample copied) outermost, and how many labels
    /// it gained.
    pub(super) fn with_labels(&mut self, stack: u32, labels: &[Label]) -> (u32, usize) {
        if labels.is_empty() {
            return (stack, 0);
        }
        let mut frames: Vec<Frame> = Vec::with_capacity(labels.len());
        for label in labels {
            if is_fsprofs_own(&label.key) {
                continue;
            }
            let key = crate::profile::clean(&label.key);
            let mut value = crate::profile::clean(&label.value);
            let seen = &mut self.labels;
            if !seen.keys.contains(&key) {
                if seen.keys.len() >= MAX_KEYS {
                    continue;
                }
                seen.keys.insert(key.clone());
            }
            let pair = (key.clone(), value.clone());
            if !seen.values.contains(&pair) {
                if seen.values.len() >= MAX_VALUES {
                    value = OTHER_VALUES.to_owned();
                } else {
                    seen.values.insert(pair);
                }
            }
            frames.push(Frame {
                feature: self.builder.feature(key),
                payload: Some(self.builder.payload(Payload {
                    kind: PayloadKind::Label,
                    text: value,
                    detail: None,
                })),
                builtin: false,
            });
        }
        let added = frames.len();
        if added == 0 {
            return (stack, 0);
        }
        let marks = self.builder.stack_by_id(stack);
        frames.extend_from_slice(&marks.frames);
        let labelled = Stack {
            frames,
            truncated_depth: (marks.truncated_depth)
                .map(|depth| depth.saturating_add(added as u32)),
        };
        (self.builder.stack(labelled), added)
    }
}
