//! A table from thread id to map value index that the program at `sched_switch` (`cpu_wide.rs`),
//! which every switch of the machine runs, looks at before the hash map of watched threads: an
//! array map (the verifier makes its lookup a direct load) indexed by the id's low bits, whose
//! entry holds the index of one watched thread with those bits, or none. A thread not watched
//! passes with that one load where no watched thread shares its entry; a watched one is found
//! with it and the load of its value, whose [`VALUE_TID`] says whose it is (the table is a hint:
//! the value is the truth, and an entry whose value is another thread's falls through to the
//! hash map). The hash lookup it saves was about 45 ns of the program's 240 a switch under
//! python3 with four threads (BENCHMARKS.md, issue 39). Not here: the hash map, which stays the
//! truth for the other programs, and what the programs do with a watched thread
//! (`programs.rs`).

use crate::native::asm::{
    insn, Asm, Label, ADD64_IMM, AND64_IMM, JEQ_IMM, JEQ_REG, LDX_DW, LDX_W, STX_W,
};
use crate::native::bpf::{create_map, update_bytes, BPF_MAP_TYPE_ARRAY};
use crate::native::fragments::{lookup, value_of_thread, watched_index};
use crate::native::layout::{INDEX_SLOT, VALUE_TID};
use foldhash::HashMap;
use nix::errno::Errno;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Entries of the table (a power of two): 256 KiB of kernel memory. Thread ids below it (the
/// kernel's `pid_max` is 32 768 on some systems) never share an entry; with a thousand threads
/// watched among ids up to 4 million, a thread not watched shares one 1.5% of the time.
const ENTRIES: u32 = 1 << 16;

/// The stack word the program's lookup key is put in (free in the switch program).
const KEY: i16 = -16;

pub(super) struct Direct {
    map: OwnedFd,
    entries: Entries,
}

impl Direct {
    pub(super) fn new() -> Result<Direct, Errno> {
        Ok(Direct {
            map: create_map(BPF_MAP_TYPE_ARRAY, 4, 4, ENTRIES)?,
            entries: Entries::default(),
        })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.map.as_raw_fd()
    }

    /// Points `tid`'s entry at value `index` (whose [`VALUE_TID`] fsprof wrote first).
    pub(super) fn add(&mut self, tid: u32, index: u32) -> Result<(), Errno> {
        let (entry, word) = self.entries.change(tid, Some(index));
        update_bytes(self.fd(), &entry.to_ne_bytes(), &word.to_ne_bytes())
    }

    /// Points `tid`'s entry at no value of its (at another watched thread's with the same
    /// entry, if any).
    pub(super) fn remove(&mut self, tid: u32) {
        let (entry, word) = self.entries.change(tid, None);
        let _ = update_bytes(self.fd(), &entry.to_ne_bytes(), &word.to_ne_bytes());
    }
}

/// fsprof's copy of the table: the watched threads (id, value index) behind each entry, the
/// one the entry holds last.
#[derive(Default)]
struct Entries(HashMap<u32, Vec<(u32, u32)>>);

impl Entries {
    /// Puts `tid` in its entry with value `index`, or takes it out (`None`); the entry and
    /// the word it is to hold: its latest thread's index + 1, or 0 for none.
    fn change(&mut self, tid: u32, index: Option<u32>) -> (u32, u32) {
        let entry = tid % ENTRIES;
        let threads = self.0.entry(entry).or_default();
        threads.retain(|&(other, _)| other != tid);
        threads.extend(index.map(|index| (tid, index)));
        let word = threads.last().map_or(0, |&(_, index)| index + 1);
        if threads.is_empty() {
            self.0.remove(&entry);
        }
        (entry, word)
    }
}

/// Part of a program: the map value (of the array `map`) of the watched thread whose id is the
/// stack word at `at` (not [`INDEX_SLOT`]) in `r0`, its index at [`INDEX_SLOT`]; or a jump to
/// `skip` where the thread is not watched (in the hash map `watched`, the truth where the
/// table's entry is not the thread's). Uses r0-r5.
pub(super) fn value_of_watched(
    p: &mut Asm,
    (direct, watched, map): (RawFd, RawFd, RawFd),
    at: i16,
    skip: Label,
) {
    let (found, hashed) = (p.label(), p.label());
    p.extend([
        insn(LDX_W, 2, 10, at, 0),
        insn(AND64_IMM, 2, 0, 0, (ENTRIES - 1) as i32),
        insn(STX_W, 10, 2, KEY, 0),
    ]);
    lookup(p, direct, KEY);
    p.jump(JEQ_IMM, 0, 0, 0, skip);
    p.push(insn(LDX_W, 1, 0, 0, 0));
    p.jump(JEQ_IMM, 1, 0, 0, skip); // no watched thread has the entry
    p.extend([
        insn(ADD64_IMM, 1, 0, 0, -1),
        insn(STX_W, 10, 1, INDEX_SLOT, 0),
    ]);
    p.extend(value_of_thread(map));
    p.jump(JEQ_IMM, 0, 0, 0, hashed);
    p.extend([
        insn(LDX_DW, 1, 0, VALUE_TID as i16, 0),
        insn(LDX_W, 2, 10, at, 0),
    ]);
    p.jump(JEQ_REG, 1, 2, 0, found);
    // Another thread's entry (or one no longer watched): the hash map says.
    p.bind(hashed);
    watched_index(p, watched, at);
    p.jump(JEQ_IMM, 0, 0, 0, skip);
    p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
    p.extend(value_of_thread(map));
    p.jump(JEQ_IMM, 0, 0, 0, skip);
    p.bind(found);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where two watched threads share an entry, it holds the later one's index, and the
    /// earlier one's again once the later is gone; none once both are.
    #[test]
    fn an_entry_shared_by_two_threads_holds_one_until_both_are_gone() {
        let mut entries = Entries::default();
        let (a, b, c) = (5, 5 + ENTRIES, 70);
        assert_eq!(entries.change(a, Some(10)), (5, 11));
        assert_eq!(entries.change(b, Some(11)), (5, 12));
        assert_eq!(entries.change(c, Some(12)), (70, 13));
        assert_eq!(
            entries.change(b, None),
            (5, 11),
            "the earlier thread's again"
        );
        assert_eq!(
            entries.change(a, Some(14)),
            (5, 15),
            "watched again, in another value"
        );
        assert_eq!(entries.change(a, None), (5, 0));
        assert_eq!(entries.change(a, None), (5, 0), "removed twice: none");
        assert_eq!(entries.change(c, None), (70, 0));
        assert!(entries.0.is_empty());
    }
}
