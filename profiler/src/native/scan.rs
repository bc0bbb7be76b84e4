//! Return addresses found by scanning a copied stack, for code that has no unwind tables: a
//! library built without them (Debian's musl `libc.so` describes 4 of its functions in
//! `.eh_frame`), where framehop can only fall back to the frame pointer, which such code does not
//! keep. From a frame's stack pointer upward, the first word that is an address in a module's
//! executable code just after a call instruction is taken as the frame's return address.
//!
//! A heuristic, as every unwinder's stack scan is: a stale return address left in a frame's
//! uninitialised locals (by the callees of a function called before) reads as a caller. So a
//! candidate whose call could not have entered the frame's function is passed over for a later
//! one that could: a direct call within the module must target a function that starts at or
//! before the frame's address with none of the module's named functions starting in between
//! (following a thunk's jump: musl's `write` calls `__syscall_cp`, which jumps to
//! `__syscall_cp_c`), and one from another module must go through its PLT. A call through a
//! register or memory cannot be checked: such a candidate, and then any, is taken only where
//! no checked one is found (a function that tail-calls another leaves a return address whose
//! call entered the first). So a frame may be left out where a stale one would have been put
//! in: the program's own call names the library function it called all the same
//! (`symbolize/call_targets.rs`). Only modules
//! whose unwind tables are missing or far too small for their code are scanned; every other
//! frame is unwound by its tables as before.
//!
//! Also here: the executable's entry point (`_start`) is a stack's root, which musl's, having
//! no unwind tables to say so, needs.
//! Nothing here reads the target: the words come from the copy the unwinder walks, the code
//! from the modules' files.

use crate::native::per_file::PerFile;
use crate::program::modules::{Image, Module};
use std::ops::Range;
use std::sync::Arc;

/// How far above a frame's stack pointer its return address is looked for: a frame of musl's
/// `qsort` (smoothsort's two arrays) is about 1.7 KiB.
pub const MAX_SCAN_BYTES: u64 = 4096;

/// A module is scanned when it has less than one byte of unwind tables per this many bytes of
/// code: glibc, libstdc++, rg, node and sqlite3 have one per 5 to 12, musl's `libc.so` one per
/// 3,000.
const CODE_PER_TABLE_BYTE: u64 = 256;

/// The longest call instruction checked before a return address: `ff /2` with a REX prefix, a
/// SIB byte and a 32-bit displacement.
const LONGEST_CALL: usize = 8;

/// The code of one module, to check the bytes before a candidate return address.
struct Code {
    /// Its executable mappings in the target.
    range: Range<u64>,
    bias: u64,
    image: Image,
    /// What its file says, learnt once per file.
    file: Arc<CodeFile>,
}

/// What a module's file says of its code.
struct CodeFile {
    /// Its executable `PT_LOAD` segments: addresses the file states, and the file offset of each.
    segments: Vec<(Range<u64>, u64)>,
    /// Whether it lacks unwind tables (see [`CODE_PER_TABLE_BYTE`]).
    scanned: bool,
    /// Where its PLT stubs are (stated addresses): a call into another module goes through them.
    plt: Vec<Range<u64>>,
    /// Where its functions start (stated addresses, sorted), from its symbol tables; only for a
    /// scanned module.
    starts: Vec<u64>,
    /// The executable's entry point (stated address); `None` for a library.
    entry: Option<u64>,
}

/// Each file's code facts, learnt once (`per_file.rs`).
static FILES: PerFile<CodeFile> = PerFile::new();

/// How many bytes from the entry point on are the root's (musl's `_start` calls `_start_c` at
/// +17; glibc's calls `__libc_start_main` at +33).
const ENTRY_BYTES: u64 = 64;

/// The modules' code, for scanning stacks.
#[derive(Default)]
pub struct Scanner {
    code: Vec<Code>,
}

impl Scanner {
    /// A scanner over `modules`.
    pub fn new(modules: &[Module]) -> Scanner {
        Scanner {
            code: modules.iter().filter_map(code).collect(),
        }
    }

    /// Whether the frame at `address` is in a module without unwind tables, and so is scanned.
    pub fn scans(&self, address: u64) -> bool {
        self.at(address).is_some_and(|c| c.file.scanned)
    }

    /// Whether the frame at `address` is in the executable's entry point, the root of its main
    /// thread's stack.
    pub fn is_entry(&self, address: u64) -> bool {
        self.at(address).is_some_and(|c| {
            let svma = address.wrapping_sub(c.bias);
            c.file
                .entry
                .is_some_and(|entry| svma >= entry && svma - entry < ENTRY_BYTES)
        })
    }

