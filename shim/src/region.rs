//! The writer side of the region: creating it, giving each thread a slot, pushing and popping marks.
//!
//! The layout and the reader's protocol are in `abi.rs`; this module only follows them. The public
//! API (features, guards) is in `lib.rs`; this module knows nothing of Rust guards beyond the
//! `(index, tag)` pair a push returns.
//!
//! Cost model: the first mark of a process creates the region (memfd + mmap), the first mark of a
//! thread claims a slot (a scan with compare-and-swap) and registers a thread-exit destructor. Every
//! later push or pop is a handful of plain loads and stores on memory only this thread writes: no
//! allocation, no lock, no syscall. On x86-64 the release fences compile to nothing.
//!
//! Locks: the fork handlers and the thread-exit key are set up when the module that links the
//! shim is loaded (a constructor), not at a first mark, and a thread-exit destructor is a
//! `pthread` key's, not a thread-local's: so no mark ever takes glibc's fork-handler lock or the
//! dynamic loader's lock, which a thread inside `fork` or `dlopen` may hold while it waits for
//! the marking thread (a program's fork handler or library constructor that takes a lock).
//!
//! Fork: the forking thread hides its slot from the prepare handler to the parent or child one,
//! so that whatever runs in the child before the child handler (other libraries' handlers, in
//! registration order) cannot write the region, which the child does not have.

use crate::abi::{self, Record, RegionHeader, Slot, MARK_CAPACITY, SLOT_COUNT};
use crate::sys;
use crate::thread_state::{self, ThreadState};
use core::ptr::null_mut;
use core::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, Ordering::*};
use std::ffi::{c_int, c_uint, c_void};

extern "C" {
    fn ftruncate(fd: c_int, length: i64) -> c_int;
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
    fn getpid() -> c_int;
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> c_int;
    fn pthread_key_create(
        key: *mut c_uint,
        destructor: Option<unsafe extern "C" fn(*mut c_void)>,
    ) -> c_int;
    fn pthread_setspecific(key: c_uint, value: *const c_void) -> c_int;
    fn pthread_key_delete(key: c_uint) -> c_int;
}

const MFD_CLOEXEC: c_uint = 1;
const MFD_ALLOW_SEALING: c_uint = 2;
const F_ADD_SEALS: c_int = 1033;
const F_SEAL_SEAL: c_int = 1;
const F_SEAL_SHRINK: c_int = 2;
const F_SEAL_GROW: c_int = 4;
const PROT_READ_WRITE: c_int = 0x1 | 0x2;
const MAP_SHARED: c_int = 0x01;
const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
const MADV_DONTFORK: c_int = 10;

/// This process's region, null until the first mark (or if it could not be created).
static REGION: AtomicPtr<RegionHeader> = AtomicPtr::new(null_mut());
/// Set once region creation failed, so that marks do not retry a syscall every time.
static REGION_FAILED: AtomicBool = AtomicBool::new(false);
/// The fork handlers and the thread-exit key: see [`setup`].
static SETUP: AtomicU32 = AtomicU32::new(UNSET);
/// The process that began [`setup`] (to tell a child forked in the middle of it).
static SETUP_PID: AtomicU32 = AtomicU32::new(0);
/// The `pthread` key whose destructor releases a thread's slot at its exit.
static EXIT_KEY: AtomicU32 = AtomicU32::new(0);
const UNSET: u32 = 0;
const SETTING: u32 = 1;
const SET: u32 = 2;
const FAILED: u32 = 3;

