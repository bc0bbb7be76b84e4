//! The feature analysis (the paper's section 14.3): how much time each feature, and each instance of
//! it, costs.
//!
//! For each feature separately, a sample counts toward the feature when the innermost frame with
//! that feature in the sample's mark stack is a mark, not an antimark; its time goes to that mark's
//! payload (the feature instance). Features are independent: nested features both count a sample.
//!
//! Which time a sample stands for is the [`TimeView`]. This module computes numbers only; the
//! renderers turn them into text or JSON.

use crate::profile::Profile;
use std::collections::HashMap;

/// Which part of the threads' time counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeView {
    /// Running or runnable time, plus blocked time inside a mark (the default): a thread idle
    /// outside every mark does not dilute the profile.
    Active,
    /// All wall time of every thread (`--idle`).
    All,
}

impl TimeView {
    /// A sentence for reports.
    pub fn describe(self) -> &'static str {
        match self {
            TimeView::Active => {
                "time counted: threads running or waiting for a CPU, plus blocked time inside a mark \
                 (idle threads outside marks do not count; --idle counts all thread time)"
            }
            TimeView::All => "time counted: all wall time of every thread, idle or not (--idle)",
        }
    }
}

/// The cost of one feature.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureCost {
    /// Feature name.
    pub name: String,
    /// Time attributed to it.
    pub ns: u64,
    /// Samples attributed to it.
    pub samples: u64,
    /// Its instances, most expensive first.
    pub instances: Vec<InstanceCost>,
}

/// The cost of one feature instance.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceCost {
    /// The payload's display text.
    pub payload: String,
    /// Time attributed to it.
    pub ns: u64,
    /// Samples attributed to it.
    pub samples: u64,
}

/// The result of the analysis.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureReport {
    /// Time view used.
    pub view: TimeView,
    /// Number of samples.
    pub samples: u64,
    /// Total counted time: the denominator of every percentage.
    pub total_ns: u64,
    /// Features seen in any sample, most expensive first.
    pub features: Vec<FeatureCost>,
    /// Samples whose mark stack was deeper than the recorded capacity.
    pub truncated_samples: u64,
    /// Deepest mark stack seen, when some were truncated.
    pub max_truncated_depth: u32,
}

impl FeatureReport {
    /// `part` as a percentage of the total, 0–100.
    pub fn percent(&self, part_ns: u64) -> f64 {
        if self.total_ns == 0 {
            0.0
        } else {
            part_ns as f64 * 100.0 / self.total_ns as f64
        }
    }
}

