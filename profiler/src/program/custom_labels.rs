//! Labels a program publishes by the custom-labels ABI v1 (polarsignals/custom-labels, which
//! parca-agent reads): the executable, or a library named `libcustomlabels*.so` loaded at its
//! start, exports `custom_labels_abi_version` (a `u32`, 1) and the thread-local
//! `custom_labels_current_set`, a pointer to the thread's label set `{storage, count,
//! capacity}`, whose `count` labels are `{{len, buf} key, {len, buf} value}` (x86-64: 8-byte
//! fields). A label whose key is null is skipped; of two with one key, the first counts.
//!
//! Here: finding the ABI in a process's modules and where the thread-local lies from a thread's
//! thread pointer (its `fs` base): in the executable, below the thread pointer by its TLS
//! segment's size (x86-64's static TLS); in the library, where the loader's TLS descriptor says
//! (read from the target). And reading one thread's labels from outside, as untrusted input: at
//! most [`MAX_LABELS`] labels, keys and values cut to [`MAX_TEXT`] bytes. Not here: getting a
//! thread's thread pointer, or turning labels into features.

use crate::program::modules::Module;
use crate::program::remote::Memory;
use object::read::elf::{FileHeader, ProgramHeader, Rela as _, SectionHeader, Sym as _};
use object::{elf, Endianness};

/// The symbol whose value is the ABI's version.
const VERSION_SYMBOL: &[u8] = b"custom_labels_abi_version";
/// The thread-local pointer to the current label set.
const SET_SYMBOL: &[u8] = b"custom_labels_current_set";
/// The version read here.
const VERSION: u32 = 1;
/// Most labels read from one set.
pub const MAX_LABELS: usize = 16;
/// Longest key or value kept, in bytes.
pub const MAX_TEXT: usize = 256;
/// Farthest a thread-local may lie from the thread pointer (static TLS is a few pages).
const MAX_TLS_OFFSET: i64 = 1 << 24;
/// Bytes of one label: two `{len, buf}` strings.
const LABEL_BYTES: usize = 32;

/// A process's custom labels: where its current set's pointer lies from a thread's pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CustomLabels {
    /// The pointer's address minus the thread pointer (negative: static TLS lies below it).
    pub tls_offset: i64,
}

/// Why [`CustomLabels::find`] found no labels to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No module exports the ABI.
    Absent,
    /// A module exports it, but its version or its thread-local's place cannot be read yet
    /// (the loader relocates a library after mapping it): to be looked for again.
    NotYet,
}

/// One label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub key: String,
    pub value: String,
}

impl CustomLabels {
    /// The ABI in `modules` of the process whose memory is `memory`, if the executable
    /// (`executable`: its path) or a `libcustomlabels*.so` exports it at version 1; else
    /// whether a module exports its symbols though they cannot be read yet ([`Missing`]).
    pub fn find(
        memory: &impl Memory,
        modules: &[Module],
        executable: &str,
    ) -> Result<CustomLabels, Missing> {
        let mut missing = Missing::Absent;
        for module in modules {
            let library = is_library_name(&module.name);
            if !library && module.path != executable {
                continue;
            }
            let Some(symbols) = Exported::of(&module.image) else {
                continue;
            };
            // Exported: a loader that has not relocated it yet, or a version not known here.
            missing = Missing::NotYet;
            let version = read_u32(memory, module.bias.wrapping_add(symbols.version));
            if version != Some(VERSION) {
                continue;
            }
            let tls_offset = match library {
                // The loader's TLS descriptor for the symbol: its argument (the second word)
                // is the offset from the thread pointer for a library in static TLS.
                true => symbols.descriptor.and_then(|descriptor| {
                    let slot = module.bias.wrapping_add(descriptor).wrapping_add(8);
                    read_u64(memory, slot).map(|offset| offset as i64)
                }),
                false => symbols.executable_offset,
            };
            if let Some(tls_offset) = tls_offset.filter(|o| *o < 0 && *o > -MAX_TLS_OFFSET) {
                return Ok(CustomLabels { tls_offset });
            }
        }
        Err(missing)
    }

