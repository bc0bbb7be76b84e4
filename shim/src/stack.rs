//! The writer side of a thread's mark stack: pushing and popping marks in its slot of the region,
//! under the slot's sequence counter (the reader's protocol is in `abi.rs`), also when a signal
//! handler interrupts a push or jumps out of one. Creating the region and claiming the slot is
//! `region.rs`; the public API (features, guards) is `lib.rs`, and this module knows nothing of
//! Rust guards beyond the `(index, tag)` pair a push returns.
//!
//! Cost model: every push or pop after a thread's first mark is a handful of plain loads and
//! stores on memory only this thread writes: no allocation, no lock, no syscall. On x86-64 the
//! release fences compile to nothing.

use crate::abi::{self, Record, Slot};
use crate::fleet;
use crate::progress;
use crate::region::{bump, claim};
use crate::thread_state::{self, ThreadState};
use core::ptr::null_mut;
use core::sync::atomic::{compiler_fence, fence, Ordering::*};
use std::ffi::{c_int, c_void};

/// What a push returns and the matching pop needs. `index == u32::MAX` means nothing was pushed.
#[derive(Clone, Copy)]
pub(crate) struct Pushed {
    pub(crate) index: u32,
    pub(crate) tag: u64,
}

impl Pushed {
    pub(crate) const NOTHING: Pushed = Pushed {
        index: u32::MAX,
        tag: 0,
    };
}

/// Like [`push`] of a call-site mark (`position`: the frame pointer), for the agent's built-in
/// features: pushes nothing when the innermost recorded
/// mark's feature address lies in `nested` and its stack address lies above `sp` (a call made
/// inside another built-in feature is counted once, by the outer one), or when the thread has no
/// slot yet and `claim` is false (a function that signal handlers may call must not claim:
/// claiming may allocate). `sp` is the interposing function's stack pointer at entry, and so is
/// a built-in mark's: an innermost built-in mark at or below `sp` was left by a call whose frame
/// is gone (a signal handler jumped out of it with `siglongjmp`), and is popped first. (A handler
/// on an alternate signal stack may take a live mark for a stale one: the interrupted call then
/// loses its mark after the handler, and nothing else.) Returns where the mark was pushed, for
/// [`pop_placed`], or why it was not. `close_left`: whether a push of this thread left halfway
/// by a jump may be closed here (see [`close_if_left`]); a caller whose fast path must not call
/// anything passes false, and on [`NotPushed::Busy`] tries again from its slow path with true.
#[inline(always)]
pub(crate) fn push_unless_nested(
    feature: u64,
    payload: u64,
    position: u64,
    sp: u64,
    nested: core::ops::Range<u64>,
    claim: bool,
    close_left: bool,
) -> Result<Placed, NotPushed> {
    match push_unless_nested_in(feature, payload, position, sp, nested.clone(), claim) {
        Err(NotPushed::Busy) if close_left => {
            push_unless_nested_after_closing(feature, payload, position, sp, nested, claim)
        }
        result => result,
    }
}

/// [`push_unless_nested`] once [`close_left_push`] closed a push left halfway, if any (out of
/// line: the callers' fast paths call nothing).
#[cold]
#[inline(never)]
fn push_unless_nested_after_closing(
    feature: u64,
    payload: u64,
    position: u64,
    sp: u64,
    nested: core::ops::Range<u64>,
    claim: bool,
) -> Result<Placed, NotPushed> {
    if !close_left_push(sp) {
        return Err(NotPushed::Skipped);
    }
    match push_unless_nested_in(feature, payload, position, sp, nested, claim) {
        Err(NotPushed::Busy) => Err(NotPushed::Skipped),
        result => result,
    }
}

