//! Native stacks: taking them (perf for running threads, `/proc` for blocked ones, ptrace stops
//! otherwise) and unwinding them from copies (framehop). Produces return addresses and frame
//! addresses; naming them is `symbolize/`'s job, after recording.

mod asm;
pub mod bpf;
mod btf;
pub mod capture;
pub mod complete;
mod cpu_wide;
mod fragments;
pub mod layout;
mod map_value;
mod memory_map;
mod off_thread;
mod per_file;
pub mod perf;
mod perf_events;
pub mod ring;
pub mod rules;
mod sampling;
mod scan;
mod seize;
pub mod stream;
pub mod tracer;
pub mod unwind;
pub mod walk;
pub mod walk_tables;
mod walk_tables_cache;
