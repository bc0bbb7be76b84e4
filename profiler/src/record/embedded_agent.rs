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

use crate::os::cache::{check_owned, fnv1a, make_private_dir, write_atomically, FNV_START};
use std::fs;
use std::path::PathBuf;

/// The agent built with this fsprof; empty when it was built without (see `build.rs`).
static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libfsprof_agent.so"));

/// The path of the cached copy of the carried agent (its file named `name`), written there
/// first if need be; or why there is none, as a sentence.
pub fn path(name: &str) -> Result<PathBuf, String> {
    if LIBRARY.is_empty() {
        return Err("this fsprof was built without it (its build found no agent sources)".into());
    }
    let dir = crate::os::cache::dir()?.join(format!("agent-{:016x}", fnv1a(FNV_START, LIBRARY)));
    let file = dir.join(name);
    let describe = |e: String| format!("cannot keep it in {}: {e}", dir.display());
    make_private_dir(&dir).map_err(describe)?;
    if fs::read(&file).is_ok_and(|bytes| bytes == LIBRARY) {
        check_owned(&file).map_err(describe)?;
        return Ok(file);
    }
    write_atomically(&file, LIBRARY, 0o755).map_err(describe)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_carried() {
        assert!(!LIBRARY.is_empty(), "built without the agent");
        assert!(LIBRARY.starts_with(b"\x7fELF"));
    }
}