/// Runs the analysis. Linear in the total size of the profile's stacks and samples.
pub fn analyse(profile: &Profile, view: TimeView) -> FeatureReport {
    let feature_count = profile.features.len();
    let mut seen = vec![false; feature_count];
    let mut feature_ns = vec![0u64; feature_count];
    let mut feature_samples = vec![0u64; feature_count];
    // For the innermost-frame-per-feature walk: the stack last seen to have this feature.
    let mut visited_in = vec![usize::MAX; feature_count];
    let mut instances: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    let mut attributed: Vec<(u32, u32)> = Vec::new();
    let mut report = FeatureReport {
        view,
        samples: 0,
        total_ns: 0,
        features: Vec::new(),
        truncated_samples: 0,
        max_truncated_depth: 0,
    };

    for (index, group) in profile.samples.iter().enumerate() {
        let stack = &profile.stacks[group.stack as usize];
        // For each feature, its innermost frame; it counts if it is a mark, not an antimark.
        attributed.clear();
        for frame in stack.frames.iter().rev() {
            let feature = frame.feature as usize;
            seen[feature] = true;
            if std::mem::replace(&mut visited_in[feature], index) == index {
                continue;
            }
            if let Some(payload) = frame.payload {
                attributed.push((frame.feature, payload));
            }
        }
        // Inside a mark, blocked time counts too (see `TimeView::Active`).
        let ns = match view {
            TimeView::Active if attributed.is_empty() => group.active_ns,
            _ => group.wall_ns,
        };
        report.samples = report.samples.saturating_add(group.count);
        report.total_ns = report.total_ns.saturating_add(ns);
        if let Some(depth) = stack.truncated_depth {
            report.truncated_samples = report.truncated_samples.saturating_add(group.count);
            report.max_truncated_depth = report.max_truncated_depth.max(depth);
        }
        for (feature, payload) in &attributed {
            let f = *feature as usize;
            feature_ns[f] = feature_ns[f].saturating_add(ns);
            feature_samples[f] = feature_samples[f].saturating_add(group.count);
            let entry = instances.entry((*feature, *payload)).or_default();
            entry.0 = entry.0.saturating_add(ns);
            entry.1 = entry.1.saturating_add(group.count);
        }
    }

    let mut by_feature: Vec<Vec<InstanceCost>> = vec![Vec::new(); feature_count];
    for ((feature, payload), (ns, samples)) in instances {
        by_feature[feature as usize].push(InstanceCost {
            payload: profile.payloads[payload as usize].text.clone(),
            ns,
            samples,
        });
    }
    // Features with the same name (two descriptors) were interned to one id by the recorder.
    for ((id, name), mut instances) in profile.features.iter().enumerate().zip(by_feature) {
        if !seen[id] {
            continue;
        }
        instances.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.payload.cmp(&b.payload)));
        report.features.push(FeatureCost {
            name: name.clone(),
            ns: feature_ns[id],
            samples: feature_samples[id],
            instances,
        });
    }
    report
        .features
        .sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.name.cmp(&b.name)));
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::PayloadKind;
    use crate::profile::{Frame, Meta, Payload, ProfileBuilder, Stack};

    fn mark(feature: u32, payload: u32) -> Frame {
        Frame {
            feature,
            payload: Some(payload),
        }
    }
    fn anti(feature: u32) -> Frame {
        Frame {
            feature,
            payload: None,
        }
    }

    /// Builds a profile from (frames, wall ms, active ms) samples on one thread.
    fn profile(samples: &[(Vec<Frame>, u64, u64)]) -> Profile {
        let mut b = ProfileBuilder::new();
        let output = b.feature("output".into());
        let parse = b.feature("parse".into());
        assert_eq!((output, parse), (0, 1));
        for text in ["a", "b", "c"] {
            b.payload(Payload {
                kind: PayloadKind::Name,
                text: text.into(),
            });
        }
        let thread = b.thread(1, || "main".into());
        for (frames, wall, active) in samples {
            let stack = b.stack(Stack {
                frames: frames.clone(),
                truncated_depth: None,
            });
            b.add_sample(thread, stack, None, wall * 1_000_000, active * 1_000_000);
        }
        b.finish(Meta::default(), |_| Vec::new())
    }

    #[test]
    fn innermost_mark_per_feature_wins_and_antimarks_cancel() {
        let p = profile(&[
            (vec![mark(0, 0)], 10, 10),                      // output a
            (vec![mark(0, 0), mark(0, 1)], 10, 10),          // output b (innermost)
            (vec![mark(0, 0), anti(0)], 10, 10),             // user code inside output
            (vec![mark(0, 0), mark(1, 2)], 10, 10),          // both output a and parse c
            (vec![mark(0, 0), anti(0), mark(0, 2)], 10, 10), // output again, instance c
            (vec![], 50, 50),                                // unmarked
        ]);
        let r = analyse(&p, TimeView::Active);
        assert_eq!(r.total_ns, 100_000_000);
        let output = &r.features[0];
        assert_eq!((output.name.as_str(), output.ns), ("output", 40_000_000));
        let by_payload: Vec<(&str, u64)> = output
            .instances
            .iter()
            .map(|i| (i.payload.as_str(), i.ns / 1_000_000))
            .collect();
        assert_eq!(by_payload, [("a", 20), ("b", 10), ("c", 10)]);
        assert_eq!(r.features[1].name, "parse");
        assert_eq!(r.features[1].ns, 10_000_000);
        assert!((r.percent(output.ns) - 40.0).abs() < 1e-9);
    }

    #[test]
    fn idle_time_counts_only_inside_marks_unless_asked() {
        // 100 ms idle outside marks, 30 ms blocked inside a mark, 20 ms running outside marks.
        let p = profile(&[
            (vec![], 100, 0),
            (vec![mark(0, 0)], 30, 0),
            (vec![], 20, 20),
        ]);
        let active = analyse(&p, TimeView::Active);
        assert_eq!(active.total_ns, 50_000_000);
        assert_eq!(active.features[0].ns, 30_000_000);
        let all = analyse(&p, TimeView::All);
        assert_eq!(all.total_ns, 150_000_000);
        assert_eq!(all.features[0].ns, 30_000_000);
    }

    #[test]
    fn features_seen_only_under_antimarks_are_reported_at_zero_and_unseen_ones_not_at_all() {
        let p = profile(&[(vec![anti(0)], 10, 10)]);
        let r = analyse(&p, TimeView::Active);
        assert_eq!(r.features.len(), 1);
        assert_eq!(
            (r.features[0].name.as_str(), r.features[0].ns),
            ("output", 0)
        );
        assert!(analyse(&profile(&[]), TimeView::Active).features.is_empty());
    }
}
