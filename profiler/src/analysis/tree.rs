//! The tree analysis (process accounting, the thesis's Marketplace study): for a feature whose
//! marks nest on a thread (a virtual machine running processes, a task running sub-tasks, a
//! server running connections), the time of each path of its instances, total and self.
//!
//! A sample counts for a feature's tree when it counts for the feature (`features.rs`: the
//! innermost frame of that feature in its mark stack is a mark, not an antimark), with the time
//! the feature analysis gives it ([`group_weights`]). Its path is the payloads of the feature's
//! own marks in the stack, outermost first: antimarks (user code run inside the feature, which may
//! mark it again) and built-in marks (the agent's, around a libc call) are left out. A path's
//! self time is the time of the samples whose path it is; its total time adds every longer path
//! it begins. Only a feature with at least one counted path of two marks or more gets a tree:
//! the others are flat, and their instance table says it all.
//!
//! Numbers only: the renderers format them. Not here: the time of each feature and instance.

use super::features::{group_weights, TimeView};
use crate::profile::{Profile, Stack};
use std::collections::HashMap;

/// One node of a feature's tree: a path of its instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    /// The instances' payloads, outermost first.
    pub path: Vec<String>,
    /// Time of the samples whose path starts with this one.
    pub total_ns: u64,
    /// Time of the samples whose path is exactly this one.
    pub self_ns: u64,
    /// Total time of the parent node; for a root, the total of all roots (the feature's time in
    /// its tree). A node's share of its parent is `total_ns / parent_ns`.
    pub parent_ns: u64,
}

/// The trees of the profile's features, by feature id (only features whose marks nest): nodes
/// in depth-first order, each node's children by decreasing total time.
pub fn trees(profile: &Profile, view: TimeView) -> HashMap<u32, Vec<TreeNode>> {
    let weights = group_weights(profile, view);
    let instance_of = profile.instance_ids();
    // Per feature, per path of payload ids: self time.
    let mut self_ns: HashMap<u32, HashMap<Vec<u32>, u64>> = HashMap::new();
    let mut nested: Vec<u32> = Vec::new();
    for (group, &ns) in profile.samples.iter().zip(&weights) {
        if ns == 0 {
            continue;
        }
        let stack = &profile.stacks[group.stack as usize];
        for (feature, mut path) in paths(stack) {
            path.iter_mut()
                .for_each(|id| *id = instance_of[*id as usize]);
            if path.len() >= 2 && !nested.contains(&feature) {
                nested.push(feature);
            }
            let entry = self_ns.entry(feature).or_default().entry(path).or_default();
            *entry = entry.saturating_add(ns);
        }
    }
    nested
        .into_iter()
        .map(|feature| {
            let paths = self_ns.remove(&feature).unwrap_or_default();
            (feature, build(profile, paths))
        })
        .collect()
}

/// For each feature the sample counts for (its innermost frame of it is a mark): the payloads of
/// its program marks in `stack`, outermost first (empty paths, of built-in marks only, left out).
fn paths(stack: &Stack) -> Vec<(u32, Vec<u32>)> {
    let mut out: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut decided: Vec<u32> = Vec::new();
    for frame in stack.frames.iter().rev() {
        if decided.contains(&frame.feature) {
            continue;
        }
        decided.push(frame.feature);
        if frame.payload.is_none() {
            continue; // innermost is an antimark: not the feature's time
        }
        let path: Vec<u32> = stack
            .frames
            .iter()
            .filter(|f| f.feature == frame.feature && !f.builtin)
            .filter_map(|f| f.payload)
            .collect();
        if !path.is_empty() {
            out.push((frame.feature, path));
        }
    }
    out
}

