//! The layout of a sampled thread's BPF map value, which fsprof writes (the thread's slot
//! addresses, its anchors, whether the walk is on) and the programs read and use as scratch
//! (`bpf.rs`, `walk.rs`), and the values mapped into fsprof. It neither creates the map nor
//! decides what to write.

use crate::native::bpf::map_shared;
use crate::native::perf::{ANCHORS, SLOTS};
use fsprof_shim::abi::{MARK_CAPACITY, RECORDS_OFFSET, RECORD_SIZE};
use nix::errno::Errno;
use nix::libc;
use std::os::fd::OwnedFd;

/// Layout of one map value (one per sampled thread): slot addresses (set by fsprof), then, per
/// slot, the ring record the BPF program builds at each sample: a header (the sample's time, the
/// value's index, the slot's number, the address copied from, the copy's result: 0 or an error)
/// and the slot's bytes (its state, then the records below its depth).
pub(super) const VALUE_ADDRESSES: usize = 0;
pub(super) const VALUE_SCRATCH: usize = 8 * SLOTS;
pub(super) const COPY_HEADER: usize = 32;
/// Room for what the program copies of a slot: its state and its records, not the history of
/// later branches after them (read apart, see `region.rs`). With the history the map was three
/// times larger (13 MB), and making it took several milliseconds per process recorded.
pub(super) const SCRATCH_SIZE: usize = COPY_HEADER + RECORDS_OFFSET + MARK_CAPACITY * RECORD_SIZE;
/// Then the anchors (see `perf::ANCHORS`): their addresses (set by fsprof, 0 for none), and the
/// record the program builds of them at each sample (a copy header, then an address and the
/// word read there, per anchor), put in the ring like a slot's copy with slot number `SLOTS`.
pub(super) const VALUE_ANCHORS: usize = VALUE_SCRATCH + SLOTS * SCRATCH_SIZE;
pub(super) const VALUE_ANCHOR_RECORD: usize = VALUE_ANCHORS + 8 * ANCHORS;
pub(super) const ANCHOR_RECORD_SIZE: usize = COPY_HEADER + 16 * ANCHORS;
/// Then the walk's part (`walk.rs`).
pub(super) const VALUE_WALK: usize = VALUE_ANCHOR_RECORD + ANCHOR_RECORD_SIZE;
/// Then when the thread's latest departure sample was taken (see `bpf::Departure`).
pub(super) const VALUE_DEPARTED: usize = VALUE_WALK + 8;
/// Then what the per-CPU programs keep of the thread (`cpu_wide.rs`): its time on a CPU up to
/// its latest departure (ns), when it came onto its CPU (0: not known to be on one), how many
/// of its switches were recorded (a gap in their numbers is a lost record), and the records
/// built there (a switch's, the CPU time's at a sample).
pub(super) const VALUE_CPU_NS: usize = VALUE_DEPARTED + 8;
pub(super) const VALUE_ON_SINCE: usize = VALUE_CPU_NS + 8;
pub(super) const VALUE_SWITCHES: usize = VALUE_ON_SINCE + 8;
pub(super) const VALUE_SWITCH_RECORD: usize = VALUE_SWITCHES + 8;
pub(super) const VALUE_TIME_RECORD: usize = VALUE_SWITCH_RECORD + COPY_HEADER;
/// Then whether the thread's switches are no longer recorded (set by fsprof: not 0), only
/// counted into its time on a CPU (see `perf::MAX_SWITCH_RATE`).
pub(super) const VALUE_QUIET: usize = VALUE_TIME_RECORD + COPY_HEADER;
/// Then the folding of short stretches off the CPU (`cpu_wide/programs.rs`, `fold`): when the
/// thread left its CPU in a departure folded (0: none open), how it left (one of the
/// [`FOLD_KINDS`]; for a departure recorded too, whether it blocked), the CPU time up to which a preemption is near
/// the end of a block (see `ring::JUST_BACK_NS`), the folded time not yet recorded per kind,
/// and the record that carries it.
pub(super) const VALUE_FOLD_LEFT: usize = VALUE_QUIET + 8;
pub(super) const VALUE_FOLD_KIND: usize = VALUE_FOLD_LEFT + 8;
pub(super) const VALUE_NEAR_UNTIL: usize = VALUE_FOLD_KIND + 8;
pub(super) const VALUE_FOLDED: usize = VALUE_NEAR_UNTIL + 8;
pub(super) const VALUE_FOLD_RECORD: usize = VALUE_FOLDED + 8 * FOLD_KINDS;
/// A fold record: time, index and kind, the folded time per kind, the switch number.
pub(super) const FOLD_RECORD: usize = 16 + 8 * FOLD_KINDS + 8;
pub(super) const VALUE_SIZE: usize = VALUE_FOLD_RECORD + FOLD_RECORD;
/// The kinds of folded stretches: blocked, preempted near the end of a block, preempted
/// elsewhere (their numbers in `VALUE_FOLD_KIND` and the order of `VALUE_FOLDED`).
pub(super) const FOLD_KINDS: usize = 3;
const _: () = assert!(VALUE_SIZE.is_multiple_of(8), "values hold aligned words");