/// [`push_unless_nested`] without closing anything: [`NotPushed::Busy`] when the slot is busy.
///
/// On x86-64, the path every interposed call takes (the agent's allocation calls, millions a
/// second in some programs): the thread's `serial` is neither read nor advanced, since a call-site
/// mark is popped by [`pop_placed`], which needs no tag; its record's tag is [`CALL_SITE_TAG`],
/// which no guard's tag equals. A thread without a slot yet takes the general path.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn push_unless_nested_in(
    feature: u64,
    payload: u64,
    position: u64,
    sp: u64,
    nested: core::ops::Range<u64>,
    claim: bool,
) -> Result<Placed, NotPushed> {
    thread_state::with(
        #[inline(always)]
        |state| {
            let placed = state.slot.get();
            if placed.is_null() {
                if !claim {
                    return Err(NotPushed::NoSlot);
                }
                return push_unless_nested_general(feature, payload, position, sp, nested, claim);
            }
            // SAFETY: a non-null slot pointer is this thread's claimed slot in the live region.
            let slot = unsafe { &*placed };
            if !outside_nested(slot, sp, nested) {
                return Err(NotPushed::Skipped);
            }
            if slot.seq.load(Relaxed) & 1 == 1 {
                return Err(NotPushed::Busy); // see `push_unless_busy`
            }
            state.push_sp.set(sp);
            compiler_fence(SeqCst); // set before `seq` is odd: a handler may read it then
            bump(&slot.seq); // odd: writing
            let depth = slot.depth.load(Relaxed); // after `bump`: a handler may have run before it
            if let Some(record) = slot.records.get(depth as usize) {
                let meta = (crate::abi::KIND_CALL_SITE as u64) << 32;
                write_record(
                    record,
                    (feature, payload, meta, position, sp, CALL_SITE_TAG, None),
                );
            }
            slot.depth.store(depth.saturating_add(1), Relaxed);
            fence(Release);
            bump(&slot.seq); // even: done
            Ok(Placed {
                slot: placed,
                index: depth,
            })
        },
    )
    .unwrap_or(Err(NotPushed::Skipped))
}

/// The tag of a call-site mark's record on x86-64: guards' tags are even, or odd from 3 on
/// (a thread on the progress point's path, `progress.rs`).
#[cfg(target_arch = "x86_64")]
const CALL_SITE_TAG: u64 = 1;

/// The general path of [`push_unless_nested_in`] on x86-64: claiming the thread's slot first.
#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
fn push_unless_nested_general(
    feature: u64,
    payload: u64,
    position: u64,
    sp: u64,
    nested: core::ops::Range<u64>,
    claim: bool,
) -> Result<Placed, NotPushed> {
    push_unless_nested_tagged(feature, payload, position, sp, nested, claim)
}

