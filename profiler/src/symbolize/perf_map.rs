//! Perf map files: the `/tmp/perf-PID.map` that node (`--perf-basic-prof`), the JVM's agents,
//! LuaJIT, .NET, wasmtime and others write, one line per function: `START SIZE NAME`, both
//! numbers hex. Not here: the table of names (`jit_code.rs`), jitdump files (`jitdump.rs`), or a
//! map written in another PID namespace's `/tmp`.
//!
//! The file is the target's (anyone may write `/tmp`): it is taken only as a regular file, not
//! through a symbolic link, owned by root or by this fsprof's user (as `perf report` takes it),
//! at most [`MAX_BYTES`] of it, names cut at [`MAX_NAME`](super::jit_code::MAX_NAME) bytes.

use super::jit_code::{cut_name, JitFunction, MAX_FUNCTIONS};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Most bytes of a perf map read.
const MAX_BYTES: u64 = 256 << 20;

/// The functions of process `pid`'s perf map, in the order written; none when it has none or
/// when the file may not be trusted.
pub fn read(pid: u32) -> Vec<JitFunction> {
    read_path(Path::new(&format!("/tmp/perf-{pid}.map")))
}

fn read_path(path: &Path) -> Vec<JitFunction> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path);
    let Ok(file) = opened else {
        return Vec::new();
    };
    let me = nix::unistd::geteuid().as_raw();
    let trusted = file
        .metadata()
        .is_ok_and(|m| m.is_file() && (m.uid() == 0 || m.uid() == me));
    if !trusted {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if file.take(MAX_BYTES).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    parse(&String::from_utf8_lossy(&bytes))
}

/// The functions of a perf map's text, lines that do not parse skipped.
fn parse(text: &str) -> Vec<JitFunction> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim_start().splitn(3, ' ');
            let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16);
            let start = hex(fields.next()?).ok()?;
            let size = hex(fields.next()?).ok()?;
            let name = fields.next()?.trim();
            let end = start.checked_add(size).filter(|end| *end > start)?;
            (!name.is_empty()).then(|| JitFunction {
                start,
                end,
                name: cut_name(name).to_owned(),
            })
        })
        .take(MAX_FUNCTIONS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::jit_code::{JitCode, MAX_NAME};

    #[test]
    fn lines_name_their_ranges() {
        let code = JitCode::from_functions(parse(
            "3ef414c0 398 LazyCompile:~hot /a.js:3\n\
             bad line\n\
             10 0 empty\n\
             ffffffffffffffff 10 overflows\n\
             1000 20 first\n\
             1000 10 again at 1000\n\
             0x2000 8 Builtin:Add\n",
        ));
        assert_eq!(code.lookup(0x3ef414c0), Some("LazyCompile:~hot /a.js:3"));
        assert_eq!(
            code.lookup(0x3ef414c0 + 0x397),
            Some("LazyCompile:~hot /a.js:3")
        );
        assert_eq!(code.lookup(0x3ef414c0 + 0x398), None);
        assert_eq!(code.lookup(0x1008), Some("again at 1000"));
        assert_eq!(code.lookup(0x2004), Some("Builtin:Add"));
        assert_eq!(code.lookup(0x10), None);
    }

    #[test]
    fn a_long_name_is_cut_and_a_link_is_not_followed() {
        let long = format!("1000 10 {}\n", "é".repeat(5000));
        assert!(parse(&long)[0].name.len() <= MAX_NAME);
        let dir = std::env::temp_dir().join(format!("fsprof-perf-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (real, link) = (dir.join("real.map"), dir.join("link.map"));
        std::fs::write(&real, "1000 10 named\n").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(read_path(&real)[0].name, "named");
        assert!(read_path(&link).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
