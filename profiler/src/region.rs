//! Reading a target's fsprof region: consistent copies of every thread's mark stack.
//!
//! Follows the protocol defined in `fsprof_shim::abi` (the single definition of the layout): copy a
//! slot's state words, then its records together with the state words again, and keep the copy only
//! if the state did not change and was not mid-write. Inconsistent slots are retried a few times and
//! then reported as unreadable for this sample, never as a torn stack.
//!
//! Addresses in records are not followed here; `names.rs` does that.

use crate::remote::Remote;
use fsprof_shim::abi::{self, HeaderView, RecordView, SlotState, MARK_CAPACITY, SLOT_COUNT};
use nix::errno::Errno;

/// How many times a slot that changed under us is copied again before giving up for this sample.
const RETRIES: usize = 4;

/// Why a mapping that looks like a region cannot be read as one.
#[derive(Debug)]
pub enum RegionError {
    /// Reading the target's memory failed.
    Read(Errno),
    /// The header does not match this build of fsprof.
    Incompatible(HeaderView),
}

/// One thread's marks, as copied consistently from its slot.
#[derive(Clone, Debug, Default)]
pub struct ThreadMarks {
    /// Kernel thread id.
    pub tid: u32,
    /// Logical depth; more than `records.len()` when the stack was deeper than the capacity.
    pub depth: u32,
    /// Records, outermost first.
    pub records: Vec<RecordView>,
}

/// Per-read counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadStats {
    /// Slot copies discarded because the thread was writing (retried).
    pub retries: u64,
    /// Slots given up on for one sample after all retries.
    pub dropped: u64,
}

/// A region in the target, at a fixed address.
pub struct RegionReader {
    remote: Remote,
    address: u64,
    /// Threads that could not get a slot, as last read.
    pub threads_without_slot: u64,
}

impl RegionReader {
    /// Checks the header of the mapping at `address` in the target.
    pub fn open(remote: Remote, address: u64) -> Result<RegionReader, RegionError> {
        let mut reader = RegionReader { remote, address, threads_without_slot: 0 };
        reader.read_header()?;
        Ok(reader)
    }

    /// The region's address in the target.
    pub fn address(&self) -> u64 {
        self.address
    }

    fn read_header(&mut self) -> Result<HeaderView, RegionError> {
        let mut bytes = [0u8; abi::HEADER_VIEW_SIZE];
        self.remote.read(self.address, &mut bytes).map_err(RegionError::Read)?;
        let header = abi::parse_header(&bytes).expect("buffer has the header's size");
        if !header.is_compatible() {
            return Err(RegionError::Incompatible(header));
        }
        self.threads_without_slot = header.threads_without_slot;
        Ok(header)
    }

    /// Appends every claimed slot's marks to `out`, and the tids of slots that could not be copied
    /// consistently to `unreadable`.
    pub fn read(
        &mut self,
        out: &mut Vec<ThreadMarks>,
        unreadable: &mut Vec<u32>,
        stats: &mut ReadStats,
    ) -> Result<(), RegionError> {
        let header = self.read_header()?;
        let used = (header.slots_used as usize).min(SLOT_COUNT);
        let slots: Vec<u64> = (0..used).map(|i| abi::slot_address(self.address, i)).collect();

        let mut states = vec![[0u8; abi::SLOT_STATE_SIZE]; used];
        {
            let mut parts: Vec<(u64, &mut [u8])> =
                slots.iter().zip(states.iter_mut()).map(|(a, b)| (*a, &mut b[..])).collect();
            self.remote.read_many(&mut parts).map_err(RegionError::Read)?;
        }

        for (slot, state_bytes) in slots.iter().zip(&states) {
            let mut state = abi::parse_slot_state(state_bytes).expect("sized");
            let mut attempt = 0;
            loop {
                if state.tid == 0 {
                    break;
                }
                if state.seq % 2 == 0 {
                    match self.copy_records(*slot, state) {
                        Ok(Some(marks)) => {
                            out.push(marks);
                            break;
                        }
                        Ok(None) => {}
                        Err(errno) => return Err(RegionError::Read(errno)),
                    }
                }
                attempt += 1;
                if attempt > RETRIES {
                    stats.dropped += 1;
                    unreadable.push(state.tid);
                    break;
                }
                stats.retries += 1;
                std::thread::yield_now();
                let mut again = [0u8; abi::SLOT_STATE_SIZE];
                self.remote.read(*slot, &mut again).map_err(RegionError::Read)?;
                state = abi::parse_slot_state(&again).expect("sized");
            }
        }
        Ok(())
    }

    /// Copies the records `state` describes and the state words again; `None` if they changed.
    fn copy_records(&self, slot: u64, state: SlotState) -> Result<Option<ThreadMarks>, Errno> {
        let recorded = (state.depth as usize).min(MARK_CAPACITY);
        let mut records = vec![0u8; recorded * abi::RECORD_SIZE];
        let mut after = [0u8; abi::SLOT_STATE_SIZE];
        let mut parts: Vec<(u64, &mut [u8])> = Vec::with_capacity(2);
        if recorded > 0 {
            parts.push((abi::record_address(slot, 0), &mut records[..]));
        }
        parts.push((slot, &mut after[..]));
        self.remote.read_many(&mut parts)?;
        if abi::parse_slot_state(&after) != Some(state) {
            return Ok(None);
        }
        let records = records
            .chunks_exact(abi::RECORD_SIZE)
            .map(|bytes| abi::parse_record(bytes).expect("sized"))
            .collect();
        Ok(Some(ThreadMarks { tid: state.tid, depth: state.depth, records }))
    }
}