/// Whether a call-site push at `sp` is not nested in the thread's innermost built-in mark (whose
/// feature lies in `nested`): true if there is none, or it was left stale by a jump (then it is
/// popped, as `pop_placed` would).
#[inline(always)]
fn outside_nested(slot: &Slot, sp: u64, nested: core::ops::Range<u64>) -> bool {
    let depth = slot.depth.load(Relaxed) as usize;
    if let Some(top) = depth.checked_sub(1).and_then(|i| slot.records.get(i)) {
        // `nested.contains`, in one comparison (fewer registers on the callers' fast paths).
        let offset = top.feature.load(Relaxed).wrapping_sub(nested.start);
        if offset < nested.end.wrapping_sub(nested.start) {
            if top.sp.load(Relaxed) > sp {
                return false;
            }
            // Stale: the frame that pushed it is gone, left without its pop (a signal
            // handler's `siglongjmp` out of the call). Pop it, as `pop_placed` would.
            slot.depth.store(depth as u32 - 1, Release);
        }
    }
    true
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn push_unless_nested_in(
    feature: u64,
    payload: u64,
    position: u64,
    sp: u64,
    nested: core::ops::Range<u64>,
    claim: bool,
) -> Result<Placed, NotPushed> {
    push_unless_nested_tagged(feature, payload, position, sp, nested, claim)
}

/// [`push_unless_nested_in`] that advances the thread's `serial` and tags the record with it, as
/// [`push`] does (the path of targets other than x86-64, and of a thread's first push there).
#[inline(always)]
fn push_unless_nested_tagged(
    feature: u64,
    payload: u64,
    position: u64,
    sp: u64,
    nested: core::ops::Range<u64>,
    claim: bool,
) -> Result<Placed, NotPushed> {
    thread_state::with(
        #[inline(always)]
        |state| {
            let slot = state.slot.get();
            if slot.is_null() {
                if !claim {
                    return Err(NotPushed::NoSlot);
                }
            } else {
                // SAFETY: a non-null slot pointer is this thread's claimed slot in the live region.
                if !outside_nested(unsafe { &*slot }, sp, nested) {
                    return Err(NotPushed::Skipped);
                }
            }
            let serial = state.serial.get();
            if serial & 1 == 1 {
                return Err(NotPushed::Skipped); // only on targets without `bump`, see `push`
            }
            let tag = serial.wrapping_add(2);
            if cfg!(target_arch = "x86_64") {
                state.serial.set(tag); // before the push, whose claim may make it odd
            } else {
                state.serial.set(serial | 1);
                compiler_fence(SeqCst);
            }
            let meta = (crate::abi::KIND_CALL_SITE as u64) << 32;
            let record = (feature, payload, meta, position, sp, tag, None);
            let pushed = push_unless_busy(state, record);
            if !cfg!(target_arch = "x86_64") {
                compiler_fence(SeqCst);
                state.serial.set(tag);
            }
            if pushed.index == BUSY {
                return Err(NotPushed::Busy);
            }
            if pushed.index == u32::MAX {
                return Err(NotPushed::Skipped);
            }
            Ok(Placed {
                slot: state.slot.get(),
                index: pushed.index,
            })
        },
    )
    .unwrap_or(Err(NotPushed::Skipped))
}

/// Why [`raw::push_call_site_unless_nested`](crate::raw::push_call_site_unless_nested) pushed
/// nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotPushed {
    /// The thread has no slot, and the caller did not let it claim one.
    NoSlot,
    /// The thread's slot is "being written": a signal handler interrupted a push of the thread,
    /// or a jump left one halfway, and the caller did not let it be closed (`close_left`).
    Busy,
    /// Anything else: a nested call, a push interrupted by the signal handler that called, a
    /// slot that could not be claimed. The call is simply not marked.
    Skipped,
}

/// Where [`push_unless_nested`] pushed a mark: its thread's slot and the mark's index. `repr(C)`:
/// the agent's trampolines pop it in assembly (see `raw::assembly_pop`).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Placed {
    pub(crate) slot: *mut Slot,
    pub(crate) index: u32,
}

/// Pops the mark [`push_unless_nested`] placed, if it is still the calling thread's innermost
/// mark in the slot it was pushed in.
///
/// Cheaper than [`pop_innermost`] where it matters (after a system call, each load the store
/// waits for shows): the store's address is known without reading the thread's state, whose
/// checks only decide whether it happens. The checks: the thread still owns that slot (a child
/// that returns from `fork` inside the mark has forgotten the region, which is not even mapped
/// in it; a thread whose destructors released its slot owns none), and the mark is still the
/// innermost (a signal handler that popped more than it pushed meanwhile is not compounded).
/// `seq` needs no check: the push succeeded, so this thread was not inside a push, and anything
/// that ran on top of it since (a signal handler) finished its own pushes.
#[inline(always)]
pub(crate) fn pop_placed(placed: Placed) {
    let _ = thread_state::with(|state| {
        if state.slot.get() != placed.slot {
            return;
        }
        // SAFETY: the slot this thread still owns, in the live region.
        let slot = unsafe { &*placed.slot };
        if slot.depth.load(Relaxed) == placed.index.wrapping_add(1) {
            // As in `pop`: one store, no seq bracket.
            slot.depth.store(placed.index, Release);
        }
    });
}

