//! Naming addresses after recording: functions, inlined frames, files and lines from the
//! modules' ELF and DWARF; which frames are the language runtime's; and which frame is the
//! program's call site of each built-in mark.

pub mod call_sites;
mod call_targets;
mod debug_files;
pub mod debuginfod;
mod demangle;
mod function_ranges;
pub mod jit_code;
mod jitdump;
mod mini_debug_info;
mod perf_map;
pub mod runtime_code;
mod symbol_table;
pub mod symbols;
