//! The structure-rich views of a feature (the thesis's feature-specific analyses), gathered per
//! feature for the report: the tree of its nested instances (`tree.rs`), the branches a parser
//! abandoned (`backtracking.rs`) and the checks on each edge between components
//! (`boundaries.rs`). Each is empty for a feature whose marks do not carry that structure.

use super::backtracking::{backtracking, BranchCost};
use super::boundaries::{boundaries, Edge};
use super::tree::{trees, Tree};
use super::weights::TimeView;
use crate::profile::Profile;
use std::collections::HashMap;

/// What a feature's marks say beyond the time of each instance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Structure {
    /// When its marks nest: the time of each path of its instances.
    pub tree: Tree,
    /// When it marks alternatives: each branch's time, and what it wasted.
    pub backtracking: Vec<BranchCost>,
    /// When it marks boundary checks: each edge's time, and each value's on it.
    pub boundaries: Vec<Edge>,
}

/// The structure of every feature that has some, by feature id.
pub fn structures(profile: &Profile, view: TimeView) -> HashMap<u32, Structure> {
    let mut out: HashMap<u32, Structure> = HashMap::new();
    for (feature, tree) in trees(profile, view) {
        out.entry(feature).or_default().tree = tree;
    }
    for (feature, branches) in backtracking(profile, view) {
        out.entry(feature).or_default().backtracking = branches;
    }
    for (feature, edges) in boundaries(profile, view) {
        out.entry(feature).or_default().boundaries = edges;
    }
    out
}
