//! The boundary analysis (the thesis's contract study): for a feature marked with
//! `mark_boundary` (checks at the boundary between two components), the graph of components with
//! the cost of the checks on each edge, and on each edge the cost of each checked value.
//!
//! A sample counts as it counts for the feature (`features.rs`: the innermost frame of the
//! feature is a mark, with [`group_weights`]'s time); when that innermost mark is a boundary
//! check, its time goes to the check's edge (`from` to `to`) and to its value on that edge, as
//! an instance gets the time of its innermost mark.
//!
//! Numbers only: the text and JSON renderers list them, `render/boundary_graph.rs` draws them.

use super::weights::{group_weights, TimeView};
use crate::profile::{Detail, Profile};
use std::collections::HashMap;

/// The checks on one edge between two components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The calling side.
    pub from: String,
    /// The called side.
    pub to: String,
    /// The time of all checks on this edge.
    pub ns: u64,
    /// Each checked value's time on this edge, most expensive first.
    pub values: Vec<(String, u64)>,
}

/// The edges of each feature that marks boundaries (by feature id), most expensive first.
pub fn boundaries(profile: &Profile, view: TimeView) -> HashMap<u32, Vec<Edge>> {
    let weights = group_weights(profile, view);
    // Per feature, per (from, to), per value: time.
    type Values<'a> = HashMap<&'a str, u64>;
    let mut found: HashMap<u32, HashMap<(&str, &str), Values>> = HashMap::new();
    for (group, &ns) in profile.samples.iter().zip(&weights) {
        if ns == 0 {
            continue;
        }
        let mut decided: Vec<u32> = Vec::new();
        for frame in profile.stacks[group.stack as usize].frames.iter().rev() {
            if decided.contains(&frame.feature) {
                continue;
            }
            decided.push(frame.feature);
            let detail = frame
                .payload
                .and_then(|id| profile.payloads.get(id as usize))
                .and_then(|payload| payload.detail.as_ref());
            if let Some(Detail::Boundary { value, from, to }) = detail {
                let time = found
                    .entry(frame.feature)
                    .or_default()
                    .entry((from.as_str(), to.as_str()))
                    .or_default()
                    .entry(value.as_str())
                    .or_default();
                *time = time.saturating_add(ns);
            }
        }
    }
    found
        .into_iter()
        .map(|(feature, edges)| {
            let mut edges: Vec<Edge> = edges
                .into_iter()
                .map(|((from, to), values)| {
                    let mut values: Vec<(String, u64)> = values
                        .into_iter()
                        .map(|(value, ns)| (value.to_owned(), ns))
                        .collect();
                    values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    Edge {
                        from: from.to_owned(),
                        to: to.to_owned(),
                        ns: values.iter().map(|(_, ns)| ns).sum(),
                        values,
                    }
                })
                .collect();
            edges.sort_by(|a, b| {
                b.ns.cmp(&a.ns)
                    .then_with(|| (&a.from, &a.to).cmp(&(&b.from, &b.to)))
            });
            (feature, edges)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::PayloadKind;
    use crate::profile::{Frame, Meta, Payload, ProfileBuilder, Stack};

    #[test]
    fn checks_cost_on_their_edge_and_value_the_innermost_one_wins() {
        let mut b = ProfileBuilder::new();
        assert_eq!(b.feature("contracts".into()), 0);
        let thread = b.thread(1, || "main".into());
        let mut check = |value: &str, from: &str, to: &str| Frame {
            feature: 0,
            payload: Some(b.payload(Payload {
                kind: PayloadKind::Boundary,
                text: format!("{value} ({from} -> {to})"),
                detail: Some(Detail::Boundary {
                    value: value.into(),
                    from: from.into(),
                    to: to.into(),
                }),
            })),
            builtin: false,
        };
        let positive = check("positive?", "client", "matrix");
        let square = check("square?", "client", "matrix");
        let index = check("index?", "matrix", "vector");
        let samples = [
            (vec![positive], 30),
            (vec![square], 10),
            (vec![positive, index], 20), // the inner check gets it
            (vec![index], 5),
        ];
        for (frames, ms) in samples {
            let stack = b.stack(Stack {
                frames,
                truncated_depth: None,
            });
            b.add_sample(thread, stack, None, ms * 1_000_000, ms * 1_000_000);
        }
        let profile = b.finish(Meta::default(), |_| Vec::new());
        let ms = |n: u64| n * 1_000_000;
        assert_eq!(
            boundaries(&profile, TimeView::Active)[&0],
            vec![
                Edge {
                    from: "client".into(),
                    to: "matrix".into(),
                    ns: ms(40),
                    values: vec![("positive?".into(), ms(30)), ("square?".into(), ms(10))],
                },
                Edge {
                    from: "matrix".into(),
                    to: "vector".into(),
                    ns: ms(25),
                    values: vec![("index?".into(), ms(25))],
                },
            ]
        );
    }
}
