//! Symbolization after recording: the functions at an address in the target (the physical
//! function and those inlined into it), with their source file and line.
//!
//! A module's ELF file is parsed lazily, on the first lookup in it, from the bytes fsprof kept
//! open ([`Module::image`]), never by opening its path again (the file may have been deleted or
//! replaced by another build since); the path only serves to find separate debug files next to
//! it. Sources, best first:
//!
//! 1. DWARF line tables and inlined functions, from the file itself or, when it has none, from a
//!    separate debug file: by build id (`<debugdir>/.build-id/xx/yyyy.debug`), then by
//!    `.gnu_debuglink` (`<dir>/<name>`, `<dir>/.debug/<name>`, `<debugdir>/<dir>/<name>`; accepted
//!    when the build ids match or, without them, the CRC-32 does), with the dwz supplementary
//!    file its `.gnu_debugaltlink` names;
//! 2. the symbol table (`.symtab`, else the debug file's `.symtab`, else `.dynsym`): the function
//!    symbol nearest at or below the address whose size covers it;
//! 3. `module+0xoffset`, where the offset is the address the ELF file states.
//!
//! Names are demangled (Rust without its hash, C++), names and paths are cut at 4 KiB, and at
//! most 64 frames come back per address. Every file is untrusted: a bad one only makes lookups
//! fall back (parsing and lookups also run under `catch_unwind`, in case a parser panics).
//!
//! Not handled: split DWARF (`.dwo`/`.dwp` files), MiniDebugInfo (`.gnu_debugdata`), debuginfod,
//! non-ELF files, and a per-address cache (callers symbolize each distinct address once).

use crate::profile::NativeFrame;
use crate::target::modules::{Image, Module};
use addr2line::gimli;
use object::{
    CompressionFormat, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SymbolKind,
};
use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::{self, Write as _};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Where distributions install separate debug files.
const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";
/// Most frames (physical plus inlined) returned for one address; deeper inlined ones are dropped.
const MAX_FRAMES: usize = 64;
/// Most inlined frames read from DWARF for one address before keeping the outermost
/// [`MAX_FRAMES`].
const MAX_FRAMES_READ: usize = 1024;
/// Longest function name or file path returned, in bytes (longer ones end in `…`).
const MAX_NAME: usize = 4096;
/// Longest mangled name handed to a demangler.
const MAX_MANGLED: usize = 64 * 1024;
/// How many symbols before the nearest one a lookup also tries (for symbols nested in others).
const MAX_SYMBOLS_BACK: usize = 16;

/// Symbolizes addresses in a target's modules, parsing each module's files once, on first use.
pub struct Symbolizer {
    /// Sorted by start address.
    modules: Vec<Entry>,
    debug_dirs: Vec<PathBuf>,
}

struct Entry {
    module: Module,
    /// `None` until the first lookup in the module.
    parsed: Option<Parsed>,
}

impl Symbolizer {
    /// Symbolizer over the target's modules (cheap: files are parsed lazily, on first lookup in
    /// them).
    pub fn new(modules: &[Module]) -> Symbolizer {
        Symbolizer::with_debug_dirs(modules, vec![PathBuf::from(DEFAULT_DEBUG_DIR)])
    }

    /// Like [`Symbolizer::new`], with other directories than `/usr/lib/debug` to search for
    /// separate debug files (tests).
    pub fn with_debug_dirs(modules: &[Module], debug_dirs: Vec<PathBuf>) -> Symbolizer {
        let mut modules: Vec<Entry> = modules
            .iter()
            .map(|module| Entry {
                module: module.clone(),
                parsed: None,
            })
            .collect();
        modules.sort_by_key(|entry| entry.module.range.start);
        Symbolizer {
            modules,
            debug_dirs,
        }
    }

    /// Adds a module the target mapped since (parsed on its first lookup).
    pub fn add(&mut self, module: Module) {
        let at = self
            .modules
            .partition_point(|entry| entry.module.range.start <= module.range.start);
        self.modules.insert(
            at,
            Entry {
                module,
                parsed: None,
            },
        );
    }

    /// The frames at a *lookup address* (already `return address - 1` for callers; the caller
    /// does that), outermost first: the physical function first, then functions inlined into
    /// it, innermost last (`inlined: true` on all but the first). Never empty.
    pub fn symbolize(&mut self, address: u64) -> Vec<NativeFrame> {
        let index = self
            .modules
            .partition_point(|entry| entry.module.range.start <= address);
        let Some(entry) = index
            .checked_sub(1)
            .map(|index| &mut self.modules[index])
            .filter(|entry| entry.module.range.contains(&address))
        else {
            return vec![frame(format!("{address:#x}"), None, None, "", false)];
        };
        let module = &entry.module;
        let debug_dirs = &self.debug_dirs;
        let parsed = entry.parsed.get_or_insert_with(|| {
            catch_unwind(AssertUnwindSafe(|| Parsed::new(module, debug_dirs))).unwrap_or_default()
        });
        // The address the ELF file states (its SVMA): what DWARF and symbol tables use.
        let svma = address.wrapping_sub(module.bias);
        match catch_unwind(AssertUnwindSafe(|| parsed.frames(module, svma))) {
            Ok(frames) => frames,
            Err(_) => {
                // A parser panicked: drop what it may have left half-initialised.
                *parsed = Parsed::default();
                vec![frame(
                    fallback_name(module, svma),
                    None,
                    None,
                    &module.name,
                    false,
                )]
            }
        }
    }
}

