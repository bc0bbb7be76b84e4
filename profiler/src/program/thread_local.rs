//! Where a thread-local variable that a module exports lies from a thread's thread pointer
//! (x86-64's `fs` base), found from outside the process as the loader placed it: the module's
//! dynamic symbol table names it (`STT_TLS`), and its offset from the thread pointer comes from
//! the executable's TLS segment (static TLS ends at the thread pointer: local-exec), from the
//! loader's TLS descriptor for the symbol (`R_X86_64_TLSDESC`, whose second word is the offset
//! for a library in static TLS) or from its initial-exec GOT slot (`R_X86_64_TPOFF64`). A
//! library in dynamic TLS (loaded by `dlopen` past the static surplus) is not found: its
//! descriptor holds a pointer, not an offset. Also a defined object's address by name.
//!
//! Used by the label readers (`custom_labels.rs`, `otel_context.rs`). Not here: reading the
//! variables, or getting a thread's pointer.

use crate::program::modules::Module;
use crate::program::remote::Memory;
use object::read::elf::{FileHeader, ProgramHeader, Rela as _, SectionHeader, Sym as _};
use object::{elf, Endianness};

/// Farthest a thread-local may lie from the thread pointer (static TLS is a few pages).
const MAX_TLS_OFFSET: i64 = 1 << 24;

type Header = elf::FileHeader64<Endianness>;
type Symbols<'data> = object::read::elf::SymbolTable<'data, Header>;
type Sections<'data> = object::read::elf::SectionTable<'data, Header>;

/// A module's exported symbols, looked up by name.
pub struct Exports<'data> {
    image: &'data [u8],
    header: &'data Header,
    endian: Endianness,
    sections: Sections<'data>,
    symbols: Symbols<'data>,
    lookup: Lookup<'data>,
}

/// A thread-local a module exports: how to find it from a thread's pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadLocal {
    /// Its offset from the thread pointer were the module the executable (static TLS).
    executable_offset: Option<i64>,
    /// The address (in the file) of the TLS descriptor the loader fills for it.
    descriptor: Option<u64>,
    /// The address (in the file) of the GOT slot that holds its offset (initial-exec).
    initial_exec: Option<u64>,
}

impl<'data> Exports<'data> {
    /// The exports of an ELF image, if it is a 64-bit ELF file with a dynamic symbol table.
    pub fn of(image: &'data [u8]) -> Option<Exports<'data>> {
        let header = Header::parse(image).ok()?;
        let endian = header.endian().ok()?;
        let sections = header.sections(endian, image).ok()?;
        let symbols = sections.symbols(endian, image, elf::SHT_DYNSYM).ok()?;
        let lookup = Lookup::new(&sections, endian, image);
        Some(Exports {
            image,
            header,
            endian,
            sections,
            symbols,
            lookup,
        })
    }

    /// The address (in the file) of the defined data object `name`.
    pub fn object(&self, name: &[u8]) -> Option<u64> {
        let (_, symbol) = self.lookup.find(&self.symbols, name)?;
        (symbol.st_type() == elf::STT_OBJECT).then(|| symbol.st_value(self.endian))
    }

    /// The thread-local `name`, if the module defines and exports it.
    pub fn thread_local(&self, name: &[u8]) -> Option<ThreadLocal> {
        let (endian, image) = (self.endian, self.image);
        let (index, symbol) = self.lookup.find(&self.symbols, name)?;
        if symbol.st_type() != elf::STT_TLS {
            return None;
        }
        let value = symbol.st_value(endian);
        let mut found = ThreadLocal {
            executable_offset: None,
            descriptor: None,
            initial_exec: None,
        };
        // x86-64's static TLS: the executable's block ends at the thread pointer, its size
        // rounded up to its alignment.
        let segments = self.header.program_headers(endian, image).ok()?;
        if let Some(tls) = segments.iter().find(|s| s.p_type(endian) == elf::PT_TLS) {
            let align = tls.p_align(endian).max(1);
            let size = tls.p_memsz(endian).checked_next_multiple_of(align)?;
            found.executable_offset = Some(i64::try_from(value).ok()? - i64::try_from(size).ok()?);
        }
        // The relocations naming the symbol: a TLS descriptor, or an initial-exec GOT slot.
        for section in self.sections.iter() {
            let Ok(Some((relocations, link))) = section.rela(endian, image) else {
                continue;
            };
            if link.0 != self.symbols.section().0 {
                continue;
            }
            for relocation in relocations {
                if relocation.r_sym(endian, false) as usize != index {
                    continue;
                }
                match relocation.r_type(endian, false) {
                    elf::R_X86_64_TLSDESC => found.descriptor = Some(relocation.r_offset(endian)),
                    elf::R_X86_64_TPOFF64 => found.initial_exec = Some(relocation.r_offset(endian)),
                    _ => {}
                }
            }
        }
        Some(found)
    }
}

impl ThreadLocal {
    /// Its offset from a thread's pointer in the process whose memory is `memory`, where
    /// `module` (which exports it) is mapped; `executable`: the module is the process's
    /// executable. None where the loader has not filled its descriptor or slot yet, or the
    /// offset is not one of static TLS (below the thread pointer, near it).
    pub fn offset(&self, memory: &impl Memory, module: &Module, executable: bool) -> Option<i64> {
        let read = |address: u64| read_u64(memory, module.bias.wrapping_add(address));
        let offset = if let Some(descriptor) = self.descriptor {
            // Its argument, the second word, is the offset for a module in static TLS.
            read(descriptor.wrapping_add(8)).map(|offset| offset as i64)
        } else if let Some(slot) = self.initial_exec {
            read(slot).map(|offset| offset as i64)
        } else if executable {
            self.executable_offset
        } else {
            None
        };
        offset.filter(|o| *o < 0 && *o > -MAX_TLS_OFFSET)
    }
}

/// Finding a defined dynamic symbol by name through the module's hash table, as the loader
/// does: a program that exports every symbol (gcc's `cc1`, for plugins, has tens of thousands)
/// is searched in a few probes rather than by comparing every name, which took 43% of the CPU
/// fsprof spent following a build's processes (BENCHMARKS.md, issue 39).
struct Lookup<'data> {
    endian: Endianness,
    gnu: Option<object::read::elf::GnuHashTable<'data, Header>>,
    sysv: Option<object::read::elf::HashTable<'data, Header>>,
    versions: object::read::elf::VersionTable<'data, Header>,
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

/// The native-endian word at `address`.
pub fn read_u64(memory: &impl Memory, address: u64) -> Option<u64> {
    let mut bytes = [0u8; 8];
    memory.read(address, &mut bytes).ok()?;
    Some(u64::from_ne_bytes(bytes))
}
