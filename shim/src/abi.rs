//! The region's ABI: the single definition of the shared-memory layout that the shim writes and the
//! `fsprof` profiler reads.
//!
//! This module is the contract between two processes. It says how the profiler finds a region, what
//! the header, slots and mark records look like byte for byte, and how a reader gets a consistent copy
//! of a slot while its thread keeps marking. It does not create or write regions (that is
//! `region.rs`), and it does not read another process's memory (that is the profiler's job); the
//! `parse_*` functions only decode bytes that a reader already copied.
//!
//! # Finding a region
//! The shim creates one region per process with `memfd_create(REGION_NAME)`, sealed against
//! shrinking and growing, and maps it `MAP_SHARED`, so the mapping appears in `/proc/<pid>/maps` with the path
//! `/memfd:fsprof-region (deleted)`. It keeps the descriptor open (close-on-exec) and records its
//! number and the mapping's address in the header: a reader with permission to read the process
//! can open `/proc/<pid>/fd/<fd>` and map the region read-only into itself, then copy slots with
//! plain loads ([`copy_slot`]) instead of a system call per read. Where that fails (the program
//! closed the descriptor), a reader copies with `process_vm_readv` and the same protocol.
//! The mapping is marked `MADV_DONTFORK`: a forked child does not share its parent's region and
//! creates its own on its first mark (the descriptor it inherits is not its region's). A process can hold
//! several regions (two copies of the shim linked into one program, each with its own thread
//! state); a reader reads them all.
//!
//! A reader that starts the program can learn when a region appears instead of reading the map
//! over and over: it sets [`ANNOUNCE_VARIABLE`] in the program's environment to the name of an
//! abstract Unix datagram socket (at most [`MAX_ANNOUNCE_NAME`] bytes, without the leading NUL),
//! and the process that creates a region sends it one datagram (the region's address, 8 bytes,
//! native-endian) once the header is written. The datagram is a hint: the reader learns the
//! sender's process from the kernel (`SO_PASSCRED`) and finds the region in its map as above.
//!
//! # Layout (all integers native-endian, native word size 8 bytes)
//! ```text
//! offset 0              RegionHeader (HEADER_SIZE bytes, zero padded)
//! offset HEADER_SIZE    Slot[slot_count], each SLOT_SIZE bytes
//! Slot:  seq u32 | tid u32 | depth u32 | reserved u32 | Record[MARK_CAPACITY] | History
//!        (64-byte aligned)
//! Record: feature u64 | payload u64 | meta u64 | position u64 | sp u64 | tag u64 | extra u64[2]
//! History: written u64 | padding to 64 bytes | Entry[HISTORY_CAPACITY]
//! Entry: feature u64 | payload u64 | branch u32 (high) and length u32 (low) | offset u64
//! ```
//! * `RegionHeader::slots_used` is a high-water mark: slots at or above it were never claimed.
//! * A slot with `tid == 0` is free. Otherwise it belongs to thread `tid` (a kernel thread id).
//! * `depth` is the thread's logical mark depth. Records `0..min(depth, MARK_CAPACITY)` are valid,
//!   outermost first; `depth > MARK_CAPACITY` means the deeper marks were counted but not written.
//! * `Record::feature` is the address (in the target) of a [`crate::Feature`] descriptor: a `u64`
//!   [`FEATURE_MAGIC`], then the name's address and length. `meta` holds the payload kind in its high
//!   32 bits and the payload string's length in its low 32 bits; `payload` the string's address.
//!   For [`KIND_LOCATION`] the string is a file name and `position` is `line << 32 | column`.
//!   For [`KIND_ANTIMARK`] payload and position are zero. For [`KIND_CALL_SITE`] `payload` is a
//!   return address, not a string, `position` the caller's frame pointer register at the call
//!   (0 if unknown), and length zero. `sp` is a stack address in the frame
//!   that pushed the mark. `tag` is private to the writer. `extra` is written only by the kinds
//!   that define it (any other kind leaves whatever an earlier mark wrote there: unread).
//! * [`KIND_ALTERNATIVE`]: `payload` and the length are the choice point's name, `position` the
//!   input offset, `extra[0]` the branch number.
//! * [`KIND_BOUNDARY`]: `payload` and the length are the checked value's name; `position` is the
//!   address of the `from` component's name and `extra[0]` the `to` component's; `extra[1]` holds
//!   their lengths, `from` in its high 32 bits and `to` in its low 32 bits.
//!
//! * `History` remembers the thread's latest pushes of a [`KIND_ALTERNATIVE`] record whose branch
//!   (`extra[0]`) is not 0: a parser trying a later branch, which tells that the earlier branches
//!   at that offset failed, however briefly the later one runs. Each entry holds the record's
//!   feature, choice (payload and length), branch and offset. Entry `n` (counted from 0 over
//!   the slot's life) is written at `entries[n % HISTORY_CAPACITY]`, inside the push's `seq`
//!   bracket, and then `written` becomes `n + 1` (release ordering).
//!
//! Version 3 (2026-11-26) added `extra` (records of 64 bytes, 48 before) and the two kinds that
//! use it. The six words every push writes stay within one cache line for every record. Version
//! 4 (2026-11-26) added `History`.
//!
//! # Consistency protocol (a sequence lock per slot)
//! Only the owning thread writes its slot. A push (and a claim or release) makes `seq` odd, writes,
//! and makes `seq` even again (release ordering); `seq` only grows. A pop is a single release store
//! that lowers `depth`: it overwrites nothing, so records below the old depth stay valid until the
//! next push, which moves `seq`. (A push that a signal handler's `siglongjmp` leaves halfway
//! leaves `seq` odd until the writer closes it, or for good if it cannot know: a reader sees the
//! slot as busy meanwhile, never a torn stack.) A reader loads `seq` (even), `tid` and `depth`, copies records
//! `0..depth`, and loads `seq` (and `tid`) again: if they are unchanged, the copy is the stack as it
//! was when `depth` was read. Otherwise it retries or gives up on that slot for this sample.
//! ([`copy_slot`] implements this for a reader that mapped the region; a reader using
//! `process_vm_readv` compares all three state words instead, which is stricter.)
//!
//! The history is read on its own: load `written` (w1), copy the entries wanted, load `written`
//! again (w2). Entry `i` is intact if `i < w1` and `i + HISTORY_CAPACITY > w2` (entry
//! `i + HISTORY_CAPACITY`, written over it, had not begun); [`history_range`] says which.
//!
//! Everything a reader takes from a region is untrusted input: check the header against these
//! constants, clamp `depth`, and bound every string it follows.

