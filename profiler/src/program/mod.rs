//! Reading the target process: what `/proc` tells of it and its threads, its memory
//! (`process_vm_readv`, or its modules' static data once it is gone), the fsprof regions in it, the modules it has mapped, and the strings
//! (feature names, payloads) its marks point to. Everything read here is untrusted input: every
//! length and depth is bounded. Nothing here decides when to read (that is `record/`).

pub mod custom_labels;
pub mod modules;
pub mod names;
pub mod otel_context;
pub mod process;
pub mod region;
pub mod remote;
pub mod scanned;
pub mod static_data;
pub mod thread_local;
pub mod thread_status;
