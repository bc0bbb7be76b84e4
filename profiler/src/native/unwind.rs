//! Unwinding a thread's stack from a copy: the registers and the top of the stack taken while the
//! thread was stopped, walked afterwards, while it runs again.
//!
//! DWARF CFI (`.eh_frame` through `.eh_frame_hdr`, `.debug_frame` when present) with frame
//! pointers as the fallback, by framehop, over the modules of `modules.rs` (executable, shared
//! libraries, vdso). Produces return addresses and each frame's CFA (the caller's stack pointer),
//! which places marks between frames. Nothing here reads the target: only the copy.
//!
//! A stack taken without the frame pointer (a blocked thread's, whose stack and instruction
//! pointers come from `/proc`) cannot be walked through a frame whose CFA is `rbp + 16` (Rust's
//! standard library keeps frame pointers): for such a frame the walk uses the frame's size at
//! that very address as learnt from stacks unwound with every register known (a frame-pointer
//! frame's size at a given call is fixed, unless it allocates on its stack dynamically, which
//! shows as two sizes: then it is not used). Unknown, the walk stops there, incomplete.
//!
//! Code without unwind tables (musl's `libc.so`) is walked by scanning the stack for its return
//! address (`scan.rs`); the frame pointer is unknown after such a frame.
//! x86-64 only for now; on other architectures native stacks are not recorded.

use crate::native::per_file::PerFile;
use crate::native::scan::Scanner;
use crate::profile::MAX_NATIVE_FRAMES;
use crate::program::modules::{Image, Module};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Unwinder as _};
use std::collections::HashMap;
use std::ops::{Deref, Range};

/// The last address of x86-64's user space (the lower half of the 57-bit address space of
/// five-level paging; 48-bit below it): a return address above it is data that a guessed rule
/// read as one (a path's bytes, from a library frame unwound by a frame pointer it does not
/// keep).
const USER_SPACE_END: u64 = 0x00ff_ffff_ffff_ffff;
/// A thread's native stack at one sample.
#[derive(Clone, Debug, Default)]
pub struct Captured {
    /// Frames, innermost first.
    pub frames: Vec<UnwoundFrame>,
    /// Whether unwinding reached the thread's root.
    pub complete: bool,
}

/// How many frame sizes are remembered (see [`FrameSizes`]).
const MAX_FRAME_SIZES: usize = 1 << 16;

/// How far below the innermost frame's stack pointer a read is taken for the frame pointer
/// register's popped word (see `Unwinder::walk`): the slot just below the return address.
const POPPED_BELOW_SP: u64 = 8;

/// A frame pointer standing for "unknown": an address no stack holds, so that a rule that needs
/// it fails rather than reading 0 as the end of the stack.
const UNKNOWN_BP: u64 = 8;

/// The registers unwinding starts from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Registers {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (rbp); `None` when unknown (a blocked thread's registers, from `/proc`,
    /// have none: see the module's documentation).
    pub bp: Option<u64>,
    /// Thread pointer (x86-64's `fs` base), where a ptrace stop read it; 0 where unknown.
    pub tp: u64,
}

/// A copy of the top of a thread's stack.
#[derive(Clone, Debug, Default)]
pub struct StackCopy {
    /// Address in the target of `bytes[0]`.
    pub start: u64,
    /// The copied bytes.
    pub bytes: Vec<u8>,
}

impl StackCopy {
    /// The copy, borrowed.
    pub fn view(&self) -> StackView<'_> {
        StackView::new(self.start, &self.bytes)
    }
}

/// The top of a thread's stack as copied somewhere (a [`StackCopy`], a perf ring).
#[derive(Clone, Copy, Debug)]
pub struct StackView<'a> {
    /// Address in the target of `bytes[0]`.
    pub start: u64,
    /// The copied bytes.
    pub bytes: &'a [u8],
    /// Words read at the same instant as `bytes` beyond them (by the walk, `walk.rs`):
    /// (address, word), by address.
    pub instant: &'a [(u64, u64)],
    /// Where `bytes` end, further bytes of the stack from elsewhere (an image of the thread's
    /// outer stack, see `complete.rs`): their address and the bytes; empty for none. The
    /// copy's bytes and the instant's words come first.
    pub outer: (u64, &'a [u8]),
}