/// What a module's files give: DWARF, if any, and its function symbols.
#[derive(Default)]
struct Parsed {
    dwarf: Option<Dwarf>,
    symbols: Symbols,
}

impl Parsed {
    fn new(module: &Module, debug_dirs: &[PathBuf]) -> Parsed {
        let Ok(object) = object::File::parse(&*module.image) else {
            return Parsed::default();
        };
        let own_dwarf = has_dwarf(&object);
        let debug = if own_dwarf && has_symtab(&object) {
            None
        } else {
            find_debug_file(module, &object, debug_dirs)
        };
        let debug_object = debug
            .as_ref()
            .and_then(|(image, _)| object::File::parse(&**image).ok());

        let dwarf = if own_dwarf {
            let dir = Path::new(&module.path).parent();
            Dwarf::load(&module.image, &object, dir, debug_dirs)
        } else {
            match (&debug, &debug_object) {
                (Some((image, path)), Some(debug_object)) if has_dwarf(debug_object) => {
                    Dwarf::load(image, debug_object, path.parent(), debug_dirs)
                }
                _ => None,
            }
        };

        let mut symbols = Symbols::from_table(&module.image, object.symbol_table());
        if symbols.is_empty() {
            if let (Some((image, _)), Some(debug_object)) = (&debug, &debug_object) {
                symbols = Symbols::from_table(image, debug_object.symbol_table());
            }
        }
        if symbols.is_empty() {
            symbols = Symbols::from_table(&module.image, object.dynamic_symbol_table());
        }
        Parsed { dwarf, symbols }
    }

    /// The frames at `svma`, an address as the ELF file states it.
    fn frames(&self, module: &Module, svma: u64) -> Vec<NativeFrame> {
        let (mut frames, short) = match &self.dwarf {
            Some(dwarf) => dwarf.frames(svma, &module.name),
            None => (Vec::new(), false),
        };
        match frames.first_mut() {
            // DWARF knows the line but not the function (e.g. a unit with line tables only).
            Some(first) if first.function.is_empty() => {
                first.function = self.symbol_name(module, svma);
            }
            // DWARF has only the unqualified name (Rust's `debug = "line-tables-only"` does
            // that): the symbol's is better.
            Some(first) if short => {
                if let Some(name) = self.symbols.lookup(svma) {
                    first.function = demangle(&String::from_utf8_lossy(name), None);
                }
            }
            Some(_) => {}
            None => frames.push(frame(
                self.symbol_name(module, svma),
                None,
                None,
                &module.name,
                false,
            )),
        }
        for inlined in frames.iter_mut().skip(1) {
            if inlined.function.is_empty() {
                inlined.function = fallback_name(module, svma);
            }
        }
        frames
    }

    /// The name of the function symbol covering `svma`, else `module+0xoffset`.
    fn symbol_name(&self, module: &Module, svma: u64) -> String {
        match self.symbols.lookup(svma) {
            Some(name) => demangle(&String::from_utf8_lossy(name), None),
            None => fallback_name(module, svma),
        }
    }
}

/// `module+0xoffset`, the offset being the address the ELF file states (lookup address minus
/// load bias), which is what `nm` and `objdump` show for it.
fn fallback_name(module: &Module, svma: u64) -> String {
    format!("{}+{svma:#x}", module.name)
}

fn frame(
    function: String,
    file: Option<String>,
    line: Option<u32>,
    module: &str,
    inlined: bool,
) -> NativeFrame {
    NativeFrame {
        function,
        file,
        line,
        module: module.to_owned(),
        inlined,
    }
}

fn has_dwarf(object: &object::File) -> bool {
    [".debug_info", ".debug_line"].iter().any(|name| {
        object
            .section_by_name(name)
            .is_some_and(|section| section.size() > 0 && !is_nobits(&section))
    })
}

/// Whether a section has no bytes in the file (`SHT_NOBITS`, as debug sections are in a
/// stripped file, or allocated sections in a file made by `objcopy --only-keep-debug`).
fn is_nobits(section: &object::Section) -> bool {
    section.file_range().is_none()
}

fn has_symtab(object: &object::File) -> bool {
    object
        .symbol_table()
        .is_some_and(|table| table.symbols().next().is_some())
}

// ---- DWARF ---------------------------------------------------------------------------------

/// Slices of the images a [`Dwarf`] holds, given `'static` lifetime so that the context and
/// the bytes it borrows can live in one struct.
type Slice = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

/// A module's DWARF, parsed lazily by addr2line.
struct Dwarf {
    /// Borrows from `_bytes`; declared first so that it is dropped first.
    context: addr2line::Context<Slice>,
    _bytes: Bytes,
}