/// The map's values, mapped into fsprof (the BPF array is created mmapable).
pub(super) struct Values {
    base: *mut u8,
    len: usize,
    capacity: u32,
}

// SAFETY: the mapping is owned by this struct (unmapped on drop) and written only through
// `&mut self`.
unsafe impl Send for Values {}

impl Values {
    /// Maps the `capacity` values of the array `map`.
    pub(super) fn map(map: &OwnedFd, page: usize, capacity: u32) -> Result<Values, Errno> {
        let len = (capacity as usize * VALUE_SIZE).div_ceil(page) * page;
        let base = map_shared(map, len, true, 0)?;
        Ok(Values {
            base,
            len,
            capacity,
        })
    }

    /// Writes `words` into value `index` from byte `offset` of the layout (volatile: the
    /// programs read them at any time).
    pub(super) fn write(&mut self, index: u32, offset: usize, words: &[u64]) {
        assert!(index < self.capacity && offset + 8 * words.len() <= VALUE_SIZE);
        assert!(offset.is_multiple_of(8));
        for (i, word) in words.iter().enumerate() {
            // SAFETY: the value lies inside the mapping (index < capacity), is VALUE_SIZE bytes
            // and 8-aligned (VALUE_SIZE is a multiple of 8, the mapping page-aligned), and the
            // words lie inside it (checked above).
            unsafe {
                self.base
                    .add(index as usize * VALUE_SIZE + offset + 8 * i)
                    .cast::<u64>()
                    .write_volatile(*word)
            };
        }
    }
}

impl Values {
    /// The word at byte `offset` of value `index` (volatile: the programs write it at any
    /// time).
    pub(super) fn read(&self, index: u32, offset: usize) -> u64 {
        assert!(index < self.capacity && offset + 8 <= VALUE_SIZE && offset.is_multiple_of(8));
        // SAFETY: as in `write`: inside the mapping, 8-aligned.
        unsafe {
            self.base
                .add(index as usize * VALUE_SIZE + offset)
                .cast::<u64>()
                .read_volatile()
        }
    }

    /// Per CPU, the time on a CPU of the thread with value `index` at `now`, by the programs'
    /// own count: up to its latest departure, and since its return after it while it is on a
    /// CPU (exact after its last switch, once it exited); read again if a switch came between
    /// the two words.
    pub(super) fn cpu_ns(&self, index: u32, now: u64) -> u64 {
        let (mut on, mut cpu) = (self.read(index, VALUE_ON_SINCE), 0);
        for _ in 0..4 {
            cpu = self.read(index, VALUE_CPU_NS);
            let again = self.read(index, VALUE_ON_SINCE);
            if again == on {
                break;
            }
            on = again;
        }
        cpu + if on == 0 { 0 } else { now.saturating_sub(on) }
    }
}

impl Drop for Values {
    fn drop(&mut self) {
        // SAFETY: unmaps what `map` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