use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64};

/// The memfd name; the mapping's path in `/proc/<pid>/maps` is `/memfd:` followed by this.
pub const REGION_NAME: &str = "fsprof-region";
/// The environment variable naming the abstract socket a new region is announced to (see
/// "Finding a region").
pub const ANNOUNCE_VARIABLE: &str = "FSPROF_ANNOUNCE";
/// [`ANNOUNCE_VARIABLE`] as a C string.
pub const ANNOUNCE_VARIABLE_C: &core::ffi::CStr = c"FSPROF_ANNOUNCE";
/// The longest socket name announced to (an abstract address holds 107 bytes).
pub const MAX_ANNOUNCE_NAME: usize = 100;
/// First eight bytes of every region.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FSPROFRG");
/// Incremented on any layout change; a reader refuses a region of another version.
pub const VERSION: u32 = 4;
/// Size of the header area in front of the slots.
pub const HEADER_SIZE: usize = 4096;
/// Number of thread slots per region.
pub const SLOT_COUNT: usize = 1024;
/// Number of mark records per slot; deeper marks are counted in `depth` but not written.
pub const MARK_CAPACITY: usize = 64;
/// Number of later branches each slot remembers (see `History` in the layout).
pub const HISTORY_CAPACITY: usize = 128;
/// Size of one slot.
pub const SLOT_SIZE: usize = size_of::<Slot>();
/// Size of one mark record.
pub const RECORD_SIZE: usize = size_of::<Record>();
/// Offset of the first record inside a slot.
pub const RECORDS_OFFSET: usize = offset_of!(Slot, records);
/// Offset of the history inside a slot: its `written` word, then its entries at
/// [`HISTORY_ENTRIES_OFFSET`] from it.
pub const HISTORY_OFFSET: usize = offset_of!(Slot, history);
/// Offset of the history's first entry from the history's start.
pub const HISTORY_ENTRIES_OFFSET: usize = offset_of!(History, entries);
/// Size of a slot's history.
pub const HISTORY_SIZE: usize = size_of::<History>();
/// Bytes a reader copies to learn a slot's state: `seq`, `tid`, `depth`, reserved.
pub const SLOT_STATE_SIZE: usize = 16;
/// Total size of a region.
pub const REGION_SIZE: usize = HEADER_SIZE + SLOT_COUNT * SLOT_SIZE;

