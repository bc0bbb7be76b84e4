//! What the profile being built says so far, for the live views (the status line, `fsprof top`):
//! samples, counted time, and each feature's and instance's time, by the report's attribution
//! rule (blocked time counts inside the program's own marks only). Computed from the sample
//! groups each time it is asked (about once a second); it changes nothing.

use crate::analysis::{counted_marks, inside_own_mark};
use crate::profile::ProfileBuilder;
use std::collections::HashMap;

/// The profile's totals so far.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Samples taken.
    pub samples: u64,
    /// Counted time, ns.
    pub total_ns: u64,
    /// Per feature id, its time, ns.
    pub features: HashMap<u32, u64>,
    /// Per (feature id, payload id), its time, ns.
    pub instances: HashMap<(u32, u32), u64>,
}

impl Progress {
    /// The totals of `builder`'s sample groups.
    pub fn of(builder: &ProfileBuilder) -> Progress {
        let mut progress = Progress::default();
        for (stack, group) in builder.groups() {
            progress.samples += group.count;
            let marks = counted_marks(stack);
            let ns = if inside_own_mark(stack) {
                group.wall_ns
            } else {
                group.active_ns
            };
            progress.total_ns += ns;
            for (feature, payload) in marks {
                *progress.features.entry(feature).or_default() += ns;
                *progress.instances.entry((feature, payload)).or_default() += ns;
            }
        }
        progress
    }

    /// The features, most time first: (feature id, ns).
    pub fn top_features(&self) -> Vec<(u32, u64)> {
        let mut top: Vec<(u32, u64)> = self.features.iter().map(|(f, ns)| (*f, *ns)).collect();
        top.sort_by_key(|(feature, ns)| (std::cmp::Reverse(*ns), *feature));
        top
    }

    /// The instances of `feature`, most time first: (payload id, ns).
    pub fn top_instances(&self, feature: u32) -> Vec<(u32, u64)> {
        let mut top: Vec<(u32, u64)> = (self.instances.iter())
            .filter(|((f, _), _)| *f == feature)
            .map(|((_, payload), ns)| (*payload, *ns))
            .collect();
        top.sort_by_key(|(payload, ns)| (std::cmp::Reverse(*ns), *payload));
        top
    }

    /// `ns` as a percentage of the total, 0–100.
    pub fn percent(&self, ns: u64) -> f64 {
        ns as f64 * 100.0 / self.total_ns.max(1) as f64
    }
}