    /// The return address of the frame at `lookup` (in a scanned module) whose stack pointer
    /// is `sp`, among the words within [`MAX_SCAN_BYTES`] that `read` can read: the first that
    /// follows a direct call which could have entered the frame's function; else the first
    /// that follows a call through a register or memory (whose target cannot be checked); else
    /// the first that follows any call. Its slot's address and the return address.
    pub fn find_return(
        &self,
        lookup: u64,
        sp: u64,
        mut read: impl FnMut(u64) -> Result<u64, ()>,
    ) -> Option<(u64, u64)> {
        let end = sp.checked_add(MAX_SCAN_BYTES)?;
        let (mut indirect, mut other) = (None, None);
        let mut slot = sp;
        while slot < end {
            let Ok(word) = read(slot) else { break };
            match self.call_before(word) {
                Some(Call::Into(code, target)) if self.could_enter(code, target, lookup) => {
                    return Some((slot, word));
                }
                Some(Call::Indirect) => indirect = indirect.or(Some((slot, word))),
                Some(Call::Into(..)) => other = other.or(Some((slot, word))),
                None => {}
            }
            slot += 8;
        }
        indirect.or(other)
    }

    /// The call instruction just before `address`, if it is in a module's code after one.
    fn call_before(&self, address: u64) -> Option<Call<'_>> {
        let code = self.at(address)?;
        let svma = address.wrapping_sub(code.bias);
        let (segment, _) = code.file.segments.iter().find(|(s, _)| s.contains(&svma))?;
        // The bytes before it, within the segment.
        let before = (svma - segment.start).min(LONGEST_CALL as u64);
        let bytes = code.bytes(svma - before, before)?;
        match call_length(bytes)? {
            Length::Direct(rel) => Some(Call::Into(code, svma.wrapping_add(rel as u64))),
            Length::Indirect => Some(Call::Indirect),
        }
    }

    /// Whether a direct call from `code` to `target` (a stated address of `code`) could have
    /// entered the function `lookup` is in: a call from another module through its PLT; one
    /// within the module to a function that starts at or before the frame, with no function
    /// of the module's symbols starting in between, once a thunk's jump is followed (musl's
    /// `write` calls `__syscall_cp`, a `jmp __syscall_cp_c`).
    fn could_enter(&self, code: &Code, target: u64, lookup: u64) -> bool {
        let Some(frame) = self.at(lookup) else {
            return false;
        };
        if !std::ptr::eq(code, frame) {
            return code.file.plt.iter().any(|plt| plt.contains(&target));
        }
        let lookup = lookup.wrapping_sub(code.bias);
        let entered = code.through_thunks(target);
        let after = code.file.starts.partition_point(|&start| start <= entered);
        entered <= lookup
            && code
                .file
                .starts
                .get(after)
                .is_none_or(|&next| next > lookup)
    }

    fn at(&self, address: u64) -> Option<&Code> {
        self.code.iter().find(|c| c.range.contains(&address))
    }
}

impl Code {
    /// The bytes of the file at stated address `svma`, up to `len` of them within its segment.
    fn bytes(&self, svma: u64, len: u64) -> Option<&[u8]> {
        let (segment, offset) = self.file.segments.iter().find(|(s, _)| s.contains(&svma))?;
        let len = len.min(segment.end - svma) as usize;
        let start = usize::try_from(offset.checked_add(svma - segment.start)?).ok()?;
        self.image.get(start..start.checked_add(len)?)
    }

    /// Where a function at `target` goes if it is a thunk (its first instruction, after an
    /// `endbr64`, a `jmp`), up to [`MAX_THUNKS`] of them; else `target`.
    fn through_thunks(&self, mut target: u64) -> u64 {
        for _ in 0..MAX_THUNKS {
            let Some(bytes) = self.bytes(target, 9) else {
                break;
            };
            let (skip, bytes) = match bytes {
                [0xf3, 0x0f, 0x1e, 0xfa, rest @ ..] => (4, rest),
                _ => (0, bytes),
            };
            let next = match bytes {
                [0xe9, a, b, c, d, ..] => (target + skip + 5)
                    .wrapping_add_signed(i64::from(i32::from_le_bytes([*a, *b, *c, *d]))),
                [0xeb, rel, ..] => (target + skip + 2).wrapping_add_signed(i64::from(*rel as i8)),
                _ => break,
            };
            target = next;
        }
        target
    }
}

/// How many jumps a thunk may chain.
const MAX_THUNKS: usize = 2;

/// A module's code, if its file parses.
fn code(module: &Module) -> Option<Code> {
    Some(Code {
        range: module.range.clone(),
        bias: module.bias,
        image: module.image.clone(),
        file: FILES.get(module, || CodeFile::of(&module.image))?,
    })
}