/// First word of every feature descriptor, so a reader can tell one from stray memory.
pub const FEATURE_MAGIC: u64 = u64::from_le_bytes(*b"FSPROFFT");
/// Size of the part of a feature descriptor a reader copies: magic, name address, name length.
pub const FEATURE_DESCRIPTOR_SIZE: usize = 24;

/// Payload kind: a source location (file string, line and column).
pub const KIND_LOCATION: u32 = 1;
/// Payload kind: a name string (a `&'static str` or an interned name).
pub const KIND_NAME: u32 = 2;
/// Payload kind: an antimark; no payload.
pub const KIND_ANTIMARK: u32 = 3;
/// Payload kind: a call site; `payload` is a return address in the target (the instruction after
/// the call that marked, so look up `payload - 1` to symbolize it), `position` the frame pointer
/// register at the call (0 if unknown: a reader's `line << 32 | column`), length zero.
/// Written by the C ABI (`fsprof_mark(feature, NULL)`).
pub const KIND_CALL_SITE: u32 = 4;
/// Payload kind: an alternative a parser tries (`Feature::mark_alternative`): the choice point's
/// name, the branch and the input offset (see the layout above).
pub const KIND_ALTERNATIVE: u32 = 5;
/// Payload kind: a check at a boundary between two components (`Feature::mark_boundary`): the
/// checked value's name and the two components' names (see the layout above).
pub const KIND_BOUNDARY: u32 = 6;

/// The region header, at offset 0.
#[repr(C)]
pub struct RegionHeader {
    pub(crate) magic: u64,
    pub(crate) version: u32,
    pub(crate) header_size: u32,
    pub(crate) slot_count: u32,
    pub(crate) slot_size: u32,
    pub(crate) mark_capacity: u32,
    pub(crate) record_size: u32,
    /// Process id of the process that created the region.
    pub(crate) pid: u32,
    /// High-water mark of claimed slots.
    pub(crate) slots_used: AtomicU32,
    /// Threads that wanted to mark but found every slot taken.
    pub(crate) threads_without_slot: AtomicU64,
    /// The region's own address in its process, to match a mapping to its descriptor.
    pub(crate) address: u64,
    /// The memfd descriptor, kept open (close-on-exec) so a reader can map the region itself.
    pub(crate) fd: i32,
    /// A number drawn when the region is created, so that a reader can tell a new region (after
    /// an `exec`, say) from the one it opened even when both are mapped at the same address.
    pub(crate) nonce: u64,
    /// A what-if run's progress point (see [`Progress`]); zero otherwise.
    pub(crate) progress: Progress,
}

/// The progress point of a what-if run (`fsprof what-if --progress FEATURE`), at
/// [`PROGRESS_OFFSET`] in the header (added within version 4: older copies of the shim leave
/// these words zero and never read them). While the process's [`PROGRESS_VARIABLE`] names a
/// feature (read when the region is created; x86-64 only), the shim counts here the ends of
/// that feature's marks and their latencies in the run's *virtual* time: real time less the
/// experiment's delay, which the agent copies into `delay_ns` as it grows, so that a mark's
/// latency leaves out what the experiment's delays added while it was open. The push of such a
/// mark keeps its start in its record's `extra[1]` (for kinds without extra words of their
/// own; the others' ends are counted, not timed), and its record's `tag` has its top bit set.
#[repr(C)]
#[derive(Default)]
pub struct Progress {
    /// The experiment's global delay so far, ns (written by the agent).
    pub delay_ns: AtomicU64,
    /// Marks of the progress feature that ended.
    pub ends: AtomicU64,
    /// Of those, the ones timed (of a kind without extra words).
    pub timed: AtomicU64,
    /// Their latencies in virtual time, added up (wrapping: one may be negative, the sum is
    /// not), ns.
    pub latency_ns: AtomicU64,
}

