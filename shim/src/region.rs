//! The writer side of the region: creating it, giving each thread a slot, and the slot's write
//! protocol (its sequence counter). Pushing and popping marks is `stack.rs`.
//!
//! The layout and the reader's protocol are in `abi.rs`; this module only follows them.
//!
//! Cost model: the first mark of a process creates the region (memfd + mmap) and announces it
//! (`announce.rs`), the first mark of a thread claims a slot (a scan with compare-and-swap) and
//! registers a thread-exit destructor.
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

use crate::abi::{self, RegionHeader, Slot, MARK_CAPACITY, SLOT_COUNT};
use crate::sys::{self, close, ftruncate, madvise, mmap, munmap};
use crate::sys::{MADV_DONTFORK, MAP_FAILED, MFD_CLOEXEC, PROT_READ_WRITE};
use crate::thread_state::{self, ThreadState};
use core::ptr::null_mut;
use core::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, Ordering::*};
use std::ffi::{c_int, c_uint, c_void};

extern "C" {
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

const MFD_ALLOW_SEALING: c_uint = 2;
const F_ADD_SEALS: c_int = 1033;
const F_SEAL_SEAL: c_int = 1;
const F_SEAL_SHRINK: c_int = 2;
const F_SEAL_GROW: c_int = 4;
const MAP_SHARED: c_int = 0x01;

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
        crate::fleet::cleared(state);
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
        crate::fleet::cleared(state);
        state.slot.set(null_mut());
        if cfg!(target_arch = "x86_64") {
            // Off the progress point's path (`progress.rs`) until the child's own claim.
            state.serial.set(state.serial.get() & !1);
        }
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
            progress: Default::default(),
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

/// This process's region if it was created (null otherwise).
pub(crate) fn created() -> *const RegionHeader {
    REGION.load(Acquire)
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
    // Before the region is published: a thread that claims a slot in it must see the name.
    crate::progress::region_created();
    match REGION.compare_exchange(null_mut(), created, AcqRel, Acquire) {
        Ok(_) => {
            crate::fleet::region_created();
            crate::announce::region_created(created as u64);
            created
        }
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
pub(crate) fn claim(state: &ThreadState) -> *mut Slot {
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
                map_in(slots.add(index));
                state.slot.set(slots.add(index));
                if cfg!(target_arch = "x86_64") && crate::progress::on() {
                    // The thread's marks take the other path (`progress.rs`, `stack::push_odd`).
                    state.serial.set(state.serial.get() | 1);
                }
                crate::fleet::claimed(state);
                return slots.add(index);
            }
        }
        (*header).threads_without_slot.fetch_add(1, Relaxed);
    }
    state.exiting.set(true); // do not rescan a full table on every mark
    null_mut()
}

/// Reads a byte of every page of `slot`, so that every page of it is mapped in this process: the
/// profiler's kernel-side copy (a BPF program at a perf sample) cannot fault a page in, and a
/// record's extra words, which only some kinds write, may lie on a page nothing wrote yet.
///
/// # Safety
/// `slot` is a slot of the live region.
unsafe fn map_in(slot: *mut Slot) {
    const STEP: usize = 4096; // no page is smaller
    let start = slot as *const u8;
    let mut offset = 0;
    while offset < abi::SLOT_SIZE {
        // SAFETY: inside the slot, which lies inside the mapping.
        unsafe { core::ptr::read_volatile(start.add(offset)) };
        offset += STEP - (start as usize + offset) % STEP;
    }
}

/// Frees a slot at thread exit. Its `seq` may be odd, if a push of the thread was left by a jump
/// that [`jumping_to`](crate::stack::jumping_to) did not see: a released slot is left even, so that it is clean for the
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

/// Adds one to `seq` with a single instruction that a signal handler cannot interrupt halfway.
/// Not atomic across threads (no `lock` prefix, which costs far more): only the owner writes.
#[inline(always)]
pub(crate) fn bump(seq: &core::sync::atomic::AtomicU32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: increments the u32 that `seq` owns; only this thread writes it.
    unsafe {
        core::arch::asm!("inc dword ptr [{0}]", in(reg) seq.as_ptr(), options(nostack));
    }
    #[cfg(not(target_arch = "x86_64"))]
    seq.store(seq.load(Relaxed).wrapping_add(1), Relaxed);
}

/// Address of this process's region, if it has one. For tests.
pub(crate) fn region_address() -> Option<usize> {
    let region = REGION.load(Acquire);
    (!region.is_null()).then_some(region as usize)
}
