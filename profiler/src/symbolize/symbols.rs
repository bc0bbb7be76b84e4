//! Symbolization after recording: the functions at an address in the target (the physical
//! function and those inlined into it), with their source file and line.
//!
//! A module's ELF file is parsed lazily, on the first lookup in it, from the bytes fsprof kept
//! open ([`Module::image`]), never by opening its path again (the file may have been deleted or
//! replaced by another build since); the path only serves to find separate debug files next to
//! it. What is parsed is shared by every symbolizer of the session (the processes of a tree run
//! the same files). Sources, best first:
//!
//! 1. DWARF line tables and inlined functions, from the file itself or, when it has none, from a
//!    separate debug file: by build id (`<debugdir>/.build-id/xx/yyyy.debug`), then by
//!    `.gnu_debuglink` (`<dir>/<name>`, `<dir>/.debug/<name>`, `<debugdir>/<dir>/<name>`; accepted
//!    when the build ids match or, without them, the CRC-32 does), with the dwz supplementary
//!    file its `.gnu_debugaltlink` names;
//! 2. the symbol table (`.symtab`, else the debug file's `.symtab`, else `.dynsym` with the
//!    MiniDebugInfo's `.symtab`, from `.gnu_debugdata`: `mini_debug_info.rs`): the function
//!    symbol nearest at or below the address whose size covers it;
//! 3. `module+0xSTART`: the start of the function covering the address as the unwind tables
//!    state it (`function_ranges.rs`: a stripped binary keeps them), so that all of a function's
//!    addresses get one name; else `module+0xoffset` of the address itself. Offsets are
//!    addresses as the ELF file states them.
//!
//! Names are demangled (Rust without its hash, C++), names and paths are cut at 4 KiB, and at
//! most 64 frames come back per address. Every file is untrusted: a bad one only makes lookups
//! fall back (parsing and lookups also run under `catch_unwind`, in case a parser panics).
//!
//! Finding the separate debug files is `debug_files.rs`'s job, keeping a symbol table
//! `symbol_table.rs`'s, demangling and cutting names `demangle.rs`'s; the tests are in
//! `symbols/tests.rs`.
//!
//! An address no module holds is named from the process's perf map where it has one
//! (`jit_code.rs`: JIT-compiled code), else shown as it is (`0x…`).
//!
//! Debug files no directory holds are fetched by build id from debuginfod servers where the
//! symbolizer is given them (`debuginfod.rs`: only after recording).
//!
//! Not handled: split DWARF (`.dwo`/`.dwp` files),
//! non-ELF files, and a per-address cache (callers symbolize each distinct address once).

use super::call_targets::CallTargets;
use super::debug_files::{find_debug_file, find_sup_file};
use super::debuginfod::Debuginfod;
use super::demangle::{bounded, demangle, is_cpp, is_mangled};
use super::function_ranges::FunctionRanges;
use super::jit_code::JitCode;
use super::symbol_table::Symbols;
use crate::profile::Symbolize;
use crate::profile::{Callee, MissingSymbols, ModuleFile, NativeFrame, UnnamedModule};
use crate::program::modules::{Image, Module};
use addr2line::gimli;
use object::{CompressionFormat, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use std::borrow::Cow;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The module a JIT-compiled function's frame names.
const JIT_MODULE: &str = "[jit]";
/// Where distributions install separate debug files.
const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";
/// Most frames (physical plus inlined) returned for one address; deeper inlined ones are dropped.
const MAX_FRAMES: usize = 64;
/// Most inlined frames read from DWARF for one address before keeping the outermost
/// [`MAX_FRAMES`].
const MAX_FRAMES_READ: usize = 1024;

/// Symbolizes addresses in a target's modules, parsing each module's files once, on first use.
pub struct Symbolizer {
    /// Sorted by start address.
    modules: Vec<Entry>,
    debug_dirs: Vec<PathBuf>,
    /// Where debug files not found in the directories are fetched from, if anywhere.
    debuginfod: Option<Arc<Debuginfod>>,
    /// JIT-compiled functions, for addresses no module holds.
    jit: JitCode,
    /// Modules some address of which had no name but `module+0x…`, each with the first such
    /// name (for the note: a debug file that lacks one function reads otherwise as none).
    unnamed: std::collections::BTreeMap<String, Unnamed>,
    /// Which module defines an imported name that has no symbol version (see `exporter`).
    exporters: HashMap<String, String>,
}

/// Most imported names whose module is remembered (a program imports a few hundred).
const MAX_EXPORTERS: usize = 1 << 16;

struct Entry {
    module: Module,
    /// `None` until the first lookup in the module.
    parsed: Option<Arc<Mutex<Parsed>>>,
}

/// The parsed files of every symbolizer of this fsprof (shared by the processes of a tree,
/// which run the same programs and libraries: a `make -j` runs `cc1` dozens of times), by the
/// file's identity (inode, path, length), the debug directories searched and whether debuginfod
/// is asked. Each is parsed
/// once, by the first symbolizer that needs it (the others wait for it).
type Shared = HashMap<(u64, String, usize, Vec<PathBuf>, bool), Arc<OnceLock<Arc<Mutex<Parsed>>>>>;

/// The parsed files of `module` (see [`Shared`]); the vdso's, which has no file, its own.
fn parsed(
    module: &Module,
    debug_dirs: &[PathBuf],
    debuginfod: Option<&Debuginfod>,
) -> Arc<Mutex<Parsed>> {
    static SHARED: Mutex<Option<Shared>> = Mutex::new(None);
    let parse = || {
        let parsed = catch_unwind(AssertUnwindSafe(|| {
            Parsed::new(module, debug_dirs, debuginfod)
        }));
        Arc::new(Mutex::new(parsed.unwrap_or_default()))
    };
    if module.inode == 0 {
        return parse();
    }
    let key = (
        module.inode,
        module.path.clone(),
        module.image.len(),
        debug_dirs.to_vec(),
        debuginfod.is_some(),
    );
    let once = {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            shared
                .get_or_insert_with(HashMap::new)
                .entry(key)
                .or_default(),
        )
    };
    Arc::clone(once.get_or_init(parse))
}