impl Dwarf {
    /// DWARF from `object` (the file whose bytes are `image`, in directory `dir` if known), with
    /// its supplementary file if it names one.
    fn load(
        image: &Image,
        object: &object::File,
        dir: Option<&Path>,
        debug_dirs: &[PathBuf],
    ) -> Option<Dwarf> {
        let mut bytes = Bytes::default();
        let endian = endian(object);
        let mut dwarf = gimli::Dwarf::load(|id| {
            Ok::<_, gimli::Error>(gimli::EndianSlice::new(
                bytes.section(image, object, id.name()),
                endian,
            ))
        })
        .ok()?;
        if let Some(sup) = find_sup_file(object, dir, debug_dirs) {
            if let Ok(sup_object) = object::File::parse(&*sup) {
                let endian = self::endian(&sup_object);
                let loaded = dwarf.load_sup(|id| {
                    Ok::<_, gimli::Error>(gimli::EndianSlice::new(
                        bytes.section(&sup, &sup_object, id.name()),
                        endian,
                    ))
                });
                if loaded.is_err() {
                    dwarf.sup = None;
                }
            }
        }
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let context = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf {
            context,
            _bytes: bytes,
        })
    }

    /// The frames at `svma`, outermost first, with function names left empty when DWARF has
    /// none; and whether the outermost one's name is a C++ or Rust name without its namespaces
    /// (no linkage name in DWARF).
    fn frames(&self, svma: u64, module: &str) -> (Vec<NativeFrame>, bool) {
        // Split DWARF (.dwo files) is not loaded: its units are skipped.
        let Ok(mut iter) = self.context.find_frames(svma).skip_all_loads() else {
            return (Vec::new(), false);
        };
        // Innermost first, as addr2line gives them.
        let mut raw = Vec::new();
        let mut short = false;
        while let Ok(Some(found)) = iter.next() {
            if raw.len() == MAX_FRAMES_READ {
                break;
            }
            short = false;
            let function = found.function.as_ref().and_then(|function| {
                let name = function.raw_name().ok()?;
                short = !is_mangled(&name)
                    && (is_cpp(function.language)
                        || function.language == Some(gimli::DW_LANG_Rust));
                Some(demangle(&name, function.language))
            });
            let (file, line) = match found.location {
                Some(location) => (location.file.map(bounded), location.line),
                None => (None, None),
            };
            raw.push((function, file, line));
        }
        raw.reverse();
        raw.truncate(MAX_FRAMES);
        let frames = raw
            .into_iter()
            .enumerate()
            .map(|(depth, (function, file, line))| {
                frame(function.unwrap_or_default(), file, line, module, depth > 0)
            })
            .collect();
        (frames, short)
    }
}

fn endian(object: &object::File) -> gimli::RunTimeEndian {
    if object.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// The images whose bytes a [`Dwarf`]'s context borrows: the file, the debug file, the
/// supplementary file, decompressed sections.
#[derive(Default)]
struct Bytes(Vec<Image>);

impl Bytes {
    /// The (decompressed) bytes of section `name` of `object`, parsed from `image`; empty when
    /// missing, unreadable or implausibly large once decompressed.
    fn section(&mut self, image: &Image, object: &object::File, name: &str) -> &'static [u8] {
        let Some(section) = object.section_by_name(name) else {
            return &[];
        };
        let Ok(compressed) = section.compressed_data() else {
            return &[];
        };
        // Legitimate DWARF shrinks perhaps tenfold; a hostile header could claim terabytes.
        let limit = (compressed.data.len() as u64)
            .saturating_mul(64)
            .saturating_add(16 << 20);
        if compressed.format != CompressionFormat::None && compressed.uncompressed_size > limit {
            return &[];
        }
        match compressed.decompress() {
            Ok(Cow::Borrowed(bytes)) => self.hold(image, bytes),
            Ok(Cow::Owned(bytes)) => {
                let owned = Image::from_vec(bytes);
                self.hold(&owned, &owned)
            }
            Err(_) => &[],
        }
    }

    /// `bytes`, which must lie in `image`, for as long as `self` lives (empty if they don't).
    ///
    /// The `'static` is a lie confined to [`Dwarf`]: the context holding these slices is
    /// dropped before `self`, and `self` keeps the image (and so its bytes, which an `Image`
    /// never moves: a mapping or a heap buffer behind an `Arc`) alive.
    fn hold(&mut self, image: &Image, bytes: &[u8]) -> &'static [u8] {
        let start = image.as_ptr() as usize;
        let at = bytes.as_ptr() as usize;
        if bytes.is_empty() || at < start || at + bytes.len() > start + image.len() {
            return &[];
        }
        if !self
            .0
            .iter()
            .any(|held| held.as_ptr() == image.as_ptr() && held.len() == image.len())
        {
            self.0.push(image.clone());
        }
        // SAFETY: `bytes` lies within `image`'s bytes (checked above), which stay where they
        // are for as long as an `Image` referring to them lives, and `self` now holds one; the
        // slice is only used by the context that is dropped before `self` (see above).
        unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) }
    }
}

// ---- Symbol tables -------------------------------------------------------------------------

/// A module's function symbols, sorted by address; names stay in the file's bytes.
#[derive(Default)]
struct Symbols {
    image: Option<Image>,
    entries: Vec<Symbol>,
}

struct Symbol {
    address: u64,
    size: u64,
    /// Offset of the name in the image.
    name: usize,
    name_len: u32,
}

