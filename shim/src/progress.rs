//! The progress point of a what-if run (`abi::Progress`, x86-64): when the region is created,
//! the feature that `FSPROF_PROGRESS` names (if any) becomes the process's progress feature,
//! and each thread that claims a slot after is put on the marks' other path: its `serial`
//! (odd, which on x86-64 means nothing else) sends its pushes out of line (`stack::push_odd`),
//! where a mark of that feature keeps its start (virtual time) in its record's `extra[1]` and
//! has [`TAG`] in its record's tag; its pop, finding the tag it holds different from the
//! record's, counts the end and its latency in the region's header. So the marks' fast paths
//! gain no instruction: they branch out on tests they already make.
//!
//! Not here: the delays that make time virtual (the agent's, which copies the experiment's
//! delay into the header), nor reading the counts (the agent, at the program's exit).

use crate::abi::{self, Record, KIND_ALTERNATIVE, KIND_ANTIMARK, KIND_BOUNDARY};
use crate::region;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::ffi::{c_char, c_int, CStr};

extern "C" {
    fn getenv(name: *const c_char) -> *const c_char;
    fn clock_gettime(clock: c_int, time: *mut [i64; 2]) -> c_int;
}

const CLOCK_MONOTONIC: c_int = 1;

/// The bit a mark of the progress feature has in its record's tag (guards' tags count up by 2
/// from 0, or from an odd value on this path; call sites' are 1: none reaches it).
pub(crate) const TAG: u64 = 1 << 63;

/// The progress feature's name, [`NAME_LEN`] bytes of it (0: none).
static NAME: [AtomicU8; abi::MAX_PROGRESS_NAME] =
    [const { AtomicU8::new(0) }; abi::MAX_PROGRESS_NAME];
static NAME_LEN: AtomicUsize = AtomicUsize::new(0);
/// The latest descriptor found to name it (several may: one per copy of a `static`).
static FOUND: AtomicU64 = AtomicU64::new(0);

/// Called once, when the process's region is created: reads [`abi::PROGRESS_VARIABLE`] (one
/// `getenv`, as `announce.rs`). A name longer than [`abi::MAX_PROGRESS_NAME`] is ignored.
pub(crate) fn region_created() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    // SAFETY: a NUL-terminated name; the result is null or a NUL-terminated value.
    let value = unsafe { getenv(abi::PROGRESS_VARIABLE_C.as_ptr()) };
    if value.is_null() {
        return;
    }
    // SAFETY: as above.
    let name = unsafe { CStr::from_ptr(value) }.to_bytes();
    if name.is_empty() || name.len() > abi::MAX_PROGRESS_NAME {
        return;
    }
    for (to, &byte) in NAME.iter().zip(name) {
        to.store(byte, Relaxed);
    }
    NAME_LEN.store(name.len(), Release);
}

/// Whether the process counts a progress feature (threads that claim a slot from now on take
/// the other path).
pub(crate) fn on() -> bool {
    NAME_LEN.load(Acquire) != 0
}

/// For a push of `feature` (record kind in `meta`'s high half) on the other path: the bit to
/// add to its record's tag, and its extra words (with its start, if it is timed).
pub(crate) fn pushing(feature: u64, meta: u64, extra: Option<[u64; 2]>) -> (u64, Option<[u64; 2]>) {
    let kind = (meta >> 32) as u32;
    if kind == KIND_ANTIMARK || !is_progress(feature) {
        return (0, extra);
    }
    match timed(kind) {
        true => (TAG, Some([0, virtual_now()])),
        false => (TAG, extra),
    }
}

/// A mark of the progress feature (its record's tag has [`TAG`]) in `record` is being popped:
/// its end is counted, with its latency if it was timed.
pub(crate) fn ended(record: &Record) {
    let header = region::created();
    if header.is_null() {
        return;
    }
    // SAFETY: the live region's header (the popping thread owns a slot in it).
    let progress = unsafe { &(*header).progress };
    progress.ends.fetch_add(1, Relaxed);
    if timed((record.meta.load(Relaxed) >> 32) as u32) {
        let start = record.extra[1].load(Relaxed);
        if start != 0 {
            // May be negative (added wrapping: the sum stays right): the delay grows in lumps,
            // a thread's share of the CPU time since its previous look, which may have begun
            // before this mark. Left out, the marks that saw a lump were the ones that would
            // have shown the speedup: a 1 ms look predicted 0-1% for 30%.
            progress.timed.fetch_add(1, Relaxed);
            progress
                .latency_ns
                .fetch_add(virtual_now().wrapping_sub(start), Relaxed);
        }
    }
}

/// Whether a record of this kind is timed: its extra words are free (the start is kept in
/// `extra[1]`).
fn timed(kind: u32) -> bool {
    kind != KIND_ALTERNATIVE && kind != KIND_BOUNDARY
}

/// Monotonic time less the experiment's delay so far (never 0: 0 means "not timed").
fn virtual_now() -> u64 {
    let mut time = [0i64; 2];
    // SAFETY: writes the two words of a timespec.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut time) };
    let now = (time[0] as u64).wrapping_mul(1_000_000_000) + time[1] as u64;
    let header = region::created();
    let delay = match header.is_null() {
        true => 0,
        // SAFETY: the live region's header.
        false => unsafe { (*header).progress.delay_ns.load(Relaxed) },
    };
    now.saturating_sub(delay).max(1)
}

/// Whether the descriptor at `feature` names the progress feature.
fn is_progress(feature: u64) -> bool {
    if feature == 0 {
        return false;
    }
    if feature == FOUND.load(Relaxed) {
        return true;
    }
    let len = NAME_LEN.load(Acquire);
    // SAFETY: `feature` is the descriptor address a push of this process passed (a `Feature`,
    // which lives as long as the process: its magic, its name's address and length).
    let (magic, name, name_len) = unsafe {
        let words = feature as *const u64;
        (*words, *words.add(1) as *const u8, *words.add(2) as usize)
    };
    if magic != abi::FEATURE_MAGIC || name_len != len || len == 0 {
        return false;
    }
    // SAFETY: the descriptor's name, `name_len` bytes of a `&'static str`.
    let name = unsafe { core::slice::from_raw_parts(name, name_len) };
    if !name.iter().zip(&NAME).all(|(&a, b)| a == b.load(Relaxed)) {
        return false;
    }
    FOUND.store(feature, Relaxed);
    true
}
