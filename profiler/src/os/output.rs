//! Writing fsprof's output files whole or not at all, and never through a link: each file is
//! written to a new temporary file beside it (created exclusively, so a link planted under that
//! name is refused, not followed), then renamed over the name asked for (a rename replaces a link,
//! it does not write through it). A write that fails (a full disk) leaves no partial file and
//! whatever was there before. Reading input files is not here (`profile.rs` bounds those).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` (see the module's header).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temporary = temporary_beside(path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Writes `bytes` to a file the user named (`--output`, `--flamegraph`): as [`write()`] when it is
/// a regular file or new; straight into it when it is a device, a pipe or a link the user made
/// (`-o /dev/stdout`).
pub fn write_named(path: &Path, bytes: &[u8]) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() => std::fs::write(path, bytes),
        _ => write(path, bytes),
    }
}

/// Checks that files can be made in `dir`, with a file of its own that nothing else can have
/// put there (created exclusively, then removed).
pub fn probe(dir: &Path) -> io::Result<()> {
    let probe = temporary_beside(&dir.join(".fsprof-write-test"));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&probe)?;
    std::fs::remove_file(probe)
}

/// `.NAME.PID.N.tmp` beside `path`: unique to this process and call.
fn temporary_beside(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy());
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fsprof-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_planted_link_is_replaced_not_written_through() {
        let dir = dir().join("link");
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let name = dir.join("profile.json");
        let _ = std::fs::remove_file(&name);
        std::os::unix::fs::symlink(&victim, &name).unwrap();
        write(&name, b"{}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&name).unwrap(), b"{}");
        assert!(!std::fs::symlink_metadata(&name)
            .unwrap()
            .file_type()
            .is_symlink());
        probe(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2); // no temporary left
    }

    #[test]
    fn a_failed_write_leaves_what_was_there() {
        let dir = dir().join("missing-parent");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(write(&dir.join("report.txt"), b"x").is_err());
        assert!(!dir.exists());
    }
}