impl Symbols {
    /// The defined function symbols of `table`, read from `image`.
    fn from_table<'data>(
        image: &Image,
        table: Option<object::read::SymbolTable<'data, '_>>,
    ) -> Symbols {
        let Some(table) = table else {
            return Symbols::default();
        };
        let base = image.as_ptr() as usize;
        // (rank, symbol): at one address, globals win over weak symbols over locals.
        let mut entries: Vec<(u8, Symbol)> = table
            .symbols()
            .filter(|symbol| {
                symbol.kind() == SymbolKind::Text
                    && symbol.is_definition()
                    && symbol.size() > 0
                    && symbol.address() != 0
            })
            .filter_map(|symbol| {
                let name = symbol.name_bytes().ok()?;
                let at = (name.as_ptr() as usize).checked_sub(base)?;
                if name.is_empty() || at + name.len() > image.len() {
                    return None;
                }
                // (object's `is_global` is true for weak symbols too.)
                let rank = if symbol.is_weak() {
                    1
                } else if symbol.is_global() {
                    0
                } else {
                    2
                };
                Some((
                    rank,
                    Symbol {
                        address: symbol.address(),
                        size: symbol.size(),
                        name: at,
                        name_len: name.len().min(MAX_MANGLED) as u32,
                    },
                ))
            })
            .collect();
        entries.sort_unstable_by_key(|(rank, symbol)| (symbol.address, *rank));
        entries.dedup_by_key(|(_, symbol)| symbol.address);
        let entries: Vec<Symbol> = entries.into_iter().map(|(_, symbol)| symbol).collect();
        Symbols {
            image: (!entries.is_empty()).then(|| image.clone()),
            entries,
        }
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The raw name of the symbol nearest at or below `svma` whose size covers it.
    fn lookup(&self, svma: u64) -> Option<&[u8]> {
        let image = self.image.as_ref()?;
        let after = self
            .entries
            .partition_point(|symbol| symbol.address <= svma);
        let symbol = self.entries[..after]
            .iter()
            .rev()
            .take(MAX_SYMBOLS_BACK)
            .find(|symbol| svma - symbol.address < symbol.size)?;
        image.get(symbol.name..symbol.name + symbol.name_len as usize)
    }
}

// ---- Separate debug files ------------------------------------------------------------------

/// The separate debug file of the module whose ELF is `object`, and its path.
fn find_debug_file(
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
fn find_sup_file(
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

fn build_id<'data>(object: &object::File<'data>) -> Option<&'data [u8]> {
    object
        .build_id()
        .ok()
        .flatten()
        .filter(|id| id.len() >= 2 && id.len() <= 64)
}

