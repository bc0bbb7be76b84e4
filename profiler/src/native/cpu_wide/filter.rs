//! A bitmap of the thread ids the per-CPU design may watch (`cpu_wide.rs`), in an array map, so
//! that the program at `sched_switch`, which every switch of the machine runs, passes over a
//! thread fsprof does not watch with one array load (the verifier makes it a direct load)
//! instead of a lookup in the hash map of watched threads: 260 ns a switch on a 2-vCPU AMD
//! host before it (BENCHMARKS.md). A thread id sets bit `tid mod BITS`; ids that share a bit
//! fall through to the hash map, which stays the truth. Not here: the hash map itself and what
//! the programs do with a watched thread (`programs.rs`).

use crate::native::asm::{
    insn, Asm, Label, ADD64_IMM, AND64_IMM, CALL, HELPER_MAP_LOOKUP_ELEM, JEQ_IMM, LDX_DW, LDX_W,
    LD_IMM64, MOV64_REG, PSEUDO_MAP_FD, RSH64_IMM, RSH64_REG, STX_W,
};
use crate::native::bpf::{create_map, update_bytes, BPF_MAP_TYPE_ARRAY};
use foldhash::HashMap;
use nix::errno::Errno;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Words of the bitmap (a power of two): 65 536 bits, 8 KiB of kernel memory. With a thousand
/// threads watched, a thread not watched shares a bit with one of them 1.5% of the time.
const WORDS: u32 = 1024;

/// The stack word the program's lookup key is put in (free in the switch program).
const KEY: i16 = -16;

pub(super) struct Filter {
    map: OwnedFd,
    bits: Bits,
}

impl Filter {
    pub(super) fn new() -> Result<Filter, Errno> {
        Ok(Filter {
            map: create_map(BPF_MAP_TYPE_ARRAY, 4, 8, WORDS)?,
            bits: Bits::default(),
        })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.map.as_raw_fd()
    }

    /// Lets `tid` through (before it goes into the hash map, so no switch of it is missed).
    pub(super) fn add(&mut self, tid: u32) -> Result<(), Errno> {
        match self.bits.change(tid, true) {
            Some((index, word)) => {
                update_bytes(self.fd(), &index.to_ne_bytes(), &word.to_ne_bytes())
            }
            None => Ok(()),
        }
    }

    /// Lets `tid` through no more (once it is out of the hash map), unless another watched id
    /// shares its bit.
    pub(super) fn remove(&mut self, tid: u32) {
        if let Some((index, word)) = self.bits.change(tid, false) {
            let _ = update_bytes(self.fd(), &index.to_ne_bytes(), &word.to_ne_bytes());
        }
    }
}

/// fsprof's copy of the bitmap, with the watched ids behind each bit set.
#[derive(Default)]
struct Bits {
    counts: HashMap<u32, u32>,
    words: HashMap<u32, u64>,
}

impl Bits {
    /// Counts `tid` in or out; the word to write (its index and value) where a bit changed.
    fn change(&mut self, tid: u32, add: bool) -> Option<(u32, u64)> {
        let bit = tid % (WORDS * 64);
        let count = self.counts.entry(bit).or_insert(0);
        let was = *count;
        *count = if add { was + 1 } else { was.saturating_sub(1) };
        let now = *count;
        if now == 0 {
            self.counts.remove(&bit);
        }
        if (was == 0) == (now == 0) {
            return None;
        }
        let word = self.words.entry(bit / 64).or_insert(0);
        *word ^= 1 << (bit % 64);
        Some((bit / 64, *word))
    }
}

/// Part of a program: jumps to `skip` unless the bit of the thread id at stack word `at` is set
/// in the bitmap `filter` (uses r0-r2).
pub(super) fn skip_unless_let_through(p: &mut Asm, filter: RawFd, at: i16, skip: Label) {
    p.extend([
        insn(LDX_W, 2, 10, at, 0),
        insn(RSH64_IMM, 2, 0, 0, 6),
        insn(AND64_IMM, 2, 0, 0, (WORDS - 1) as i32),
        insn(STX_W, 10, 2, KEY, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, filter),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(KEY)),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
    ]);
    p.jump(JEQ_IMM, 0, 0, 0, skip);
    p.extend([
        insn(LDX_DW, 1, 0, 0, 0),
        insn(LDX_W, 2, 10, at, 0),
        insn(AND64_IMM, 2, 0, 0, 63),
        insn(RSH64_REG, 1, 2, 0, 0),
        insn(AND64_IMM, 1, 0, 0, 1),
    ]);
    p.jump(JEQ_IMM, 1, 0, 0, skip);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bit_shared_by_two_threads_stays_set_until_both_are_gone() {
        let mut bits = Bits::default();
        let (a, b, c) = (5, 5 + WORDS * 64, 70);
        assert_eq!(bits.change(a, true), Some((0, 1 << 5)));
        assert_eq!(bits.change(b, true), None);
        assert_eq!(bits.change(c, true), Some((1, 1 << 6)));
        assert_eq!(bits.change(a, false), None);
        assert_eq!(bits.change(b, false), Some((0, 0)));
        assert_eq!(
            bits.change(b, false),
            None,
            "removed twice: nothing changes"
        );
        assert_eq!(bits.change(c, false), Some((1, 0)));
        assert!(bits.counts.is_empty());
    }
}