/// Offset of [`Progress`] in the region header.
pub const PROGRESS_OFFSET: usize = offset_of!(RegionHeader, progress);
/// The environment variable that names a what-if run's progress feature.
pub const PROGRESS_VARIABLE: &str = "FSPROF_PROGRESS";
/// [`PROGRESS_VARIABLE`] as a C string.
pub const PROGRESS_VARIABLE_C: &core::ffi::CStr = c"FSPROF_PROGRESS";
/// The longest progress feature name the shim takes.
pub const MAX_PROGRESS_NAME: usize = 256;

/// One thread's slot.
#[repr(C, align(64))]
pub struct Slot {
    pub(crate) seq: AtomicU32,
    pub(crate) tid: AtomicU32,
    pub(crate) depth: AtomicU32,
    pub(crate) reserved: AtomicU32,
    /// Right after the state, so that a thread's first mark shares the state's cache line: a
    /// push and pop at depth 0 touch one line of the region (what a built-in mark around a
    /// system call costs is mostly lines touched).
    pub(crate) records: [Record; MARK_CAPACITY],
    /// After the records: written only by pushes of later branches.
    pub(crate) history: History,
}

/// A slot's latest later branches (see the layout).
#[repr(C, align(64))]
pub struct History {
    pub(crate) written: AtomicU64,
    _padding: [u64; 7],
    pub(crate) entries: [Entry; HISTORY_CAPACITY],
}

/// A later branch in a history (see the layout).
#[repr(C)]
pub struct Entry {
    pub(crate) feature: AtomicU64,
    pub(crate) payload: AtomicU64,
    pub(crate) meta: AtomicU64,
    pub(crate) position: AtomicU64,
}

/// Size of one history entry.
pub const ENTRY_SIZE: usize = size_of::<Entry>();

/// One mark or antimark.
#[repr(C)]
pub struct Record {
    pub(crate) feature: AtomicU64,
    pub(crate) payload: AtomicU64,
    pub(crate) meta: AtomicU64,
    pub(crate) position: AtomicU64,
    pub(crate) sp: AtomicU64,
    pub(crate) tag: AtomicU64,
    pub(crate) extra: [AtomicU64; 2],
}

const _: () = assert!(size_of::<RegionHeader>() <= HEADER_SIZE);
const _: () = assert!(RECORDS_OFFSET == 16);
const _: () = assert!(RECORD_SIZE == 64);
const _: () = assert!(HISTORY_ENTRIES_OFFSET == 64);

/// A decoded region header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderView {
    /// Must equal [`MAGIC`].
    pub magic: u64,
    /// Must equal [`VERSION`].
    pub version: u32,
    /// Must equal [`HEADER_SIZE`].
    pub header_size: u32,
    /// Must equal [`SLOT_COUNT`].
    pub slot_count: u32,
    /// Must equal [`SLOT_SIZE`].
    pub slot_size: u32,
    /// Must equal [`MARK_CAPACITY`].
    pub mark_capacity: u32,
    /// Must equal [`RECORD_SIZE`].
    pub record_size: u32,
    /// The creating process.
    pub pid: u32,
    /// Slots at or above this index were never claimed (clamp to `slot_count`).
    pub slots_used: u32,
    /// Threads that could not get a slot.
    pub threads_without_slot: u64,
    /// The region's address in the process that created it.
    pub address: u64,
    /// The creating process's memfd descriptor for the region (`-1` if closed).
    pub fd: i32,
    /// Drawn at creation, never 0: tells this region from a later one at the same address.
    pub nonce: u64,
}

impl HeaderView {
    /// Whether this header describes a region laid out exactly as this crate defines it.
    pub fn is_compatible(&self) -> bool {
        self.magic == MAGIC
            && self.version == VERSION
            && self.header_size as usize == HEADER_SIZE
            && self.slot_count as usize == SLOT_COUNT
            && self.slot_size as usize == SLOT_SIZE
            && self.mark_capacity as usize == MARK_CAPACITY
            && self.record_size as usize == RECORD_SIZE
    }
}

/// The state words of a slot, as a reader copied them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotState {
    /// Sequence counter: odd while the owner writes.
    pub seq: u32,
    /// Owner thread id, 0 when free.
    pub tid: u32,
    /// Logical mark depth (may exceed [`MARK_CAPACITY`]).
    pub depth: u32,
}

