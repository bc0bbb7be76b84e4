//! Reading a target's fsprof region: consistent copies of every thread's mark stack.
//!
//! Follows the protocol defined in `fsprof_shim::abi` (the single definition of the layout and of
//! the consistency check). Two ways to read, chosen per region when it is opened:
//! * **mapped**: the region's memfd, opened through `/proc/<pid>/fd/<fd>` and mapped read-only
//!   into fsprof. A slot is copied with plain loads between two reads of its sequence counter, a
//!   window of tens of nanoseconds, so even threads that mark millions of times a second are read
//!   consistently. No system call per sample.
//! * **remote**: `process_vm_readv` (when the program closed the descriptor): the slot's state
//!   words, then its records with the state words again, in two calls.
//!
//! A slot that changed under us is retried, and after that reported as unreadable for this sample,
//! never as a torn stack. Addresses in records are not followed here; `names.rs` does that.

use crate::program::remote::Remote;
use fsprof_shim::abi::{self, HeaderView, RecordView, SlotState, MARK_CAPACITY, SLOT_COUNT};
use memmap2::{Mmap, MmapOptions};
use nix::errno::Errno;

/// Copies of a changing slot made before giving up for this sample (mapped backing).
const MAPPED_RETRIES: usize = 200;
/// The same for the remote backing, where each copy costs two system calls.
const REMOTE_RETRIES: usize = 8;
/// Free slots kept per read (see [`RegionReader::free_slots`]).
const FREE_KEPT: usize = 2;

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
    /// The slot's sequence counter at the copy (it moves at every push and pop).
    pub seq: u32,
    /// Records, outermost first.
    pub records: Vec<RecordView>,
    /// Index of the slot in its region.
    pub slot: usize,
    /// Index of the region among those the caller reads (set by the caller).
    pub region: usize,
}

impl ThreadMarks {
    /// Whether `other`, a copy of the same slot, holds the same marks.
    pub fn same_marks(&self, other: &ThreadMarks) -> bool {
        self.depth == other.depth && self.records == other.records
    }
}

/// Per-read counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadStats {
    /// Slot copies discarded because the thread was writing (retried).
    pub retries: u64,
    /// Slots given up on for one sample after all retries.
    pub dropped: u64,
    /// Later branches taken from the slots' histories.
    pub later_branches: u64,
    /// Later branches written over in a history before they could be read.
    pub later_branches_lost: u64,
    /// Thread samples whose copies from several regions may not be of one instant, kept for
    /// want of a perf sample.
    pub unsettled: u64,
}

enum Backing {
    Mapped(Mmap, Holder),
    Remote,
}

/// How a mapped region is known to be still the target's without reading the target's memory:
/// the descriptor it was mapped through still names the same file in the target. Reading the
/// target's memory (`process_vm_readv`) waits for its memory map's lock, which `fork`, `mmap` and
/// `munmap` hold for writing: a tick that read the header that way was delayed until the
/// program's `fork` returned, and took the time of the `fork` for whatever came after it.
struct Holder {
    /// The target's descriptor directory (`/proc/PID/task/TID/fd`), opened as a path.
    directory: std::os::fd::OwnedFd,
    /// The descriptor's number, as a name in it.
    name: std::ffi::CString,
    /// The memfd's device and inode, as mapped.
    file: (u64, u64),
}

impl Holder {
    /// Whether the target's descriptor still names the mapped file. False after an exec (the
    /// memfd is close-on-exec), when the program closed it, or when the thread whose directory
    /// this is has exited: the caller then reads the header from the target's memory.
    fn holds(&self) -> bool {
        use std::os::fd::AsRawFd;
        nix::sys::stat::fstatat(
            Some(self.directory.as_raw_fd()),
            self.name.as_c_str(),
            nix::fcntl::AtFlags::empty(),
        )
        .is_ok_and(|stat| (stat.st_dev, stat.st_ino) == self.file)
    }
}