impl<'a> StackView<'a> {
    /// A view of `bytes`, copied from address `start`, and nothing beyond.
    pub fn new(start: u64, bytes: &'a [u8]) -> StackView<'a> {
        StackView {
            start,
            bytes,
            instant: &[],
            outer: (0, &[]),
        }
    }

    /// The address after the last byte of the copy itself.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.bytes.len() as u64)
    }

    fn read_u64(&self, address: u64) -> Result<u64, ()> {
        read_word(self.start, self.bytes, address)
            .or_else(|| {
                let at = self.instant.binary_search_by_key(&address, |(a, _)| *a);
                at.ok().map(|at| self.instant[at].1)
            })
            .or_else(|| read_word(self.outer.0, self.outer.1, address))
            .ok_or(())
    }
}

/// The word at `address` in `bytes`, which were copied from `start`.
pub fn read_word(start: u64, bytes: &[u8], address: u64) -> Option<u64> {
    let offset = address.checked_sub(start)? as usize;
    let bytes = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// One unwound frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwoundFrame {
    /// Lookup address: the instruction pointer for the innermost frame, the return address minus
    /// one for callers (inside the call instruction).
    pub address: u64,
    /// The frame's CFA: the caller's stack pointer at the call; `u64::MAX` for the root frame.
    pub cfa: u64,
}

/// The result of unwinding one stack.
#[derive(Clone, Debug, Default)]
pub struct Unwound {
    /// Frames, innermost first.
    pub frames: Vec<UnwoundFrame>,
    /// Whether unwinding reached the thread's root (the unwind information said the stack ends);
    /// otherwise it stopped early (unreadable memory, missing unwind data, the depth bound).
    pub complete: bool,
}

/// How a caller's frame is unwound from the return address its callee returns to, in the
/// few forms the BPF walk follows (`walk.rs`): its CFA is the stack pointer (after the return)
/// or the frame pointer plus `cfa`; the caller's rbp was saved at `bp_saved` from the CFA, or
/// is unchanged (0); the return address is at the CFA minus 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameRule {
    StackPointer {
        cfa: u32,
        bp_saved: i16,
    },
    FramePointer {
        cfa: u32,
        bp_saved: i16,
    },
    /// The stack ends there.
    Root,
}

/// A slice of a module's image, as framehop wants section data.
#[derive(Clone)]
pub struct Section {
    image: Image,
    range: Range<usize>,
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.image[self.range.clone()]
    }
}

/// An unwinder for one process.
pub struct Unwinder {
    unwinder: UnwinderX86_64<Section>,
    cache: CacheX86_64,
    modules: Vec<Module>,
    sizes: FrameSizes,
    scanner: Scanner,
}

/// The sizes of frame-pointer frames (CFA minus stack pointer) by lookup address, learnt from
/// stacks whose frame pointer was known; `None` where two sizes were seen.
#[derive(Default)]
struct FrameSizes(HashMap<u64, Option<u64>>);

impl FrameSizes {
    fn learn(&mut self, address: u64, size: u64) {
        if self.0.len() >= MAX_FRAME_SIZES && !self.0.contains_key(&address) {
            return;
        }
        let entry = self.0.entry(address).or_insert(Some(size));
        if *entry != Some(size) {
            *entry = None;
        }
    }

    fn get(&self, address: u64) -> Option<u64> {
        self.0.get(&address).copied().flatten()
    }
}

impl Default for Unwinder {
    fn default() -> Self {
        Unwinder::new()
    }
}

impl Unwinder {
    /// An unwinder that knows no module yet.
    pub fn new() -> Unwinder {
        Unwinder {
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            modules: Vec::new(),
            sizes: FrameSizes::default(),
            scanner: Scanner::default(),
        }
    }

    /// The modules it unwinds with.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// Replaces the modules (after the target loaded or unloaded libraries, or called exec).
    /// Modules as they were are kept as they are (and, where none changed, the rules cached).
    pub fn set_modules(&mut self, modules: Vec<Module>) {
        let same = |a: &Module, b: &Module| {
            (a.range == b.range && a.bias == b.bias && a.inode == b.inode) && a.path == b.path
        };
        let unchanged = |list: &[Module], module: &Module| list.iter().any(|m| same(m, module));
        if modules.len() == self.modules.len()
            && modules.iter().all(|m| unchanged(&self.modules, m))
        {
            return;
        }
        for old in &self.modules {
            if !unchanged(&modules, old) {
                self.unwinder.remove_module(old.range.start);
            }
        }
        for module in &modules {
            if !unchanged(&self.modules, module) {
                self.unwinder.add_module(framehop_module(module));
            }
        }
        self.scanner = Scanner::new(&modules);
        self.modules = modules;
        self.cache = CacheX86_64::new();
        self.sizes = FrameSizes::default();
    }

