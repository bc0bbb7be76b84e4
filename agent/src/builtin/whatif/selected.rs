//! Whether the calling thread is in an experiment's selected code: its innermost mark or
//! antimark of the selected candidate's feature is a mark (of its instance, if it names one), read from
//! the thread's own slot. The slot is found by thread id in the process's regions, which
//! `/proc/self/maps` lists (`/memfd:fsprof-region`; the program's shim copy made them, not this
//! library's); each thread looks again at most every [`SEARCH_EVERY_NS`] until it has one.
//! Called only from the timer's handler, on the thread itself: a push the handler interrupted
//! leaves the slot's `seq` odd, and such a look finds nothing.

use super::{clock, getpid, syscall, Control, Thread, CLOCK_MONOTONIC, SYS_CLOSE};
use core::ffi::c_long;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use fsprof_shim::abi;
use fsprof_shim::whatif::{Candidate, ANY_INSTANCE, NAME_CAPACITY};

const SEARCH_EVERY_NS: u64 = 20_000_000;
/// Regions remembered (a process has one per shim copy that marked).
const MOST_REGIONS: usize = 8;
static REGIONS: [AtomicU64; MOST_REGIONS] = [const { AtomicU64::new(0) }; MOST_REGIONS];
/// Whether a thread's slot was found in the region of the same index: a region with a claimed
/// slot is one the shim published, not one it mapped and dropped on losing a race to create the
/// process's region, which `/proc/self/maps` may have shown for a moment. Only those are
/// written (`delay_added`) and read at exit.
static LIVE: [AtomicBool; MOST_REGIONS] = [const { AtomicBool::new(false) }; MOST_REGIONS];
/// Feature descriptors already compared with the candidates' names: address, and [`KNOWN`] with
/// a bit set for each candidate of that name (bit `i` for candidate `i`).
const MOST_FEATURES: usize = 256;
const KNOWN: u64 = 1 << 63;
static FEATURES: [(AtomicU64, AtomicU64); MOST_FEATURES] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; MOST_FEATURES];
static FEATURES_USED: AtomicUsize = AtomicUsize::new(0);

/// Whether the thread is in candidate `candidate`'s code now.
pub(super) fn is_selected(control: &Control, me: &Thread, candidate: usize) -> bool {
    let count = (control.candidate_count as usize).min(control.candidates.len());
    if candidate >= count {
        return false;
    }
    let Some(slot) = slot(me) else {
        return false;
    };
    // SAFETY: `slot` is a slot of a mapped region of this process whose `tid` is this thread's;
    // only this thread writes it, and this handler interrupted it (so it is not mid-write unless
    // `seq` is odd, checked first).
    unsafe {
        let seq = (*(slot as *const AtomicU32)).load(Acquire);
        if seq & 1 == 1 {
            return false;
        }
        let depth =
            ((*((slot + 8) as *const AtomicU32)).load(Acquire) as usize).min(abi::MARK_CAPACITY);
        for index in (0..depth).rev() {
            let at = abi::record_address(slot, index);
            let bytes = core::slice::from_raw_parts(at as *const u8, abi::RECORD_SIZE);
            let Some(record) = abi::parse_record(bytes) else {
                return false;
            };
            if candidates_named(control, record.feature) & (1 << candidate) == 0 {
                continue;
            }
            return record.kind != abi::KIND_ANTIMARK
                && instance_matches(&control.candidates[candidate], &record);
        }
    }
    false
}

/// The thread's slot, found again if its cached one is no longer its own.
fn slot(me: &Thread) -> Option<u64> {
    let tid = me.tid.load(Relaxed) as u32;
    let cached = me.slot.load(Relaxed);
    // SAFETY: a cached slot lies in a region that stays mapped for the process's life.
    if cached != 0 && unsafe { (*((cached + 4) as *const AtomicU32)).load(Relaxed) } == tid {
        return Some(cached);
    }
    if let Some(found) = search_regions(tid) {
        me.slot.store(found, Relaxed);
        return Some(found);
    }
    let now = clock(CLOCK_MONOTONIC);
    if now < me.next_search.load(Relaxed) {
        return None;
    }
    me.next_search.store(now + SEARCH_EVERY_NS, Relaxed);
    read_regions();
    let found = search_regions(tid)?;
    me.slot.store(found, Relaxed);
    Some(found)
}

