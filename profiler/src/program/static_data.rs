//! A module's static data as its loader left it in the target, read from the module's file:
//! for strings and descriptors that marks point to when the target's memory can no longer be
//! read (a sample the kernel copied just before the program exited, handled after it).
//!
//! Only bytes that cannot have changed since loading are given: those of a read-only `PT_LOAD`
//! segment or under `PT_GNU_RELRO`, within the file (not `.bss`). Relative relocations over them
//! (`RELA`, `RELR`) are applied with the module's load bias, as the loader did; any other
//! relocation over them makes the read fail rather than give bytes the program never saw. It does
//! not read the live process (that is `remote.rs`) and does not interpret the bytes (`names.rs`).

use crate::program::modules::{Mapping, Module};
use crate::program::remote::Memory;
use crate::program::remote::Remote;
use nix::errno::Errno;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, Rela as _, SectionHeader};
use object::Endianness;
use std::cell::Cell;

/// Reads from the module files fsprof holds open (at most this many times, each scanning a
/// module's relocations: the addresses come from the target).
const MAX_FILE_READS: u32 = 4096;

/// The target's memory, or, where it cannot be read, its modules' static data.
pub struct WithModules<'a> {
    /// The live process.
    pub remote: &'a Remote,
    /// Its memory map as last read.
    pub maps: &'a [Mapping],
    /// Its modules, open.
    pub modules: &'a [Module],
    /// Reads from files left (see `MAX_FILE_READS`).
    pub budget: &'a Cell<u32>,
}

impl WithModules<'_> {
    /// A budget for [`WithModules::budget`].
    pub fn budget() -> Cell<u32> {
        Cell::new(MAX_FILE_READS)
    }
}

impl Memory for WithModules<'_> {
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let error = match self.remote.read(address, buf) {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let left = self.budget.get();
        if left == 0 {
            return Err(error);
        }
        self.budget.set(left - 1);
        let end = address.checked_add(buf.len() as u64).ok_or(error)?;
        let mapping = (self.maps.iter())
            .find(|m| m.inode != 0 && m.range.start <= address && end <= m.range.end)
            .ok_or(error)?;
        let module = (self.modules.iter())
            .find(|m| m.inode == mapping.inode && m.path == mapping.path)
            .ok_or(error)?;
        read(module, address, buf).ok_or(error)
    }
}

/// Fills `buf` with the bytes at `address` of `module`'s static data as loaded; `None` when they
/// are not all known (see the module's documentation).
pub fn read(module: &Module, address: u64, buf: &mut [u8]) -> Option<()> {
    let data: &[u8] = &module.image;
    let header = elf::FileHeader64::<Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    if endian != Endianness::Little {
        return None;
    }
    let file = File {
        data,
        segments: header.program_headers(endian, data).ok()?,
        endian,
    };
    let start = address.wrapping_sub(module.bias);
    let end = start.checked_add(buf.len() as u64)?;
    buf.copy_from_slice(file.unchanged(start, end)?);
    let relative = match header.e_machine(endian) {
        elf::EM_X86_64 => elf::R_X86_64_RELATIVE,
        elf::EM_AARCH64 => elf::R_AARCH64_RELATIVE,
        _ => u32::MAX,
    };
    let sections = header.sections(endian, data).ok()?;
    if sections.is_empty() && header.e_type(endian) == elf::ET_DYN {
        return None; // relocations not found: unknown
    }
    let overlaps = |offset: u64| offset < end && offset.saturating_add(8) > start;
    let mut place = |offset: u64, value: u64| {
        for (i, byte) in value.to_le_bytes().into_iter().enumerate() {
            let at = offset.wrapping_add(i as u64);
            if (start..end).contains(&at) {
                buf[(at - start) as usize] = byte;
            }
        }
    };
    for section in sections.iter() {
        if section.sh_flags(endian) as u32 & elf::SHF_ALLOC == 0 {
            continue;
        }
        match section.sh_type(endian) {
            elf::SHT_RELA => {
                let (relas, _) = section.rela(endian, data).ok()??;
                for rela in relas {
                    let offset = rela.r_offset(endian);
                    if !overlaps(offset) {
                        continue;
                    }
                    if rela.r_type(endian, false) != relative {
                        return None; // a symbol's address, or code: not known from the file
                    }
                    place(
                        offset,
                        module.bias.wrapping_add(rela.r_addend(endian) as u64),
                    );
                }
            }
            elf::SHT_RELR => {
                for offset in section.relr(endian, data).ok()?? {
                    if overlaps(offset) {
                        let at = file.unchanged(offset, offset.checked_add(8)?)?;
                        let addend = u64::from_le_bytes(at.try_into().ok()?);
                        place(offset, module.bias.wrapping_add(addend));
                    }
                }
            }
            elf::SHT_REL | elf::SHT_CREL => return None, // not produced for these machines
            _ => {}
        }
    }
    Some(())
}