    /// The labels of the thread whose thread pointer is `thread_pointer`, in the set's order,
    /// null keys skipped, the first of each key kept; none when it has no set or the set
    /// cannot be read.
    pub fn read(&self, memory: &impl Memory, thread_pointer: u64) -> Vec<Label> {
        self.try_read(memory, thread_pointer).unwrap_or_default()
    }

    fn try_read(&self, memory: &impl Memory, thread_pointer: u64) -> Option<Vec<Label>> {
        let set = read_u64(memory, thread_pointer.wrapping_add_signed(self.tls_offset))?;
        Some(read_set(memory, set))
    }
}

/// The labels of the label set at `set` (0: none), as [`CustomLabels::read`] reads them; none
/// when it cannot be read.
pub fn read_set(memory: &impl Memory, set: u64) -> Vec<Label> {
    try_read_set(memory, set).unwrap_or_default()
}

fn try_read_set(memory: &impl Memory, set: u64) -> Option<Vec<Label>> {
    if set == 0 {
        return Some(Vec::new());
    }
    let mut header = [0u8; 16];
    memory.read(set, &mut header).ok()?;
    let storage = u64::from_ne_bytes(header[..8].try_into().ok()?);
    let count = u64::from_ne_bytes(header[8..].try_into().ok()?).min(MAX_LABELS as u64);
    let mut raw = vec![0u8; count as usize * LABEL_BYTES];
    if count > 0 {
        memory.read(storage, &mut raw).ok()?;
    }
    let mut labels: Vec<Label> = Vec::new();
    for label in raw.chunks_exact(LABEL_BYTES) {
        let word = |at: usize| u64::from_ne_bytes(label[at..at + 8].try_into().unwrap());
        let (key_len, key_buf, value_len, value_buf) = (word(0), word(8), word(16), word(24));
        if key_buf == 0 {
            continue;
        }
        let key = read_text(memory, key_buf, key_len)?;
        if labels.iter().any(|l| l.key == key) {
            continue;
        }
        let value = match value_buf {
            0 => String::new(),
            _ => read_text(memory, value_buf, value_len)?,
        };
        labels.push(Label { key, value });
    }
    Some(labels)
}

/// Whether a module's file name is the ABI's library's: `libcustomlabels*.so`.
fn is_library_name(name: &str) -> bool {
    name.starts_with("libcustomlabels") && name.ends_with(".so")
}

/// What a module's file says of the ABI's symbols (addresses as the file states them).
struct Exported {
    version: u64,
    /// In an executable: the set pointer's offset from the thread pointer.
    executable_offset: Option<i64>,
    /// In a library: the address of the TLS descriptor the loader fills for the symbol.
    descriptor: Option<u64>,
}

impl Exported {
    fn of(image: &[u8]) -> Option<Exported> {
        let header = elf::FileHeader64::<Endianness>::parse(image).ok()?;
        let endian = header.endian().ok()?;
        let sections = header.sections(endian, image).ok()?;
        let symbols = sections.symbols(endian, image, elf::SHT_DYNSYM).ok()?;
        let lookup = Lookup::new(&sections, endian, image);
        let version = lookup
            .find(&symbols, VERSION_SYMBOL)
            .filter(|(_, symbol)| symbol.st_type() == elf::STT_OBJECT)
            .map(|(_, symbol)| symbol.st_value(endian));
        let set = lookup
            .find(&symbols, SET_SYMBOL)
            .filter(|(_, symbol)| symbol.st_type() == elf::STT_TLS)
            .map(|(index, symbol)| (index, symbol.st_value(endian)));
        let (set_index, set_value) = set?;
        let mut found = Exported {
            version: version?,
            executable_offset: None,
            descriptor: None,
        };
        // x86-64's static TLS: the executable's block ends at the thread pointer, its size
        // rounded up to its alignment.
        let segments = header.program_headers(endian, image).ok()?;
        if let Some(tls) = segments.iter().find(|s| s.p_type(endian) == elf::PT_TLS) {
            let align = tls.p_align(endian).max(1);
            let size = tls.p_memsz(endian).checked_next_multiple_of(align)?;
            found.executable_offset =
                Some(i64::try_from(set_value).ok()? - i64::try_from(size).ok()?);
        }
        // A library's descriptor: the TLSDESC relocation naming the symbol.
        for section in sections.iter() {
            let Ok(Some((relocations, link))) = section.rela(endian, image) else {
                continue;
            };
            if link.0 != symbols.section().0 {
                continue;
            }
            let descriptor = relocations.iter().find(|r| {
                r.r_type(endian, false) == elf::R_X86_64_TLSDESC
                    && r.r_sym(endian, false) as usize == set_index
            });
            if let Some(relocation) = descriptor {
                found.descriptor = Some(relocation.r_offset(endian));
            }
        }
        Some(found)
    }
}

