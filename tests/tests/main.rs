//! The end-to-end suite, one test binary: each module tests one capability with real targets
//! profiled by the real `fsprof` binary. One binary rather than one per file: the helpers in
//! `support` are compiled and linked once (19 binaries took 160 s of CPU to build), and the
//! locks that keep time-measuring tests apart (`support::serial`) hold across all of them.
//! Run one module's tests with `cargo test --release -p fsprof-tests --test suite MODULE::`.
//! Not here: `signals.rs`, a binary of its own, for it marks with the shim in its own process
//! (this one finds the agent's region in itself by the region's name, `agent.rs`).

mod support;

mod agent;
mod analyses;
mod builtins;
mod busy;
mod deep_stacks;
mod e2e;
mod ecosystem;
mod fleet;
mod functions;
mod house;
mod install;
mod native;
mod privilege;
mod real_programs;
mod release;
mod report;
mod rules;
mod safety;
mod trees;
mod what_if;