/// An ELF file's bytes and segments.
struct File<'a> {
    data: &'a [u8],
    segments: &'a [elf::ProgramHeader64<Endianness>],
    endian: Endianness,
}

impl<'a> File<'a> {
    /// The file's bytes for addresses `start..end` (as the file states them), if they lie in
    /// one loaded segment's file part and never change once loaded.
    fn unchanged(&self, start: u64, end: u64) -> Option<&'a [u8]> {
        let endian = self.endian;
        let within = |s: &elf::ProgramHeader64<Endianness>, kind: u32, size: u64| {
            let vaddr = s.p_vaddr(endian);
            s.p_type(endian) == kind && vaddr <= start && end <= vaddr.saturating_add(size)
        };
        let segment =
            (self.segments.iter()).find(|s| within(s, elf::PT_LOAD, s.p_filesz(endian)))?;
        let writable = segment.p_flags(endian) & elf::PF_W != 0;
        if writable
            && !(self.segments.iter()).any(|s| within(s, elf::PT_GNU_RELRO, s.p_memsz(endian)))
        {
            return None;
        }
        let offset = segment
            .p_offset(endian)
            .checked_add(start - segment.p_vaddr(endian))?;
        let len = end - start;
        self.data
            .get(usize::try_from(offset).ok()?..usize::try_from(offset.checked_add(len)?).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::modules;
    use fsprof_shim::Feature;

    /// In `.data.rel.ro`: its name pointer is relocated at load time.
    static DESCRIPTOR: Feature = Feature::new("read from the file");

    fn this_process() -> (Vec<Mapping>, Vec<Module>) {
        let pid = std::process::id();
        let maps = modules::read_maps(pid, pid).unwrap();
        let found = modules::modules(pid, &maps, &[]);
        (maps, found)
    }

    /// This test's own descriptor, read from its executable's file, is byte for byte what is
    /// in memory (its relocated name pointer included), and a process that is gone reads the
    /// same through the files.
    #[test]
    fn a_descriptor_read_from_the_file_is_what_the_loader_made() {
        let (maps, found) = this_process();
        let address = &DESCRIPTOR as *const Feature as u64;
        let size = std::mem::size_of::<Feature>();
        // SAFETY: reading the bytes of a static.
        let in_memory = unsafe { std::slice::from_raw_parts(address as *const u8, size) }.to_vec();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let budget = WithModules::budget();
        let memory = WithModules {
            remote: &Remote::new(gone),
            maps: &maps,
            modules: &found,
            budget: &budget,
        };
        let mut bytes = vec![0; size];
        memory.read(address, &mut bytes).unwrap();
        assert_eq!(bytes, in_memory);
        assert_eq!(
            crate::program::names::feature_name(&memory, address),
            "read from the file"
        );
        // The name's bytes (read-only data) too, and any piece of the descriptor.
        let mut piece = vec![0; 5];
        memory.read(address + 6, &mut piece).unwrap();
        assert_eq!(piece, in_memory[6..11]);
        // The descriptor, then the descriptor and its name again (`feature_name`), then the piece.
        assert_eq!(budget.get(), MAX_FILE_READS - 4);
    }

    /// Data that may have changed since loading (`.data`, `.bss`, the heap, the stack) is not
    /// given from the file.
    #[test]
    fn writable_data_is_not_read_from_the_file() {
        static mut CHANGED: [u64; 4] = [1, 2, 3, 4];
        static mut ZEROED: [u64; 4] = [0; 4];
        // SAFETY: this test alone uses them.
        unsafe {
            CHANGED[1] = 20;
            ZEROED[2] = 30;
        }
        let (maps, found) = this_process();
        let heap = Box::new([7u8; 32]);
        let stack = [9u8; 32];
        let budget = WithModules::budget();
        let gone = Remote::new(u32::MAX >> 1);
        let memory = WithModules {
            remote: &gone,
            maps: &maps,
            modules: &found,
            budget: &budget,
        };
        let mut bytes = [0u8; 8];
        for address in [
            &raw const CHANGED as u64,
            &raw const ZEROED as u64,
            heap.as_ptr() as u64,
            stack.as_ptr() as u64,
        ] {
            assert!(memory.read(address, &mut bytes).is_err(), "{address:#x}");
        }
    }
}