/// Pushes a record on the calling thread's mark stack.
///
/// Signal safety: a signal handler that marks while this thread is inside `push` must not write
/// the slot. The slot's `seq` is odd exactly while a push is in progress, so `push` turns a caller
/// away when it finds it odd; what remains is the gap between checking `seq` and making it odd.
/// On x86-64 `seq` is advanced by a single (non-locked) `inc` on memory, which a handler on the
/// same thread cannot split: a handler that ran in the gap finished entirely, and the increment
/// applies to the value it left, so `seq` never moves backwards. Elsewhere a thread-local flag,
/// the low bit of `serial`, closes the gap (at the cost of one more store).
#[inline(always)]
pub(crate) fn push(
    feature: u64,
    payload: u64,
    meta: u64,
    position: u64,
    sp: u64,
    extra: Option<[u64; 2]>,
) -> Pushed {
    let pushed = push_in(feature, payload, meta, position, sp, extra);
    if pushed.index == BUSY {
        return push_after_closing(feature, payload, meta, position, sp, extra);
    }
    pushed
}

/// [`push`] once [`close_left_push`] closed a push left halfway, if any (out of line); or, on
/// x86-64, the push of a thread on the other path ([`push_odd`]).
#[cold]
#[inline(never)]
fn push_after_closing(
    feature: u64,
    payload: u64,
    meta: u64,
    position: u64,
    sp: u64,
    extra: Option<[u64; 2]>,
) -> Pushed {
    let odd = || thread_state::with(|state| state.serial.get() & 1 == 1) == Some(true);
    if cfg!(target_arch = "x86_64") && odd() {
        let record = (feature, payload, meta, position, sp, 0, extra);
        let pushed = push_odd(record);
        if pushed.index != BUSY {
            return pushed;
        }
        if !close_left_push(sp) {
            return Pushed::NOTHING;
        }
        return match push_odd(record) {
            Pushed { index: BUSY, .. } => Pushed::NOTHING,
            pushed => pushed,
        };
    }
    if !close_left_push(sp) {
        return Pushed::NOTHING;
    }
    match push_in(feature, payload, meta, position, sp, extra) {
        Pushed { index: BUSY, .. } => Pushed::NOTHING,
        pushed => pushed,
    }
}

/// Closes the calling thread's push left halfway by a jump, if its slot is busy and
/// [`close_if_left`] finds it was; true when the slot is no longer busy.
fn close_left_push(sp: u64) -> bool {
    thread_state::with(|state| {
        let slot = state.slot.get();
        if slot.is_null() {
            return false;
        }
        // SAFETY: this thread's claimed slot in the live region.
        let slot = unsafe { &*slot };
        slot.seq.load(Relaxed) & 1 == 0 || close_if_left(state, slot, sp)
    })
    .unwrap_or(false)
}

/// [`push`] without closing anything: `index` [`BUSY`] when the slot is busy.
#[inline(always)]
fn push_in(
    feature: u64,
    payload: u64,
    meta: u64,
    position: u64,
    sp: u64,
    extra: Option<[u64; 2]>,
) -> Pushed {
    thread_state::with(
        #[inline(always)]
        |state| {
            let serial = state.serial.get();
            if serial & 1 == 1 {
                // On x86-64, this thread's marks take the other path (a what-if run's progress
                // point: `push_after_closing` takes it); elsewhere, this is a handler inside a
                // push (see above).
                return match cfg!(target_arch = "x86_64") {
                    true => Pushed {
                        index: BUSY,
                        tag: 0,
                    },
                    false => Pushed::NOTHING,
                };
            }
            let tag = serial.wrapping_add(2);
            if cfg!(target_arch = "x86_64") {
                state.serial.set(tag); // before the push, whose claim may make it odd
            } else {
                state.serial.set(serial | 1);
                compiler_fence(SeqCst);
            }
            let record = (feature, payload, meta, position, sp, tag, extra);
            let pushed = push_unless_busy(state, record);
            if !cfg!(target_arch = "x86_64") {
                compiler_fence(SeqCst);
                state.serial.set(tag);
            }
            pushed
        },
    )
    .unwrap_or(Pushed::NOTHING)
}