    /// The rule of the frame that `return_address` returns into, as framehop unwinds it: found
    /// by unwinding that one frame over a made-up stack whose every word says where it lies.
    /// `None` for a rule in another form, or none.
    pub fn frame_rule(&mut self, return_address: u64) -> Option<FrameRule> {
        const SP: u64 = 0x1000_0000_0000;
        const BP: u64 = 0x2000_0000_0000;
        const TAG: u64 = 1 << 63;
        if !self.knows(return_address.wrapping_sub(1)) {
            return None; // framehop would fall back to the frame pointer
        }
        let address = FrameAddress::from_return_address(return_address)?;
        let mut regs = UnwindRegsX86_64::new(return_address, SP, BP);
        let mut read = |at: u64| Ok(at | TAG);
        let next = self
            .unwinder
            .unwind_frame(address, &mut regs, &mut self.cache, &mut read)
            .ok()?;
        let Some(next) = next else {
            return Some(FrameRule::Root);
        };
        let cfa = regs.sp();
        if next != cfa.wrapping_sub(8) | TAG {
            return None;
        }
        let bp_saved = match regs.bp() {
            BP => 0,
            bp if bp & TAG != 0 => i16::try_from((bp & !TAG).wrapping_sub(cfa) as i64)
                .ok()
                .filter(|o| *o != 0)?,
            _ => return None,
        };
        let small = |offset: u64| u32::try_from(offset).ok().filter(|o| *o < 1 << 30);
        if (SP..BP).contains(&cfa) {
            Some(FrameRule::StackPointer {
                cfa: small(cfa - SP)?,
                bp_saved,
            })
        } else {
            let cfa = small(cfa.checked_sub(BP)?)?;
            Some(FrameRule::FramePointer { cfa, bp_saved })
        }
    }

    /// Whether `address` is in a known module.
    pub fn knows(&self, address: u64) -> bool {
        self.modules.iter().any(|m| m.range.contains(&address))
    }

    /// Unwinds the stack `stack` from `regs` into `out`.
    pub fn unwind(&mut self, regs: Registers, stack: StackView<'_>, out: &mut Unwound) {
        let bp = regs.bp.unwrap_or(UNKNOWN_BP);
        let unwind_regs = UnwindRegsX86_64::new(regs.ip, regs.sp, bp);
        let address = FrameAddress::from_instruction_pointer(regs.ip);
        self.walk(address, unwind_regs, regs.bp.is_some(), stack, out);
    }

    /// Unwinds `stack` from a function that was about to return to `ret`, with its return
    /// address stored at `sp` (a call's entry) and the frame pointer register `bp` (0 if
    /// unknown: a frame whose unwind rule needs it then ends the walk, incomplete): the first
    /// frame is `ret`'s function.
    pub fn unwind_from_call(
        &mut self,
        ret: u64,
        sp: u64,
        bp: u64,
        stack: StackView<'_>,
        out: &mut Unwound,
    ) {
        out.frames.clear();
        out.complete = false;
        let Some(address) = FrameAddress::from_return_address(ret) else {
            return;
        };
        let known = bp != 0;
        let bp = if known { bp } else { UNKNOWN_BP };
        let unwind_regs = UnwindRegsX86_64::new(ret, sp.saturating_add(8), bp);
        self.walk(address, unwind_regs, known, stack, out);
    }

