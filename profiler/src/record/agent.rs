//! The agent `fsprof run --agent` preloads: finding `libfsprof_agent.so`, deciding whether the program
//! can preload it at all, composing `LD_PRELOAD`, and telling the agent's built-in features
//! apart from the program's own.
//!
//! The library is the one `FSPROF_AGENT` names (a path), else the one built with this fsprof and
//! carried inside it, from its copy in the user's cache (`embedded_agent.rs`). A statically
//! linked program (no `PT_INTERP`: nothing runs the dynamic loader) cannot preload anything, and
//! one run by another loader than glibc's (musl's) cannot load an agent built against glibc.
//! In these cases the program runs without the agent and the report says why. The agent's
//! implementation is in `agent/src/builtin.rs`; this module never loads it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The agent library's file name.
pub const LIBRARY: &str = "libfsprof_agent.so";
/// The environment variable that names the agent library.
pub const ENV: &str = "FSPROF_AGENT";

/// Whether and what `run` preloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Preload {
    /// Not asked for (no `--agent`): the built-in features come from the native stacks.
    Off,
    /// Preload this library.
    Library(PathBuf),
    /// No library to preload (the message says why).
    NotFound(String),
    /// The program is statically linked.
    Static,
    /// The program is run by another loader than glibc's (musl's), which cannot load the agent
    /// (built against glibc): its `PT_INTERP`.
    ForeignLoader(String),
}

impl Preload {
    /// The library to preload, if any.
    pub fn library(&self) -> Option<&Path> {
        match self {
            Preload::Library(path) => Some(path),
            _ => None,
        }
    }

    /// A sentence for stderr and the report when the agent was wanted but is not preloaded.
    pub fn note(&self) -> Option<String> {
        match self {
            Preload::Off | Preload::Library(_) => None,
            Preload::NotFound(looked) => Some(format!(
                "no built-in features (output, allocation, locks, ...): no {LIBRARY} to preload: {looked}; set {ENV}=PATH to use another copy"
            )),
            Preload::Static => Some(
                "the program is statically linked, so the agent cannot be preloaded: its built-in features (output, allocation, locks, ...) come from its native stacks alone (none with --no-native)"
                    .to_owned(),
            ),
            Preload::ForeignLoader(loader) => Some(format!(
                "the program is run by {loader}, not glibc's loader, so the agent (built against glibc) is not preloaded: its built-in features (output, allocation, locks, ...) come from its native stacks alone (none with --no-native)"
            )),
        }
    }
}

/// What `run` preloads into `program` (a path, or a name looked up in `PATH`).
pub fn preload(program: &OsStr) -> Preload {
    let library = match find_library() {
        Ok(library) => library,
        Err(looked) => return Preload::NotFound(looked),
    };
    match resolve_program(program).and_then(|path| interpreter(&path)) {
        Some(None) => Preload::Static,
        Some(Some(loader)) if !loader.is_empty() && !is_glibc_loader(&loader) => {
            Preload::ForeignLoader(loader)
        }
        _ => Preload::Library(library),
    }
}

/// Whether a `PT_INTERP` names glibc's dynamic loader (`/lib64/ld-linux-x86-64.so.2`,
/// `ld-linux-aarch64.so.1`, `ld-linux.so.2`), the only one the agent can be loaded by.
fn is_glibc_loader(interpreter: &str) -> bool {
    Path::new(interpreter)
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("ld-linux"))
}

/// The agent library `run` would preload (`fsprof agent`), or why there is none.
pub fn library() -> anyhow::Result<PathBuf> {
    find_library().map_err(|why| anyhow::anyhow!("no {LIBRARY}: {why}"))
}

/// The agent library, or why there is none.
fn find_library() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(absolute(path))
        } else {
            Err(format!("{ENV}={} is not a file", path.display()))
        };
    }
    super::embedded_agent::path(LIBRARY)
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// The value of `LD_PRELOAD` for the program: the user's own (`existing`), with `library` appended.
pub fn ld_preload(existing: Option<OsString>, library: &Path) -> OsString {
    match existing {
        Some(existing) if !existing.is_empty() => {
            let mut value = existing;
            value.push(":");
            value.push(library);
            value
        }
        _ => library.as_os_str().to_owned(),
    }
}

/// The file `program` names: itself if it contains a `/`, else the first executable of that name
/// in `PATH` (as `execvp` would find it).
fn resolve_program(program: &OsStr) -> Option<PathBuf> {
    let path = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(path.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
}

/// The program interpreter the ELF file at `path` names (its `PT_INTERP`; cut at 4 KiB), `None`
/// inside when it has none (statically linked); `None` when it is not an ELF file (a script:
/// its interpreter decides) or cannot be read.
fn interpreter(path: &Path) -> Option<Option<String>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::io::Read;
    // The ELF and program headers, and the interpreter's name, are at the start of the file.
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut head)
        .ok()?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&*head).ok()?;
    let endian = header.endian().ok()?;
    let segments = header.program_headers(endian, &*head).ok()?;
    let Some(interp) = (segments.iter()).find(|s| s.p_type(endian) == object::elf::PT_INTERP)
    else {
        return Some(None);
    };
    // Beyond the head: an interpreter all the same, its name unknown (empty).
    let name = interp.data(endian, &*head).unwrap_or_default();
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    let name = &name[..name.len().min(4096)];
    Some(Some(String::from_utf8_lossy(name).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ld_preload_keeps_what_the_user_set() {
        let library = Path::new("/x/libfsprof_agent.so");
        assert_eq!(ld_preload(None, library), "/x/libfsprof_agent.so");
        assert_eq!(
            ld_preload(Some("".into()), library),
            "/x/libfsprof_agent.so"
        );
        assert_eq!(
            ld_preload(Some("/lib/a.so".into()), library),
            "/lib/a.so:/x/libfsprof_agent.so"
        );
    }

    #[test]
    fn static_and_dynamic_programs() {
        let sh = interpreter(Path::new("/bin/sh")).unwrap().unwrap();
        assert!(is_glibc_loader(&sh), "{sh}");
        assert!(!is_glibc_loader("/lib/ld-musl-x86_64.so.1"));
        assert_eq!(interpreter(Path::new("/nonexistent")), None);
        let script = std::env::temp_dir().join(format!("fsprof-script-{}", std::process::id()));
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(interpreter(&script), None);
        let _ = std::fs::remove_file(script);
        assert_eq!(
            resolve_program(OsStr::new("sh")).and_then(|p| interpreter(&p)),
            Some(Some(sh))
        );
    }
}
