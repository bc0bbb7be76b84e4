//! The allocation family: `malloc`, `calloc`, `realloc`, `free`, ... marked `allocation`, with
//! the bootstrap path for the calls the dynamic loader makes before the real functions are known
//! (served from `real.rs`'s arena), and the real `malloc` and `free` for the agent's own needs.

use super::*;

/// Interposes an allocation function: like `interpose!`, but while some real function is being
/// resolved and this one is not known yet, `$bootstrap` serves the call (from the arena); and
/// `$moved` (given the arguments) may serve a call itself, for a pointer from the arena that must
/// not reach the real function (`$arena` tells whether it may, on the fast path).
macro_rules! interpose_alloc {
    (list $list:ident; $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $bootstrap:path, $moved:path, $arena:path;)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            pub(super) static REAL: Real = Real::new(concat!(stringify!($name), "\0").as_bytes());

            pub(super) unsafe extern "C-unwind" fn imp($($arg: $ty,)* caller: Caller) -> $ret {
                let address = REAL.address.load(Relaxed);
                if address != 0 && !$arena($($arg),*) {
                    let real: unsafe extern "C" fn($($ty),*) -> $ret =
                        core::mem::transmute::<usize, _>(address);
                    return_fast!(ALLOCATION, caller, true, real($($arg),*));
                }
                slow($($arg,)* caller)
            }

            #[cold]
            #[inline(never)]
            unsafe extern "C-unwind" fn slow($($arg: $ty,)* caller: Caller) -> $ret {
                count_slow_entry();
                let address = REAL.get_unless_resolving();
                if address == 0 {
                    return $bootstrap($($arg),*);
                }
                if let Some(moved) = $moved($($arg),*) {
                    return moved;
                }
                let real: unsafe extern "C" fn($($ty),*) -> $ret =
                    core::mem::transmute::<usize, _>(address);
                let _marked = enter(ALLOCATION, caller, true);
                real($($arg),*)
            }
        }

        /// Interposed: see the module's documentation.
        ///
        /// # Safety
        /// As the libc function of this name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                ".cfi_startproc",
                pass_caller!($($arg)*),
                "jmp {imp}",
                ".cfi_endproc",
                imp = sym $name::imp,
            )
        }
    )*
    };
}

interpose_alloc! {
    list ALLOC;
    fn malloc(size: SizeT) -> *mut c_void => boot::malloc, boot::no_move1, boot::never1;
    fn calloc(n: SizeT, size: SizeT) -> *mut c_void => boot::calloc, boot::no_move2, boot::never2;
    fn realloc(p: *mut c_void, size: SizeT) -> *mut c_void =>
        boot::realloc, boot::move_realloc, boot::from_arena2;
    fn reallocarray(p: *mut c_void, n: SizeT, size: SizeT) -> *mut c_void =>
        boot::reallocarray, boot::move_reallocarray, boot::from_arena3;
    fn posix_memalign(out: *mut *mut c_void, align: SizeT, size: SizeT) -> c_int =>
        boot::posix_memalign, boot::no_move3, boot::never3;
    fn aligned_alloc(align: SizeT, size: SizeT) -> *mut c_void =>
        boot::memalign, boot::no_move2, boot::never2;
    fn memalign(align: SizeT, size: SizeT) -> *mut c_void =>
        boot::memalign, boot::no_move2, boot::never2;
}

/// Allocation while the real functions cannot be known yet (from the arena), and the move of
/// arena pieces to the real heap when they are reallocated later.
mod boot {
    use super::*;
    use core::ptr::null_mut;

    pub unsafe fn malloc(size: SizeT) -> *mut c_void {
        arena::alloc(size, 16) as *mut c_void
    }
    pub unsafe fn calloc(n: SizeT, size: SizeT) -> *mut c_void {
        n.checked_mul(size)
            .map_or(null_mut(), |size| arena::alloc(size, 16) as *mut c_void)
    }
    pub unsafe fn memalign(align: SizeT, size: SizeT) -> *mut c_void {
        arena::alloc(size, align) as *mut c_void
    }
    pub unsafe fn posix_memalign(out: *mut *mut c_void, align: SizeT, size: SizeT) -> c_int {
        let p = arena::alloc(size, align);
        if p.is_null() {
            return 12; // ENOMEM
        }
        *out = p as *mut c_void;
        0
    }
    pub unsafe fn realloc(p: *mut c_void, size: SizeT) -> *mut c_void {
        if !p.is_null() && !arena::contains(p as *const u8) {
            // A block of the real heap, reallocated by this thread's own `dlsym` before `realloc`
            // is known (glibc's never does): its size is unknown here, so it cannot be copied.
            // Fail, as `realloc` may, and leave the block as it is.
            return null_mut();
        }
        let new = arena::alloc(size, 16);
        if !p.is_null() && !new.is_null() {
            let old = arena::size_of(p as *const u8);
            core::ptr::copy_nonoverlapping(p as *const u8, new, old.min(size));
        }
        new as *mut c_void
    }
    pub unsafe fn reallocarray(p: *mut c_void, n: SizeT, size: SizeT) -> *mut c_void {
        n.checked_mul(size)
            .map_or(null_mut(), |size| realloc(p, size))
    }

