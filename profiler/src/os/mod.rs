//! What fsprof asks of the system for itself, below every stage: the privilege a capable copy
//! keeps and drops (`privilege`), its scheduling priority (`priority`), the clock it shares with
//! the kernel's records (`time`), its private cache directory (`cache`), its file descriptors
//! (`descriptors`), the machine's CPUs and load, asked once (`machine`), threads kept for the next followed process (`threads`), writing its output
//! files whole (`output`) and reading tracefs where it is not mounted (`tracefs`). Nothing here reads the target or knows of profiles.

pub mod cache;
pub mod descriptors;
pub mod machine;
pub mod output;
pub mod priority;
pub mod privilege;
pub mod threads;
pub mod time;
pub mod tracefs;
