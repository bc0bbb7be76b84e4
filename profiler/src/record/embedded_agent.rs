//! The agent library carried inside the `fsprof` executable (built by `build.rs`), and its copy
//! in the user's cache directory, which is what `fsprof run` preloads: one `cargo install` gives
//! a complete profiler, with nothing to place beside it.
//!
//! The copy is `$XDG_CACHE_HOME/fsprof/agent-HASH/libfsprof_agent.so` (`~/.cache` without
//! `XDG_CACHE_HOME`), HASH naming the library's bytes, so that two fsprof versions never share one.
//! It is written once (to a temporary file in the same directory, then renamed into place, so that
//! a concurrent `fsprof run` never preloads half a library), and every later run compares it,
//! byte for byte, with the one carried before using it: a copy changed or truncated since is
//! written again. The directories are created private (mode 0700), and a directory or file that
//! another user owns or could write is refused: a library preloaded into every profiled program
//! must be one only its user could have put there.
//!
//! Not here: whether a program gets the agent at all (`agent.rs`), and `FSPROF_AGENT`.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The agent built with this fsprof; empty when it was built without (see `build.rs`).
static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libfsprof_agent.so"));

/// The path of the cached copy of the carried agent, written there first if need be; or why
/// there is none, as a sentence.
pub fn path() -> Result<PathBuf, String> {
    if LIBRARY.is_empty() {
        return Err("this fsprof was built without it (its build found no agent sources)".into());
    }
    let dir = cache_dir()?.join(format!("agent-{:016x}", fnv1a(LIBRARY)));
    let file = dir.join(super::agent::LIBRARY);
    let describe = |e: String| format!("cannot keep it in {}: {e}", dir.display());
    make_private_dir(&dir).map_err(describe)?;
    if fs::read(&file).is_ok_and(|bytes| bytes == LIBRARY) {
        check_owned(&file).map_err(describe)?;
        return Ok(file);
    }
    write_atomically(&dir, &file).map_err(describe)?;
    Ok(file)
}

/// `$XDG_CACHE_HOME/fsprof`, else `$HOME/.cache/fsprof` (relative values are ignored, as the
/// XDG base directory specification says).
fn cache_dir() -> Result<PathBuf, String> {
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
fn make_private_dir(dir: &Path) -> Result<(), String> {
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
fn check_owned(path: &Path) -> Result<(), String> {
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

/// Writes [`LIBRARY`] to `file` in `dir` through a temporary file renamed into place.
fn write_atomically(dir: &Path, file: &Path) -> Result<(), String> {
    let temporary = dir.join(format!(".{}.{}", super::agent::LIBRARY, std::process::id()));
    let _ = fs::remove_file(&temporary); // left by an fsprof that had this pid and was killed
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(&temporary)
        .and_then(|mut out| {
            out.write_all(LIBRARY)?;
            out.sync_all()
        })
        .and_then(|()| fs::rename(&temporary, file));
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e.to_string());
    }
    Ok(())
}

/// The 64-bit FNV-1a hash of `bytes`: names a library's copy (not a check: the copy is compared
/// byte for byte).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_carried_and_cached_privately() {
        assert!(!LIBRARY.is_empty(), "built without the agent");
        assert!(LIBRARY.starts_with(b"\x7fELF"));
        let cache = std::env::temp_dir().join(format!("fsprof-cache-{}", std::process::id()));
        let dir = cache.join("fsprof/agent-x");
        make_private_dir(&dir).unwrap();
        let file = dir.join("lib.so");
        write_atomically(&dir, &file).unwrap();
        assert_eq!(fs::read(&file).unwrap(), LIBRARY);
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        check_owned(&file).unwrap();
        // Writable by others: refused.
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let refused = check_owned(&dir).unwrap_err();
        assert!(refused.contains("other users may write"), "{refused}");
        let _ = fs::remove_dir_all(&cache);
    }

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
