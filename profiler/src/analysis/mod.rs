//! Analyses of a saved profile: numbers only, which the renderers format. The feature analysis
//! (costs per feature and instance, with call paths) and the function view (self and total time
//! per function, with callers and callees), and the tree of a feature whose marks nest (process
//! accounting), the branches a parser abandoned (backtracking) and the checks between components
//! (boundaries), gathered per feature by `structure.rs`; further analyses go beside them, one
//! file each.

mod attribution;
mod backtracking;
mod boundaries;
mod diff;
mod features;
mod functions;
mod processes;
mod structure;
mod threads;
mod tree;
mod weights;

pub use attribution::{counted_marks, inside_own_mark};
pub use backtracking::BranchCost;
pub use boundaries::Edge;
pub use diff::{diff, ratio, Diff, FeatureDiff, InstanceDiff};
pub use functions::{functions, FunctionCost, FunctionReport};
pub use processes::{keep_process, process_times, ProcessTime};
pub use structure::Structure;
pub use threads::{keep_thread, thread_times, ThreadTime};
pub use tree::{Tree, TreeNode, MAX_NODES};

pub use features::{
    analyse, CallPath, FeatureCost, FeatureReport, ImageTime, InstanceCost, PATHS_PER_INSTANCE,
    PATH_FRAMES, PATH_INSTANCES,
};
pub use weights::{group_weights, TimeView};
