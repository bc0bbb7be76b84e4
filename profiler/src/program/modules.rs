//! The executables and libraries mapped into the target: where each is loaded, its load bias, and
//! its bytes, kept open so that symbolization after recording still works when the target has
//! exited or the file was deleted or replaced.
//!
//! Read from `/proc/<pid>/maps`; a file is opened by its path in the target's root where that
//! names the mapped file (its inode), else through `/proc/<pid>/map_files/` (the very file
//! that is mapped, even if deleted), and mapped read-only into fsprof. The bias comes from the
//! file's `PT_LOAD` segments, not from `start - offset`. The vdso is copied from the target's
//! memory. Unwinding (`unwind.rs`) and symbolization (`symbols.rs`) both use these.
//!
//! A file mapped once is shared by every process of the recording that maps it (`shared`): a
//! build runs the same compiler, assembler and libraries in process after process, and mapping
//! each again (its pages faulted in anew, its parse redone, unmapped at the end with a TLB flush
//! that interrupts the other CPUs) was most of what setting up a followed process cost.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::sync::{Arc, LazyLock, Mutex};

/// A module mapped into the target.
#[derive(Clone)]
pub struct Module {
    /// File name for display (`libc.so.6`), or `[vdso]`.
    pub name: String,
    /// Path as the target's `/proc/<pid>/maps` shows it (without ` (deleted)`), used to find
    /// separate debug files next to it; may no longer exist.
    pub path: String,
    /// Addresses of its executable mappings in the target (AVMAs).
    pub range: Range<u64>,
    /// Load bias: an address in the target minus the address the ELF file states (SVMA).
    pub bias: u64,
    /// The file's inode (0 for the vdso).
    pub inode: u64,
    /// The file's bytes.
    pub image: Image,
}

/// A module's bytes: a read-only mapping of its file, or a copy (the vdso).
#[derive(Clone)]
pub struct Image(Arc<ImageBytes>);

enum ImageBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Image {
    /// An image of `bytes` (for tests, and for the vdso's copy).
    pub fn from_vec(bytes: Vec<u8>) -> Image {
        Image(Arc::new(ImageBytes::Owned(bytes)))
    }

    /// An image of a file, mapped read-only.
    pub fn map(file: &std::fs::File) -> std::io::Result<Image> {
        // SAFETY: a read-only private mapping. The file may change under us only if someone
        // rewrites the executable in place (not the usual replace-by-rename); parsing treats the
        // bytes as untrusted anyway.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Image(Arc::new(ImageBytes::Mapped(map))))
    }
}

impl Image {
    /// Where its bytes are held: the same for every process that maps the same file (see
    /// `shared`), different for different images while both live.
    pub fn address(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl Deref for Image {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            ImageBytes::Mapped(map) => map,
            ImageBytes::Owned(bytes) => bytes,
        }
    }
}

/// One line of `/proc/<pid>/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Addresses in the target.
    pub range: Range<u64>,
    /// Readable.
    pub read: bool,
    /// Executable.
    pub execute: bool,
    /// Offset in the file.
    pub offset: u64,
    /// Inode (0 for anonymous mappings).
    pub inode: u64,
    /// The device the inode is on (as `stat`'s `st_dev` encodes it; 0 for anonymous mappings).
    pub device: u64,
    /// Path or pseudo-name (`[stack]`, `[vdso]`), `" (deleted)"` removed; empty when anonymous.
    pub path: String,
    /// The file was deleted (or replaced) since it was mapped.
    pub deleted: bool,
}

/// Most lines of a maps file considered: a process with more mappings than this is unusual, and
/// the file is the target's doing.
const MAX_MAPPINGS: usize = 1 << 20;
/// Largest vdso copied (it is a few pages).
const MAX_VDSO: u64 = 1 << 20;

/// Reads and parses `/proc/<pid>/maps` (of thread `via`, which must be alive).
pub fn read_maps(pid: u32, via: u32) -> std::io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{via}/maps"))?;
    Ok(text
        .lines()
        .take(MAX_MAPPINGS)
        .filter_map(parse_mapping)
        .collect())
}