/// A decoded mark record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordView {
    /// Address of the feature descriptor in the target.
    pub feature: u64,
    /// One of the `KIND_*` constants (unchecked).
    pub kind: u32,
    /// Address of the payload string.
    pub payload: u64,
    /// Length of the payload string (unchecked).
    pub payload_len: u32,
    /// Line for locations.
    pub line: u32,
    /// Column for locations.
    pub column: u32,
    /// A stack address in the frame that pushed the mark.
    pub sp: u64,
    /// The `position` word as written (the input offset of an alternative, the `from` name's
    /// address of a boundary).
    pub position: u64,
    /// The extra words of [`KIND_ALTERNATIVE`] and [`KIND_BOUNDARY`] (meaningless for the other
    /// kinds).
    pub extra: [u64; 2],
}

/// A decoded feature descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureView {
    /// Must equal [`FEATURE_MAGIC`].
    pub magic: u64,
    /// Address of the name string.
    pub name: u64,
    /// Length of the name string (unchecked).
    pub name_len: u64,
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_ne_bytes(word)
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_ne_bytes(word)
}

/// Decodes a region header from at least `size_of::<RegionHeader>()` bytes; `None` if too short.
pub fn parse_header(bytes: &[u8]) -> Option<HeaderView> {
    if bytes.len() < size_of::<RegionHeader>() {
        return None;
    }
    Some(HeaderView {
        magic: u64_at(bytes, offset_of!(RegionHeader, magic)),
        version: u32_at(bytes, offset_of!(RegionHeader, version)),
        header_size: u32_at(bytes, offset_of!(RegionHeader, header_size)),
        slot_count: u32_at(bytes, offset_of!(RegionHeader, slot_count)),
        slot_size: u32_at(bytes, offset_of!(RegionHeader, slot_size)),
        mark_capacity: u32_at(bytes, offset_of!(RegionHeader, mark_capacity)),
        record_size: u32_at(bytes, offset_of!(RegionHeader, record_size)),
        pid: u32_at(bytes, offset_of!(RegionHeader, pid)),
        slots_used: u32_at(bytes, offset_of!(RegionHeader, slots_used)),
        threads_without_slot: u64_at(bytes, offset_of!(RegionHeader, threads_without_slot)),
        address: u64_at(bytes, offset_of!(RegionHeader, address)),
        fd: u32_at(bytes, offset_of!(RegionHeader, fd)) as i32,
        nonce: u64_at(bytes, offset_of!(RegionHeader, nonce)),
    })
}

/// Size of the header prefix a reader must copy for [`parse_header`].
pub const HEADER_VIEW_SIZE: usize = size_of::<RegionHeader>();

/// Decodes the [`SLOT_STATE_SIZE`] state bytes at the start of a slot; `None` if too short.
pub fn parse_slot_state(bytes: &[u8]) -> Option<SlotState> {
    if bytes.len() < SLOT_STATE_SIZE {
        return None;
    }
    Some(SlotState {
        seq: u32_at(bytes, offset_of!(Slot, seq)),
        tid: u32_at(bytes, offset_of!(Slot, tid)),
        depth: u32_at(bytes, offset_of!(Slot, depth)),
    })
}

/// Decodes one [`RECORD_SIZE`]-byte record; `None` if too short.
pub fn parse_record(bytes: &[u8]) -> Option<RecordView> {
    if bytes.len() < RECORD_SIZE {
        return None;
    }
    let meta = u64_at(bytes, offset_of!(Record, meta));
    let position = u64_at(bytes, offset_of!(Record, position));
    Some(RecordView {
        feature: u64_at(bytes, offset_of!(Record, feature)),
        kind: (meta >> 32) as u32,
        payload: u64_at(bytes, offset_of!(Record, payload)),
        payload_len: meta as u32,
        line: (position >> 32) as u32,
        column: position as u32,
        sp: u64_at(bytes, offset_of!(Record, sp)),
        position,
        extra: [
            u64_at(bytes, offset_of!(Record, extra)),
            u64_at(bytes, offset_of!(Record, extra) + 8),
        ],
    })
}

/// Decodes the first [`FEATURE_DESCRIPTOR_SIZE`] bytes of a feature descriptor; `None` if too short.
pub fn parse_feature(bytes: &[u8]) -> Option<FeatureView> {
    if bytes.len() < FEATURE_DESCRIPTOR_SIZE {
        return None;
    }
    Some(FeatureView {
        magic: u64_at(bytes, 0),
        name: u64_at(bytes, 8),
        name_len: u64_at(bytes, 16),
    })
}

