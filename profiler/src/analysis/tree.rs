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
//! The tree is a trie of node ids, each node one instance under its parent, built as the
//! samples are read: its memory grows with the number of distinct nodes, at most [`MAX_NODES`]
//! per feature, never with depth x name length (a program nesting one feature 64 deep with
//! 300-byte names, a different path at every sample, took gigabytes when each node held its
//! whole path as strings: issue 40).
//!
//! Numbers only: the renderers format them. Not here: the time of each feature and instance.

use super::weights::{group_weights, TimeView};
use crate::profile::{Profile, Stack};
use std::collections::HashMap;

/// Most nodes a feature's tree keeps. Past them, a path's instances that would need a new node
/// are left out, and its time counts as self time of the deepest node it has (`Tree::cut_ns`
/// says how much): a recursion whose paths never repeat would otherwise keep about one node
/// per mark of every sample.
pub const MAX_NODES: usize = 50_000;

/// A feature's tree: its nodes in depth-first order, each node's children by decreasing total
/// time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub nodes: Vec<TreeNode>,
    /// Time of samples whose path was cut short at [`MAX_NODES`].
    pub cut_ns: u64,
}

/// One node of a feature's tree: an instance, under its parent's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    /// The instance's payload.
    pub instance: String,
    /// The parent's index among the tree's nodes (always before this one); `None` for a root.
    pub parent: Option<usize>,
    /// 1 for a root, 2 for its children, and so on.
    pub depth: usize,
    /// Time of the samples whose path starts with this node's.
    pub total_ns: u64,
    /// Time of the samples whose path is exactly this node's.
    pub self_ns: u64,
    /// Total time of the parent node; for a root, the total of all roots (the feature's time in
    /// its tree). A node's share of its parent is `total_ns / parent_ns`.
    pub parent_ns: u64,
}

/// The trees of the profile's features, by feature id (only features whose marks nest).
pub fn trees(profile: &Profile, view: TimeView) -> HashMap<u32, Tree> {
    let weights = group_weights(profile, view);
    let instance_of = profile.instance_ids();
    let mut tries: HashMap<u32, Trie> = HashMap::new();
    let mut nested: Vec<u32> = Vec::new();
    let mut path = Vec::new();
    for (group, &ns) in profile.samples.iter().zip(&weights) {
        if ns == 0 {
            continue;
        }
        let stack = &profile.stacks[group.stack as usize];
        for feature in counted_features(stack) {
            path.clear();
            path.extend(
                (stack.frames.iter())
                    .filter(|f| f.feature == feature && !f.builtin)
                    .filter_map(|f| f.payload)
                    .map(|id| instance_of[id as usize]),
            );
            if path.is_empty() {
                continue; // built-in marks only
            }
            if path.len() >= 2 && !nested.contains(&feature) {
                nested.push(feature);
            }
            tries.entry(feature).or_default().add(&path, ns);
        }
    }
    nested
        .into_iter()
        .map(|feature| {
            let trie = tries.remove(&feature).unwrap_or_default();
            (feature, trie.into_tree(profile))
        })
        .collect()
}

/// The features a sample counts for (the innermost frame of each in `stack` is a mark, not an
/// antimark).
fn counted_features(stack: &Stack) -> Vec<u32> {
    let mut decided: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for frame in stack.frames.iter().rev() {
        if decided.contains(&frame.feature) {
            continue;
        }
        decided.push(frame.feature);
        if frame.payload.is_some() {
            out.push(frame.feature);
        }
    }
    out
}

/// A feature's tree as the samples are added: nodes by id.
#[derive(Default)]
struct Trie {
    nodes: Vec<Node>,
    roots: Vec<u32>,
    /// A node's id by its parent's (`None` for a root) and its instance (payload id).
    index: HashMap<(Option<u32>, u32), u32>,
    cut_ns: u64,
}

struct Node {
    instance: u32,
    total_ns: u64,
    self_ns: u64,
    children: Vec<u32>,
}

impl Trie {
    /// Adds `ns` of the path `path` (payload ids, outermost first).
    fn add(&mut self, path: &[u32], ns: u64) {
        let mut at: Option<u32> = None;
        for &instance in path {
            let id = match self.index.get(&(at, instance)) {
                Some(&id) => id,
                None if self.nodes.len() < MAX_NODES => {
                    let id = self.nodes.len() as u32;
                    self.nodes.push(Node {
                        instance,
                        total_ns: 0,
                        self_ns: 0,
                        children: Vec::new(),
                    });
                    self.index.insert((at, instance), id);
                    match at {
                        Some(parent) => self.nodes[parent as usize].children.push(id),
                        None => self.roots.push(id),
                    }
                    id
                }
                None => {
                    self.cut_ns = self.cut_ns.saturating_add(ns);
                    break;
                }
            };
            let node = &mut self.nodes[id as usize];
            node.total_ns = node.total_ns.saturating_add(ns);
            at = Some(id);
        }
        if let Some(last) = at {
            let node = &mut self.nodes[last as usize];
            node.self_ns = node.self_ns.saturating_add(ns);
        }
    }

