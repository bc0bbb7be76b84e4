//! Finding a module's separate debug file: by build id under the debug directories, then by
//! `.gnu_debuglink` next to the file and under the debug directories (accepted when the build
//! ids match or, without them, the CRC-32 does), and the dwz supplementary file that
//! `.gnu_debugaltlink` names; and by build id from debuginfod servers (`debuginfod.rs`) where
//! none is found here. Only regular files are opened; what they contain is checked, not
//! trusted. Parsing them is `symbols.rs`'s job.

use super::debuginfod::Debuginfod;
use crate::program::modules::{Image, Module};
use object::Object;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The separate debug file of the module whose ELF is `object`, and its path: under the debug
/// directories, else from `debuginfod`'s servers (by build id).
pub(super) fn find_debug_file(
    module: &Module,
    object: &object::File,
    debug_dirs: &[PathBuf],
    debuginfod: Option<&Debuginfod>,
) -> Option<(Image, PathBuf)> {
    find_local_debug_file(module, object, debug_dirs).or_else(|| {
        let id = build_id(object)?;
        let path = debuginfod?.debuginfo(id, &module.name)?;
        let image = open_regular(&path)?;
        matches(&image, Some(id), None).then_some((image, path))
    })
}

/// The separate debug file of the module whose ELF is `object` under the debug directories.
fn find_local_debug_file(
    module: &Module,
    object: &object::File,
    debug_dirs: &[PathBuf],
) -> Option<(Image, PathBuf)> {
    let build_id = build_id(object);
    if let Some(id) = build_id {
        for path in build_id_paths(id, debug_dirs) {
            if let Some(image) = open_regular(&path) {
                if matches(&image, Some(id), None) {
                    return Some((image, path));
                }
            }
        }
    }
    let (name, crc) = object.gnu_debuglink().ok().flatten()?;
    let name = plain_file_name(name)?;
    let path = Path::new(&module.path);
    if !path.is_absolute() {
        return None;
    }
    let dir = path.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    let relative_dir = dir.strip_prefix("/").unwrap_or(dir);
    candidates.extend(
        debug_dirs
            .iter()
            .map(|debug_dir| debug_dir.join(relative_dir).join(name)),
    );
    candidates.into_iter().find_map(|candidate| {
        let image = open_regular(&candidate)?;
        matches(&image, build_id, Some(crc)).then_some((image, candidate))
    })
}

/// The supplementary file (made by dwz) that `object`'s `.gnu_debugaltlink` names: its path,
/// absolute or relative to `dir` (the file's directory), or by its build id.
pub(super) fn find_sup_file(
    object: &object::File,
    dir: Option<&Path>,
    debug_dirs: &[PathBuf],
) -> Option<Image> {
    let (path, id) = object.gnu_debugaltlink().ok().flatten()?;
    if id.is_empty() || id.len() > 64 {
        return None;
    }
    let path = Path::new(OsStr::from_bytes(path));
    let mut candidates = Vec::new();
    if path.is_absolute() {
        candidates.push(path.to_owned());
    } else if let Some(dir) = dir {
        candidates.push(dir.join(path));
    }
    candidates.extend(build_id_paths(id, debug_dirs));
    candidates.into_iter().find_map(|candidate| {
        let image = open_regular(&candidate)?;
        matches(&image, Some(id), None).then_some(image)
    })
}

pub(super) fn build_id<'data>(object: &object::File<'data>) -> Option<&'data [u8]> {
    object
        .build_id()
        .ok()
        .flatten()
        .filter(|id| id.len() >= 2 && id.len() <= 64)
}

/// `<debugdir>/.build-id/xx/yyyy.debug` for each debug directory.
pub(super) fn build_id_paths(id: &[u8], debug_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    let (head, tail) = hex.split_at(2);
    debug_dirs
        .iter()
        .map(|dir| {
            dir.join(".build-id")
                .join(head)
                .join(format!("{tail}.debug"))
        })
        .collect()
}

/// A debuglink name, if it is a plain file name (not a path, which could point anywhere).
fn plain_file_name(name: &[u8]) -> Option<&OsStr> {
    let plain = !name.is_empty()
        && name.len() <= 255
        && !name.contains(&b'/')
        && !name.contains(&0)
        && name != b"."
        && name != b"..";
    plain.then(|| OsStr::from_bytes(name))
}

/// Whether `image` is the debug file wanted: same build id if both have one, else the CRC-32
/// the debuglink states if there is one, else (found by build id) it must have that build id.
fn matches(image: &Image, build_id: Option<&[u8]>, crc: Option<u32>) -> bool {
    let Ok(object) = object::File::parse(&**image) else {
        return false;
    };
    match (build_id, self::build_id(&object), crc) {
        (Some(wanted), Some(found), _) => wanted == found,
        (_, _, Some(crc)) => crc32(image) == crc,
        _ => false,
    }
}

/// A regular file, mapped; `None` for anything else (a FIFO or device would block or act).
fn open_regular(path: &Path) -> Option<Image> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() == 0 {
        return None;
    }
    Image::map(&file).ok()
}

/// The CRC-32 (IEEE, as zlib's and `.gnu_debuglink`'s) of `bytes`, eight bytes a step.
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    static TABLES: std::sync::OnceLock<[[u32; 256]; 8]> = std::sync::OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        let mut tables = [[0u32; 256]; 8];
        for (i, entry) in tables[0].iter_mut().enumerate() {
            let mut crc = i as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    0xedb8_8320 ^ (crc >> 1)
                } else {
                    crc >> 1
                };
            }
            *entry = crc;
        }
        for i in 0..256 {
            for k in 1..8 {
                let previous = tables[k - 1][i];
                tables[k][i] = (previous >> 8) ^ tables[0][(previous & 0xff) as usize];
            }
        }
        tables
    });
    let mut crc = !0u32;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let low = crc ^ u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        crc = tables[7][(low & 0xff) as usize]
            ^ tables[6][((low >> 8) & 0xff) as usize]
            ^ tables[5][((low >> 16) & 0xff) as usize]
            ^ tables[4][(low >> 24) as usize]
            ^ tables[3][chunk[4] as usize]
            ^ tables[2][chunk[5] as usize]
            ^ tables[1][chunk[6] as usize]
            ^ tables[0][chunk[7] as usize];
    }
    for &byte in chunks.remainder() {
        crc = (crc >> 8) ^ tables[0][((crc ^ byte as u32) & 0xff) as usize];
    }
    !crc
}