/// A region in the target, at a fixed address.
pub struct RegionReader {
    backing: Backing,
    remote: Remote,
    address: u64,
    /// The header's nonce when opened: a region with another is a new one (after an exec).
    nonce: u64,
    /// Threads that could not get a slot, as last read.
    pub threads_without_slot: u64,
    /// Slots claimed so far, as last read.
    slots_used: u32,
    /// The lowest slots below `slots_used` that were free at the last read (at most
    /// [`FREE_KEPT`]): a thread's first mark claims the lowest free slot.
    free: Vec<usize>,
    /// Per slot, the first history entry not yet taken; empty before the first read of the
    /// histories (whose older entries are taken then, none counted lost).
    history_taken: Vec<u64>,
}

impl RegionReader {
    /// Opens the region mapped at `address` in process `pid`: maps it if possible, else reads it
    /// remotely. Fails if its header does not match this build.
    /// `via` is a live thread of the process, through which its memory is read.
    pub fn open(pid: u32, via: u32, address: u64) -> Result<RegionReader, RegionError> {
        let remote = Remote::new(via);
        let mut bytes = [0u8; abi::HEADER_VIEW_SIZE];
        remote
            .read(address, &mut bytes)
            .map_err(RegionError::Read)?;
        let header = abi::parse_header(&bytes).expect("buffer has the header's size");
        if !header.is_compatible() {
            return Err(RegionError::Incompatible(header));
        }
        let backing = map(pid, via, address, &header)
            .map(|(map, holder)| Backing::Mapped(map, holder))
            .unwrap_or(Backing::Remote);
        Ok(RegionReader {
            backing,
            remote,
            address,
            nonce: header.nonce,
            threads_without_slot: header.threads_without_slot,
            slots_used: 0,
            free: Vec::new(),
            history_taken: Vec::new(),
        })
    }

    /// The region's address in the target.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// The lowest slots that were free at the last read, among those claimed before (whose
    /// pages the program has touched): where a thread without a slot yet will likely put its
    /// first marks (the shim claims the lowest free slot).
    pub fn free_slots(&self) -> &[usize] {
        &self.free
    }

    /// Appends every claimed slot's marks to `out`, and the tids of slots that could not be copied
    /// consistently to `unreadable`.
    pub fn read(
        &mut self,
        out: &mut Vec<ThreadMarks>,
        unreadable: &mut Vec<u32>,
        stats: &mut ReadStats,
    ) -> Result<(), RegionError> {
        match &self.backing {
            Backing::Mapped(map, holder) => {
                // Our mapping outlives the target's (after an exec, say): check that the target
                // still holds it open, else, with one small read, that the region is still
                // mapped at its address in the target.
                if !holder.holds() {
                    let mut bytes = [0u8; abi::HEADER_VIEW_SIZE];
                    self.remote
                        .read(self.address, &mut bytes)
                        .map_err(RegionError::Read)?;
                    let header = abi::parse_header(&bytes).expect("sized");
                    if !header.is_compatible()
                        || header.address != self.address
                        || header.nonce != self.nonce
                    {
                        return Err(RegionError::Incompatible(header));
                    }
                }
                // SAFETY: `map` is a compatible region of REGION_SIZE bytes (checked in `map`),
                // mapped for as long as `self` lives.
                let header = unsafe { abi::header_at(map.as_ptr()) };
                self.threads_without_slot = header.threads_without_slot;
                self.slots_used = header.slots_used;
                self.free.clear();
                read_mapped(
                    map,
                    header.slots_used,
                    out,
                    &mut self.free,
                    unreadable,
                    stats,
                );
                Ok(())
            }
            Backing::Remote => {
                let mut bytes = [0u8; abi::HEADER_VIEW_SIZE];
                self.remote
                    .read(self.address, &mut bytes)
                    .map_err(RegionError::Read)?;
                let header = abi::parse_header(&bytes).expect("sized");
                if !header.is_compatible() || header.nonce != self.nonce {
                    return Err(RegionError::Incompatible(header));
                }
                self.threads_without_slot = header.threads_without_slot;
                self.slots_used = header.slots_used;
                self.free.clear();
                read_remote(
                    &self.remote,
                    self.address,
                    header.slots_used,
                    out,
                    &mut self.free,
                    unreadable,
                    stats,
                )
                .map_err(RegionError::Read)
            }
        }
    }
}