/// Address of slot `index` in a region mapped at `region_start`.
pub fn slot_address(region_start: u64, index: usize) -> u64 {
    region_start + (HEADER_SIZE + index * SLOT_SIZE) as u64
}

/// Address of record `index` of the slot at `slot_address`.
pub fn record_address(slot_address: u64, index: usize) -> u64 {
    slot_address + (RECORDS_OFFSET + index * RECORD_SIZE) as u64
}

/// Address of a slot's history (its `written` word) in the slot at `slot_address`.
pub fn history_address(slot_address: u64) -> u64 {
    slot_address + HISTORY_OFFSET as u64
}

/// Which history entries to keep from a copy (see the protocol above): `written` read before the
/// copy (`w1`) and after it (`w2`), and the first entry not yet taken (`since`). Returns the
/// entries to keep, at most [`HISTORY_CAPACITY`] of them whatever the counters say, and how many
/// after `since` were written over before they could be read. The counters are the target's
/// memory: one that went backwards (a stray write, or a slot taken by a new thread) gives
/// nothing to keep this time, and reading goes on from `w1`.
pub fn history_range(w1: u64, w2: u64, since: u64) -> (core::ops::Range<u64>, u64) {
    if w1 < since || w2 < w1 {
        return (w1..w1, 0);
    }
    let oldest_intact = w2.saturating_add(1).saturating_sub(HISTORY_CAPACITY as u64);
    let oldest_held = w1.saturating_sub(HISTORY_CAPACITY as u64);
    let start = since.max(oldest_intact).max(oldest_held);
    let lost = start.saturating_sub(since).min(w1 - since);
    (start..w1.max(start), lost)
}

/// Copies the history entries of slot `index` from `since` on (a region mapped in the reading
/// process) into `out`, oldest first; returns `written` (the next `since`) and how many entries
/// were written over before they could be read.
///
/// # Safety
/// As for [`copy_slot`].
pub unsafe fn copy_history(
    region: *const u8,
    index: usize,
    since: u64,
    out: &mut Vec<RecordView>,
) -> (u64, u64) {
    use core::sync::atomic::{fence, Ordering::*};
    let slot = &*(region.add(HEADER_SIZE + index * SLOT_SIZE) as *const Slot);
    let history = &slot.history;
    let w1 = history.written.load(Acquire);
    if w1 == since {
        return (w1, 0);
    }
    let first = since.max(w1.saturating_sub(HISTORY_CAPACITY as u64));
    let mut copied = [None; HISTORY_CAPACITY];
    for n in first..w1 {
        let entry = &history.entries[(n % HISTORY_CAPACITY as u64) as usize];
        let words = [&entry.feature, &entry.payload, &entry.meta, &entry.position];
        copied[(n % HISTORY_CAPACITY as u64) as usize] = Some(words.map(|word| word.load(Relaxed)));
    }
    fence(Acquire);
    let w2 = history.written.load(Relaxed);
    let (keep, lost) = history_range(w1, w2, since);
    for n in keep {
        if let Some(words) = copied[(n % HISTORY_CAPACITY as u64) as usize] {
            out.push(entry_view(words));
        }
    }
    (w1, lost)
}

/// Decodes a copied history (`HISTORY_SIZE` bytes from [`history_address`]) from `since` on into
/// `out`, oldest first; `w2` is `written` read again after the copy. Returns `written` as copied
/// (the next `since`) and how many entries were written over before they could be read; `None` if
/// `bytes` is too short.
pub fn parse_history(
    bytes: &[u8],
    w2: u64,
    since: u64,
    out: &mut Vec<RecordView>,
) -> Option<(u64, u64)> {
    if bytes.len() < HISTORY_SIZE {
        return None;
    }
    let w1 = u64_at(bytes, offset_of!(History, written));
    let (keep, lost) = history_range(w1, w2, since);
    for n in keep {
        let at = HISTORY_ENTRIES_OFFSET + (n % HISTORY_CAPACITY as u64) as usize * ENTRY_SIZE;
        let word = |i: usize| u64_at(bytes, at + 8 * i);
        out.push(entry_view([word(0), word(1), word(2), word(3)]));
    }
    Some((w1, lost))
}