/// A push of a thread whose `serial` is odd on x86-64 (from [`push_after_closing`], out of line:
/// the fast path passes no record to a call): a thread of a what-if run's process with a
/// progress point, whose mark of the progress feature gets its start and [`progress::TAG`] in
/// its record's tag (the tag returned, which its guard holds, is without it: see [`pop`]).
/// `index` [`BUSY`] if the slot is busy.
fn push_odd(record: RecordWords) -> Pushed {
    thread_state::with(|state| {
        let (feature, payload, meta, position, sp, _, extra) = record;
        let tag = state.serial.get().wrapping_add(2);
        state.serial.set(tag);
        let (bit, extra) = progress::pushing(feature, meta, extra);
        let record = (feature, payload, meta, position, sp, tag | bit, extra);
        let pushed = push_unless_busy(state, record);
        Pushed {
            index: pushed.index,
            tag: tag & !progress::TAG,
        }
    })
    .unwrap_or(Pushed::NOTHING)
}

/// `index` of a [`Pushed`] that [`push_unless_busy`] did not push because the slot is busy.
const BUSY: u32 = u32::MAX - 1;

/// Pushes unless the slot is busy (see [`push`]). Returns [`Pushed::NOTHING`] if nothing could
/// be pushed, `index` [`BUSY`] if the slot is busy.
#[inline(always)]
fn push_unless_busy(state: &ThreadState, record: RecordWords) -> Pushed {
    let (_, _, _, _, sp, tag, _) = record;
    let mut slot = state.slot.get();
    if slot.is_null() {
        slot = claim(state);
        if slot.is_null() {
            return Pushed::NOTHING;
        }
        if cfg!(target_arch = "x86_64") && state.serial.get() & 1 == 1 && tag & 1 == 0 {
            // The claim put the thread on the other path, which `push_after_closing` takes.
            return Pushed { index: BUSY, tag };
        }
    }
    // SAFETY: a non-null slot pointer is this thread's claimed slot in the live region.
    let slot = unsafe { &*slot };
    if slot.seq.load(Relaxed) & 1 == 1 {
        // A signal handler interrupted this thread inside a push, or a jump left one halfway.
        return Pushed { index: BUSY, tag };
    }
    state.push_sp.set(sp);
    compiler_fence(SeqCst); // set before `seq` is odd: a handler may read it then
    bump(&slot.seq); // odd: writing
    fence(Release);
    let depth = slot.depth.load(Relaxed);
    if let Some(place) = slot.records.get(depth as usize) {
        write_record(place, record);
    }
    remember_later_branch(slot, record);
    slot.depth.store(depth.saturating_add(1), Relaxed);
    fence(Release);
    bump(&slot.seq); // even: done
    let (feature, payload, meta, position, _, _, extra) = record;
    let words = (feature, payload, meta & u64::from(u32::MAX), position);
    fleet::pushed(state, slot, (meta >> 32) as u32, words, extra);
    Pushed { index: depth, tag }
}

/// Called by a push that finds its slot "being written" (`seq` odd): either it runs in a signal
/// handler that interrupted a push of this thread (which will finish when the handler returns),
/// or that push was left by a jump out of such a handler that [`jumping_to`] did not hear of (a
/// program without the agent, a jump through libc's own symbol). The second case is certain when
/// this push's stack address lies at or above the unfinished one's on the same stack: a handler
/// runs below the frame it interrupted. Then the unfinished push is closed (`seq` made even), and
/// true returned. A handler on an alternate signal stack could lie anywhere: while this thread
/// runs on one, nothing is closed. So a push left by an unseen jump stays open until a later
/// push of the thread at or above it, outside any alternate stack (the next call from the same
/// loop, typically). x86-64 only: elsewhere pushes also set a bit of `serial`, left alone here.
#[cold]
#[inline(never)]
fn close_if_left(state: &ThreadState, slot: &Slot, sp: u64) -> bool {
    if !cfg!(target_arch = "x86_64") || sp < state.push_sp.get() || on_alternate_stack() {
        return false;
    }
    fence(Release);
    bump(&slot.seq); // even: the unfinished push is closed
    true
}