    /// `realloc` of an arena piece once `malloc` is known: a new piece from the real heap.
    pub unsafe fn move_realloc(p: *mut c_void, size: SizeT) -> Option<*mut c_void> {
        if p.is_null() || !arena::contains(p as *const u8) {
            return None;
        }
        let new = real_malloc(size.max(1));
        if !new.is_null() {
            let old = arena::size_of(p as *const u8);
            core::ptr::copy_nonoverlapping(p as *const u8, new as *mut u8, old.min(size));
        }
        Some(new)
    }
    pub unsafe fn move_reallocarray(p: *mut c_void, n: SizeT, size: SizeT) -> Option<*mut c_void> {
        if p.is_null() || !arena::contains(p as *const u8) {
            return None;
        }
        Some(n.checked_mul(size).map_or(null_mut(), |size| {
            move_realloc(p, size).unwrap_or(null_mut())
        }))
    }
    /// Whether the pointer argument of `realloc` came from the arena.
    #[inline(always)]
    pub fn from_arena2(p: *mut c_void, _: SizeT) -> bool {
        arena::contains(p as *const u8)
    }
    /// Whether the pointer argument of `reallocarray` came from the arena.
    #[inline(always)]
    pub fn from_arena3(p: *mut c_void, _: SizeT, _: SizeT) -> bool {
        arena::contains(p as *const u8)
    }
    #[inline(always)]
    pub fn never1<A>(_: A) -> bool {
        false
    }
    #[inline(always)]
    pub fn never2<A, B>(_: A, _: B) -> bool {
        false
    }
    #[inline(always)]
    pub fn never3<A, B, C>(_: A, _: B, _: C) -> bool {
        false
    }
    pub unsafe fn no_move1<A>(_: A) -> Option<*mut c_void> {
        None
    }
    pub unsafe fn no_move2<A, B>(_: A, _: B) -> Option<*mut c_void> {
        None
    }
    pub unsafe fn no_move3<A, B, C>(_: A, _: B, _: C) -> Option<c_int> {
        None
    }
}

/// `free`: arena pointers are never freed; others go to the real `free` (or leak, if it cannot
/// be known yet).
pub(super) mod free {
    use super::*;
    pub(crate) static REAL: Real = Real::new(b"free\0");

    pub(super) unsafe extern "C-unwind" fn imp(p: *mut c_void, caller: Caller) {
        if p.is_null() || arena::contains(p as *const u8) {
            return;
        }
        let address = REAL.address.load(Relaxed);
        if address != 0 {
            let real: unsafe extern "C" fn(*mut c_void) = core::mem::transmute::<usize, _>(address);
            return_fast!(ALLOCATION, caller, true, real(p));
        }
        slow(p, caller)
    }

    #[cold]
    #[inline(never)]
    unsafe extern "C-unwind" fn slow(p: *mut c_void, caller: Caller) {
        count_slow_entry();
        let address = REAL.get_unless_resolving();
        if address == 0 {
            return;
        }
        let real: unsafe extern "C" fn(*mut c_void) = core::mem::transmute::<usize, _>(address);
        let _marked = enter(ALLOCATION, caller, true);
        real(p)
    }
}

/// Interposed: see the module's documentation.
///
/// # Safety
/// As libc's `free`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov rsi, rsp",
        "mov rdx, rbp",
        "jmp {imp}",
        ".cfi_endproc",
        imp = sym free::imp,
    )
}

/// The real `malloc` (for the agent's own bookkeeping, unmarked).
pub(super) unsafe fn real_malloc(size: usize) -> *mut c_void {
    let real: unsafe extern "C" fn(usize) -> *mut c_void =
        core::mem::transmute::<usize, _>(malloc::REAL.get());
    real(size)
}

/// The real `free`.
pub(super) unsafe fn real_free(p: *mut c_void) {
    let real: unsafe extern "C" fn(*mut c_void) =
        core::mem::transmute::<usize, _>(free::REAL.get());
    real(p)
}
