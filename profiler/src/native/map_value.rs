//! The sampled threads' BPF map values mapped into fsprof, which writes the thread's slot
//! addresses, its anchors, whether the walk is on, and reads what the programs keep there (the
//! layout is `layout.rs`). It neither creates the map nor decides what to write.

use crate::native::bpf::map_shared;
use crate::native::layout::{VALUE_CPU_NS, VALUE_ON_SINCE, VALUE_SIZE};
use nix::errno::Errno;
use nix::libc;
use std::os::fd::OwnedFd;

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