impl RegionReader {
    /// Appends the later branches written to the slots' histories since the previous call (see
    /// `fsprof_shim::abi`), of the slots claimed at the last [`RegionReader::read`], whoever owns
    /// them now (a thread that exited since keeps its entries), oldest first per slot. Returns
    /// the most entries one history read before was given since the previous call.
    pub fn read_history(&mut self, out: &mut Vec<RecordView>, stats: &mut ReadStats) -> u64 {
        let used = (self.slots_used as usize).min(SLOT_COUNT);
        let (first, before) = (self.history_taken.is_empty(), out.len());
        // Slots read before: a slot first read now has its whole history counted since 0,
        // which says nothing of how fast it fills.
        let (known, mut most) = (self.history_taken.len(), 0);
        if self.history_taken.len() < used {
            self.history_taken.resize(used, 0);
        }
        for index in 0..used {
            let since = self.history_taken[index];
            let (written, lost) = match &self.backing {
                // SAFETY: see `RegionReader::read`; index < SLOT_COUNT.
                Backing::Mapped(map, _) => unsafe {
                    abi::copy_history(map.as_ptr(), index, since, out)
                },
                Backing::Remote => {
                    let slot = abi::slot_address(self.address, index);
                    match read_history_remote(&self.remote, slot, since, out) {
                        Some(read) => read,
                        None => continue,
                    }
                }
            };
            self.history_taken[index] = written;
            if !first {
                stats.later_branches_lost += lost;
                if index < known {
                    most = most.max(written.saturating_sub(since));
                }
            }
        }
        stats.later_branches += (out.len() - before) as u64;
        most
    }

    /// Copies one slot again (a thread's, while it is stopped: its marks then match its native
    /// stack). `None` if the slot changed owner, or could not be copied consistently (a thread
    /// stopped in the middle of a push).
    pub fn read_slot(&self, index: usize, tid: u32) -> Option<ThreadMarks> {
        if index >= SLOT_COUNT {
            return None;
        }
        let marks = match &self.backing {
            Backing::Mapped(map, _) => {
                let mut records = Vec::with_capacity(MARK_CAPACITY);
                // SAFETY: see `RegionReader::read`; index < SLOT_COUNT.
                let state = unsafe { abi::copy_slot(map.as_ptr(), index, &mut records) }.ok()?;
                ThreadMarks {
                    tid: state.tid,
                    seq: state.seq,
                    depth: state.depth,
                    records,
                    slot: index,
                    region: 0,
                }
            }
            Backing::Remote => {
                let slot = abi::slot_address(self.address, index);
                let mut bytes = [0u8; abi::SLOT_STATE_SIZE];
                self.remote.read(slot, &mut bytes).ok()?;
                let state = abi::parse_slot_state(&bytes)?;
                if state.seq % 2 == 1 {
                    return None;
                }
                let mut marks = copy_remote(&self.remote, slot, state).ok()??;
                marks.slot = index;
                marks
            }
        };
        (marks.tid == tid).then_some(marks)
    }
}