impl CodeFile {
    fn of(image: &[u8]) -> Option<CodeFile> {
        use object::{
            Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags,
        };
        let file = object::File::parse(image).ok()?;
        let size = |name: &str| file.section_by_name(name).map_or(0, |s| s.size());
        let tables = size(".eh_frame") + size(".debug_frame");
        let text = size(".text");
        let scanned = text > 0 && tables.saturating_mul(CODE_PER_TABLE_BYTE) < text;
        let plt = [".plt", ".plt.sec", ".plt.got"]
            .iter()
            .filter_map(|name| file.section_by_name(name))
            .filter_map(|s| Some(s.address()..s.address().checked_add(s.size())?))
            .collect();
        let mut starts: Vec<u64> = Vec::new();
        if scanned {
            starts = (file.symbols().chain(file.dynamic_symbols()))
                .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
                .map(|s| s.address())
                .collect();
            starts.sort_unstable();
            starts.dedup();
        }
        let executable = file.kind() == ObjectKind::Executable
            || (file.kind() == ObjectKind::Dynamic && has_interpreter(&file));
        let entry = executable.then(|| file.entry());
        let segments = (file.segments())
        .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .filter_map(|s| {
            let (offset, size) = s.file_range();
            let end = s.address().checked_add(size)?;
            Some((s.address()..end, offset))
        })
        .collect();
        Some(CodeFile {
            segments,
            scanned,
            plt,
            starts,
            entry,
        })
    }
}

/// Whether an ELF file asks for a program interpreter (a position-independent executable does,
/// a shared library does not).
fn has_interpreter(file: &object::File) -> bool {
    use object::read::elf::ProgramHeader;
    // `segments()` lists the PT_LOAD ones only: PT_INTERP is read from the program headers.
    match file {
        object::File::Elf64(elf) => {
            let endian = elf.endian();
            (elf.elf_program_headers().iter()).any(|p| p.p_type(endian) == object::elf::PT_INTERP)
        }
        _ => false,
    }
}

/// A call instruction's form, from its bytes.
enum Length {
    /// `e8 rel32`: its displacement from the return address.
    Direct(i32),
    /// `ff /2`.
    Indirect,
}

/// A call before a return address.
enum Call<'a> {
    /// A direct call from this module's code to this stated address.
    Into(&'a Code, u64),
    /// Through a register or memory: its target is not known.
    Indirect,
}

/// The call instruction `bytes` end with, if they do: `e8 rel32`, or `ff /2` (through a
/// register or memory, any addressing form, with or without a REX prefix).
fn call_length(bytes: &[u8]) -> Option<Length> {
    let n = bytes.len();
    if n >= 5 && bytes[n - 5] == 0xe8 {
        let rel = i32::from_le_bytes(bytes[n - 4..].try_into().ok()?);
        return Some(Length::Direct(rel));
    }
    (2..=n.min(LONGEST_CALL))
        .any(|length| {
            let at = n - length;
            bytes[at] == 0xff && indirect_call_length(&bytes[at + 1..]) == Some(length)
        })
        .then_some(Length::Indirect)
}

#[cfg(test)]
fn ends_with_call(bytes: &[u8]) -> bool {
    call_length(bytes).is_some()
}

