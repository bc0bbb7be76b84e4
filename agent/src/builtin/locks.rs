//! Locks: only the wait is marked (`locks`): an uncontended `pthread_mutex_lock` or rwlock takes
//! the `try` form first and is not marked; condition-variable waits are `waiting`.

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
                let try_lock: unsafe extern "C" fn($ty) -> c_int =
                    core::mem::transmute::<usize, _>(TRY.get());
                let tried = try_lock($arg);
                if tried != EBUSY {
                    return tried;
                }
                let real: unsafe extern "C" fn($ty) -> c_int =
                    core::mem::transmute::<usize, _>(REAL.get());
                let _marked = enter(LOCKS, caller, true);
                real($arg)
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
    list TIMED_LOCK;
    LOCKS true fn pthread_mutex_timedlock(mutex: *mut c_void, abstime: *const c_void) -> c_int;
    LOCKS true fn pthread_rwlock_timedrdlock(lock: *mut c_void, abstime: *const c_void) -> c_int;
    LOCKS true fn pthread_rwlock_timedwrlock(lock: *mut c_void, abstime: *const c_void) -> c_int;
}
