//! Recording: the `run` and `attach` sessions, the sampling loop that turns each tick into
//! samples, the scanner that finds the target's regions, the agent `run` preloads. Reads the target through `target/` and `native/`; writes a
//! [`crate::profile::Profile`]; formats nothing (the session hands the profile to `render/`).

pub mod agent;
pub mod announce;
pub mod clock;
mod embedded_agent;
pub mod interner;
pub mod marks;
pub mod progress;
pub mod sampler;
pub mod scanner;
pub mod schedule;
pub mod session;
pub mod status;
pub mod top;
pub mod tree;
