//! fsprof, the feature-specific profiler: the library behind the `fsprof` command.
//!
//! Data flows one way, and the stages follow it, each using only those before it (a test,
//! `tests/tests/house.rs`, reads the sources to keep it so):
//!
//! 1. [`os`]: what fsprof asks of the system for itself (privilege, priority, its clock, its
//!    cache, writing files whole);
//! 2. [`profile`]: the saved, versioned format, and the builder that makes one;
//! 3. [`program`]: reading the program being profiled (`/proc`, its memory, its regions,
//!    modules and strings), all of it untrusted input;
//! 4. [`native`]: native stacks, taken (perf and BPF, `/proc`, ptrace) and unwound;
//! 5. [`symbolize`]: naming addresses;
//! 6. [`record`]: the recording loop that turns ticks into samples of marks and stacks;
//! 7. [`rules`]: the language's and the libraries' features found in named native stacks;
//! 8. [`analysis`]: costs per feature and instance, per function, thread and process;
//! 9. [`render`]: text, JSON, folded stacks, flamegraphs, pprof, speedscope;
//! 10. [`commands`]: `run`, `attach` and `top` sessions, `report` and `diff`, their options;
//! 11. [`cli`]: the command line, parsed into those options.

/// A line on stderr, as `eprintln!` writes it, except that a stderr that cannot take it (a
/// closed pipe, a full disk it was sent to) is not a panic: fsprof's files, its exit code and the
/// program's release come first.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod analysis;
pub mod cli;
pub mod commands;
#[cfg(test)]
mod fuzz;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod native;
pub mod os;
pub mod profile;
pub mod program;
pub mod record;
pub mod render;
pub mod rules;
pub mod symbolize;