/// The executable mappings of `pid` (through thread `via`), asked of the kernel one at a time
/// (`PROCMAP_QUERY`, Linux 6.11) rather than formatted as text for every mapping (the modules
/// are all a followed process's set-up needs, and a build's `cc1` has five times as many other
/// mappings), with the mapping that holds address `stack` if one is asked for (and found).
/// `Ok(None)` where the kernel cannot be asked so (then [`read_maps`] is the way).
pub fn read_code_maps(
    pid: u32,
    via: u32,
    stack: Option<u64>,
) -> std::io::Result<Option<(Vec<Mapping>, Option<Mapping>)>> {
    static UNSUPPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if UNSUPPORTED.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(None);
    }
    let file = std::fs::File::open(format!("/proc/{pid}/task/{via}/maps"))?;
    let mut name = vec![0u8; 4096];
    let mut code = Vec::new();
    let mut from = 0u64;
    while code.len() < MAX_MAPPINGS {
        let flags = QUERY_COVERING_OR_NEXT | QUERY_EXECUTABLE;
        match query(&file, from, flags, &mut name) {
            Ok(Some(mapping)) if mapping.range.end > from => {
                from = mapping.range.end;
                code.push(mapping);
            }
            Ok(_) => break, // none above `from` (or not the kernel's word: stop, not loop)
            Err(e) if is_unsupported(&e) => {
                UNSUPPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    let held = match stack {
        Some(address) => query(&file, address, 0, &mut name)?,
        None => None,
    };
    Ok(Some((code, held)))
}

/// Whether a `PROCMAP_QUERY` failed because the kernel has none.
fn is_unsupported(error: &std::io::Error) -> bool {
    use nix::libc::{EINVAL, ENOTTY, EOPNOTSUPP};
    matches!(error.raw_os_error(), Some(ENOTTY | EINVAL | EOPNOTSUPP))
}

/// The mapping `PROCMAP_QUERY` finds for `address` with `flags` on `file` (a `maps` file),
/// its name read into `name`; `None` where there is none.
fn query(
    file: &std::fs::File,
    address: u64,
    flags: u64,
    name: &mut [u8],
) -> std::io::Result<Option<Mapping>> {
    use std::os::fd::AsRawFd;
    let mut query = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        query_flags: flags,
        query_addr: address,
        vma_name_addr: name.as_mut_ptr() as u64,
        vma_name_size: name.len() as u32,
        ..ProcmapQuery::default()
    };
    // SAFETY: PROCMAP_QUERY reads and writes `query` (its size given) and writes at most
    // `vma_name_size` bytes at `vma_name_addr`, a buffer of ours that outlives the call.
    if unsafe { nix::libc::ioctl(file.as_raw_fd(), PROCMAP_QUERY as _, &mut query) } != 0 {
        let error = std::io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(nix::libc::ENOENT) => Ok(None),
            _ => Err(error),
        };
    }
    if query.vma_end <= query.vma_start {
        return Ok(None);
    }
    let len = (query.vma_name_size as usize).min(name.len());
    let text = String::from_utf8_lossy(&name[..len]);
    let text = text.trim_end_matches('\0');
    let (path, deleted) = match text.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (text, false),
    };
    Ok(Some(Mapping {
        range: query.vma_start..query.vma_end,
        read: query.vma_flags & QUERY_READABLE != 0,
        execute: query.vma_flags & QUERY_EXECUTABLE != 0,
        offset: query.vma_offset,
        inode: query.inode,
        device: nix::libc::makedev(query.dev_major, query.dev_minor),
        path: path.to_owned(),
        deleted,
    }))
}

/// `struct procmap_query` of `linux/fs.h`.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

const _: () = assert!(std::mem::size_of::<ProcmapQuery>() == 104);
/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 = 0xC068_6611;
const QUERY_READABLE: u64 = 0x01;
const QUERY_EXECUTABLE: u64 = 0x04;
const QUERY_COVERING_OR_NEXT: u64 = 0x10;

fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.as_bytes();
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let device = nix::libc::makedev(
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = fields.next()?.parse().ok()?;
    let path = fields.next().unwrap_or("").trim_start();
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    let range = u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?;
    (range.start < range.end && perms.len() >= 3).then(|| Mapping {
        range,
        read: perms[0] == b'r',
        execute: perms[2] == b'x',
        offset,
        inode,
        device,
        path: path.to_owned(),
        deleted,
    })
}

