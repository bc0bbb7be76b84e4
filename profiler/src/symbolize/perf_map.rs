//! Names of JIT-compiled code from perf map files: the `/tmp/perf-PID.map` that node
//! (`--perf-basic-prof`), the JVM's agents, LuaJIT, .NET, wasmtime and others write, one line
//! per function: `START SIZE NAME`, both numbers hex, for code with no file behind it. Read once
//! recording has ended, for each process recorded; used for addresses no module holds.
//!
//! The file is the target's (anyone may write `/tmp`): it is taken only as a regular file, not
//! through a symbolic link, owned by root or by this fsprof's user (as `perf report` takes it),
//! at most [`MAX_BYTES`] of it, names cut at 4 KiB. Not here: jitdump files (`jit-PID.dump`),
//! or a map written in another PID namespace's `/tmp`.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Most bytes of a perf map read.
const MAX_BYTES: u64 = 256 << 20;
/// Most functions kept from one map (a large JIT's has a few hundred thousand).
const MAX_FUNCTIONS: usize = 1 << 20;
/// Longest name kept.
const MAX_NAME: usize = 4096;

/// The functions of one process's perf map, sorted by start.
#[derive(Default)]
pub struct PerfMap {
    functions: Vec<Function>,
}

struct Function {
    start: u64,
    end: u64,
    name: String,
}

impl PerfMap {
    /// The perf map of process `pid` (`/tmp/perf-PID.map`), empty when it has none or when the
    /// file may not be trusted.
    pub fn of_process(pid: u32) -> PerfMap {
        PerfMap::read(Path::new(&format!("/tmp/perf-{pid}.map")))
    }

    fn read(path: &Path) -> PerfMap {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(path);
        let Ok(file) = opened else {
            return PerfMap::default();
        };
        let me = nix::unistd::geteuid().as_raw();
        let trusted = file
            .metadata()
            .is_ok_and(|m| m.is_file() && (m.uid() == 0 || m.uid() == me));
        if !trusted {
            return PerfMap::default();
        }
        let mut bytes = Vec::new();
        if file.take(MAX_BYTES).read_to_end(&mut bytes).is_err() {
            return PerfMap::default();
        }
        PerfMap::parse(&String::from_utf8_lossy(&bytes))
    }

    /// The functions of a perf map's text. A function written again at the same start (code
    /// collected and the space reused) is the later one.
    fn parse(text: &str) -> PerfMap {
        let mut functions: Vec<Function> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.trim_start().splitn(3, ' ');
                let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16);
                let start = hex(fields.next()?).ok()?;
                let size = hex(fields.next()?).ok()?;
                let name = fields.next()?.trim();
                let end = start.checked_add(size).filter(|end| *end > start)?;
                let mut cut = name.len().min(MAX_NAME);
                while !name.is_char_boundary(cut) {
                    cut -= 1;
                }
                (!name.is_empty()).then(|| Function {
                    start,
                    end,
                    name: name[..cut].to_owned(),
                })
            })
            .take(MAX_FUNCTIONS)
            .collect();
        // Stable, so that of two at one start the later line comes later; reversed, it comes
        // first, and is the one kept.
        functions.sort_by_key(|function| function.start);
        functions.reverse();
        functions.dedup_by_key(|function| function.start);
        functions.reverse();
        PerfMap { functions }
    }

    /// The name of the function holding `address`, if the map has one.
    pub fn lookup(&self, address: u64) -> Option<&str> {
        let after = self.functions.partition_point(|f| f.start <= address);
        let function = &self.functions[..after].last()?;
        (address < function.end).then_some(function.name.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_their_ranges_and_the_latest_wins() {
        let map = PerfMap::parse(
            "3ef414c0 398 LazyCompile:~hot /a.js:3\n\
             bad line\n\
             10 0 empty\n\
             ffffffffffffffff 10 overflows\n\
             1000 20 first\n\
             1000 10 again at 1000\n\
             0x2000 8 Builtin:Add\n",
        );
        assert_eq!(map.lookup(0x3ef414c0), Some("LazyCompile:~hot /a.js:3"));
        assert_eq!(
            map.lookup(0x3ef414c0 + 0x397),
            Some("LazyCompile:~hot /a.js:3")
        );
        assert_eq!(map.lookup(0x3ef414c0 + 0x398), None);
        assert_eq!(map.lookup(0x1008), Some("again at 1000"));
        assert_eq!(map.lookup(0x1018), None);
        assert_eq!(map.lookup(0x2004), Some("Builtin:Add"));
        assert_eq!(map.lookup(0x10), None);
        assert_eq!(map.functions.len(), 3);
    }

    #[test]
    fn a_long_name_is_cut_and_a_link_is_not_followed() {
        let long = format!("1000 10 {}\n", "é".repeat(5000));
        let map = PerfMap::parse(&long);
        assert!(map.lookup(0x1000).unwrap().len() <= MAX_NAME);
        let dir = std::env::temp_dir().join(format!("fsprof-perf-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (real, link) = (dir.join("real.map"), dir.join("link.map"));
        std::fs::write(&real, "1000 10 named\n").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(PerfMap::read(&real).lookup(0x1000), Some("named"));
        assert!(PerfMap::read(&link).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
