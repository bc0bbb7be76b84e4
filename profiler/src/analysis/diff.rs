//! Profile differencing (`fsprof diff A B`, the Chez seed's use: one program run at size x and at
//! 2x, to see which instances grow faster than the input): the features and instances of two
//! feature reports side by side, matched by name and by payload text.
//!
//! Numbers only; `render/diff.rs` formats them. Not here: the feature analysis itself
//! (`features.rs`, run once per profile) or the differential flamegraph (from folded stacks).

use super::features::FeatureReport;
use std::collections::HashMap;

/// Two reports side by side.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// Total counted time of A and of B: what each side's percentages are of.
    pub total_ns: [u64; 2],
    /// Features of either, by the larger of their two times, largest first.
    pub features: Vec<FeatureDiff>,
}

/// One feature in A and in B.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureDiff {
    /// The feature's name.
    pub name: String,
    /// Its time in A and in B (0 where absent).
    pub ns: [u64; 2],
    /// Its instances in either, ordered like the features.
    pub instances: Vec<InstanceDiff>,
}

/// One instance in A and in B.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceDiff {
    /// The instance's payload text.
    pub payload: String,
    /// Its time in A and in B (0 where absent).
    pub ns: [u64; 2],
}

impl Diff {
    /// `ns` of side `side` (0 A, 1 B) as a percentage of that side's total, 0–100.
    pub fn percent(&self, side: usize, ns: u64) -> f64 {
        ns as f64 * 100.0 / self.total_ns[side].max(1) as f64
    }
}

/// B's time over A's (`None` when A has none).
pub fn ratio(ns: [u64; 2]) -> Option<f64> {
    (ns[0] > 0).then(|| ns[1] as f64 / ns[0] as f64)
}

/// Reports `a` and `b` side by side.
pub fn diff(a: &FeatureReport, b: &FeatureReport) -> Diff {
    let mut features: Vec<FeatureDiff> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut instance_at: HashMap<(usize, String), usize> = HashMap::new();
    for (side, report) in [a, b].into_iter().enumerate() {
        for feature in &report.features {
            let at = *by_name.entry(feature.name.clone()).or_insert_with(|| {
                features.push(FeatureDiff {
                    name: feature.name.clone(),
                    ns: [0, 0],
                    instances: Vec::new(),
                });
                features.len() - 1
            });
            let found = &mut features[at];
            found.ns[side] = found.ns[side].saturating_add(feature.ns);
            for instance in &feature.instances {
                let key = (at, instance.payload.clone());
                let slot = *instance_at.entry(key).or_insert_with(|| {
                    found.instances.push(InstanceDiff {
                        payload: instance.payload.clone(),
                        ns: [0, 0],
                    });
                    found.instances.len() - 1
                });
                let ns = &mut found.instances[slot].ns[side];
                *ns = ns.saturating_add(instance.ns);
            }
        }
    }
    let larger = |ns: [u64; 2]| ns[0].max(ns[1]);
    for feature in &mut features {
        (feature.instances).sort_by(|x, y| {
            (larger(y.ns).cmp(&larger(x.ns))).then_with(|| x.payload.cmp(&y.payload))
        });
    }
    features.sort_by(|x, y| (larger(y.ns).cmp(&larger(x.ns))).then_with(|| x.name.cmp(&y.name)));
    Diff {
        total_ns: [a.total_ns, b.total_ns],
        features,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{FeatureCost, InstanceCost, TimeView};

    fn report(total_ms: u64, features: &[(&str, &[(&str, u64)])]) -> FeatureReport {
        let ms = 1_000_000;
        FeatureReport {
            view: TimeView::Active,
            samples: 0,
            total_ns: total_ms * ms,
            blocked_ns: 0,
            features: (features.iter())
                .map(|(name, instances)| FeatureCost {
                    name: name.to_string(),
                    ns: instances.iter().map(|(_, t)| t * ms).sum(),
                    samples: 0,
                    blocked_ns: 0,
                    builtin: false,
                    instances: (instances.iter())
                        .map(|(payload, t)| InstanceCost {
                            payload: payload.to_string(),
                            ns: t * ms,
                            samples: 0,
                            blocked_ns: 0,
                            paths: Vec::new(),
                            paths_ns: t * ms,
                        })
                        .collect(),
                    structure: Default::default(),
                })
                .collect(),
            truncated_samples: 0,
            max_truncated_depth: 0,
            native: false,
            images: Vec::new(),
            native_ns: 0,
            agent_ns: 0,
            no_feature_ns: 0,
        }
    }

    #[test]
    fn features_and_instances_are_matched_by_name_and_ordered_by_their_larger_time() {
        let a = report(
            100,
            &[
                ("work", &[("linear", 20), ("quadratic", 20)]),
                ("gone", &[("x", 5)]),
            ],
        );
        let b = report(
            200,
            &[("work", &[("quadratic", 80), ("linear", 40), ("new", 1)])],
        );
        let d = diff(&a, &b);
        let ms = 1_000_000;
        assert_eq!(d.total_ns, [100 * ms, 200 * ms]);
        let names: Vec<_> = d.features.iter().map(|f| (f.name.as_str(), f.ns)).collect();
        assert_eq!(
            names,
            [("work", [40 * ms, 121 * ms]), ("gone", [5 * ms, 0])]
        );
        let work: Vec<_> = (d.features[0].instances.iter())
            .map(|i| (i.payload.as_str(), ratio(i.ns)))
            .collect();
        assert_eq!(
            work,
            [
                ("quadratic", Some(4.0)),
                ("linear", Some(2.0)),
                ("new", None)
            ]
        );
        assert_eq!(d.percent(1, 80 * ms), 40.0);
    }
}