    /// Walks from `address`; `bp_known` tells whether `unwind_regs` holds the real frame
    /// pointer (then frame-pointer frames' sizes are learnt) or [`UNKNOWN_BP`] (then they are
    /// used, until a frame restores the register from the stack).
    fn walk(
        &mut self,
        mut address: FrameAddress,
        mut unwind_regs: UnwindRegsX86_64,
        mut bp_known: bool,
        stack: StackView<'_>,
        out: &mut Unwound,
    ) {
        out.frames.clear();
        out.complete = false;
        // A word the view lacks ends the walk there, even where framehop unwound the frame
        // anyway. framehop reads it as 0: where its DWARF evaluation fails to read (a frame too
        // large for its cached rules), it falls back to the frame pointer and caches that rule
        // for the address, which would unwind the function wrongly on every stack after. (The
        // whole cache was dropped at each miss instead: with stacks deeper than the copy, at
        // every sample.)
        let missed = std::cell::Cell::new(false);
        // Below the innermost frame's stack pointer no copy reaches (the kernel's and ours start
        // there). A rule reads there only at a function's `ret` after its `pop %rbp`: the CFI
        // still says where the register was saved (`rbp` at CFA-16 with CFA = rsp+8), and the
        // word there is the one the pop put in the register. So the register's value, where
        // known, is that word (without it, a sample on such a `ret`, one in a few hundred of a
        // Rust program's that calls the clock in a loop, was cut after its first frame).
        let innermost = std::cell::Cell::new(true);
        let innermost_sp = unwind_regs.sp();
        let innermost_bp = bp_known.then_some(unwind_regs.bp());
        let mut read = |address: u64| {
            let popped = innermost.get() && address < innermost_sp;
            let word = match innermost_bp {
                Some(bp) if popped && innermost_sp - address <= POPPED_BELOW_SP => Ok(bp),
                _ => stack.read_u64(address),
            };
            word.or_else(|()| {
                missed.set(true);
                Ok(0)
            })
        };
        while out.frames.len() < MAX_NATIVE_FRAMES {
            let lookup = match address {
                FrameAddress::InstructionPointer(ip) => ip,
                FrameAddress::ReturnAddress(ra) => u64::from(ra) - 1,
            };
            if self.scanner.is_entry(lookup) {
                out.frames.push(UnwoundFrame {
                    address: lookup,
                    cfa: u64::MAX,
                });
                out.complete = true;
                return;
            }
            if self.scanner.scans(lookup) {
                let sp = unwind_regs.sp();
                let found = (self.scanner).find_return(lookup, sp, |at| stack.read_u64(at));
                let next = found.and_then(|(slot, ret)| {
                    Some((slot, ret, FrameAddress::from_return_address(ret)?))
                });
                let Some((slot, ret, next)) = next else {
                    out.frames.push(UnwoundFrame {
                        address: lookup,
                        cfa: u64::MAX,
                    });
                    return;
                };
                let cfa = slot + 8;
                out.frames.push(UnwoundFrame {
                    address: lookup,
                    cfa,
                });
                innermost.set(false);
                address = next;
                unwind_regs = UnwindRegsX86_64::new(ret, cfa, UNKNOWN_BP);
                bp_known = false;
                continue;
            }
            let before = unwind_regs;
            missed.set(false);
            let mut result =
                self.unwinder
                    .unwind_frame(address, &mut unwind_regs, &mut self.cache, &mut read);
            if !bp_known && (result.is_err() || missed.get()) {
                if let Some(size) = self.sizes.get(lookup) {
                    unwind_regs = before;
                    missed.set(false);
                    let bp = before.sp().saturating_add(size).saturating_sub(16);
                    unwind_regs.set_bp(bp);
                    result = self.unwinder.unwind_frame(
                        address,
                        &mut unwind_regs,
                        &mut self.cache,
                        &mut read,
                    );
                    bp_known = result.is_ok() && !missed.get();
                }
            }
            if missed.get() {
                result = Err(framehop::Error::CouldNotReadStack(0));
            }
            if let Ok(Some(_)) = result {
                if bp_known && unwind_regs.sp() == before.bp().wrapping_add(16) {
                    self.sizes.learn(lookup, unwind_regs.sp() - before.sp());
                } else if !bp_known && unwind_regs.bp() != UNKNOWN_BP {
                    bp_known = true; // restored from the stack by this frame's rule
                }
            }
            match result {
                Ok(Some(return_address)) => {
                    out.frames.push(UnwoundFrame {
                        address: lookup,
                        cfa: unwind_regs.sp(),
                    });
                    innermost.set(false);
                    if return_address > USER_SPACE_END {
                        return; // not an address of code: a guessed rule read other data
                    }
                    match FrameAddress::from_return_address(return_address) {
                        Some(next) => address = next,
                        None => {
                            out.complete = true;
                            return;
                        }
                    }
                }
                Ok(None) => {
                    out.frames.push(UnwoundFrame {
                        address: lookup,
                        cfa: u64::MAX,
                    });
                    out.complete = true;
                    return;
                }
                Err(_) => {
                    out.frames.push(UnwoundFrame {
                        address: lookup,
                        cfa: u64::MAX,
                    });
                    return;
                }
            }
        }
    }
}

