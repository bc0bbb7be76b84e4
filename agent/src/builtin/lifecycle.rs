//! Processes and threads: `_Fork` (a child made without `fork`'s handlers forgets its parent's
//! region) and `pthread_create` (a new thread claims its mark slot before running its routine).

use super::allocation::{real_free, real_malloc};
use super::*;

pub(super) mod fork_without_handlers {
    use super::*;
    pub(crate) static REAL: Real = Real::new(b"_Fork\0");
}

/// Interposed `_Fork` (glibc 2.34: `fork` without the `pthread_atfork` handlers, so that a
/// signal handler may call it): the child forgets the shim's region, as `fork`'s handler makes
/// it do; the region is not mapped in the child, and its first mark would fault. Not a feature.
///
/// # Safety
/// As libc's `_Fork`.
#[no_mangle]
pub unsafe extern "C" fn _Fork() -> c_int {
    let real: unsafe extern "C" fn() -> c_int =
        core::mem::transmute::<usize, _>(fork_without_handlers::REAL.get());
    let pid = real();
    if pid == 0 {
        raw::forget_region_in_child();
        super::whatif::leave_in_child();
    }
    pid
}

// ---- Threads: claim a slot at start --------------------------------------------------------------

pub(super) mod pthread_create {
    use super::*;
    pub(crate) static REAL: Real = Real::new(b"pthread_create\0");
    pub(super) type Start = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

    /// The user's start routine and argument, passed to `start` in memory from the real malloc.
    #[repr(C)]
    pub(super) struct Launch {
        pub start: Start,
        pub arg: *mut c_void,
    }

    /// The new thread's first function: claims its slot (where built-in features are marked)
    /// and joins a what-if experiment (where one runs), then runs the user's routine.
    pub(super) unsafe extern "C-unwind" fn start(launch: *mut c_void) -> *mut c_void {
        let Launch { start, arg } = core::ptr::read(launch as *const Launch);
        real_free(launch);
        if HOT.ready.load(Relaxed) {
            claim_slot();
        }
        super::whatif::thread_start();
        let result = start(arg);
        super::whatif::thread_end();
        result
    }
}

/// Interposed `pthread_create`: the new thread claims its mark slot before running `start`, so
/// that its first mark never happens in a signal handler, and joins a what-if experiment. Not a
/// feature.
///
/// # Safety
/// As libc's `pthread_create`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut c_void,
    attr: *const c_void,
    start: pthread_create::Start,
    arg: *mut c_void,
) -> c_int {
    type Create = unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        pthread_create::Start,
        *mut c_void,
    ) -> c_int;
    let real: Create = core::mem::transmute::<usize, Create>(pthread_create::REAL.get());
    if !HOT.ready.load(Relaxed) && !super::whatif::active() {
        return real(thread, attr, start, arg);
    }
    let launch =
        real_malloc(core::mem::size_of::<pthread_create::Launch>()) as *mut pthread_create::Launch;
    if launch.is_null() {
        return real(thread, attr, start, arg);
    }
    launch.write(pthread_create::Launch { start, arg });
    let created = real(thread, attr, pthread_create::start, launch as *mut c_void);
    if created != 0 {
        real_free(launch as *mut c_void);
    }
    created
}

pub(super) mod pthread_join {
    use super::*;
    pub(crate) static REAL: Real = Real::new(b"pthread_join\0");
}

/// Interposed `pthread_join`: during a what-if experiment, what accrues while the caller waits
/// for the thread is forgiven (the thread paid before it ended). Not a feature (the agent marks
/// no wait for a thread's end).
///
/// # Safety
/// As libc's `pthread_join`.
#[no_mangle]
pub unsafe extern "C" fn pthread_join(thread: usize, result: *mut *mut c_void) -> c_int {
    let real: unsafe extern "C" fn(usize, *mut *mut c_void) -> c_int =
        core::mem::transmute::<usize, _>(pthread_join::REAL.get());
    let waited = super::whatif::block_start();
    let joined = real(thread, result);
    super::whatif::block_end(waited);
    joined
}
