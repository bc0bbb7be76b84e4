//! Locks: only the wait is marked (`locks`): an uncontended `pthread_mutex_lock` or rwlock takes
//! the `try` form first and is not marked; condition-variable waits (`stdio.rs`), POSIX
//! semaphore waits and barrier waits are `waiting`. The wake-ups (`pthread_mutex_unlock`,
//! `pthread_cond_signal`, `pthread_cond_broadcast`, `sem_post`) are interposed only for what-if
//! experiments, where a thread pays its delay before it wakes another: otherwise they jump to
//! libc's at once. `pthread_barrier_wait` is both a wait (marked) and a wake-up (paid first).

use super::*;

/// Interposes a lock function that waits only when the lock is taken: its `try` form first,
/// unmarked; then, if that found the lock busy (`EBUSY`), the real function under `locks`.
macro_rules! interpose_lock {
    (list $list:ident; $(fn $name:ident($arg:ident: $ty:ty) try $try:ident;)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL, &$name::TRY),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            use super::*;
            pub(super) static REAL: Real = Real::new(concat!(stringify!($name), "\0").as_bytes());
            pub(super) static TRY: Real = Real::new(concat!(stringify!($try), "\0").as_bytes());

            pub(super) unsafe extern "C-unwind" fn imp($arg: $ty, caller: Caller) -> c_int {
                const EBUSY: c_int = 16;
                // During a what-if experiment a thread pays before it takes a lock, so that it
                // never sleeps its delay while holding one (it pays again before it releases
                // it, for what accrued meanwhile): a consumer that paid at its unlock, inside
                // the lock, made the selected producer wait on that lock, real time no delay
                // accounts for (decode 20% faster predicted 13-17% against 19-21%).
                if super::whatif::active() {
                    super::whatif::pay();
                }
                let try_lock: unsafe extern "C" fn($ty) -> c_int =
                    core::mem::transmute::<usize, _>(TRY.get());
                let tried = try_lock($arg);
                if tried != EBUSY {
                    return tried;
                }
                let real: unsafe extern "C" fn($ty) -> c_int =
                    core::mem::transmute::<usize, _>(REAL.get());
                let _marked = enter(LOCKS, caller, true);
                let waiting = super::whatif::block_start();
                let result = real($arg);
                super::whatif::block_end(waiting);
                result
            }
        }

        /// Interposed: see the module's documentation.
        ///
        /// # Safety
        /// As the libc function of this name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($arg: $ty) -> c_int {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "mov rsi, rsp",
                "mov rdx, rbp",
                "jmp {imp}",
                ".cfi_endproc",
                imp = sym $name::imp,
            )
        }
    )*
    };
}

interpose_lock! {
    list LOCK;
    fn pthread_mutex_lock(mutex: *mut c_void) try pthread_mutex_trylock;
    fn pthread_rwlock_rdlock(lock: *mut c_void) try pthread_rwlock_tryrdlock;
    fn pthread_rwlock_wrlock(lock: *mut c_void) try pthread_rwlock_trywrlock;
}

interpose! {
    list SEMAPHORE_WAIT;
    WAITING true fn sem_wait(sem: *mut c_void) -> c_int;
    WAITING true fn sem_timedwait(sem: *mut c_void, abstime: *const c_void) -> c_int;
    WAITING true fn sem_clockwait(sem: *mut c_void, clock: c_int, abstime: *const c_void) -> c_int;
}

/// The real `pthread_barrier_wait`, resolved by the constructor.
pub(super) static BARRIER_WAIT: &[&Real] = &[&pthread_barrier_wait::REAL];

/// `pthread_barrier_wait` is a wait (`waiting`) and a wake-up: the last thread to arrive wakes
/// the others inside libc, where no interposed call sees it. During a what-if experiment a
/// thread pays its delay before it arrives (it may be the last), and what accrues while it
/// waits is forgiven.
#[allow(non_snake_case)]
mod pthread_barrier_wait {
    use super::*;
    pub(super) static REAL: Real = Real::new(b"pthread_barrier_wait\0");

    pub(super) unsafe extern "C-unwind" fn paying(barrier: *mut c_void, caller: Caller) -> c_int {
        if super::whatif::active() {
            super::whatif::pay();
        }
        waiting::imp(barrier, caller)
    }

    /// The wait itself, as any `waiting` function's.
    mod waiting {
        use super::*;
        imp!(
            WAITING,
            true,
            super::REAL,
            fn(barrier: *mut c_void) -> c_int
        );
    }
}

/// Interposed: see [`pthread_barrier_wait`](mod@pthread_barrier_wait).
///
/// # Safety
/// As the libc function of this name.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_wait(barrier: *mut c_void) -> c_int {
    core::arch::naked_asm!(
        ".cfi_startproc",
        pass_caller!(barrier),
        "jmp {paying}",
        ".cfi_endproc",
        paying = sym pthread_barrier_wait::paying,
    )
}

interpose! {
    list TIMED_LOCK;
    LOCKS true fn pthread_mutex_timedlock(mutex: *mut c_void, abstime: *const c_void) -> c_int;
    LOCKS true fn pthread_rwlock_timedrdlock(lock: *mut c_void, abstime: *const c_void) -> c_int;
    LOCKS true fn pthread_rwlock_timedwrlock(lock: *mut c_void, abstime: *const c_void) -> c_int;
}

/// Interposes wake-ups of one argument: a trampoline that jumps to the real function unless a
/// what-if experiment runs (or the real function is not known yet), and then calls `paying`,
/// which pays the thread's delay first and forgives what accrued where the thread waited for its
/// CPU through most of the call (`whatif::wake_start`, `whatif::wake_end`). Not features.
macro_rules! interpose_wake {
    (list $list:ident; $(fn $name:ident($arg:ident: $ty:ty);)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            use super::*;
            pub(super) static REAL: Real = Real::new(concat!(stringify!($name), "\0").as_bytes());

            pub(super) unsafe extern "C-unwind" fn paying($arg: $ty) -> c_int {
                let waking = super::super::whatif::wake_start();
                let real: unsafe extern "C" fn($ty) -> c_int =
                    core::mem::transmute::<usize, _>(REAL.get());
                let result = real($arg);
                super::super::whatif::wake_end(waking);
                result
            }
        }

        /// Interposed: see [`interpose_wake`].
        ///
        /// # Safety
        /// As the libc function of this name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($arg: $ty) -> c_int {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "cmp byte ptr [rip + {on}], 0",
                "jne 2f",
                "mov r11, qword ptr [rip + {real} + {address}]",
                "test r11, r11",
                "jz 2f",
                "jmp r11",
                "2:",
                "jmp {paying}",
                ".cfi_endproc",
                on = sym super::whatif::ON,
                real = sym $name::REAL,
                address = const core::mem::offset_of!(Real, address),
                paying = sym $name::paying,
            )
        }
    )*
    };
}

interpose_wake! {
    list WAKE;
    fn pthread_mutex_unlock(mutex: *mut c_void);
    fn pthread_cond_signal(cond: *mut c_void);
    fn pthread_cond_broadcast(cond: *mut c_void);
    fn sem_post(sem: *mut c_void);
}