/// The nodes of one feature's tree from the self time of each path.
fn build(profile: &Profile, paths: HashMap<Vec<u32>, u64>) -> Vec<TreeNode> {
    // Every prefix is a node; its total adds the self time of every path it begins.
    let mut nodes: HashMap<Vec<u32>, (u64, u64)> = HashMap::new();
    for (path, ns) in paths {
        for end in 1..=path.len() {
            let node = nodes.entry(path[..end].to_vec()).or_default();
            node.0 = node.0.saturating_add(ns);
        }
        let node = nodes.entry(path).or_default();
        node.1 = node.1.saturating_add(ns);
    }
    let mut children: HashMap<Vec<u32>, Vec<Vec<u32>>> = HashMap::new();
    for path in nodes.keys() {
        children
            .entry(path[..path.len() - 1].to_vec())
            .or_default()
            .push(path.clone());
    }
    let text = |path: &[u32]| -> Vec<String> {
        path.iter()
            .map(|&p| profile.payloads[p as usize].text.clone())
            .collect()
    };
    // Depth first, heaviest child first (ties by name, for a stable order).
    let order = |list: &mut Vec<Vec<u32>>| {
        list.sort_by(|a, b| {
            nodes[b]
                .0
                .cmp(&nodes[a].0)
                .then_with(|| text(a).cmp(&text(b)))
        });
    };
    let mut roots = children.remove(&Vec::new()).unwrap_or_default();
    order(&mut roots);
    let roots_ns: u64 = roots.iter().map(|root| nodes[root].0).sum();
    let mut out = Vec::with_capacity(nodes.len());
    let mut pending: Vec<(Vec<u32>, u64)> = roots
        .into_iter()
        .rev()
        .map(|root| (root, roots_ns))
        .collect();
    while let Some((path, parent_ns)) = pending.pop() {
        let (total_ns, self_ns) = nodes[&path];
        if let Some(mut below) = children.remove(&path) {
            order(&mut below);
            pending.extend(below.into_iter().rev().map(|child| (child, total_ns)));
        }
        out.push(TreeNode {
            path: text(&path),
            total_ns,
            self_ns,
            parent_ns,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Meta, Payload, ProfileBuilder};
    use crate::target::names::PayloadKind;

    fn mark(feature: u32, payload: u32) -> Frame {
        Frame {
            feature,
            payload: Some(payload),
            builtin: false,
        }
    }

    /// A profile of feature 0 ("vm") with payloads "ground", "a", "b", "c", feature 1 ("other"),
    /// and one sample group per (stack, ms).
    fn profile(stacks: Vec<(Vec<Frame>, u64)>) -> Profile {
        let mut b = ProfileBuilder::new();
        assert_eq!((b.feature("vm".into()), b.feature("other".into())), (0, 1));
        for text in ["ground", "a", "b", "c"] {
            b.payload(Payload {
                kind: PayloadKind::Name,
                text: text.into(),
                detail: None,
            });
        }
        let thread = b.thread(1, || "main".into());
        for (frames, ms) in stacks {
            let stack = b.stack(Stack {
                frames,
                truncated_depth: None,
            });
            b.add_sample(thread, stack, None, ms * 1_000_000, ms * 1_000_000);
        }
        b.finish(Meta::default(), |_| Vec::new())
    }

    fn node(path: &[&str], total: u64, own: u64, parent: u64) -> TreeNode {
        TreeNode {
            path: path.iter().map(|p| (*p).to_owned()).collect(),
            total_ns: total * 1_000_000,
            self_ns: own * 1_000_000,
            parent_ns: parent * 1_000_000,
        }
    }

    #[test]
    fn nested_marks_make_a_tree_with_total_and_self_time() {
        let antimark = Frame {
            feature: 0,
            payload: None,
            builtin: false,
        };
        let builtin = Frame {
            feature: 0,
            payload: Some(3),
            builtin: true,
        };
        let p = profile(vec![
            (vec![mark(0, 0)], 10),                         // ground itself
            (vec![mark(0, 0), mark(0, 1)], 30),             // ground > a
            (vec![mark(0, 0), mark(0, 1), mark(1, 0)], 5),  // other feature nested: still a
            (vec![mark(0, 0), mark(0, 2)], 20),             // ground > b
            (vec![mark(0, 0), mark(0, 2), mark(0, 3)], 40), // ground > b > c
            (vec![mark(0, 0), mark(0, 1), antimark], 100),  // user code: not vm's
            (vec![mark(0, 0), mark(0, 1), builtin], 5),     // a libc call inside a
            (vec![mark(1, 1)], 50),                         // flat feature: no tree
        ]);
        let trees = trees(&p, TimeView::Active);
        assert_eq!(trees.len(), 1, "{trees:?}");
        assert_eq!(
            trees[&0],
            vec![
                node(&["ground"], 110, 10, 110),
                node(&["ground", "b"], 60, 20, 110),
                node(&["ground", "b", "c"], 40, 40, 60),
                node(&["ground", "a"], 40, 40, 110),
            ]
        );
    }

    #[test]
    fn a_flat_feature_has_no_tree() {
        let p = profile(vec![(vec![mark(0, 1)], 10), (vec![mark(0, 2)], 10)]);
        assert!(trees(&p, TimeView::Active).is_empty());
    }
}
