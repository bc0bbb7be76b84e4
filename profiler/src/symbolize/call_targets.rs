//! Which function a caller's frame is calling: decoded from the call instruction that ends at
//! its return address, in the module's file. A direct call (`call rel32`) names the function at
//! its target, or, where the target is a stub of the linkage table, the symbol whose address
//! the stub jumps through (its slot in the global offset table, by the module's dynamic
//! relocations); a call through the table itself (`call *slot(%rip)`, `-fno-plt`) names the
//! slot's symbol. An imported symbol's module is the file its version requirement names
//! (`calloc@GLIBC_2.2.5`: `libc.so.6`), which is where the dynamic loader finds it unless a
//! preloaded library interposes it; without a version it is unknown (empty).
//!
//! What the stack alone cannot tell: a function that ends by jumping to another leaves no
//! frame of its own (glibc's `calloc` jumps to `memset`, `fprintf` to `__vfprintf_internal`),
//! yet its caller's call names it. Calls through a register or memory other than the offset
//! table give nothing; so does an x86-64 instruction stream this does not recognise. Every byte
//! read is bounded by the file's sections; not here: symbolizing the frames themselves
//! (`symbols.rs`).

use crate::profile::Callee;
use object::elf::{FileHeader64, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, R_X86_64_RELATIVE};
use object::read::elf::{ElfFile, Rela as _, SectionHeader as _};
use object::{LittleEndian, Object, ObjectSection, SectionKind};
use std::collections::HashMap;
use std::ops::Range;

/// Most bytes of a symbol name kept.
const MAX_NAME: usize = 512;

/// What a module's file tells of its calls: its code (to read instructions), its linkage
/// table's stubs, and the symbol each slot of its offset table is bound to.
#[derive(Default)]
pub(super) struct CallTargets {
    /// Executable sections: addresses as the file states them, and where their bytes lie.
    code: Vec<(Range<u64>, usize)>,
    plt: Vec<Range<u64>>,
    /// What each offset-table slot holds at run time.
    slots: HashMap<u64, Slot>,
}

/// What an offset-table slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    /// A symbol the dynamic loader binds (an imported function, or an exported one of this
    /// module that another could interpose).
    Bound(Callee),
    /// The address of a function of this module (a relative relocation: Rust calls its own
    /// functions this way), as the file states it.
    Own(u64),
}

impl CallTargets {
    /// Reads `image`, an ELF file (64-bit, little-endian); empty for anything else.
    pub(super) fn new(image: &[u8]) -> CallTargets {
        let Ok(file) = ElfFile::<FileHeader64<LittleEndian>>::parse(image) else {
            return CallTargets::default();
        };
        let mut targets = CallTargets::default();
        let mut got = Vec::new();
        for section in file.sections() {
            let range = section.address()..section.address().saturating_add(section.size());
            if matches!(
                section.name(),
                Ok(".plt" | ".plt.sec" | ".plt.got" | ".iplt")
            ) {
                targets.plt.push(range.clone());
            }
            if matches!(section.name(), Ok(".got" | ".got.plt")) {
                got.push(range.clone());
            }
            if section.kind() == SectionKind::Text {
                if let Some((offset, size)) = section.file_range() {
                    if offset
                        .checked_add(size)
                        .is_some_and(|end| end <= image.len() as u64)
                    {
                        targets.code.push((range, offset as usize));
                    }
                }
            }
        }
        targets.slots = slots(&file, image, &got);
        targets
    }

    /// The function the call ending at `return_address` (an address as the file states it)
    /// calls, if that is a call this can read; `symbol_at` names a function of this module by
    /// an address inside it (the module's own name in `own_module`).
    pub(super) fn callee(
        &self,
        image: &[u8],
        return_address: u64,
        own_module: &str,
        symbol_at: impl Fn(u64) -> Option<String>,
    ) -> Option<Callee> {
        let before = self.read(image, return_address.checked_sub(6)?, 6)?;
        let own = |target| {
            Some(Callee {
                function: symbol_at(target)?,
                module: own_module.to_owned(),
            })
        };
        if before[0] == 0xff && before[1] == 0x15 {
            // call *disp32(%rip): through an offset-table slot.
            let slot = relative(return_address, &before[2..6]);
            return match self.slots.get(&slot)? {
                Slot::Bound(callee) => Some(callee.clone()),
                Slot::Own(target) => own(*target),
            };
        }
        if before[1] != 0xe8 {
            return None;
        }
        let target = relative(return_address, &before[2..6]);
        if self.plt.iter().any(|plt| plt.contains(&target)) {
            return match self.stub_slot(image, target)? {
                Slot::Bound(callee) => Some(callee.clone()),
                Slot::Own(target) => own(*target),
            };
        }
        if !self.code.iter().any(|(range, _)| range.contains(&target)) {
            return None; // not a call after all: its target is no code
        }
        own(target)
    }

