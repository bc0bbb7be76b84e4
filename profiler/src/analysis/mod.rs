//! Analyses of a saved profile: numbers only, which the renderers format. Today the feature
//! analysis (costs per feature and instance, with call paths); further analyses (a call tree,
//! backtracking, boundaries) go beside it, one file each.

mod features;

pub use features::{
    analyse, group_weights, CallPath, FeatureCost, FeatureReport, ImageTime, InstanceCost,
    TimeView, PATHS_PER_INSTANCE, PATH_FRAMES, PATH_INSTANCES,
};
