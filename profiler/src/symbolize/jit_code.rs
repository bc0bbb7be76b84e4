//! Names of JIT-compiled code: code with no file behind it, named by the JIT that wrote it in a
//! perf map (`perf_map.rs`) or a jitdump (`jitdump.rs`). Read once recording has ended, for each
//! process recorded; used for addresses no module holds. Not here: reading either format.
//!
//! Code is named as its last record says: a JIT that collects code and reuses its space writes
//! the new code at the old address, and a sample of the old code is then named after the new
//! one (neither format's timestamps are kept with the samples: `perf report` has them, fsprof
//! does not).

use super::{jitdump, perf_map};
use crate::program::modules::JitDump;

/// Most functions kept for one process (a large JIT names a few hundred thousand).
pub const MAX_FUNCTIONS: usize = 1 << 20;
/// Longest name kept.
pub const MAX_NAME: usize = 4096;

/// One piece of JIT-compiled code.
pub struct JitFunction {
    pub start: u64,
    pub end: u64,
    pub name: String,
}

/// The JIT-compiled functions of one process, sorted by start.
#[derive(Default)]
pub struct JitCode {
    functions: Vec<JitFunction>,
}

impl JitCode {
    /// The functions process `pid` named in its perf map and in the jitdump files it mapped
    /// (`jitdumps`, opened while it ran), a jitdump's over the perf map's where both name code
    /// at one address.
    pub fn of_process(pid: u32, jitdumps: &[JitDump]) -> JitCode {
        let mut functions = perf_map::read(pid);
        for JitDump { file, .. } in jitdumps {
            if functions.len() >= MAX_FUNCTIONS {
                break;
            }
            functions.extend(jitdump::read(file, MAX_FUNCTIONS - functions.len()));
        }
        JitCode::from_functions(functions)
    }

    /// The table of `functions`, listed in the order written: of two at one start, the later.
    pub fn from_functions(mut functions: Vec<JitFunction>) -> JitCode {
        functions.truncate(MAX_FUNCTIONS);
        // Stable, so that of two at one start the later comes later; reversed, it comes first,
        // and is the one kept.
        functions.sort_by_key(|function| function.start);
        functions.reverse();
        functions.dedup_by_key(|function| function.start);
        functions.reverse();
        JitCode { functions }
    }

    /// The name of the function holding `address`, if one does.
    pub fn lookup(&self, address: u64) -> Option<&str> {
        let after = self.functions.partition_point(|f| f.start <= address);
        let function = &self.functions[..after].last()?;
        (address < function.end).then_some(function.name.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

/// `name`, cut to [`MAX_NAME`] bytes at a character's boundary.
pub fn cut_name(name: &str) -> &str {
    let mut cut = name.len().min(MAX_NAME);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    &name[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(start: u64, end: u64, name: &str) -> JitFunction {
        JitFunction {
            start,
            end,
            name: name.to_owned(),
        }
    }

    #[test]
    fn the_latest_at_one_start_wins_and_ranges_end() {
        let code = JitCode::from_functions(vec![
            function(0x1000, 0x1020, "first"),
            function(0x2000, 0x2008, "Builtin:Add"),
            function(0x1000, 0x1010, "again at 1000"),
        ]);
        assert_eq!(code.lookup(0x1008), Some("again at 1000"));
        assert_eq!(code.lookup(0x1018), None);
        assert_eq!(code.lookup(0x2004), Some("Builtin:Add"));
        assert_eq!(code.lookup(0x10), None);
        assert_eq!(code.functions.len(), 2);
    }

    #[test]
    fn a_name_is_cut_at_a_character() {
        let long = "é".repeat(5000);
        let cut = cut_name(&long);
        assert!(cut.len() <= MAX_NAME && cut.len() > MAX_NAME - 2);
    }
}
