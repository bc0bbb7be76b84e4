//! The functions' tables of large modules (`walk_tables.rs`) kept on disk between runs: reading
//! rustc's driver's 107,000 functions takes 30 to 60 ms of a busy machine, during which the BPF
//! walk cannot follow the driver's frames and the compiler's first stacks stop short; from this
//! cache the table is ready in a few milliseconds (perf keeps build ids' files in `~/.debug` for
//! the same reason).
//!
//! A table is named by what it is made from: its module's `.eh_frame_hdr` (every function's
//! start and where its description is), the addresses and sizes of that section and of
//! `.eh_frame`, and fsprof's version (which reads the rules), hashed (FNV-1a's steps, a word at
//! a time). Not `.eh_frame`'s bytes (6 MB for rustc's driver). Addresses are the file's
//! (before the module's load bias). A
//! table that is not its module's (two modules with one name, a file changed in place, a
//! damaged file) can only make the walk read the wrong words, which the unwinder does not
//! take: stacks stop short, none is wrong. A file read is untrusted all the same: only one of
//! this user's, in a directory only this user may write, is read; its size is bounded, every
//! rule checked, and a file that fails is read again from the module.
//!
//! Kept in `functions/` in fsprof's cache directory (`os/cache.rs`), at most [`FILES`] tables,
//! the least recently used removed first; none when the directory the cache is in (`$HOME`,
//! `$XDG_CACHE_HOME`) is another user's (root run with a user's environment). Not here: reading the tables (`walk_tables.rs`).

use crate::native::layout::{decode, encode};
use crate::native::unwind::FrameRule;
use crate::os::cache::{
    check_owned, fnv1a, make_private_dir, write_atomically, FNV_PRIME, FNV_START,
};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Functions from which a module's table is kept (fewer are read in a millisecond or two).
pub const CACHED_FROM: usize = 10_000;

/// Tables kept (rustc's driver's is 1.7 MB; a toolchain has two or three large libraries).
const FILES: usize = 32;

/// The first bytes of a table's file (the format's version in its last digits).
const MAGIC: &[u8; 8] = b"fsprfn01";

/// The name of a module's table: `parts` (its sections' addresses, sizes and bytes), hashed
/// by FNV-1a a word at a time (rustc's driver's `.eh_frame_hdr` is 0.85 MB).
pub fn key(parts: &[&[u8]]) -> u64 {
    let version: &[u8] = env!("CARGO_PKG_VERSION").as_bytes();
    (std::iter::once(&version).chain(parts)).fold(FNV_START, |hash, part| {
        let words = part.chunks_exact(8);
        let rest = words.remainder();
        let hash = words.fold(
            fnv1a(hash, &(part.len() as u64).to_le_bytes()),
            |hash, word| {
                let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
                (hash ^ word).wrapping_mul(FNV_PRIME)
            },
        );
        fnv1a(hash, rest)
    })
}

/// The table kept as `key` (file addresses, by start), if there is one of at most `most`
/// functions and it reads whole.
pub fn load(key: u64, most: usize) -> Option<Vec<(u64, Option<FrameRule>)>> {
    load_from(&dir().ok()?, key, most)
}

/// [`load`] from the tables in `dir`.
fn load_from(dir: &Path, key: u64, most: usize) -> Option<Vec<(u64, Option<FrameRule>)>> {
    use std::io::Read;
    let path = dir.join(name(key));
    // Only this user's, as the agent's copy (`os/cache.rs`): a plain file (not followed if a
    // link, nor waited on if a pipe) that no other user may write.
    check_owned(dir).ok()?;
    let file = (std::fs::OpenOptions::new().read(true))
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let mine = meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o022 == 0;
    let size = meta.len();
    if !meta.is_file() || !mine || size > 16 * (most as u64 + 1) || size % 16 != 0 {
        return None;
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(size).read_to_end(&mut bytes).ok()?;
    let words: Vec<u64> = (bytes.chunks_exact(8))
        .map(|word| u64::from_le_bytes(word.try_into().unwrap_or_default()))
        .collect();
    let (head, entries) = words.split_at_checked(2)?;
    if head[0].to_le_bytes() != *MAGIC || head[1] as usize != entries.len() / 2 {
        return None;
    }
    let mut table = Vec::with_capacity(entries.len() / 2);
    for entry in entries.chunks_exact(2) {
        let rule = match entry[1] {
            0 => None,
            word => Some(decode(word)?),
        };
        table.push((entry[0], rule));
    }
    // Used now: the last to be removed (the time only; nothing if that fails).
    let _ = std::fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    Some(table)
}

/// Keeps `table` (file addresses) as `key`, removing the least recently used tables beyond
/// [`FILES`]. Quietly does nothing if the cache directory cannot be used (a profile needs no
/// cache).
pub fn store(key: u64, table: &[(u64, Option<FrameRule>)]) {
    if let Ok(dir) = dir() {
        store_in(&dir, key, table);
    }
}

/// [`store`] into the tables in `dir`.
fn store_in(dir: &Path, key: u64, table: &[(u64, Option<FrameRule>)]) {
    let path = dir.join(name(key));
    if make_private_dir(dir).is_err() {
        return;
    }
    let mut bytes = Vec::with_capacity(16 * (table.len() + 1));
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(table.len() as u64).to_le_bytes());
    for (start, rule) in table {
        bytes.extend_from_slice(&start.to_le_bytes());
        bytes.extend_from_slice(&rule.map_or(0, encode).to_le_bytes());
    }
    if write_atomically(&path, &bytes, 0o600).is_err() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = (entries.flatten())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("table-"))
        .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
        .collect();
    if kept.len() > FILES {
        kept.sort();
        for (_, old) in &kept[..kept.len() - FILES] {
            let _ = std::fs::remove_file(old);
        }
    }
}