/// The length of an `ff /2` call from its opcode, given the bytes after the opcode; `None` if
/// the ModRM byte is not a call's (`/2`) or the bytes are too few.
fn indirect_call_length(after: &[u8]) -> Option<usize> {
    let modrm = *after.first()?;
    if (modrm >> 3) & 7 != 2 {
        return None;
    }
    let (mode, rm) = (modrm >> 6, modrm & 7);
    let sib = mode != 3 && rm == 4;
    let displacement = match mode {
        0 if rm == 5 => 4, // rip-relative
        0 if sib => match after.get(1)? & 7 {
            5 => 4, // a SIB without base register
            _ => 0,
        },
        1 => 1,
        2 => 4,
        _ => 0,
    };
    Some(2 + usize::from(sib) + displacement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_of_a_call_are_recognised_before_a_return_address() {
        // call rel32
        assert!(ends_with_call(&[0x90, 0x90, 0x90, 0xe8, 1, 2, 3, 4]));
        // call *%rax; call *%r11 (REX.B)
        assert!(ends_with_call(&[0x90, 0xff, 0xd0]));
        assert!(ends_with_call(&[0x41, 0xff, 0xd3]));
        // call *0x10(%rip)
        assert!(ends_with_call(&[0x90, 0x90, 0xff, 0x15, 0x10, 0, 0, 0]));
        // call *0x8(%rax); call *0x18(%rsp) (SIB)
        assert!(ends_with_call(&[0x90, 0xff, 0x50, 0x08]));
        assert!(ends_with_call(&[0x90, 0xff, 0x54, 0x24, 0x18]));
        // call *(%rbx)
        assert!(ends_with_call(&[0x90, 0xff, 0x13]));
        // Not calls: a jmp *%rax (ff /4), a push, a ret, too few bytes.
        assert!(!ends_with_call(&[0x90, 0x90, 0xff, 0xe0]));
        assert!(!ends_with_call(&[0x90, 0x90, 0x50]));
        assert!(!ends_with_call(&[0x90, 0x90, 0xc3]));
        assert!(!ends_with_call(&[0xd0]));
    }

    /// A scanner over one scanned module of `bytes` at 0x40_0000 (stated addresses from 0),
    /// its named functions starting at `starts`.
    fn one_module(bytes: Vec<u8>, starts: Vec<u64>, entry: Option<u64>) -> Scanner {
        let code = Code {
            range: 0x40_0000..0x40_2000,
            bias: 0x40_0000,
            image: Image::from_vec(bytes),
            file: Arc::new(CodeFile {
                segments: vec![(0..0x2000, 0)],
                scanned: true,
                plt: Vec::new(),
                starts,
                entry,
            }),
        };
        Scanner { code: vec![code] }
    }

    #[test]
    fn the_first_word_after_a_call_is_the_return_address() {
        // One module whose code is a call at 0x1000 (returning to 0x1005) and nops after it.
        let mut bytes = vec![0x90; 0x2000];
        bytes[0x1000] = 0xe8;
        let scanner = one_module(bytes, vec![0x800, 0x1000, 0x1800], Some(0x100));
        assert!(scanner.scans(0x40_0100));
        assert!(!scanner.scans(0x50_0000));
        assert!(scanner.is_entry(0x40_0120) && !scanner.is_entry(0x40_0200));
        let stack = [7, 0x40_0100, 0x50_0000, 0x40_1005, 0x40_1006];
        let read = |at: u64| stack.get(((at - 0x7000) / 8) as usize).copied().ok_or(());
        // A call that could not have entered the frame's function (its displacement, the nops
        // after it, points outside the module): the first candidate all the same.
        assert_eq!(
            scanner.find_return(0x40_0900, 0x7000, read),
            Some((0x7018, 0x40_1005))
        );
        // None readable: none found.
        assert_eq!(scanner.find_return(0x40_0900, 0x7028, read), None);
    }

    #[test]
    fn a_stale_return_address_is_passed_over_for_one_whose_call_entered_the_frame() {
        // Calls at 0x1000 (to 0x1800) and at 0x1100 (to 0x1900); named functions start at
        // 0x1800 and 0x1900. A frame at 0x1950 is in the second: the stale return from the
        // first call (0x1005, lower on the stack) is passed over. One at 0x1850 is in the first.
        let mut bytes = vec![0x90; 0x2000];
        bytes[0x1000..0x1005].copy_from_slice(&[0xe8, 0xfb, 0x07, 0, 0]);
        bytes[0x1100..0x1105].copy_from_slice(&[0xe8, 0xfb, 0x07, 0, 0]);
        let scanner = one_module(bytes, vec![0x1800, 0x1900], None);
        let stack = [0x40_1005, 0x40_1105];
        let read = |at: u64| stack.get(((at - 0x7000) / 8) as usize).copied().ok_or(());
        assert_eq!(
            scanner.find_return(0x40_1950, 0x7000, read),
            Some((0x7008, 0x40_1105))
        );
        assert_eq!(
            scanner.find_return(0x40_1850, 0x7000, read),
            Some((0x7000, 0x40_1005))
        );
    }

    #[test]
    fn a_call_to_a_thunk_entered_the_function_it_jumps_to() {
        // A call at 0x1000 to 0x1700, a thunk `jmp 0x1900` (after an endbr64); named functions
        // start at 0x1800 and 0x1900. A frame at 0x1950 was entered through the thunk; a call
        // through a register (0x1100, `call *%rax`) is taken only where no checked one is.
        let mut bytes = vec![0x90; 0x2000];
        bytes[0x1000..0x1005].copy_from_slice(&[0xe8, 0xfb, 0x06, 0, 0]);
        bytes[0x1100..0x1102].copy_from_slice(&[0xff, 0xd0]);
        bytes[0x1700..0x1709].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0xf7, 0x01, 0, 0]);
        let scanner = one_module(bytes, vec![0x1800, 0x1900], None);
        let stack = [0x40_1102, 0x40_1005];
        let read = |at: u64| stack.get(((at - 0x7000) / 8) as usize).copied().ok_or(());
        assert_eq!(
            scanner.find_return(0x40_1950, 0x7000, read),
            Some((0x7008, 0x40_1005))
        );
        // In the first named function, not the thunk's: the call through a register.
        assert_eq!(
            scanner.find_return(0x40_1850, 0x7000, read),
            Some((0x7000, 0x40_1102))
        );
    }
}