/// The modules of the executable mappings in `maps`. `known` are modules loaded before: one whose
/// file and address are unchanged is reused rather than opened again.
pub fn modules(pid: u32, maps: &[Mapping], known: &[Module]) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    // A jitdump is mapped executable to be seen, and holds no code (`jit_dumps`).
    for mapping in maps
        .iter()
        .filter(|m| m.execute && !is_jitdump_path(&m.path))
    {
        // Another executable segment of a file already seen (rare: split text sections), at
        // the same load bias. At another, it is another copy of the file's code, a module of
        // its own: node maps its embedded builtins again near its JIT's code (remapped, its
        // offset in the file 0x14c4000), and one range from the first segment to that copy held
        // the JIT's code and the libraries in between, named `node+0x7f..` (its perf map
        // unread, only addresses no module holds being looked up there).
        let same_copy = |m: &Module| {
            m.inode != 0
                && m.inode == mapping.inode
                && m.path == mapping.path
                && load_bias(&m.image, mapping.range.start, mapping.offset)
                    .is_none_or(|bias| bias == m.bias)
        };
        if let Some(module) = out.iter_mut().find(|m| same_copy(m)) {
            module.range.start = module.range.start.min(mapping.range.start);
            module.range.end = module.range.end.max(mapping.range.end);
            continue;
        }
        if let Some(module) = known
            .iter()
            .find(|m| m.range.start == mapping.range.start && m.path == mapping.path)
        {
            out.push(module.clone());
            continue;
        }
        if let Some(module) = load(pid, mapping) {
            out.push(module);
        }
    }
    out
}

/// Opens and parses the file behind an executable mapping (or copies the vdso).
fn load(pid: u32, mapping: &Mapping) -> Option<Module> {
    let image = if mapping.path == "[vdso]" {
        let len = (mapping.range.end - mapping.range.start).min(MAX_VDSO) as usize;
        let mut bytes = vec![0u8; len];
        crate::program::remote::Remote::new(pid)
            .read(mapping.range.start, &mut bytes)
            .ok()?;
        Image::from_vec(bytes)
    } else if mapping.path.starts_with('/') {
        shared(mapping).or_else(|| map_file(pid, mapping))?
    } else {
        return None; // anonymous executable memory (a JIT): nothing to read
    };
    let offset = if mapping.path == "[vdso]" {
        0
    } else {
        mapping.offset
    };
    let bias = load_bias(&image, mapping.range.start, offset)?;
    let name = std::path::Path::new(&mapping.path).file_name().map_or_else(
        || mapping.path.clone(),
        |n| n.to_string_lossy().into_owned(),
    );
    Some(Module {
        name,
        path: mapping.path.clone(),
        range: mapping.range.clone(),
        bias,
        inode: mapping.inode,
        image,
    })
}

/// Maps the file behind `mapping` (a path) into fsprof.
fn map_file(pid: u32, mapping: &Mapping) -> Option<Image> {
    let file = open_mapped(pid, mapping)?;
    let image = Image::map(&file).ok()?;
    share(mapping, &file, &image);
    Some(image)
}

/// Opens the file behind `mapping` (a path).
fn open_mapped(pid: u32, mapping: &Mapping) -> Option<std::fs::File> {
    // The mapped file itself, even if deleted or replaced on disk since: by its path where
    // that still names it (the same inode), else through `map_files`, whose lookup waits
    // for the target's memory map's lock (see `native/off_thread.rs`; among 1000 busy
    // threads being born, opening libc that way took 44 to 345 ms). Where `map_files` cannot
    // be opened either, the path's file is taken as it is, as before. Opened without
    // blocking: a path the target replaced with a FIFO must not hang fsprof.
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let open = |path: String| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
    };
    let by_path = (!mapping.deleted)
        .then(|| open(format!("/proc/{pid}/root{}", mapping.path)).ok())
        .flatten();
    let same = |file: &std::fs::File| file.metadata().is_ok_and(|m| m.ino() == mapping.inode);
    let file = match by_path {
        Some(file) if same(&file) => file,
        by_path => {
            let by_mapping = format!(
                "/proc/{pid}/map_files/{:x}-{:x}",
                mapping.range.start, mapping.range.end
            );
            open(by_mapping).ok().or(by_path)?
        }
    };
    Some(file)
}

/// A jitdump file the target mapped, opened while it was mapped.
pub struct JitDump {
    device: u64,
    inode: u64,
    pub file: std::fs::File,
}