type Symbols<'data> = object::read::elf::SymbolTable<'data, elf::FileHeader64<Endianness>>;
type Sections<'data> = object::read::elf::SectionTable<'data, elf::FileHeader64<Endianness>>;

/// Finding a defined dynamic symbol by name through the module's hash table, as the loader
/// does: a program that exports every symbol (gcc's `cc1`, for plugins, has tens of thousands)
/// is searched in a few probes rather than by comparing every name, which took 43% of the CPU
/// fsprof spent following a build's processes (BENCHMARKS.md, issue 39).
struct Lookup<'data> {
    endian: Endianness,
    gnu: Option<object::read::elf::GnuHashTable<'data, elf::FileHeader64<Endianness>>>,
    sysv: Option<object::read::elf::HashTable<'data, elf::FileHeader64<Endianness>>>,
    versions: object::read::elf::VersionTable<'data, elf::FileHeader64<Endianness>>,
}

impl<'data> Lookup<'data> {
    fn new(sections: &Sections<'data>, endian: Endianness, image: &'data [u8]) -> Lookup<'data> {
        Lookup {
            endian,
            gnu: sections
                .gnu_hash(endian, image)
                .ok()
                .flatten()
                .map(|(t, _)| t),
            sysv: sections.hash(endian, image).ok().flatten().map(|(t, _)| t),
            versions: sections
                .versions(endian, image)
                .ok()
                .flatten()
                .unwrap_or_default(),
        }
    }

    /// The defined symbol named `name` and its index; the table is searched whole only in a
    /// module without a hash table.
    fn find(
        &self,
        symbols: &Symbols<'data>,
        name: &[u8],
    ) -> Option<(usize, &'data elf::Sym64<Endianness>)> {
        let endian = self.endian;
        let found = if let Some(table) = &self.gnu {
            let hash = elf::gnu_hash(name);
            table
                .find(endian, name, hash, None, symbols, &self.versions)
                .map(|(index, symbol)| (index.0, symbol))
        } else if let Some(table) = &self.sysv {
            let hash = elf::hash(name);
            table
                .find(endian, name, hash, None, symbols, &self.versions)
                .map(|(index, symbol)| (index.0, symbol))
        } else {
            symbols
                .iter()
                .enumerate()
                .find(|(_, symbol)| symbols.symbol_name(endian, symbol).is_ok_and(|n| n == name))
        };
        found.filter(|(_, symbol)| symbol.st_shndx(endian) != elf::SHN_UNDEF)
    }
}

fn read_u32(memory: &impl Memory, address: u64) -> Option<u32> {
    let mut bytes = [0u8; 4];
    memory.read(address, &mut bytes).ok()?;
    Some(u32::from_ne_bytes(bytes))
}

fn read_u64(memory: &impl Memory, address: u64) -> Option<u64> {
    let mut bytes = [0u8; 8];
    memory.read(address, &mut bytes).ok()?;
    Some(u64::from_ne_bytes(bytes))
}

/// `len` bytes at `address` as text, cut to [`MAX_TEXT`] (invalid UTF-8 replaced).
fn read_text(memory: &impl Memory, address: u64, len: u64) -> Option<String> {
    let mut bytes = vec![0u8; len.min(MAX_TEXT as u64) as usize];
    memory.read(address, &mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests;