/// `<debugdir>/.build-id/xx/yyyy.debug` for each debug directory.
fn build_id_paths(id: &[u8], debug_dirs: &[PathBuf]) -> Vec<PathBuf> {
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
fn crc32(bytes: &[u8]) -> u32 {
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

// ---- Names ---------------------------------------------------------------------------------

/// `raw` demangled (Rust without its hash, C++), or as is; at most [`MAX_NAME`] bytes.
fn demangle(raw: &str, language: Option<gimli::DwLang>) -> String {
    let mut out = Bounded::default();
    if raw.len() <= MAX_MANGLED {
        if !is_cpp(language) {
            if let Ok(demangled) = rustc_demangle::try_demangle(raw) {
                // `{:#}` leaves out the hash. An error only means the name was cut.
                let _ = write!(out, "{demangled:#}");
                return out.finish();
            }
        }
        if raw.starts_with("_Z") {
            if let Ok(symbol) = cpp_demangle::Symbol::new(raw.as_bytes()) {
                let options = cpp_demangle::DemangleOptions::default();
                if symbol.structured_demangle(&mut out, &options).is_ok() || out.cut {
                    return out.finish();
                }
            }
        }
    }
    bounded(raw)
}

/// Whether `name` looks like a C++ or Rust linkage name.
fn is_mangled(name: &str) -> bool {
    name.starts_with("_Z") || name.starts_with("_R")
}

fn is_cpp(language: Option<gimli::DwLang>) -> bool {
    language.is_some_and(|language| {
        [
            gimli::DW_LANG_C_plus_plus,
            gimli::DW_LANG_C_plus_plus_03,
            gimli::DW_LANG_C_plus_plus_11,
            gimli::DW_LANG_C_plus_plus_14,
            gimli::DW_LANG_C_plus_plus_17,
            gimli::DW_LANG_C_plus_plus_20,
        ]
        .contains(&language)
    })
}

/// `text` cut to at most [`MAX_NAME`] bytes.
fn bounded(text: &str) -> String {
    let mut out = Bounded::default();
    let _ = out.write_str(text);
    out.finish()
}

/// A string that refuses to grow beyond [`MAX_NAME`] bytes, `…` included.
#[derive(Default)]
struct Bounded {
    text: String,
    cut: bool,
}

impl Bounded {
    fn finish(mut self) -> String {
        if self.cut {
            self.text.push('…');
        }
        self.text
    }
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Err(fmt::Error);
        }
        let room = MAX_NAME - '…'.len_utf8() - self.text.len();
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&s[..end]);
        self.cut = true;
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{ObjectSegment, SegmentFlags};
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A C program with a function inlined into another; `INNER` and `CALL` mark lines.
    const INLINE_C: &str = r#"volatile int sink;

static inline __attribute__((always_inline)) int inner(int x) {
    sink = x * 3; /* INNER */
    sink = sink + x;
    return sink;
}

__attribute__((noinline)) int outer(int x) {
    int r = inner(x); /* CALL */
    return r * 2;
}

int main(int argc, char **argv) {
    (void)argv;
    return outer(argc);
}
"#;

    /// The 1-based line of `INLINE_C` holding `marker`.
    fn line_of(marker: &str) -> u32 {
        INLINE_C
            .lines()
            .position(|line| line.contains(marker))
            .unwrap() as u32
            + 1
    }

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TempDir(PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_dir(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fsprof-symbols-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn run(command: &mut Command) {
        let output = command
            .output()
            .unwrap_or_else(|error| panic!("{command:?}: {error}"));
        assert!(
            output.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Compiles `source` with `compiler` (`gcc` or `g++`) and `flags` into `dir/name`.
    fn compile(dir: &Path, compiler: &str, source: &str, name: &str, flags: &[&str]) -> PathBuf {
        let extension = if compiler == "g++" { "cpp" } else { "c" };
        let source_path = dir.join(format!("{name}.{extension}"));
        std::fs::write(&source_path, source).unwrap();
        let output = dir.join(name);
        run(Command::new(compiler)
            .args(flags)
            .arg("-o")
            .arg(&output)
            .arg(&source_path));
        output
    }

    /// `(address, size)` of `symbol` (mangled) as `nm` states them.
    fn nm(path: &Path, symbol: &str) -> (u64, u64) {
        let output = Command::new("nm").arg("-S").arg(path).output().unwrap();
        let text = String::from_utf8(output.stdout).unwrap();
        text.lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|fields| fields.len() == 4 && fields[3] == symbol)
            .map(|fields| {
                (
                    u64::from_str_radix(fields[0], 16).unwrap(),
                    u64::from_str_radix(fields[1], 16).unwrap(),
                )
            })
            .unwrap_or_else(|| panic!("{symbol} not in nm's output for {}", path.display()))
    }

    /// `(p_vaddr, p_offset, p_vaddr + p_memsz)` of the executable segments of `object`, merged.
    fn executable_segment(object: &object::File) -> (u64, u64, u64) {
        let mut found: Option<(u64, u64, u64)> = None;
        for segment in object.segments() {
            let SegmentFlags::Elf { p_flags } = segment.flags() else {
                continue;
            };
            if p_flags & object::elf::PF_X == 0 {
                continue;
            }
            let (offset, _) = segment.file_range();
            let end = segment.address() + segment.size();
            found = Some(match found {
                None => (segment.address(), offset, end),
                Some((address, offset, old_end)) => (address, offset, old_end.max(end)),
            });
        }
        found.expect("no executable segment")
    }

    /// A module for a file not loaded anywhere: bias 0, so lookup addresses are ELF addresses.
    fn file_module(path: &Path) -> Module {
        let image = Image::map(&File::open(path).unwrap()).unwrap();
        image_module(path, image)
    }

    fn image_module(path: &Path, image: Image) -> Module {
        let (start, _, end) = executable_segment(&object::File::parse(&*image).unwrap());
        Module {
            name: path.file_name().unwrap().to_str().unwrap().to_owned(),
            path: path.to_str().unwrap().to_owned(),
            range: start..end,
            bias: 0,
            inode: 0,
            image,
        }
    }

    /// The executable mapping of the file at `path` in this process, as fsprof would see it.
    fn mapped_module(path: &Path) -> Module {
        let image = Image::map(&File::open(path).unwrap()).unwrap();
        let (vaddr, p_offset, _) = executable_segment(&object::File::parse(&*image).unwrap());
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 || !fields[1].contains('x') || Path::new(fields[5]) != path {
                continue;
            }
            let (start, end) = fields[0].split_once('-').unwrap();
            let start = u64::from_str_radix(start, 16).unwrap();
            let end = u64::from_str_radix(end, 16).unwrap();
            let offset = u64::from_str_radix(fields[2], 16).unwrap();
            // The mapping's first byte is file offset `offset`, which the ELF places at
            // `vaddr - p_offset + offset`.
            let bias = start.wrapping_sub(vaddr.wrapping_sub(p_offset).wrapping_add(offset));
            return Module {
                name: path.file_name().unwrap().to_str().unwrap().to_owned(),
                path: path.to_str().unwrap().to_owned(),
                range: start..end,
                bias,
                inode: 0,
                image,
            };
        }
        panic!("{} is not mapped executable", path.display());
    }

    /// A directory with nothing in it, so that tests do not find the machine's debug files.
    fn no_debug_dirs() -> Vec<PathBuf> {
        vec![PathBuf::from("/nonexistent/fsprof-debug")]
    }

    /// Checks that some address in `outer` symbolizes to `outer` with `inner` inlined into it,
    /// at the right lines, and that every address in it has `outer` as its physical function.
    fn check_inlined(symbolizer: &mut Symbolizer, module: &str, outer: (u64, u64)) {
        let (address, size) = outer;
        let mut seen_inlined = false;
        for lookup in address..address + size {
            let frames = symbolizer.symbolize(lookup);
            assert_eq!(frames[0].function, "outer", "at {lookup:#x}: {frames:?}");
            assert!(!frames[0].inlined);
            assert!(frames.iter().all(|frame| frame.module == module));
            assert!(frames.iter().skip(1).all(|frame| frame.inlined));
            if frames.len() == 2 {
                seen_inlined = true;
                assert!(frames[0].file.as_deref().unwrap().ends_with("inline.c"));
                assert_eq!(frames[0].line, Some(line_of("CALL")), "{frames:?}");
                assert_eq!(frames[1].function, "inner");
                assert!(frames[1].file.as_deref().unwrap().ends_with("inline.c"));
                let line = frames[1].line.unwrap();
                let body = line_of("INNER");
                assert!((body..body + 3).contains(&line), "{frames:?}");
            }
        }
        assert!(seen_inlined, "no address in outer had inner inlined");
    }

    #[test]
    fn dwarf_gives_inlined_frames_and_lines() {
        let dir = temp_dir("dwarf");
        // Plain, and with zlib-compressed debug sections.
        for flags in [&["-g", "-O2"][..], &["-g", "-O2", "-gz"][..]] {
            let program = compile(&dir, "gcc", INLINE_C, "inline", flags);
            let outer = nm(&program, "outer");
            let module = file_module(&program);
            let compressed = object::File::parse(&*module.image)
                .unwrap()
                .section_by_name(".debug_info")
                .unwrap()
                .compressed_data()
                .unwrap()
                .format
                != CompressionFormat::None;
            assert_eq!(compressed, flags.contains(&"-gz"));
            let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
            check_inlined(&mut symbolizer, "inline", outer);
        }
    }

    #[test]
    fn inline_depth_is_capped_keeping_the_outermost() {
        let depth = 100;
        let mut source = String::from("volatile int sink;\n");
        source += &format!(
            "static inline __attribute__((always_inline)) void f{}(int x) {{ sink = x; }}\n",
            depth - 1
        );
        for level in (0..depth - 1).rev() {
            source += &format!(
                "static inline __attribute__((always_inline)) void f{level}(int x) \
                 {{ f{}(x + 1); sink = x; }}\n",
                level + 1
            );
        }
        source += "__attribute__((noinline)) int deep(int x) { f0(x); return 0; }\n";
        source += "int main(int argc, char **argv) { (void)argv; return deep(argc); }\n";
        let dir = temp_dir("deep");
        let program = compile(&dir, "gcc", &source, "deep", &["-g", "-O2"]);
        let (address, size) = nm(&program, "deep");
        let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
        let deepest = (address..address + size)
            .map(|lookup| symbolizer.symbolize(lookup))
            .max_by_key(Vec::len)
            .unwrap();
        assert_eq!(deepest.len(), MAX_FRAMES);
        assert_eq!(deepest[0].function, "deep");
        for (level, frame) in deepest.iter().enumerate().skip(1) {
            assert_eq!(frame.function, format!("f{}", level - 1));
        }
    }

    #[test]
    fn symbol_table_without_dwarf() {
        let dir = temp_dir("symtab");
        let program = compile(&dir, "gcc", INLINE_C, "inline", &["-O2"]);
        let (outer, _) = nm(&program, "outer");
        let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
        let frames = symbolizer.symbolize(outer + 1);
        assert_eq!(
            frames,
            vec![frame("outer".into(), None, None, "inline", false)]
        );
    }

    #[test]
    fn stripped_falls_back_to_dynsym_then_offset() {
        let dir = temp_dir("stripped");
        let source = r#"
__attribute__((noinline, noclone, used)) static int hidden_helper(int x) { return x * 7 + 1; }
int exported_function(int x) { return hidden_helper(x) + 3; }
"#;
        let library = compile(
            &dir,
            "gcc",
            source,
            "libdemo.so",
            &["-O2", "-shared", "-fPIC"],
        );
        let (exported, _) = nm(&library, "exported_function");
        let (hidden, _) = nm(&library, "hidden_helper");
        run(Command::new("strip").arg(&library));
        let module = file_module(&library);
        {
            let object = object::File::parse(&*module.image).unwrap();
            assert!(object.symbol_table().is_none(), "strip left .symtab");
        }
        let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
        assert_eq!(
            symbolizer.symbolize(exported + 1)[0].function,
            "exported_function"
        );
        let frames = symbolizer.symbolize(hidden + 1);
        assert_eq!(
            frames,
            vec![frame(
                format!("libdemo.so+{:#x}", hidden + 1),
                None,
                None,
                "libdemo.so",
                false
            )]
        );
    }

    #[test]
    fn cpp_names_are_demangled() {
        let dir = temp_dir("cpp");
        let source = r#"
volatile int sink;
namespace geometry {
__attribute__((noinline)) int area(int w, int h) { return w * h + sink; }
}
int main(int argc, char **) { return geometry::area(argc, argc); }
"#;
        for flags in [&["-O2"][..], &["-O2", "-g"][..]] {
            let program = compile(&dir, "g++", source, "shapes", flags);
            let (area, _) = nm(&program, "_ZN8geometry4areaEii");
            let mut symbolizer =
                Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
            let frames = symbolizer.symbolize(area + 1);
            assert_eq!(frames[0].function, "geometry::area(int, int)", "{flags:?}");
            assert_eq!(frames[0].file.is_some(), flags.contains(&"-g"));
        }
    }

    /// `-g -O2` program `dir/inline` split into a stripped file and `dir/inline.debug`.
    fn split_debug(dir: &Path, build_id: bool, strip_flag: &str) -> (PathBuf, PathBuf, (u64, u64)) {
        let id_flag = if build_id {
            "-Wl,--build-id"
        } else {
            "-Wl,--build-id=none"
        };
        let program = compile(dir, "gcc", INLINE_C, "inline", &["-g", "-O2", id_flag]);
        let outer = nm(&program, "outer");
        let debug = dir.join("inline.debug");
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&program)
            .arg(&debug));
        run(Command::new("strip").arg(strip_flag).arg(&program));
        (program, debug, outer)
    }

    #[test]
    fn debuglink_next_to_the_file_and_under_the_debug_dir() {
        let dir = temp_dir("debuglink");
        let (program, debug, outer) = split_debug(&dir, false, "--strip-debug");
        run(Command::new("objcopy")
            .current_dir(&*dir)
            .arg("--add-gnu-debuglink=inline.debug")
            .arg(&program));

        // Next to the file, even after the file itself was replaced by something else (the
        // image is what counts, not the path).
        let module = file_module(&program);
        let replacement = dir.join("replacement");
        std::fs::write(&replacement, b"not an ELF file").unwrap();
        std::fs::rename(&replacement, &program).unwrap();
        let mut symbolizer =
            Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
        check_inlined(&mut symbolizer, "inline", outer);

        // In .debug/ next to it.
        std::fs::create_dir(dir.join(".debug")).unwrap();
        std::fs::rename(&debug, dir.join(".debug/inline.debug")).unwrap();
        let mut symbolizer =
            Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
        check_inlined(&mut symbolizer, "inline", outer);

        // Under a debug directory, at the file's directory.
        let debug_dir = temp_dir("debuglink-dir");
        let under = debug_dir.join(dir.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&under).unwrap();
        std::fs::rename(dir.join(".debug/inline.debug"), under.join("inline.debug")).unwrap();
        let mut symbolizer = Symbolizer::with_debug_dirs(
            std::slice::from_ref(&module),
            vec![debug_dir.to_path_buf()],
        );
        check_inlined(&mut symbolizer, "inline", outer);

        // A debug file with the wrong CRC is not used: the symbol table still names the
        // function, but there are no lines.
        let mut bytes = std::fs::read(under.join("inline.debug")).unwrap();
        bytes.push(0);
        std::fs::write(dir.join("inline.debug"), bytes).unwrap();
        let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
        let frames = symbolizer.symbolize(outer.0 + 1);
        assert_eq!(
            frames,
            vec![frame("outer".into(), None, None, "inline", false)]
        );
    }

    #[test]
    fn debug_file_by_build_id() {
        let dir = temp_dir("build-id");
        let (program, debug, outer) = split_debug(&dir, true, "--strip-all");
        let module = file_module(&program);
        let id = {
            let object = object::File::parse(&*module.image).unwrap();
            assert!(object.symbol_table().is_none(), "strip left .symtab");
            build_id(&object).unwrap().to_vec()
        };
        let debug_dir = temp_dir("build-id-dir");
        let path = build_id_paths(&id, &[debug_dir.to_path_buf()]).remove(0);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::rename(&debug, &path).unwrap();

        // Not found without the debug directory: no symbols at all.
        let mut symbolizer =
            Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
        assert_eq!(
            symbolizer.symbolize(outer.0 + 1)[0].function,
            format!("inline+{:#x}", outer.0 + 1)
        );

        let mut symbolizer = Symbolizer::with_debug_dirs(&[module], vec![debug_dir.to_path_buf()]);
        check_inlined(&mut symbolizer, "inline", outer);
    }

    #[inline(never)]
    fn rust_symbolization_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(31).rotate_left(7)
    }

    /// Whether `name` has a Rust hash (`::h` and 16 hex digits) in it.
    fn has_hash(name: &str) -> bool {
        name.match_indices("::h").any(|(at, _)| {
            let rest = &name.as_bytes()[at + 3..];
            rest.len() >= 16 && rest[..16].iter().all(u8::is_ascii_hexdigit)
        })
    }

    #[test]
    fn rust_names_without_hash() {
        assert_eq!(rust_symbolization_target(1), 31 << 7);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let module = mapped_module(&exe);
        let address = rust_symbolization_target as *const () as usize as u64 + 1;
        let mut symbolizer =
            Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
        let frames = symbolizer.symbolize(address);
        let function = &frames[0].function;
        assert!(
            function.ends_with("symbols::tests::rust_symbolization_target"),
            "{frames:?}"
        );
        assert!(!has_hash(function), "{frames:?}");
        assert_eq!(frames[0].module, module.name);
        assert!(frames[0]
            .file
            .as_deref()
            .is_some_and(|file| file.ends_with("symbols.rs")));

        // Demangling the symbol table's name directly, too.
        let parsed = Parsed::new(&module, &[]);
        let raw = parsed
            .symbols
            .lookup(address.wrapping_sub(module.bias))
            .unwrap();
        let raw = std::str::from_utf8(raw).unwrap();
        assert!(raw.starts_with("_ZN") || raw.starts_with("_R"), "{raw}");
        let demangled = demangle(raw, None);
        assert!(
            demangled.ends_with("symbols::tests::rust_symbolization_target"),
            "{demangled}"
        );
        assert!(!has_hash(&demangled));
    }

    #[test]
    fn system_library() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| path.contains("/libc.so"))
            .expect("libc is not mapped");
        let module = mapped_module(Path::new(libc));
        let address = nix::libc::getpid as *const () as usize as u64 + 1;
        assert!(module.range.contains(&address));
        let frames = Symbolizer::new(&[module]).symbolize(address);
        assert!(frames[0].function.contains("getpid"), "{frames:?}");
    }

    #[test]
    fn address_in_no_module() {
        let mut symbolizer = Symbolizer::new(&[]);
        assert_eq!(
            symbolizer.symbolize(0x1234),
            vec![frame("0x1234".into(), None, None, "", false)]
        );
    }

    #[test]
    fn long_names_are_cut() {
        let long = "x".repeat(10_000);
        let name = demangle(&long, None);
        assert_eq!(name.len(), MAX_NAME);
        assert!(name.ends_with('…'));
        // A C++ name whose demangling outgrows the bound: each `S_` repeats the type so far.
        let mangled = format!("_Z1fPFvPA1_iE{}", "S_".repeat(2000));
        let name = demangle(&mangled, None);
        assert!(
            name.starts_with("f(void (*)(int (*) [1])") && name.ends_with('…'),
            "{name}"
        );
        assert!(name.len() <= MAX_NAME);
        // Not UTF-8-splitting.
        let name = demangle(&"é".repeat(5000), None);
        assert!(name.len() <= MAX_NAME && name.ends_with('…'));
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut bytewise = !0u32;
        for &byte in &bytes {
            bytewise ^= byte as u32;
            for _ in 0..8 {
                bytewise = if bytewise & 1 != 0 {
                    0xedb8_8320 ^ (bytewise >> 1)
                } else {
                    bytewise >> 1
                };
            }
        }
        assert_eq!(crc32(&bytes), !bytewise);
    }

    /// A tiny xorshift generator, for reproducible garbage.
    fn garbage(seed: u64, length: usize) -> Vec<u8> {
        let mut state = seed | 1;
        (0..length)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    /// Files with damaged DWARF, truncated or garbage: every lookup falls back, none panics.
    /// (Calls the parser without `symbolize`'s `catch_unwind`, so that a panic fails the test.)
    #[test]
    fn hostile_files_do_not_panic() {
        let dir = temp_dir("hostile");
        let program = compile(&dir, "gcc", INLINE_C, "inline", &["-g", "-O2"]);
        let original = std::fs::read(&program).unwrap();
        let base = file_module(&program);
        let sections: Vec<(u64, u64)> = {
            let object = object::File::parse(&*base.image).unwrap();
            object
                .sections()
                .filter(|section| section.name().is_ok_and(|name| name.starts_with(".debug")))
                .filter_map(|section| section.file_range())
                .collect()
        };
        assert!(!sections.is_empty());

        let mut images = Vec::new();
        for seed in 1..=40u64 {
            let mut bytes = original.clone();
            // Garbage over one debug section, or a few bytes flipped in all of them.
            if seed % 2 == 0 {
                let (offset, size) = sections[seed as usize % sections.len()];
                let noise = garbage(seed, size as usize);
                bytes[offset as usize..(offset + size) as usize].copy_from_slice(&noise);
            } else {
                for (offset, size) in &sections {
                    for (i, noise) in garbage(seed, 16).chunks(2).enumerate() {
                        let at = offset + (noise[0] as u64 * 7919 + i as u64 * 104_729) % size;
                        bytes[at as usize] ^= noise[1] | 1;
                    }
                }
            }
            images.push(bytes);
        }
        images.push(original[..original.len() / 2].to_vec());
        images.push(original[..200].to_vec());
        images.push(garbage(7, original.len()));
        images.push(Vec::new());

        for bytes in images {
            let module = Module {
                image: Image::from_vec(bytes),
                ..base.clone()
            };
            let parsed = Parsed::new(&module, &[]);
            for address in module.range.clone() {
                let frames = parsed.frames(&module, address);
                assert!(!frames.is_empty());
                assert!(frames.len() <= MAX_FRAMES);
                assert!(frames.iter().all(|frame| frame.module == "inline"
                    && !frame.function.is_empty()
                    && frame.function.len() <= MAX_NAME));
            }
        }
    }

    /// Times parsing and lookups over this test binary (run with `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn measure() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let module = mapped_module(&exe);
        let range = module.range.clone();
        let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
        let started = std::time::Instant::now();
        symbolizer.symbolize(rust_symbolization_target as *const () as usize as u64 + 1);
        let first = started.elapsed();
        let step = ((range.end - range.start) / 100_000).max(1);
        let started = std::time::Instant::now();
        let mut count = 0;
        let mut frames = 0;
        for address in range.step_by(step as usize) {
            frames += symbolizer.symbolize(address).len();
            count += 1;
        }
        let rest = started.elapsed();
        println!(
            "first lookup (parse) {first:?}; {count} lookups in {rest:?} ({:?} each, {frames} frames)",
            rest / count
        );
    }
}