/// The record of an alternative that a history entry's words stand for.
fn entry_view([feature, payload, meta, position]: [u64; 4]) -> RecordView {
    RecordView {
        feature,
        kind: KIND_ALTERNATIVE,
        payload,
        payload_len: meta as u32,
        line: (position >> 32) as u32,
        column: position as u32,
        sp: 0,
        position,
        extra: [meta >> 32, 0],
    }
}

/// A record read in place, field by field.
fn view_of(record: &Record) -> RecordView {
    use core::sync::atomic::Ordering::Relaxed;
    let meta = record.meta.load(Relaxed);
    let position = record.position.load(Relaxed);
    RecordView {
        feature: record.feature.load(Relaxed),
        kind: (meta >> 32) as u32,
        payload: record.payload.load(Relaxed),
        payload_len: meta as u32,
        line: (position >> 32) as u32,
        column: position as u32,
        sp: record.sp.load(Relaxed),
        position,
        extra: [record.extra[0].load(Relaxed), record.extra[1].load(Relaxed)],
    }
}

/// A slot that changed while it was being copied; copy it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

/// Decodes the header of a region mapped in the reading process.
///
/// # Safety
/// `region` must point to at least [`HEADER_SIZE`] readable bytes (a region mapped read-only is
/// fine) that stay mapped during the call.
pub unsafe fn header_at(region: *const u8) -> HeaderView {
    use core::ptr::{addr_of, read_volatile};
    use core::sync::atomic::Ordering::{Acquire, Relaxed};
    // Another process may write any of these at any time: read each field once, volatile (the
    // counters atomically), and never hold a reference to the plain fields.
    let header = region as *const RegionHeader;
    HeaderView {
        magic: read_volatile(addr_of!((*header).magic)),
        version: read_volatile(addr_of!((*header).version)),
        header_size: read_volatile(addr_of!((*header).header_size)),
        slot_count: read_volatile(addr_of!((*header).slot_count)),
        slot_size: read_volatile(addr_of!((*header).slot_size)),
        mark_capacity: read_volatile(addr_of!((*header).mark_capacity)),
        record_size: read_volatile(addr_of!((*header).record_size)),
        pid: read_volatile(addr_of!((*header).pid)),
        slots_used: (*addr_of!((*header).slots_used)).load(Acquire),
        threads_without_slot: (*addr_of!((*header).threads_without_slot)).load(Relaxed),
        address: read_volatile(addr_of!((*header).address)),
        fd: read_volatile(addr_of!((*header).fd)),
        nonce: read_volatile(addr_of!((*header).nonce)),
    }
}

/// The thread that owns slot `index` of a region mapped in the reading process (0 if free).
/// `tid` changes only when a slot is claimed or released, so this needs no consistent copy; use it
/// to tell whose slot could not be copied.
///
/// # Safety
/// As for [`copy_slot`].
pub unsafe fn slot_owner(region: *const u8, index: usize) -> u32 {
    let slot = &*(region.add(HEADER_SIZE + index * SLOT_SIZE) as *const Slot);
    slot.tid.load(core::sync::atomic::Ordering::Relaxed)
}

/// Copies slot `index` of a region mapped in the reading process, following the consistency
/// protocol: `records` receives the first `min(depth, MARK_CAPACITY)` records, outermost first.
/// Returns [`Busy`] if the owner changed the slot meanwhile.
///
/// # Safety
/// `region` must point to a mapped region of [`REGION_SIZE`] bytes that is compatible
/// ([`HeaderView::is_compatible`]) and stays mapped during the call; `index < SLOT_COUNT`.
pub unsafe fn copy_slot(
    region: *const u8,
    index: usize,
    records: &mut Vec<RecordView>,
) -> Result<SlotState, Busy> {
    use core::sync::atomic::{fence, Ordering::*};
    let slot = &*(region.add(HEADER_SIZE + index * SLOT_SIZE) as *const Slot);
    let seq = slot.seq.load(Acquire);
    if seq % 2 == 1 {
        return Err(Busy);
    }
    let tid = slot.tid.load(Relaxed);
    let depth = slot.depth.load(Relaxed);
    records.clear();
    for record in slot.records.iter().take(depth as usize) {
        records.push(view_of(record));
    }
    fence(Acquire);
    if slot.seq.load(Relaxed) != seq || slot.tid.load(Relaxed) != tid {
        return Err(Busy);
    }
    Ok(SlotState { seq, tid, depth })
}