/// Runs when the module that links the shim is loaded (before `main`, or inside `dlopen`):
/// registers the fork handlers and creates the thread-exit key now, while no interposed call
/// can be waiting for the locks those take (glibc's fork-handler lock, which a `fork` holds while
/// running the program's handlers).
extern "C" fn at_load() {
    setup();
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

/// Runs when the module is unloaded (`dlclose`, or at exit): deletes the thread-exit key, whose
/// destructor would otherwise run, at a later thread exit, code no longer mapped. (glibc removes
/// the module's fork handlers itself.)
extern "C" fn at_unload() {
    if SETUP.load(Acquire) == SET {
        // SAFETY: the key `setup` created; deleting it runs no destructor.
        unsafe { pthread_key_delete(EXIT_KEY.load(Relaxed)) };
    }
}

#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

/// Registers the fork handlers and creates the thread-exit key, once; true when both are in
/// place. Never waits: a thread that finds another one doing it gets false (and makes no region
/// yet), and so does a child forked in the middle of it, which then does it again itself.
fn setup() -> bool {
    match SETUP.load(Acquire) {
        SET => return true,
        FAILED => return false,
        // SAFETY: getpid has no preconditions.
        SETTING if SETUP_PID.load(Relaxed) == unsafe { getpid() } as u32 => return false,
        SETTING => {
            // A child of a fork made during the setup: this process has one thread, this one.
            SETUP.store(UNSET, Relaxed);
        }
        _ => {}
    }
    if SETUP
        .compare_exchange(UNSET, SETTING, Acquire, Relaxed)
        .is_err()
    {
        return false;
    }
    // SAFETY: getpid has no preconditions.
    SETUP_PID.store(unsafe { getpid() } as u32, Relaxed);
    let mut key: c_uint = 0;
    // SAFETY: the handlers only store to atomics and to this thread's state; the key's
    // destructor releases the exiting thread's slot.
    let ok = unsafe {
        pthread_atfork(
            Some(hide_slot_before_fork),
            Some(restore_slot_after_fork),
            Some(forget_region_in_child),
        ) == 0
            && pthread_key_create(&mut key, Some(release_at_exit)) == 0
    };
    EXIT_KEY.store(key, Relaxed);
    SETUP.store(if ok { SET } else { FAILED }, Release);
    ok
}

/// The thread-exit key's destructor: releases the thread's slot, and keeps it from claiming
/// another (later destructors may still mark; those marks are not recorded).
unsafe extern "C" fn release_at_exit(_: *mut c_void) {
    let _ = thread_state::with(|state| {
        state.exiting.set(true);
        let slot = state.slot.replace(null_mut());
        if !slot.is_null() {
            // SAFETY: a non-null slot pointer always points into this process's live region.
            unsafe { release(&*slot) };
        }
    });
}

/// `fork`'s prepare handler, in the forking thread: hides its slot until the parent or child
/// handler. The region is not mapped in the child (`MADV_DONTFORK`), and the child may run other
/// handlers before ours (glibc runs child handlers in registration order): with its slot
/// hidden and claiming barred, nothing they mark can touch it. In the parent, marks made between
/// the handlers (by other handlers) are not recorded; the marks already pushed (`fork`'s own
/// built-in mark) stay, and count the fork.
unsafe extern "C" fn hide_slot_before_fork() {
    let _ = thread_state::with(|state| {
        state.forking.set(true);
        compiler_fence(SeqCst);
        let slot = state.slot.get();
        let region = REGION.load(Relaxed);
        if !slot.is_null() && !region.is_null() {
            let index = (slot as usize - region as usize - abi::HEADER_SIZE) / abi::SLOT_SIZE;
            state.hidden.set(index as u32 + 1);
            compiler_fence(SeqCst);
            state.slot.set(null_mut());
        }
    });
}

/// `fork`'s parent handler: gives the forking thread its slot back.
unsafe extern "C" fn restore_slot_after_fork() {
    let _ = thread_state::with(|state| {
        let hidden = state.hidden.replace(0);
        let region = REGION.load(Relaxed);
        if hidden != 0 && !region.is_null() {
            let slots = (region as *mut u8).add(abi::HEADER_SIZE) as *mut Slot;
            state.slot.set(slots.add(hidden as usize - 1));
        }
        compiler_fence(SeqCst);
        state.forking.set(false);
    });
}

/// `fork`'s child handler: the region was not inherited (`MADV_DONTFORK`), so forget it. The
/// child creates its own region on its first mark; guards alive across the fork become inert.
/// The inherited descriptor is left open (it is close-on-exec): by now the program may have closed
/// it and reused the number for one of its own files. Also called by the agent in a child of
/// `_Fork`, which runs no handlers. Async-signal-safe: it only stores.
pub(crate) unsafe extern "C" fn forget_region_in_child() {
    REGION.store(null_mut(), Relaxed);
    REGION_FAILED.store(false, Relaxed);
    let _ = thread_state::with(|state| {
        state.slot.set(null_mut());
        state.hidden.set(0);
        compiler_fence(SeqCst);
        state.forking.set(false);
    });
}

fn create_region() -> *mut RegionHeader {
    // SAFETY: plain syscalls on values we own; every result is checked before use.
    unsafe {
        let fd = sys::memfd_create(c"fsprof-region".as_ptr(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if fd < 0 {
            return null_mut();
        }
        let mut addr = MAP_FAILED;
        // Sealed at its size: a reader that maps it can never fault on a shrunk file.
        if ftruncate(fd, abi::REGION_SIZE as i64) == 0
            && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0
        {
            addr = mmap(
                null_mut(),
                abi::REGION_SIZE,
                PROT_READ_WRITE,
                MAP_SHARED,
                fd,
                0,
            );
        }
        if addr == MAP_FAILED {
            close(fd);
            return null_mut();
        }
        // Without DONTFORK a child would share (and scribble on) the parent's slots.
        if madvise(addr, abi::REGION_SIZE, MADV_DONTFORK) != 0 {
            munmap(addr, abi::REGION_SIZE);
            close(fd);
            return null_mut();
        }
        let header = addr as *mut RegionHeader;
        // The memfd starts zeroed: slots are free, the counters zero. Fill in the constants.
        header.write(RegionHeader {
            magic: abi::MAGIC,
            version: abi::VERSION,
            header_size: abi::HEADER_SIZE as u32,
            slot_count: SLOT_COUNT as u32,
            slot_size: abi::SLOT_SIZE as u32,
            mark_capacity: MARK_CAPACITY as u32,
            record_size: abi::RECORD_SIZE as u32,
            pid: getpid() as u32,
            slots_used: Default::default(),
            threads_without_slot: Default::default(),
            address: addr as u64,
            fd,
            nonce: nonce(addr as u64),
        });
        header
    }
}

/// A number unlikely to repeat for a region created at `address` now (slow path, once a process).
fn nonce(address: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { getpid() } as u64;
    (now ^ address.rotate_left(29) ^ pid.rotate_left(47)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

/// This process's region, created on first use; null if it cannot be created.
fn region() -> *mut RegionHeader {
    let existing = REGION.load(Acquire);
    if !existing.is_null() || REGION_FAILED.load(Relaxed) {
        return existing;
    }
    // Without the fork handlers a child would keep the region, unmapped in it: no region yet.
    if !setup() {
        return null_mut();
    }
    let created = create_region();
    if created.is_null() {
        REGION_FAILED.store(true, Relaxed);
        return null_mut();
    }
    match REGION.compare_exchange(null_mut(), created, AcqRel, Acquire) {
        Ok(_) => created,
        Err(winner) => {
            // Another thread created it first.
            // SAFETY: `created` is our own mapping of REGION_SIZE bytes and its descriptor, never
            // published.
            unsafe {
                close((*created).fd);
                munmap(created as *mut c_void, abi::REGION_SIZE);
            }
            winner
        }
    }
}

/// Claims a free slot for the calling thread. Slow path, once per thread.
#[cold]
#[inline(never)]
fn claim(state: &ThreadState) -> *mut Slot {
    if state.exiting.get() || state.forking.get() || state.claiming.replace(true) {
        return null_mut();
    }
    compiler_fence(SeqCst);
    // A signal handler may have run between our caller finding no slot and the flag being set,
    // and claimed one for this thread: use it rather than claim (and leak) a second.
    let mut slot = state.slot.get();
    if slot.is_null() {
        slot = claim_once(state);
    }
    compiler_fence(SeqCst);
    state.claiming.set(false);
    slot
}

fn claim_once(state: &ThreadState) -> *mut Slot {
    let header = region();
    if header.is_null() {
        return null_mut();
    }
    // The exit destructor first: a `pthread` key's (C++ and Rust thread-local destructors
    // register through `__cxa_thread_atexit_impl`, which takes the dynamic loader's lock, which a
    // thread inside `dlopen` may hold while it waits for this one).
    // SAFETY: a key from `setup` (which `region` needs); any non-null value runs the destructor.
    if unsafe { pthread_setspecific(EXIT_KEY.load(Relaxed), core::ptr::dangling::<c_void>()) } != 0
    {
        return null_mut();
    }
    // SAFETY: header points to a live region of REGION_SIZE bytes laid out as abi.rs says.
    unsafe {
        let slots = (header as *mut u8).add(abi::HEADER_SIZE) as *mut Slot;
        let tid = sys::gettid();
        for index in 0..SLOT_COUNT {
            let slot = &*slots.add(index);
            if slot.tid.load(Relaxed) == 0
                && slot.tid.compare_exchange(0, tid, Acquire, Relaxed).is_ok()
            {
                make_even(slot); // a previous owner may have left it odd (see `release`)
                begin_write(slot);
                slot.depth.store(0, Relaxed);
                end_write(slot);
                (*header).slots_used.fetch_max(index as u32 + 1, Release);
                state.slot.set(slots.add(index));
                return slots.add(index);
            }
        }
        (*header).threads_without_slot.fetch_add(1, Relaxed);
    }
    state.exiting.set(true); // do not rescan a full table on every mark
    null_mut()
}

/// Frees a slot at thread exit. Its `seq` may be odd, if a push of the thread was left by a jump
/// that [`jumping_to`] did not see: a released slot is left even, so that it is clean for the
/// next owner and readable meanwhile.
fn release(slot: &Slot) {
    make_even(slot);
    begin_write(slot);
    slot.depth.store(0, Relaxed);
    end_write(slot);
    slot.tid.store(0, Release);
}

/// Makes the slot's sequence counter odd: a reader will discard what it copies until `end_write`.
#[inline(always)]
fn begin_write(slot: &Slot) {
    let seq = slot.seq.load(Relaxed);
    slot.seq.store(seq.wrapping_add(1), Relaxed);
    fence(Release);
}

/// Makes the slot's `seq` even if a push left it odd. Only for a slot no push of its owner is
/// in the middle of: one being claimed or released, or one whose push was left by a jump.
fn make_even(slot: &Slot) {
    if slot.seq.load(Relaxed) & 1 == 1 {
        bump(&slot.seq);
    }
}

#[inline(always)]
fn end_write(slot: &Slot) {
    let seq = slot.seq.load(Relaxed);
    slot.seq.store(seq.wrapping_add(1), Release);
}

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
            let slot = state.slot.get();
            if slot.is_null() {
                if !claim {
                    return Err(NotPushed::NoSlot);
                }
            } else {
                // SAFETY: a non-null slot pointer is this thread's claimed slot in the live region.
                let slot = unsafe { &*slot };
                let depth = slot.depth.load(Relaxed) as usize;
                if let Some(top) = depth.checked_sub(1).and_then(|i| slot.records.get(i)) {
                    if nested.contains(&top.feature.load(Relaxed)) {
                        if top.sp.load(Relaxed) > sp {
                            return Err(NotPushed::Skipped);
                        }
                        // Stale: the frame that pushed it is gone, left without its pop (a signal
                        // handler's `siglongjmp` out of the call). Pop it, as `pop_placed` would.
                        slot.depth.store(depth as u32 - 1, Release);
                    }
                }
            }
            let serial = state.serial.get();
            if serial & 1 == 1 {
                return Err(NotPushed::Skipped); // only on targets without `bump`, see `push`
            }
            let tag = serial.wrapping_add(2);
            if !cfg!(target_arch = "x86_64") {
                state.serial.set(serial | 1);
                compiler_fence(SeqCst);
            }
            let meta = (crate::abi::KIND_CALL_SITE as u64) << 32;
            let pushed = push_unless_busy(state, feature, payload, meta, position, sp, tag);
            if !cfg!(target_arch = "x86_64") {
                compiler_fence(SeqCst);
            }
            state.serial.set(tag);
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

/// Why [`push_unless_nested`] pushed nothing.
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

/// Where [`push_unless_nested`] pushed a mark: its thread's slot and the mark's index.
#[derive(Clone, Copy)]
pub(crate) struct Placed {
    slot: *mut Slot,
    index: u32,
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
pub(crate) fn push(feature: u64, payload: u64, meta: u64, position: u64, sp: u64) -> Pushed {
    let pushed = push_in(feature, payload, meta, position, sp);
    if pushed.index == BUSY {
        return push_after_closing(feature, payload, meta, position, sp);
    }
    pushed
}

/// [`push`] once [`close_left_push`] closed a push left halfway, if any (out of line).
#[cold]
#[inline(never)]
fn push_after_closing(feature: u64, payload: u64, meta: u64, position: u64, sp: u64) -> Pushed {
    if !close_left_push(sp) {
        return Pushed::NOTHING;
    }
    match push_in(feature, payload, meta, position, sp) {
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
fn push_in(feature: u64, payload: u64, meta: u64, position: u64, sp: u64) -> Pushed {
    thread_state::with(
        #[inline(always)]
        |state| {
            let serial = state.serial.get();
            if serial & 1 == 1 {
                return Pushed::NOTHING; // only on targets without `bump`, see above
            }
            let tag = serial.wrapping_add(2);
            if !cfg!(target_arch = "x86_64") {
                state.serial.set(serial | 1);
                compiler_fence(SeqCst);
            }
            let pushed = push_unless_busy(state, feature, payload, meta, position, sp, tag);
            if !cfg!(target_arch = "x86_64") {
                compiler_fence(SeqCst);
            }
            state.serial.set(tag);
            pushed
        },
    )
    .unwrap_or(Pushed::NOTHING)
}

/// `index` of a [`Pushed`] that [`push_unless_busy`] did not push because the slot is busy.
const BUSY: u32 = u32::MAX - 1;

/// Pushes unless the slot is busy (see [`push`]). Returns [`Pushed::NOTHING`] if nothing could
/// be pushed, `index` [`BUSY`] if the slot is busy.
#[inline(always)]
fn push_unless_busy(
    state: &ThreadState,
    feature: u64,
    payload: u64,
    meta: u64,
    position: u64,
    sp: u64,
    tag: u64,
) -> Pushed {
    let mut slot = state.slot.get();
    if slot.is_null() {
        slot = claim(state);
        if slot.is_null() {
            return Pushed::NOTHING;
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
    if let Some(record) = slot.records.get(depth as usize) {
        write_record(record, feature, payload, meta, position, sp, tag);
    }
    slot.depth.store(depth.saturating_add(1), Relaxed);
    fence(Release);
    bump(&slot.seq); // even: done
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
fn on_alternate_stack() -> bool {
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

/// Adds one to `seq` with a single instruction that a signal handler cannot interrupt halfway.
/// Not atomic across threads (no `lock` prefix, which costs far more): only the owner writes.
#[inline(always)]
fn bump(seq: &core::sync::atomic::AtomicU32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: increments the u32 that `seq` owns; only this thread writes it.
    unsafe {
        core::arch::asm!("inc dword ptr [{0}]", in(reg) seq.as_ptr(), options(nostack));
    }
    #[cfg(not(target_arch = "x86_64"))]
    seq.store(seq.load(Relaxed).wrapping_add(1), Relaxed);
}

#[inline(always)]
fn write_record(
    record: &Record,
    feature: u64,
    payload: u64,
    meta: u64,
    position: u64,
    sp: u64,
    tag: u64,
) {
    record.feature.store(feature, Relaxed);
    record.payload.store(payload, Relaxed);
    record.meta.store(meta, Relaxed);
    record.position.store(position, Relaxed);
    record.sp.store(sp, Relaxed);
    record.tag.store(tag, Relaxed);
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
                return; // that mark is gone and another took its place
            }
        }
        // A pop only lowers depth: one store, no seq bracket. (seq, depth) still identifies the
        // stack: seq only grows (on pushes), and without a push depth only falls.
        slot.depth.store(pushed.index, Release);
    });
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
            return; // only on targets without `bump`, see `push`
        }
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
            // As in `pop`: one store, no seq bracket.
            slot.depth.store(depth - 1, Release);
        }
    });
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

/// Address of this process's region, if it has one. For tests.
pub(crate) fn region_address() -> Option<usize> {
    let region = REGION.load(Acquire);
    (!region.is_null()).then_some(region as usize)
}