/// Whether the calling thread runs on its alternate signal stack (if in doubt, yes).
pub(crate) fn on_alternate_stack() -> bool {
    #[repr(C)]
    struct StackT {
        sp: *mut c_void,
        flags: c_int,
        size: usize,
    }
    extern "C" {
        fn sigaltstack(stack: *const StackT, old: *mut StackT) -> c_int;
    }
    const SS_ONSTACK: c_int = 1;
    let mut old = StackT {
        sp: null_mut(),
        flags: 0,
        size: 0,
    };
    // SAFETY: only reads the thread's alternate stack settings into `old`; async-signal-safe.
    unsafe { sigaltstack(core::ptr::null(), &mut old) != 0 || old.flags & SS_ONSTACK != 0 }
}

/// A record's words as a push writes them: feature, payload, meta, position, sp, tag, and the
/// two extra words of the kinds that have them (none: left as they were, unread).
type RecordWords = (u64, u64, u64, u64, u64, u64, Option<[u64; 2]>);

/// Adds `record` to the slot's history if it is an alternative's later branch (see `abi.rs`):
/// inside the push's `seq` bracket, so that a signal handler's push cannot interleave with it.
/// For every other kind (constant at each call site) this is nothing.
#[inline(always)]
fn remember_later_branch(slot: &Slot, record: RecordWords) {
    let (_, _, meta, _, _, _, extra) = record;
    let later = matches!(extra, Some([branch, _]) if branch != 0);
    if meta >> 32 != abi::KIND_ALTERNATIVE as u64 || !later {
        return;
    }
    let (feature, payload, meta, position, _, _, extra) = record;
    let branch = extra.map_or(0, |[branch, _]| branch);
    let history = &slot.history;
    let written = history.written.load(Relaxed);
    let entry = &history.entries[(written % abi::HISTORY_CAPACITY as u64) as usize];
    entry.feature.store(feature, Relaxed);
    entry.payload.store(payload, Relaxed);
    entry
        .meta
        .store(branch << 32 | (meta & u64::from(u32::MAX)), Relaxed);
    entry.position.store(position, Relaxed);
    history.written.store(written.wrapping_add(1), Release);
}

#[inline(always)]
fn write_record(record: &Record, words: RecordWords) {
    let (feature, payload, meta, position, sp, tag, extra) = words;
    record.feature.store(feature, Relaxed);
    record.payload.store(payload, Relaxed);
    record.meta.store(meta, Relaxed);
    record.position.store(position, Relaxed);
    record.sp.store(sp, Relaxed);
    record.tag.store(tag, Relaxed);
    if let Some([first, second]) = extra {
        record.extra[0].store(first, Relaxed);
        record.extra[1].store(second, Relaxed);
    }
}

/// Pops the mark `pushed` and every mark above it, if it is still on the stack.
///
/// A guard dropped out of order (an outer one before an inner one) pops the inner marks with it; the
/// inner guards' later pops find their mark gone and do nothing. A guard whose mark was already
/// popped, or that outlived a `fork()`, does nothing. So no sequence of drops or leaks can corrupt
/// the stack: a leaked guard's mark stays until an enclosing guard is dropped.
#[inline(always)]
pub(crate) fn pop(pushed: Pushed) {
    if pushed.index == u32::MAX {
        return;
    }
    let _ = thread_state::with(|state| {
        let slot = state.slot.get();
        if slot.is_null() {
            return;
        }
        // SAFETY: as in `push`.
        let slot = unsafe { &*slot };
        let seq = slot.seq.load(Relaxed);
        let depth = slot.depth.load(Relaxed);
        if seq & 1 == 1 || depth <= pushed.index {
            return;
        }
        if let Some(record) = slot.records.get(pushed.index as usize) {
            if record.tag.load(Relaxed) != pushed.tag {
                return pop_other(state, slot, record, pushed);
            }
        }
        // A pop only lowers depth: one store, no seq bracket. (seq, depth) still identifies the
        // stack: seq only grows (on pushes), and without a push depth only falls.
        slot.depth.store(pushed.index, Release);
        fleet::popped(state, slot);
    });
}