fn search_regions(tid: u32) -> Option<u64> {
    for (region, live) in REGIONS.iter().zip(&LIVE) {
        let start = region.load(Acquire);
        if start == 0 {
            break;
        }
        // SAFETY: a region checked by `read_regions`: mapped for the process's life, at least
        // a header and SLOT_COUNT slots.
        let used = unsafe {
            let bytes = core::slice::from_raw_parts(start as *const u8, abi::HEADER_VIEW_SIZE);
            abi::parse_header(bytes).map_or(0, |header| header.slots_used as usize)
        };
        for index in 0..used.min(abi::SLOT_COUNT) {
            let slot = abi::slot_address(start, index);
            // SAFETY: as above.
            let owner = unsafe { (*((slot + 4) as *const AtomicU32)).load(Acquire) };
            if owner == tid {
                live.store(true, Release);
                return Some(slot);
            }
        }
    }
    None
}

/// The experiment's global delay grew by `delay`: added to the copy in every region known,
/// which the shim's progress point reads (`abi::Progress`: virtual time is real time less it).
/// A region found later starts from 0: a mark open across its finding leaves out less.
pub(super) fn delay_added(delay: u64) {
    for (region, live) in REGIONS.iter().zip(&LIVE) {
        let start = region.load(Acquire);
        if start != 0 && live.load(Acquire) {
            progress_of(start).delay_ns.fetch_add(delay, Relaxed);
        }
    }
}

/// At the program's exit: the progress point's counts of every live region of the process
/// (one where a thread's timer found its slot), added up into the control page.
pub(super) fn progress_counts(control: &Control) {
    let (mut ends, mut timed, mut latency) = (0u64, 0u64, 0u64);
    for (region, live) in REGIONS.iter().zip(&LIVE) {
        let start = region.load(Acquire);
        if start != 0 && live.load(Acquire) {
            let progress = progress_of(start);
            ends += progress.ends.load(Acquire);
            timed += progress.timed.load(Acquire);
            latency = u64::wrapping_add(latency, progress.latency_ns.load(Acquire));
        }
    }
    control.progress_ends.store(ends, Relaxed);
    control.progress_timed.store(timed, Relaxed);
    control.progress_latency_ns.store(latency, Relaxed);
}

fn progress_of(start: u64) -> &'static abi::Progress {
    // SAFETY: `start` is a remembered region of this process (a header of a compatible
    // version, mapped for the process's life): its progress words lie at `PROGRESS_OFFSET`.
    unsafe { &*((start as usize + abi::PROGRESS_OFFSET) as *const abi::Progress) }
}

/// Reads `/proc/self/maps` for the process's regions and remembers those not known yet.
fn read_regions() {
    const AT_FDCWD: c_long = -100;
    const O_RDONLY_CLOEXEC: c_long = 0o2000000;
    const NAME: &[u8] = b"/memfd:fsprof-region";
    let fd = syscall(
        257,
        AT_FDCWD,
        c"/proc/self/maps".as_ptr() as c_long,
        O_RDONLY_CLOEXEC,
        0,
    );
    if fd < 0 {
        return;
    }
    let mut buffer = [0u8; 4096];
    let mut kept = 0;
    loop {
        let read = syscall(
            0,
            fd,
            buffer[kept..].as_mut_ptr() as c_long,
            (buffer.len() - kept) as c_long,
            0,
        );
        if read <= 0 {
            break;
        }
        let filled = kept + read as usize;
        let mut start = 0;
        while let Some(end) = buffer[start..filled].iter().position(|&b| b == b'\n') {
            let line = &buffer[start..start + end];
            if line.windows(NAME.len()).any(|w| w == NAME) {
                if let Some(address) = hex_prefix(line) {
                    remember(address);
                }
            }
            start += end + 1;
        }
        // A line longer than the buffer is dropped (no region's line is).
        kept = if filled - start == buffer.len() {
            0
        } else {
            filled - start
        };
        buffer.copy_within(start..start + kept, 0);
    }
    syscall(SYS_CLOSE, fd, 0, 0, 0);
}

fn hex_prefix(line: &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    let mut digits = 0;
    for &byte in line {
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            _ => break,
        };
        value = value.checked_mul(16)? + u64::from(digit);
        digits += 1;
    }
    (digits > 0).then_some(value)
}

/// Remembers a region mapped at `start` if its header is one this library reads and this
/// process made it.
fn remember(start: u64) {
    // SAFETY: `start` begins a mapping of a region memfd (at least a header long).
    let header = unsafe {
        abi::parse_header(core::slice::from_raw_parts(
            start as *const u8,
            abi::HEADER_VIEW_SIZE,
        ))
    };
    let Some(header) = header else {
        return;
    };
    if !header.is_compatible() || header.address != start || u64::from(header.pid) != getpid() {
        return;
    }
    for region in &REGIONS {
        match region.compare_exchange(0, start, AcqRel, Acquire) {
            Ok(_) => return,
            Err(known) if known == start => return,
            Err(_) => {}
        }
    }
}

