//! The user's cache directory for what fsprof keeps between runs (the agent's copy,
//! `record/embedded_agent.rs`; the functions' tables of large libraries,
//! `native/walk_tables_cache.rs`): where it is, private directories in it, and files written
//! whole or not at all.
//!
//! The directory is `$XDG_CACHE_HOME/fsprof` (`~/.cache/fsprof` without `XDG_CACHE_HOME`). Its
//! directories are created private (mode 0700), and a directory or file that another user owns
//! or could write is refused. Not here: what is kept, and whether it is still right (each user
//! checks its own files).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `$XDG_CACHE_HOME/fsprof`, else `$HOME/.cache/fsprof` (relative values are ignored, as the
/// XDG base directory specification says).
pub fn dir() -> Result<PathBuf, String> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    if let Some(cache) = absolute("XDG_CACHE_HOME") {
        return Ok(cache.join("fsprof"));
    }
    absolute("HOME")
        .map(|home| home.join(".cache/fsprof"))
        .ok_or_else(|| "neither XDG_CACHE_HOME nor HOME is set to a directory to keep it in".into())
}

/// Creates `dir` and its missing parents with mode 0700, then checks that `dir` and its parent
/// (the `fsprof` cache directory) are this user's and writable by nobody else.
pub fn make_private_dir(dir: &Path) -> Result<(), String> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| e.to_string())?;
    check_owned(dir.parent().unwrap_or(dir))?;
    check_owned(dir)
}

/// Fails unless `path` (not followed if a symbolic link) belongs to this process's effective
/// user and no other user may write it.
pub fn check_owned(path: &Path) -> Result<(), String> {
    let meta = fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symbolic link", path.display()));
    }
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to user {}, not to this user ({me}); set XDG_CACHE_HOME to a directory of yours",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "other users may write {} (mode {:o}); `chmod go-w` it",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Writes `bytes` to `file` (mode `mode`) through a temporary file in the same directory
/// renamed into place: a reader sees the old file or the whole new one. Not synced to disk
/// (after a crash the file may be short or empty; both users check what they read).
pub fn write_atomically(file: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    write_atomically_from(file, &mut &*bytes, mode)
}

/// Like [`write_atomically`], with what `from` reads to its end (a download, say): a read that
/// fails leaves no file.
pub fn write_atomically_from(file: &Path, from: &mut dyn Read, mode: u32) -> Result<(), String> {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    // The thread too: two threads of one fsprof may write at once.
    let unique = format!("{}.{:?}", std::process::id(), std::thread::current().id());
    let temporary = file.with_file_name(format!(".{name}.{unique}"));
    let _ = fs::remove_file(&temporary); // left by an fsprof that had this pid and was killed
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temporary)
        .and_then(|mut out| std::io::copy(from, &mut out))
        .and_then(|_| fs::rename(&temporary, file));
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e.to_string());
    }
    Ok(())
}

/// The 64-bit FNV-1a hash of `bytes`, continuing from `hash` (start from [`FNV_START`]): names
/// a cached file by what it was made from (not a check of it).
pub fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// FNV-1a's offset basis and prime.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;
pub const FNV_PRIME: u64 = 0x0100_0000_01b3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_directories_and_whole_files() {
        let cache = std::env::temp_dir().join(format!("fsprof-cache-{}", std::process::id()));
        let dir = cache.join("fsprof/agent-x");
        make_private_dir(&dir).unwrap();
        let file = dir.join("lib.so");
        write_atomically(&file, b"\x7fELF", 0o755).unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"\x7fELF");
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        check_owned(&file).unwrap();
        // Nothing left beside it.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        // Writable by others: refused.
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let refused = check_owned(&dir).unwrap_err();
        assert!(refused.contains("other users may write"), "{refused}");
        let _ = fs::remove_dir_all(&cache);
    }

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(FNV_START, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_START, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(fnv1a(FNV_START, b"a"), b"b"), fnv1a(FNV_START, b"ab"));
    }
}