impl Symbolizer {
    /// Symbolizer over the target's modules (cheap: files are parsed lazily, on first lookup in
    /// them).
    pub fn new(modules: &[Module]) -> Symbolizer {
        Symbolizer::with_debug_dirs(modules, vec![PathBuf::from(DEFAULT_DEBUG_DIR)])
    }

    /// Like [`Symbolizer::new`], searching `dirs` for separate debug files before
    /// `/usr/lib/debug` (`--debug-dir`).
    pub fn with_extra_debug_dirs(modules: &[Module], dirs: &[PathBuf]) -> Symbolizer {
        let mut debug_dirs = dirs.to_vec();
        debug_dirs.push(PathBuf::from(DEFAULT_DEBUG_DIR));
        Symbolizer::with_debug_dirs(modules, debug_dirs)
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
            debuginfod: None,
            jit: JitCode::default(),
            unnamed: Default::default(),
            exporters: HashMap::new(),
        }
    }

    /// This symbolizer, fetching the debug files it finds nowhere else from `debuginfod`'s
    /// servers (only after recording: a fetch may take seconds).
    pub fn with_debuginfod(mut self, debuginfod: Option<Arc<Debuginfod>>) -> Symbolizer {
        self.debuginfod = debuginfod;
        self
    }

    /// This symbolizer, naming the addresses no module holds from `jit` (JIT-compiled code).
    pub fn with_jit_code(mut self, jit: JitCode) -> Symbolizer {
        self.jit = jit;
        self
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
            return vec![match self.jit.lookup(address) {
                Some(name) => frame(name.to_owned(), None, None, JIT_MODULE, false),
                None => frame(format!("{address:#x}"), None, None, "", false),
            }];
        };
        let module = &entry.module;
        let (debug_dirs, debuginfod) = (&self.debug_dirs, self.debuginfod.as_deref());
        let parsed = entry
            .parsed
            .get_or_insert_with(|| parsed(module, debug_dirs, debuginfod));
        let mut parsed = parsed.lock().unwrap_or_else(|e| e.into_inner());
        // The address the ELF file states (its SVMA): what DWARF and symbol tables use.
        let svma = address.wrapping_sub(module.bias);
        match catch_unwind(AssertUnwindSafe(|| parsed.frames(module, svma))) {
            Ok(frames) => {
                let unnamed = frames[0]
                    .function
                    .strip_prefix(module.name.as_str())
                    .is_some_and(|rest| rest.starts_with("+0x"));
                if unnamed && !self.unnamed.contains_key(&module.name) {
                    let first = Unnamed {
                        first: frames[0].function.clone(),
                        path: module.path.clone(),
                    };
                    self.unnamed.insert(module.name.clone(), first);
                }
                frames
            }
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

impl Symbolizer {
    /// The function the call that returns to `return_address` calls, if its instruction names
    /// one (see `call_targets.rs`).
    pub fn calls(&mut self, return_address: u64) -> Option<Callee> {
        let index = self
            .modules
            .partition_point(|entry| entry.module.range.start < return_address);
        let entry = index
            .checked_sub(1)
            .map(|index| &mut self.modules[index])
            .filter(|entry| entry.module.range.contains(&(return_address - 1)))?;
        let module = &entry.module;
        let (debug_dirs, debuginfod) = (&self.debug_dirs, self.debuginfod.as_deref());
        let parsed = entry
            .parsed
            .get_or_insert_with(|| parsed(module, debug_dirs, debuginfod));
        let parsed = parsed.lock().unwrap_or_else(|e| e.into_inner());
        let svma = return_address.wrapping_sub(module.bias);
        let mut callee = catch_unwind(AssertUnwindSafe(|| {
            let targets = (parsed.call_targets).get_or_init(|| CallTargets::new(&module.image));
            targets.callee(&module.image, svma, &module.name, |target| {
                parsed
                    .symbols
                    .lookup(target)
                    .map(|name| demangle(&String::from_utf8_lossy(name), None))
            })
        }))
        .ok()
        .flatten()?;
        drop(parsed);
        // A slot's symbol comes as the file writes it (`_Znam`: operator new[]).
        if is_mangled(&callee.function) {
            callee.function = demangle(&callee.function, None);
        }
        if callee.module.is_empty() {
            callee.module = self.exporter(&callee.function, index - 1);
        }
        Some(callee)
    }

    /// The module other than `caller` (an index into `modules`) whose dynamic symbol table
    /// defines `name`, the first by address; empty if none does. For an import without a
    /// symbol version (musl's programs have none), where the loader finds it among the loaded
    /// files: with one C library and a program, the library.
    fn exporter(&mut self, name: &str, caller: usize) -> String {
        if let Some(module) = self.exporters.get(name) {
            return module.clone();
        }
        let defines = |image: &[u8]| {
            let Ok(file) = object::File::parse(image) else {
                return false;
            };
            (file.dynamic_symbols())
                .any(|s| s.is_definition() && s.name_bytes() == Ok(name.as_bytes()))
        };
        let module = catch_unwind(AssertUnwindSafe(|| {
            (self.modules.iter().enumerate())
                .filter(|(at, _)| *at != caller)
                .find(|(_, entry)| defines(&entry.module.image))
                .map(|(_, entry)| entry.module.name.clone())
        }))
        .ok()
        .flatten()
        .unwrap_or_default();
        if self.exporters.len() < MAX_EXPORTERS {
            self.exporters.insert(name.to_owned(), module.clone());
        }
        module
    }
}

impl Symbolize for &mut Symbolizer {
    fn frames(&mut self, address: u64) -> Vec<NativeFrame> {
        self.symbolize(address)
    }

    fn calls(&mut self, return_address: u64) -> Option<Callee> {
        Symbolizer::calls(self, return_address)
    }
}

impl Symbolizer {
    /// The modules some address was looked up in, for the profile: name, path and build id.
    pub fn modules_used(&self) -> Vec<ModuleFile> {
        (self.modules.iter())
            .filter_map(|entry| {
                let parsed = entry.parsed.as_ref()?;
                let parsed = parsed.lock().unwrap_or_else(|e| e.into_inner());
                Some(ModuleFile {
                    name: entry.module.name.clone(),
                    path: entry.module.path.clone(),
                    build_id: (parsed.build_id.as_ref())
                        .map(|id| id.iter().map(|byte| format!("{byte:02x}")).collect()),
                    c_library: parsed.c_library,
                })
            })
            .collect()
    }

    /// The modules some addresses of which had no symbol (a stripped binary, say), and what was
    /// looked for, for the report's note (`render/text.rs`); `None` if every address had a name.
    pub fn missing_symbols(&self) -> Option<MissingSymbols> {
        if self.unnamed.is_empty() {
            return None;
        }
        Some(MissingSymbols {
            modules: (self.unnamed.iter())
                .map(|(name, unnamed)| UnnamedModule {
                    name: name.clone(),
                    first: unnamed.first.clone(),
                    system: is_system_file(&unnamed.path),
                })
                .collect(),
            debug_dirs: (self.debug_dirs.iter())
                .map(|dir| dir.display().to_string())
                .collect(),
            debuginfod: self.debuginfod.is_some(),
        })
    }
}

/// A module with an address that had no name.
struct Unnamed {
    /// The first such address's name (`module+0xSTART`).
    first: String,
    /// The module's path.
    path: String,
}

/// Whether `path` is a file the system's packages installed (not one built by the user or
/// installed by hand under `/usr/local`).
fn is_system_file(path: &str) -> bool {
    !path.starts_with("/usr/local/")
        && ["/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/"]
            .iter()
            .any(|dir| path.starts_with(dir))
}

/// What a module's files give: DWARF, if any, and its function symbols; the function ranges of
/// its unwind tables once an address needs them.
#[derive(Default)]
struct Parsed {
    /// The module's build id (GNU note), if it has one.
    build_id: Option<Vec<u8>>,
    dwarf: Option<Dwarf>,
    symbols: Symbols,
    ranges: std::cell::OnceCell<FunctionRanges>,
    /// What its calls call, once a caller's frame in it needs it.
    call_targets: std::cell::OnceCell<CallTargets>,
    /// Its procedure linkage table (`.plt`, `.plt.sec`, `.plt.got`): stubs with no symbol.
    plt: Vec<std::ops::Range<u64>>,
    /// It defines the C library's entry, `__libc_start_main` (see [`ModuleFile::c_library`]).
    c_library: bool,
}

impl Parsed {
    fn new(module: &Module, debug_dirs: &[PathBuf], debuginfod: Option<&Debuginfod>) -> Parsed {
        let Ok(object) = object::File::parse(&*module.image) else {
            return Parsed::default();
        };
        let own_dwarf = has_dwarf(&object);
        let debug = if own_dwarf && has_symtab(&object) {
            None
        } else {
            find_debug_file(module, &object, debug_dirs, debuginfod)
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

        let mut symbols = Symbols::from_table(&module.image, &object, object.symbol_table());
        if symbols.is_empty() {
            if let (Some((image, _)), Some(debug_object)) = (&debug, &debug_object) {
                symbols = Symbols::from_table(image, debug_object, debug_object.symbol_table());
            }
        }
        if symbols.is_empty() {
            symbols = Symbols::from_table(&module.image, &object, object.dynamic_symbol_table());
            if let Some(mini) = super::mini_debug_info::decompressed(&object) {
                if let Ok(mini_object) = object::File::parse(&*mini) {
                    symbols = symbols.with(Symbols::from_table(
                        &mini,
                        &mini_object,
                        mini_object.symbol_table(),
                    ));
                }
            }
        }
        let plt = (object.sections())
            .filter(|section| {
                matches!(
                    section.name(),
                    Ok(".plt" | ".plt.sec" | ".plt.got" | ".iplt")
                )
            })
            .map(|section| section.address()..section.address().saturating_add(section.size()))
            .collect();
        let c_library =
            defines_libc_start(&object) || debug_object.as_ref().is_some_and(defines_libc_start);
        Parsed {
            build_id: super::debug_files::build_id(&object).map(<[u8]>::to_vec),
            dwarf,
            symbols,
            ranges: Default::default(),
            call_targets: Default::default(),
            plt,
            c_library,
        }
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
                inlined.function = self.unnamed(module, svma);
            }
        }
        frames
    }

    /// The name of the function symbol covering `svma`, else `[PLT of module]` for a stub of
    /// its linkage table (no debug file names those: not a missing symbol), else
    /// `module+0xSTART`.
    fn symbol_name(&self, module: &Module, svma: u64) -> String {
        match self.symbols.lookup(svma) {
            Some(name) => demangle(&String::from_utf8_lossy(name), None),
            None if self.plt.iter().any(|plt| plt.contains(&svma)) => {
                format!("[PLT of {}]", module.name)
            }
            None => self.unnamed(module, svma),
        }
    }

    /// `module+0xSTART` of the function covering `svma` by the unwind tables (read on the first
    /// such address), else `module+0xoffset` of `svma`.
    fn unnamed(&self, module: &Module, svma: u64) -> String {
        let ranges = self.ranges.get_or_init(|| {
            object::File::parse(&*module.image)
                .map(|object| FunctionRanges::from_object(&object))
                .unwrap_or_default()
        });
        fallback_name(module, ranges.start_of(svma).unwrap_or(svma))
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
        calls: None,
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

/// Whether the file defines `__libc_start_main`, the C library's entry (glibc and musl alike):
/// it holds the C library, as its shared object or linked into a static program (which only
/// refers to it when the C library is a shared one).
fn defines_libc_start(object: &object::File) -> bool {
    let defines = |symbol: object::Symbol| {
        !symbol.is_undefined() && symbol.name_bytes() == Ok(b"__libc_start_main".as_slice())
    };
    object.symbols().any(defines) || object.dynamic_symbols().any(defines)
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

#[cfg(test)]
mod tests;