/// Where the tables are kept; none if the nearest existing directory above fsprof's cache
/// directory is not this user's (nothing is made in another user's home).
fn dir() -> Result<PathBuf, String> {
    let fsprof = crate::os::cache::dir()?;
    let holder = (fsprof.ancestors().skip(1))
        .find_map(|dir| std::fs::metadata(dir).ok())
        .ok_or("no directory")?;
    if holder.uid() != nix::unistd::geteuid().as_raw() {
        return Err("the cache directory is in another user's".to_owned());
    }
    Ok(fsprof.join("functions"))
}

/// The file name of the table named `key`.
fn name(key: u64) -> String {
    format!("table-{key:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `test` with a directory of tables of its own.
    fn with_cache(test: impl FnOnce(&Path)) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("fsprof-tables-{}-{n}", std::process::id()));
        test(&dir.join("functions"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn table() -> Vec<(u64, Option<FrameRule>)> {
        vec![
            (
                0x1000,
                Some(FrameRule::StackPointer {
                    cfa: 16,
                    bp_saved: 0,
                }),
            ),
            (
                0x1040,
                Some(FrameRule::FramePointer {
                    cfa: 16,
                    bp_saved: -16,
                }),
            ),
            (0x1100, None),
            (0x1180, Some(FrameRule::Root)),
        ]
    }

    #[test]
    fn a_table_kept_reads_back_whole() {
        with_cache(|dir| {
            let key = key(&[b"hdr", b"\x01\x02"]);
            assert_eq!(load_from(dir, key, 100), None);
            store_in(dir, key, &table());
            assert_eq!(load_from(dir, key, 100), Some(table()));
            assert_eq!(
                load_from(dir, key, 3),
                None,
                "more functions than asked for"
            );
            assert_eq!(load_from(dir, key ^ 1, 100), None);
        });
    }

    #[test]
    fn a_damaged_table_is_not_read() {
        with_cache(|dir| {
            let key = key(&[b"damaged"]);
            store_in(dir, key, &table());
            let file = dir.join(name(key));
            let whole = std::fs::read(&file).unwrap();
            let mut bad_rule = whole.clone();
            bad_rule[16 + 8 + 6] = 9; // the first rule's kind
            let mut short = whole.clone();
            short.truncate(whole.len() - 16);
            let mut bad_magic = whole.clone();
            bad_magic[0] ^= 1;
            for bytes in [bad_rule, short, bad_magic, whole[..20].to_vec()] {
                std::fs::write(&file, bytes).unwrap();
                assert_eq!(load_from(dir, key, 100), None);
            }
            // Whole, but others may write it: not read.
            std::fs::write(&file, &whole).unwrap();
            assert!(load_from(dir, key, 100).is_some());
            let writable = std::os::unix::fs::PermissionsExt::from_mode(0o666);
            std::fs::set_permissions(&file, writable).unwrap();
            assert_eq!(load_from(dir, key, 100), None);
        });
    }

    #[test]
    fn at_most_files_tables_are_kept() {
        with_cache(|dir| {
            for n in 0..FILES as u64 + 3 {
                store_in(dir, n, &table());
            }
            assert_eq!(std::fs::read_dir(dir).unwrap().count(), FILES);
        });
    }

    #[test]
    fn the_key_tells_parts_apart() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"0123456789"]), key(&[b"0123456788"]));
        assert_ne!(key(&[b"0123456789"]), key(&[b"1123456789"]));
        assert_eq!(key(&[b"ab", b"c"]), key(&[b"ab", b"c"]));
    }
}