/// Maps the region's memfd, if the target still has it open and it is the region at `address`.
///
/// The descriptor number comes from the target, so it is checked before anything is done with it:
/// it must name a memfd of the region's name (not a FIFO, whose open would block, or a device),
/// be opened without blocking, be a regular file of the region's size, and be sealed against
/// shrinking (a mapping of a file that shrinks faults with SIGBUS when read).
fn map(pid: u32, via: u32, address: u64, header: &HeaderView) -> Option<(Mmap, Holder)> {
    use nix::libc;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    if header.fd < 0 || header.address != address {
        return None;
    }
    // Through a live thread: a leader that exited before the others has an empty fd directory.
    let directory = format!("/proc/{pid}/task/{via}/fd");
    let path = format!("{directory}/{}", header.fd);
    let link = std::fs::read_link(&path).ok()?;
    if link.as_os_str() != format!("/memfd:{} (deleted)", abi::REGION_NAME).as_str() {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() < abi::REGION_SIZE as u64 {
        return None;
    }
    // SAFETY: F_GET_SEALS on a descriptor we own.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return None;
    }
    // SAFETY: a read-only shared mapping of a file sealed against shrinking and at least
    // REGION_SIZE bytes long; the target writes it concurrently, which is why every read of it
    // goes through the atomic loads of `abi::header_at` and `abi::copy_slot`.
    let map = unsafe { MmapOptions::new().len(abi::REGION_SIZE).map(&file) }.ok()?;
    // SAFETY: the mapping has REGION_SIZE >= HEADER_SIZE bytes.
    let mapped = unsafe { abi::header_at(map.as_ptr()) };
    if !(mapped.is_compatible() && mapped.address == address && mapped.nonce == header.nonce) {
        return None;
    }
    let holder = Holder {
        directory: nix::fcntl::open(
            directory.as_str(),
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        // SAFETY: `open` returned a descriptor that nothing else owns.
        .map(|fd| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
        .ok()?,
        name: std::ffi::CString::new(header.fd.to_string()).ok()?,
        file: (metadata.dev(), metadata.ino()),
    };
    Some((map, holder))
}

fn read_mapped(
    map: &Mmap,
    slots_used: u32,
    out: &mut Vec<ThreadMarks>,
    free: &mut Vec<usize>,
    unreadable: &mut Vec<u32>,
    stats: &mut ReadStats,
) {
    let mut records = Vec::with_capacity(MARK_CAPACITY);
    for index in 0..(slots_used as usize).min(SLOT_COUNT) {
        let mut attempt = 0;
        loop {
            // SAFETY: see `RegionReader::read`; index < SLOT_COUNT.
            match unsafe { abi::copy_slot(map.as_ptr(), index, &mut records) } {
                Ok(state) => {
                    if state.tid != 0 {
                        out.push(ThreadMarks {
                            tid: state.tid,
                            seq: state.seq,
                            depth: state.depth,
                            records: records.clone(),
                            slot: index,
                            region: 0,
                        });
                    } else if free.len() < FREE_KEPT {
                        free.push(index);
                    }
                    break;
                }
                Err(abi::Busy) if attempt < MAPPED_RETRIES => {
                    attempt += 1;
                    stats.retries += 1;
                    std::hint::spin_loop();
                }
                Err(abi::Busy) => {
                    stats.dropped += 1;
                    // SAFETY: as above.
                    unreadable.push(unsafe { abi::slot_owner(map.as_ptr(), index) });
                    break;
                }
            }
        }
    }
}

fn read_remote(
    remote: &Remote,
    address: u64,
    slots_used: u32,
    out: &mut Vec<ThreadMarks>,
    free: &mut Vec<usize>,
    unreadable: &mut Vec<u32>,
    stats: &mut ReadStats,
) -> Result<(), Errno> {
    let used = (slots_used as usize).min(SLOT_COUNT);
    let slots: Vec<u64> = (0..used).map(|i| abi::slot_address(address, i)).collect();
    let mut states = vec![[0u8; abi::SLOT_STATE_SIZE]; used];
    {
        let mut parts: Vec<(u64, &mut [u8])> = slots
            .iter()
            .zip(states.iter_mut())
            .map(|(a, b)| (*a, &mut b[..]))
            .collect();
        remote.read_many(&mut parts)?;
    }
    for (index, (slot, state_bytes)) in slots.iter().zip(&states).enumerate() {
        let mut state = abi::parse_slot_state(state_bytes).expect("sized");
        let mut attempt = 0;
        loop {
            if state.tid == 0 {
                if free.len() < FREE_KEPT {
                    free.push(index);
                }
                break;
            }
            if state.seq.is_multiple_of(2) {
                if let Some(mut marks) = copy_remote(remote, *slot, state)? {
                    marks.slot = index;
                    out.push(marks);
                    break;
                }
            }
            attempt += 1;
            if attempt > REMOTE_RETRIES {
                stats.dropped += 1;
                unreadable.push(state.tid);
                break;
            }
            stats.retries += 1;
            let mut again = [0u8; abi::SLOT_STATE_SIZE];
            remote.read(*slot, &mut again)?;
            state = abi::parse_slot_state(&again).expect("sized");
        }
    }
    Ok(())
}

/// The history of the slot at `slot` from `since` on (see [`RegionReader::read_history`]): its
/// `written` word first, and the whole history only when it moved. `None` if unreadable.
fn read_history_remote(
    remote: &Remote,
    slot: u64,
    since: u64,
    out: &mut Vec<RecordView>,
) -> Option<(u64, u64)> {
    let address = abi::history_address(slot);
    let mut written = [0u8; 8];
    remote.read(address, &mut written).ok()?;
    if u64::from_ne_bytes(written) == since {
        return Some((since, 0));
    }
    let mut bytes = vec![0u8; abi::HISTORY_SIZE];
    let mut again = [0u8; 8];
    remote
        .read_many(&mut [(address, &mut bytes[..]), (address, &mut again[..])])
        .ok()?;
    abi::parse_history(&bytes, u64::from_ne_bytes(again), since, out)
}

/// Copies the records `state` describes and the state words again; `None` if they changed.
fn copy_remote(remote: &Remote, slot: u64, state: SlotState) -> Result<Option<ThreadMarks>, Errno> {
    let recorded = (state.depth as usize).min(MARK_CAPACITY);
    let mut records = vec![0u8; recorded * abi::RECORD_SIZE];
    let mut after = [0u8; abi::SLOT_STATE_SIZE];
    let mut parts: Vec<(u64, &mut [u8])> = Vec::with_capacity(2);
    if recorded > 0 {
        parts.push((abi::record_address(slot, 0), &mut records[..]));
    }
    parts.push((slot, &mut after[..]));
    remote.read_many(&mut parts)?;
    if abi::parse_slot_state(&after) != Some(state) {
        return Ok(None);
    }
    let records = records
        .chunks_exact(abi::RECORD_SIZE)
        .map(|bytes| abi::parse_record(bytes).expect("sized"))
        .collect();
    Ok(Some(ThreadMarks {
        tid: state.tid,
        seq: state.seq,
        depth: state.depth,
        records,
        slot: 0,
        region: 0,
    }))
}

/// Reads `bytes` laid out as a region from its start, the rest zero, as a target's region is read
/// remotely (see `fuzzing.rs`): the header, every used slot's marks, and the histories of the
/// slots the bytes reach, from the start and from the point the bytes' last word gives. Panics
/// if anything read exceeds its capacity. Returns how many records and history entries came
/// through.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_arbitrary(bytes: &[u8]) -> usize {
    // Zeroed by the allocator's fresh pages: only those the bytes and the reads touch cost.
    let mut region = vec![0u64; abi::REGION_SIZE / 8];
    let len = bytes.len().min(abi::REGION_SIZE);
    for (word, chunk) in region.iter_mut().zip(bytes[..len].chunks(8)) {
        let mut full = [0u8; 8];
        full[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(full);
    }
    let start: *const u8 = region.as_ptr().cast();
    let address = start as u64;
    // SAFETY: `region` is REGION_SIZE bytes, alive for the call.
    let header = unsafe { abi::header_at(start) };
    let remote = Remote::new(std::process::id());
    let (mut out, mut free, mut unreadable) = (Vec::new(), Vec::new(), Vec::new());
    let mut stats = ReadStats::default();
    let _ = read_remote(
        &remote,
        address,
        header.slots_used,
        &mut out,
        &mut free,
        &mut unreadable,
        &mut stats,
    );
    let mut got = 0;
    for thread in &out {
        assert!(thread.records.len() <= MARK_CAPACITY && thread.slot < SLOT_COUNT);
        got += thread.records.len();
    }
    assert!(free.len() <= FREE_KEPT && free.iter().all(|&slot| slot < SLOT_COUNT));
    let last_word = bytes.len().checked_sub(8).map_or(0, |at| {
        u64::from_ne_bytes(bytes[at..].try_into().expect("eight bytes"))
    });
    let reached = len
        .saturating_sub(abi::HEADER_SIZE)
        .div_ceil(abi::SLOT_SIZE);
    let mut history = Vec::new();
    for index in 0..reached.min(SLOT_COUNT) {
        let mut records = Vec::new();
        // SAFETY: as above, and index < SLOT_COUNT.
        if unsafe { abi::copy_slot(start, index, &mut records) }.is_ok() {
            assert!(records.len() <= MARK_CAPACITY);
            got += records.len();
        }
        for since in [0, last_word] {
            history.clear();
            read_history_remote(
                &remote,
                abi::slot_address(address, index),
                since,
                &mut history,
            );
            assert!(history.len() <= abi::HISTORY_CAPACITY);
            got += history.len();
            history.clear();
            // SAFETY: as above.
            unsafe { abi::copy_history(start, index, since, &mut history) };
            assert!(history.len() <= abi::HISTORY_CAPACITY);
        }
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region of arbitrary bytes (every slot's state, depth, records and history random, some
    /// slots mid-write), read as fsprof reads a target's, through `process_vm_readv` and through
    /// the mapped path's copies: every thread's records, and every history read, stay within
    /// their capacity, nothing panics.
    #[test]
    fn arbitrary_regions_are_read_within_bounds() {
        let mut rng = fastrand::Rng::with_seed(16);
        let mut region = vec![0u64; abi::REGION_SIZE / 8];
        let remote = Remote::new(std::process::id());
        let (mut out, mut unreadable, mut stats) = (Vec::new(), Vec::new(), ReadStats::default());
        let (mut records, mut history, mut free) = (Vec::new(), Vec::new(), Vec::new());
        let cases = crate::fuzz::cases(200);
        let (mut marks, mut histories) = (0usize, 0usize);
        for _ in 0..cases {
            let words = region.len();
            for _ in 0..rng.usize(1..4096) {
                region[rng.usize(abi::HEADER_SIZE / 8..words)] = match rng.u8(..4) {
                    0 => rng.u64(..=(abi::MARK_CAPACITY as u64 + 2)),
                    1 => rng.u64(..) & !1, // an even word: a settled `seq`, or a tid
                    _ => rng.u64(..),
                };
            }
            let address = region.as_ptr() as u64;
            let used = if rng.bool() {
                rng.u32(..)
            } else {
                rng.u32(..=SLOT_COUNT as u32)
            };
            out.clear();
            unreadable.clear();
            free.clear();
            read_remote(
                &remote,
                address,
                used,
                &mut out,
                &mut free,
                &mut unreadable,
                &mut stats,
            )
            .unwrap();
            for thread in &out {
                assert!(thread.records.len() <= MARK_CAPACITY);
                assert!(thread.slot < SLOT_COUNT);
                marks += thread.records.len();
            }
            assert!(free.len() <= FREE_KEPT && free.iter().all(|&slot| slot < SLOT_COUNT));
            let index = rng.usize(..SLOT_COUNT);
            // SAFETY: `region` is REGION_SIZE bytes, alive for the call; index < SLOT_COUNT.
            if unsafe { abi::copy_slot(region.as_ptr().cast(), index, &mut records) }.is_ok() {
                assert!(records.len() <= MARK_CAPACITY);
            }
            let since = if rng.bool() {
                rng.u64(..)
            } else {
                rng.u64(..300)
            };
            let slot = abi::slot_address(address, index);
            history.clear();
            read_history_remote(&remote, slot, since, &mut history);
            assert!(history.len() <= abi::HISTORY_CAPACITY);
            histories += history.len();
            history.clear();
            // SAFETY: as above.
            unsafe { abi::copy_history(region.as_ptr().cast(), index, since, &mut history) };
            assert!(history.len() <= abi::HISTORY_CAPACITY);
        }
        assert!(
            marks > 0 && histories > 0,
            "no slot ever read as holding marks ({marks}) or a history ({histories}): {cases} cases"
        );
    }
}