/// A pop whose record's tag is not its guard's: that mark is gone and another took its place,
/// or it is a mark of a what-if run's progress feature, whose record's tag also has
/// [`progress::TAG`] (see [`push_odd`]): then it is popped and its end counted.
#[cold]
#[inline(never)]
fn pop_other(state: &ThreadState, slot: &Slot, record: &Record, pushed: Pushed) {
    if record.tag.load(Relaxed) != pushed.tag | progress::TAG {
        return;
    }
    progress::ended(record); // before the depth falls: a handler's push may reuse the record
    slot.depth.store(pushed.index, Release);
    fleet::popped(state, slot);
}

/// Pops the calling thread's innermost mark or antimark, whichever guard or caller pushed it; does
/// nothing if its stack is empty. For callers without guards (the C ABI), whose pop names no mark.
///
/// Signal safety: like a push, it is turned away while this thread is inside a push (`seq` odd,
/// or on targets other than x86-64 `serial` odd), so a handler whose push was skipped for that
/// reason also skips the matching pop. A handler that interrupts it between the load and the store
/// of `depth` and pushes and pops in balance leaves `depth` as it found it, so the store is right.
#[inline(always)]
pub(crate) fn pop_innermost() {
    let _ = thread_state::with(|state| {
        if state.serial.get() & 1 == 1 {
            // Only on targets without `bump`, see `push`; on x86-64, the other path.
            return pop_innermost_odd(state);
        }
        pop_innermost_in::<false>(state);
    });
}

/// [`pop_innermost`] of a thread whose `serial` is odd: on x86-64 (see [`push_odd`]), the pop,
/// with the end of a mark of the progress feature counted; elsewhere nothing.
#[cold]
#[inline(never)]
fn pop_innermost_odd(state: &ThreadState) {
    if cfg!(target_arch = "x86_64") {
        pop_innermost_in::<true>(state);
    }
}

#[inline(always)]
fn pop_innermost_in<const COUNTING: bool>(state: &ThreadState) {
    let slot = state.slot.get();
    if slot.is_null() {
        return;
    }
    // SAFETY: as in `push`.
    let slot = unsafe { &*slot };
    if slot.seq.load(Relaxed) & 1 == 1 {
        return;
    }
    let depth = slot.depth.load(Relaxed);
    if depth > 0 {
        if COUNTING {
            if let Some(record) = slot.records.get(depth as usize - 1) {
                if record.tag.load(Relaxed) & progress::TAG != 0 {
                    progress::ended(record);
                }
            }
        }
        // As in `pop`: one store, no seq bracket.
        slot.depth.store(depth - 1, Release);
        match slot.records.get(depth as usize - 1) {
            Some(record) => fleet::popped_reusable(state, slot, record),
            None => fleet::popped(state, slot),
        }
    }
}

/// Called before a jump (`siglongjmp`) that makes the calling thread's stack pointer `target`:
/// if the thread is inside a push (its slot's `seq` odd) whose frame the jump leaves (the push's
/// stack address lies at or below `target`), that push will never finish, so its slot is made
/// readable and writable again (`seq` even). The records are consistent: the push had either
/// not yet raised `depth`, or had written its record before it did. A push that the jump does
/// not leave (a handler that jumps within itself) is left to finish. Async-signal-safe. (On
/// targets other than x86-64 a push also sets the low bit of `serial`, which this leaves alone:
/// the only caller, the agent's `siglongjmp`, exists only on x86-64.)
pub(crate) fn jumping_to(target: u64) {
    let _ = thread_state::with(|state| {
        let slot = state.slot.get();
        if slot.is_null() {
            return;
        }
        // SAFETY: this thread's claimed slot in the live region.
        let slot = unsafe { &*slot };
        if slot.seq.load(Relaxed) & 1 == 1 && state.push_sp.get() <= target {
            fence(Release);
            bump(&slot.seq);
        }
    });
}

/// The calling thread's current logical mark depth (0 if it has no slot). For tests and asserts.
pub(crate) fn current_depth() -> u32 {
    thread_state::with(|state| {
        let slot = state.slot.get();
        // SAFETY: as in `push`.
        if slot.is_null() {
            0
        } else {
            unsafe { (*slot).depth.load(Relaxed) }
        }
    })
    .unwrap_or(0)
}
