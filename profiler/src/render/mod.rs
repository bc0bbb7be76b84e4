//! Renderers: turn a [`FeatureReport`](crate::analysis::FeatureReport) and the profile's metadata
//! into text for people (`text`) or JSON for programs (`json`). They compute nothing themselves.

pub mod json;
pub mod text;