/// The candidates whose feature the descriptor at `feature` names, a bit each (each descriptor
/// compared once, then remembered).
fn candidates_named(control: &Control, feature: u64) -> u64 {
    if feature == 0 {
        return 0;
    }
    let used = FEATURES_USED.load(Acquire).min(MOST_FEATURES);
    for (address, verdict) in &FEATURES[..used] {
        if address.load(Acquire) == feature {
            match verdict.load(Acquire) {
                0 => break, // being written: compare below
                known => return known & !KNOWN,
            }
        }
    }
    let count = (control.candidate_count as usize).min(control.candidates.len());
    let mut named = 0u64;
    for (index, candidate) in control.candidates[..count].iter().enumerate() {
        if names(candidate, feature) {
            named |= 1 << index;
        }
    }
    let index = FEATURES_USED.fetch_add(1, AcqRel);
    if index < MOST_FEATURES {
        FEATURES[index].0.store(feature, Release);
        FEATURES[index].1.store(named | KNOWN, Release);
    }
    named
}

/// Whether the descriptor at `feature` names `candidate`'s feature.
fn names(candidate: &Candidate, feature: u64) -> bool {
    // SAFETY: the address of a feature descriptor a mark of this process recorded (a static or
    // leaked descriptor: valid for the process's life); the name is a `&'static str`.
    unsafe {
        let Some(view) = abi::parse_feature(core::slice::from_raw_parts(
            feature as *const u8,
            abi::FEATURE_DESCRIPTOR_SIZE,
        )) else {
            return false;
        };
        // A length past the page's capacity (fsprof writes none) never matches.
        if view.magic != abi::FEATURE_MAGIC
            || view.name_len != candidate.feature_len
            || candidate.feature_len > NAME_CAPACITY as u64
        {
            return false;
        }
        let name = core::slice::from_raw_parts(view.name as *const u8, view.name_len as usize);
        name == &candidate.feature[..candidate.feature_len as usize]
    }
}

/// Whether the record is the candidate's instance (any, if it names none): a name as it is, a
/// location as `file:line:column`; other kinds never match a named instance.
fn instance_matches(candidate: &Candidate, record: &abi::RecordView) -> bool {
    if candidate.instance_len == ANY_INSTANCE {
        return true;
    }
    let Some(wanted) = candidate.instance.get(..candidate.instance_len as usize) else {
        return false; // past the page's capacity: fsprof writes none
    };
    // SAFETY: a payload string of a mark of this process (see the shim's contract: valid while
    // the mark may be read).
    let payload = unsafe {
        core::slice::from_raw_parts(record.payload as *const u8, record.payload_len as usize)
    };
    match record.kind {
        abi::KIND_NAME => payload == wanted,
        abi::KIND_LOCATION => {
            let Some(rest) = wanted.strip_prefix(payload) else {
                return false;
            };
            let mut text = [0u8; 24];
            let suffix = location_suffix(record.line, record.column, &mut text);
            rest == suffix
        }
        _ => false,
    }
}

/// `:line:column` in `buffer`.
fn location_suffix(line: u32, column: u32, buffer: &mut [u8; 24]) -> &[u8] {
    let mut length = 0;
    for number in [line, column] {
        buffer[length] = b':';
        length += 1;
        let mut digits = [0u8; 10];
        let mut count = 0;
        let mut n = number;
        loop {
            digits[count] = b'0' + (n % 10) as u8;
            count += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for digit in digits[..count].iter().rev() {
            buffer[length] = *digit;
            length += 1;
        }
    }
    &buffer[..length]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_named_as_the_report_names_it() {
        let mut buffer = [0u8; 24];
        assert_eq!(location_suffix(12, 5, &mut buffer), b":12:5");
        assert_eq!(
            location_suffix(0, 4294967295, &mut buffer),
            b":0:4294967295"
        );
    }

    #[test]
    fn map_lines_give_their_start() {
        assert_eq!(
            hex_prefix(b"7f3a00000000-7f3a00001000 rw-s"),
            Some(0x7f3a_0000_0000)
        );
        assert_eq!(hex_prefix(b"-"), None);
        assert_eq!(hex_prefix(b"fffffffffffffffff-"), None);
    }
}
