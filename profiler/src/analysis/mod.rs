//! Analyses of a saved profile: numbers only, which the renderers format. The feature analysis
//! (costs per feature and instance, with call paths) and the function view (self and total time
//! per function, with callers and callees); further analyses (a call tree, backtracking,
//! boundaries) go beside them, one file each.

mod features;
mod functions;
mod threads;

pub use functions::{functions, FunctionCost, FunctionReport};
pub use threads::{keep_thread, thread_times, ThreadTime};

pub use features::{
    analyse, group_weights, CallPath, FeatureCost, FeatureReport, ImageTime, InstanceCost,
    TimeView, PATHS_PER_INSTANCE, PATH_FRAMES, PATH_INSTANCES,
};