/// The framehop view of a module: its unwind sections, as slices of the image (no copies).
fn framehop_module(module: &Module) -> framehop::Module<Section> {
    let mut info = ExplicitModuleSectionInfo::<Section> {
        base_svma: 0,
        text_svma: None,
        text: None,
        stubs_svma: None,
        stub_helper_svma: None,
        got_svma: None,
        unwind_info: None,
        eh_frame_svma: None,
        eh_frame: None,
        eh_frame_hdr_svma: None,
        eh_frame_hdr: None,
        debug_frame: None,
        text_segment_svma: None,
        text_segment: None,
    };
    if let Some(sections) = SECTIONS.get(module, || UnwindSections::of(&module.image)) {
        let data = |range: &Option<Range<usize>>| {
            range.clone().map(|range| Section {
                image: module.image.clone(),
                range,
            })
        };
        if let Some((svma, range)) = &sections.text {
            (info.text_svma, info.text) = (Some(svma.clone()), data(range));
        }
        if let Some((svma, range)) = &sections.eh_frame {
            (info.eh_frame_svma, info.eh_frame) = (Some(svma.clone()), data(range));
        }
        if let Some((svma, range)) = &sections.eh_frame_hdr {
            (info.eh_frame_hdr_svma, info.eh_frame_hdr) = (Some(svma.clone()), data(range));
        }
        info.got_svma = sections.got.clone();
        info.debug_frame = data(&sections.debug_frame);
    }
    framehop::Module::new(module.name.clone(), module.range.clone(), module.bias, info)
}

/// Where a file's sections that unwinding reads are: each one's stated addresses, and where its
/// bytes lie in the file (`None` where they are compressed or out of the file).
struct UnwindSections {
    text: Option<(Range<u64>, Option<Range<usize>>)>,
    eh_frame: Option<(Range<u64>, Option<Range<usize>>)>,
    eh_frame_hdr: Option<(Range<u64>, Option<Range<usize>>)>,
    got: Option<Range<u64>>,
    /// Only where there is no `.eh_frame`.
    debug_frame: Option<Range<usize>>,
}

/// Each file's sections, learnt once (`per_file.rs`).
static SECTIONS: PerFile<UnwindSections> = PerFile::new();

impl UnwindSections {
    fn of(image: &[u8]) -> Option<UnwindSections> {
        use object::{Object, ObjectSection};
        let file = object::File::parse(image).ok()?;
        let section = |name: &str| -> Option<(Range<u64>, Option<Range<usize>>)> {
            let section = file.section_by_name(name)?;
            let svma = section.address()..section.address().checked_add(section.size())?;
            let data = match section.compressed_file_range() {
                Ok(range) if range.format == object::CompressionFormat::None => {
                    let start = usize::try_from(range.offset).ok()?;
                    let end = start.checked_add(usize::try_from(range.compressed_size).ok()?)?;
                    (end <= image.len()).then_some(start..end)
                }
                _ => None,
            };
            Some((svma, data))
        };
        let eh_frame = section(".eh_frame");
        let debug_frame = match eh_frame {
            Some((_, Some(_))) => None,
            _ => section(".debug_frame").and_then(|(_, data)| data),
        };
        Some(UnwindSections {
            text: section(".text"),
            eh_frame,
            eh_frame_hdr: section(".eh_frame_hdr"),
            got: section(".got").map(|(svma, _)| svma),
            debug_frame,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_size_seen_twice_differently_is_not_used() {
        let mut sizes = FrameSizes::default();
        sizes.learn(0x1000, 48);
        sizes.learn(0x1000, 48);
        sizes.learn(0x2000, 32);
        sizes.learn(0x2000, 64); // an alloca, say
        assert_eq!(sizes.get(0x1000), Some(48));
        assert_eq!(sizes.get(0x2000), None);
        assert_eq!(sizes.get(0x3000), None);
    }
}