/// Opens the jitdump files mapped in `maps` that `known` does not hold (those tried before,
/// opened or not), at most `MAX_JIT_DUMPS` with `known`. A JIT maps its dump
/// (`jit-PID.dump`, perf's name for it) so that profilers find it there; it writes its records
/// on, and they are read once recording has ended (`symbolize/jitdump.rs`).
pub fn jit_dumps(pid: u32, maps: &[Mapping], known: &[(u64, u64)]) -> Vec<JitDump> {
    let mut found: Vec<JitDump> = Vec::new();
    for mapping in maps
        .iter()
        .filter(|m| m.inode != 0 && is_jitdump_path(&m.path))
    {
        let id = (mapping.device, mapping.inode);
        if known.contains(&id) || found.iter().any(|dump| dump.id() == id) {
            continue;
        }
        if known.len() + found.len() >= MAX_JIT_DUMPS {
            break;
        }
        // The very file mapped, or none (`open_mapped` may fall back to whatever the path
        // names now).
        use std::os::unix::fs::MetadataExt;
        let mapped = |file: &std::fs::File| file.metadata().is_ok_and(|m| (m.dev(), m.ino()) == id);
        if let Some(file) = open_mapped(pid, mapping).filter(mapped) {
            found.push(JitDump {
                device: mapping.device,
                inode: mapping.inode,
                file,
            });
        }
    }
    found
}

impl JitDump {
    /// The device and inode of its file.
    pub fn id(&self) -> (u64, u64) {
        (self.device, self.inode)
    }
}

/// Most jitdump files opened per process (a JIT writes one; each is kept open to the end).
const MAX_JIT_DUMPS: usize = 4;

/// The device and inode of every jitdump file mapped in `maps`.
pub fn jit_dump_ids(maps: &[Mapping]) -> Vec<(u64, u64)> {
    (maps.iter())
        .filter(|m| m.inode != 0 && is_jitdump_path(&m.path))
        .map(|m| (m.device, m.inode))
        .collect()
}