    /// The nodes depth first, heaviest child first (ties by name, for a stable order).
    fn into_tree(self, profile: &Profile) -> Tree {
        let Trie {
            mut nodes,
            mut roots,
            cut_ns,
            ..
        } = self;
        let name = |instance: u32| profile.payloads[instance as usize].text.as_str();
        let keys: Vec<(u64, u32)> = (nodes.iter()).map(|n| (n.total_ns, n.instance)).collect();
        let order = |list: &mut Vec<u32>| {
            list.sort_by(|a, b| {
                let (a, b) = (keys[*a as usize], keys[*b as usize]);
                (b.0.cmp(&a.0)).then_with(|| name(a.1).cmp(name(b.1)))
            });
        };
        order(&mut roots);
        for node in &mut nodes {
            order(&mut node.children);
        }
        let roots_ns = (roots.iter()).fold(0u64, |sum, root| {
            sum.saturating_add(nodes[*root as usize].total_ns)
        });
        let mut out: Vec<TreeNode> = Vec::with_capacity(nodes.len());
        // (node id, its parent's index in `out`, its parent's total)
        let mut pending: Vec<(u32, Option<usize>, u64)> = (roots.iter().rev())
            .map(|root| (*root, None, roots_ns))
            .collect();
        while let Some((id, parent, parent_ns)) = pending.pop() {
            let node = &nodes[id as usize];
            let index = out.len();
            let below = node.children.iter().rev();
            pending.extend(below.map(|child| (*child, Some(index), node.total_ns)));
            out.push(TreeNode {
                instance: name(node.instance).to_owned(),
                parent,
                depth: parent.map_or(1, |p| out[p].depth + 1),
                total_ns: node.total_ns,
                self_ns: node.self_ns,
                parent_ns,
            });
        }
        Tree { nodes: out, cut_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::PayloadKind;
    use crate::profile::{Frame, Meta, Payload, ProfileBuilder};

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

    /// A node of instance `name` under the node at `parent`, `depth` deep, with its total, self
    /// and parent's total time in ms.
    fn node(name: &str, parent: Option<usize>, depth: usize, ms: [u64; 3]) -> TreeNode {
        TreeNode {
            instance: name.to_owned(),
            parent,
            depth,
            total_ns: ms[0] * 1_000_000,
            self_ns: ms[1] * 1_000_000,
            parent_ns: ms[2] * 1_000_000,
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
            Tree {
                nodes: vec![
                    node("ground", None, 1, [110, 10, 110]),
                    node("b", Some(0), 2, [60, 20, 110]),
                    node("c", Some(1), 3, [40, 40, 60]),
                    node("a", Some(0), 2, [40, 40, 110]),
                ],
                cut_ns: 0,
            }
        );
    }

    #[test]
    fn a_recursion_whose_paths_never_repeat_keeps_at_most_the_node_budget_and_all_its_time() {
        // 3,000 samples of 40 marks deep, each a different path of 300-byte names (issue 40's
        // `deepnames.c`): 120,000 distinct nodes.
        let mut b = ProfileBuilder::new();
        b.feature("eval".into());
        for letter in b'a'..=b'z' {
            b.payload(Payload {
                kind: PayloadKind::Name,
                text: String::from_utf8(vec![letter; 300]).unwrap(),
                detail: None,
            });
        }
        let thread = b.thread(1, || "main".into());
        let mut seed = 1u64;
        for _ in 0..3_000 {
            let frames = (0..40)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    mark(0, (seed >> 33) as u32 % 26)
                })
                .collect();
            let stack = b.stack(Stack {
                frames,
                truncated_depth: None,
            });
            b.add_sample(thread, stack, None, 1_000_000, 1_000_000);
        }
        let p = b.finish(Meta::default(), |_| Vec::new());
        let tree = &trees(&p, TimeView::Active)[&0];
        assert_eq!(tree.nodes.len(), MAX_NODES);
        let all = 3_000 * 1_000_000;
        assert!(tree.cut_ns > 0 && tree.cut_ns < all, "{}", tree.cut_ns);
        let roots: u64 = (tree.nodes.iter())
            .filter(|n| n.parent.is_none())
            .map(|n| n.total_ns)
            .sum();
        let own: u64 = tree.nodes.iter().map(|n| n.self_ns).sum();
        assert_eq!((roots, own), (all, all));
        for (index, node) in tree.nodes.iter().enumerate() {
            assert!(node.parent.is_none_or(|p| p < index));
            let depth = node.parent.map_or(1, |p| tree.nodes[p].depth + 1);
            assert_eq!(node.depth, depth);
        }
    }

    #[test]
    fn a_flat_feature_has_no_tree() {
        let p = profile(vec![(vec![mark(0, 1)], 10), (vec![mark(0, 2)], 10)]);
        assert!(trees(&p, TimeView::Active).is_empty());
    }
}
