//! Recording: the loop that turns each tick into samples (`schedule.rs`, `sampler.rs`), the
//! scanner that finds the target's regions, the children followed, the agent `run` preloads.
//! Reads the target through `program/` and `native/`; builds a [`crate::profile::Profile`];
//! formats nothing and knows no command (a session in `commands/` drives it).

pub mod agent;
pub mod announce;
pub mod children;
pub mod clock;
mod embedded_agent;
pub mod interner;
pub mod marks;
pub mod sampler;
pub mod scanner;
pub mod schedule;