/// Whether `path` names a jitdump file: `jit-<number>.dump`.
fn is_jitdump_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("jit-")
        .and_then(|rest| rest.strip_suffix(".dump"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Files mapped by earlier loads, by device and inode: each mapping here keeps its inode in use,
/// so that no other file can take its number while it is kept.
static SHARED: LazyLock<Mutex<HashMap<(u64, u64), Image>>> = LazyLock::new(Mutex::default);

/// Most files kept in [`SHARED`]. When it is full, files no module uses any more are let go.
const MAX_SHARED: usize = 1024;

/// The image of the file `mapping` maps, if an earlier load mapped it.
fn shared(mapping: &Mapping) -> Option<Image> {
    if mapping.inode == 0 {
        return None;
    }
    let shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared.get(&(mapping.device, mapping.inode)).cloned()
}

/// Keeps `image`, mapped from `file`, for later loads of the file `mapping` maps: only if `file`
/// is that very file (its device and inode are the mapping's).
fn share(mapping: &Mapping, file: &std::fs::File, image: &Image) {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = file.metadata() else {
        return;
    };
    if mapping.inode == 0 || (metadata.dev(), metadata.ino()) != (mapping.device, mapping.inode) {
        return;
    }
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if shared.len() >= MAX_SHARED {
        shared.retain(|_, image| Arc::strong_count(&image.0) > 1);
    }
    if shared.len() < MAX_SHARED {
        shared.insert((mapping.device, mapping.inode), image.clone());
    }
}

/// The load bias of an ELF file whose executable segment is mapped at `start` from file offset
/// `offset` (page-aligned): found through that `PT_LOAD` segment, which may begin inside the
/// page and state an address that differs from its file offset (lld and recent ld lay out
/// segments so), hence not `start - offset`.
pub fn load_bias(image: &[u8], start: u64, offset: u64) -> Option<u64> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use object::Endianness;
    let header = object::elf::FileHeader64::<Endianness>::parse(image).ok()?;
    let endian = header.endian().ok()?;
    let segments = header.program_headers(endian, image).ok()?;
    const PAGE: u64 = 4096;
    let segment = segments.iter().find(|s| {
        let file_start = s.p_offset(endian);
        s.p_type(endian) == object::elf::PT_LOAD
            && s.p_flags(endian) & object::elf::PF_X != 0
            && offset >= file_start & !(PAGE - 1)
            && offset < file_start.saturating_add(s.p_filesz(endian).max(1))
    })?;
    // An address in the mapping minus (its file offset's stated address).
    Some(
        start
            .wrapping_sub(offset)
            .wrapping_add(segment.p_offset(endian))
            .wrapping_sub(segment.p_vaddr(endian)),
    )
}

/// Whether the mapping path `path` (from `/proc/PID/maps`) is fsprof's agent library
/// (`libfsprof_agent*`): its frames are fsprof's, not the program's.
pub fn is_agent_path(path: &str) -> bool {
    std::path::Path::new(path)
        .file_name()
        .is_some_and(|name| name.as_encoded_bytes().starts_with(b"libfsprof_agent"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jitdump_is_known_by_its_file_name() {
        assert!(is_jitdump_path("/tmp/jd/jit-26719.dump"));
        assert!(is_jitdump_path("jit-1.dump"));
        for not in [
            "/tmp/jit-.dump",
            "/tmp/jit-12.dump.bak",
            "/tmp/xjit-12.dump",
            "/a/jit-1a.dump",
        ] {
            assert!(!is_jitdump_path(not), "{not}");
        }
    }

    #[test]
    fn the_agent_is_known_by_its_file_name() {
        assert!(is_agent_path("/a/b/libfsprof_agent.so"));
        assert!(!is_agent_path("/a/libfsprof_agent.so/libc.so.6"));
    }

    #[test]
    fn a_mapping_names_its_device_as_stat_does() {
        let line = "7f00a000-7f00b000 r-xp 00001000 fd:12 4242   /usr/lib/x.so (deleted)";
        let mapping = parse_mapping(line).unwrap();
        assert_eq!(mapping.device, nix::libc::makedev(0xfd, 0x12));
        assert_eq!((mapping.inode, mapping.offset), (4242, 0x1000));
        assert_eq!(
            (mapping.path.as_str(), mapping.deleted),
            ("/usr/lib/x.so", true)
        );
    }

    #[test]
    fn the_executable_mappings_asked_of_the_kernel_are_those_of_the_text() {
        let pid = std::process::id();
        // Another test's thread may map or unmap code between the two reads: a few tries.
        for _ in 0..5 {
            let stack = &pid as *const u32 as u64; // on this thread's stack
            let Some((asked, held)) = read_code_maps(pid, pid, Some(stack)).unwrap() else {
                eprintln!("skipped: this kernel has no PROCMAP_QUERY (Linux 6.11)");
                return;
            };
            let all = read_maps(pid, pid).unwrap();
            let text: Vec<Mapping> = (all.iter())
                .filter(|m| m.execute && m.path != "[vsyscall]")
                .cloned()
                .collect();
            let holding = all.into_iter().find(|m| m.range.contains(&stack));
            if asked == text && held == holding {
                assert!(held.is_some());
                assert!(asked
                    .iter()
                    .any(|m| m.path.ends_with(".so.6") || m.inode != 0));
                assert!(asked.iter().any(|m| m.path == "[vdso]"), "{asked:?}");
                return;
            }
        }
        panic!("the kernel's answers never matched the text");
    }

    /// This test's own executable, loaded twice, is mapped once when the map's device and inode
    /// are the file's (as on a plain file system), and never shared when they are not.
    #[test]
    fn a_file_loaded_again_shares_its_mapping() {
        use std::os::unix::fs::MetadataExt;
        let pid = std::process::id();
        let maps = read_maps(pid, pid).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mapping = maps
            .iter()
            .find(|m| m.execute && std::path::Path::new(&m.path) == exe)
            .expect("the test's executable is mapped");
        let first = load(pid, mapping).unwrap();
        let again = load(pid, mapping).unwrap();
        let stat = std::fs::metadata(&exe).unwrap();
        let verified = (stat.dev(), stat.ino()) == (mapping.device, mapping.inode);
        assert_eq!(Arc::ptr_eq(&first.image.0, &again.image.0), verified);
    }

    /// A file's code mapped again at another load bias (node remaps its builtins near its
    /// JIT's code) is a module of its own: the first keeps its own range, which would otherwise
    /// stretch over everything mapped between the two copies.
    #[test]
    fn a_copy_of_a_files_code_elsewhere_is_a_module_of_its_own() {
        let pid = std::process::id();
        let maps = read_maps(pid, pid).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let text = maps
            .iter()
            .find(|m| m.execute && std::path::Path::new(&m.path) == exe)
            .expect("the test's executable is mapped")
            .clone();
        let far = 0x1000_0000_0000u64;
        let copy = Mapping {
            range: far..far + (text.range.end - text.range.start),
            ..text.clone()
        };
        let found = modules(pid, &[text.clone(), copy.clone()], &[]);
        let ranges: Vec<_> = found.iter().map(|m| m.range.clone()).collect();
        assert_eq!(found.len(), 2, "{ranges:x?}");
        assert_eq!(found[0].range, text.range);
        assert_eq!(found[1].range, copy.range);
        assert_eq!(
            found[1].bias.wrapping_sub(found[0].bias),
            far - text.range.start
        );
    }
}