    /// The symbol of the slot a linkage-table stub at `stub` jumps through: `[endbr64] [bnd]
    /// jmp *disp32(%rip)`.
    fn stub_slot(&self, image: &[u8], stub: u64) -> Option<&Slot> {
        let bytes = self.read(image, stub, 11)?;
        let mut at = 0;
        if bytes[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
            at += 4; // endbr64
        }
        if bytes[at] == 0xf2 {
            at += 1; // bnd
        }
        if bytes[at..at + 2] != [0xff, 0x25] {
            return None;
        }
        let end = stub + at as u64 + 6;
        let slot = relative(end, &bytes[at + 2..at + 6]);
        self.slots.get(&slot)
    }

    /// `len` bytes of code at `address`, if one section holds them all.
    fn read<'a>(&self, image: &'a [u8], address: u64, len: usize) -> Option<&'a [u8]> {
        let (range, offset) = self
            .code
            .iter()
            .find(|(range, _)| range.contains(&address))?;
        let end = address.checked_add(len as u64)?;
        if end > range.end {
            return None;
        }
        let start = offset + (address - range.start) as usize;
        image.get(start..start + len)
    }
}

/// The address `disp` (a little-endian 32-bit displacement) points to from `end`, the address
/// of the instruction's end.
fn relative(end: u64, disp: &[u8]) -> u64 {
    let disp = i32::from_le_bytes([disp[0], disp[1], disp[2], disp[3]]);
    end.wrapping_add_signed(i64::from(disp))
}

/// What each slot of the module's offset table (`got`: its sections) holds by its dynamic
/// relocations: the symbol bound there (jump slots and global data), with the library its
/// version requirement names, or the address of one of its own functions (relative).
fn slots(
    file: &ElfFile<FileHeader64<LittleEndian>>,
    image: &[u8],
    got: &[Range<u64>],
) -> HashMap<u64, Slot> {
    let endian = file.endian();
    let sections = file.elf_section_table();
    let symbols = file.elf_dynamic_symbol_table();
    let mut slots = HashMap::new();
    let versions = sections.versions(endian, image).ok().flatten();
    for section in sections.iter() {
        let Ok(Some((relas, link))) = section.rela(endian, image) else {
            continue;
        };
        for rela in relas {
            let kind = rela.r_type(endian, false);
            let offset = rela.r_offset(endian);
            if kind == R_X86_64_RELATIVE && got.iter().any(|got| got.contains(&offset)) {
                slots.insert(offset, Slot::Own(rela.r_addend(endian) as u64));
                continue;
            }
            if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                continue;
            }
            if symbols.is_empty() || link != symbols.section() {
                continue;
            }
            let Some(index) = rela.symbol(endian, false) else {
                continue;
            };
            let Ok(name) = symbols
                .symbol(index)
                .and_then(|symbol| symbols.symbol_name(endian, symbol))
            else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            let module = (versions.as_ref())
                .and_then(|v| v.version(v.version_index(endian, index)).ok().flatten())
                .and_then(|version| version.file())
                .map(bounded)
                .unwrap_or_default();
            let function = bounded(name);
            slots.insert(offset, Slot::Bound(Callee { function, module }));
        }
    }
    slots
}

/// A name read from the file, cut at [`MAX_NAME`] bytes.
fn bounded(name: &[u8]) -> String {
    String::from_utf8_lossy(&name[..name.len().min(MAX_NAME)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displacements_are_signed_and_relative_to_the_instructions_end() {
        assert_eq!(relative(0x1000, &[0x10, 0, 0, 0]), 0x1010);
        assert_eq!(relative(0x1000, &[0xf0, 0xff, 0xff, 0xff]), 0xff0);
    }

    #[test]
    fn anything_but_an_elf_file_gives_no_call_targets() {
        let targets = CallTargets::new(b"not an ELF file");
        assert!(targets.code.is_empty() && targets.slots.is_empty());
        assert_eq!(targets.callee(b"", 0x1000, "m", |_| None), None);
    }
}
