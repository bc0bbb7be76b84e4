//! `longjmp` and its siblings, interposed (not features): a signal handler that interrupted a
//! mark's push and jumps out of it (POSIX allows leaving an async-signal-safe function that way;
//! bash and psql do) would leave the thread's slot "being written" for good, its `seq` odd:
//! every later mark of the thread ignored, and the slot busy for the profiler. So before the
//! real jump, the shim is told where the jump goes (`raw::jumping_to`), and closes a push whose
//! frame the jump leaves.
//!
//! Where the jump goes is the stack pointer saved in the `jmp_buf`: glibc's x86-64 layout
//! (rbx, rbp, r12-r15, rsp, pc), with rbp, rsp and pc mangled by the thread's pointer guard
//! (`PTR_MANGLE`: xor with the guard at `%fs:0x30`, then rotate left by 17). Not here: marks
//! left by such a jump, which the next interposed call drops (the shim's
//! `push_call_site_unless_nested`).

use super::Real;
use core::ffi::{c_int, c_void};
use fsprof_shim::raw;

/// The real functions, resolved by the constructor.
pub(super) static REALS: &[&Real] = &[
    &longjmp_real::REAL,
    &_longjmp_real::REAL,
    &siglongjmp_real::REAL,
    &__longjmp_chk_real::REAL,
];

/// Index of the saved stack pointer in a `jmp_buf`'s registers.
const JB_RSP: usize = 6;

/// The stack pointer a jump to `env` restores.
///
/// # Safety
/// `env` is a `jmp_buf` filled by this thread's `setjmp`.
#[inline(always)]
unsafe fn target(env: *const u64) -> u64 {
    let guard: u64;
    // SAFETY: reads the thread's pointer guard from its TCB (glibc's `tcbhead_t`, offset 0x30).
    core::arch::asm!("mov {}, qword ptr fs:[0x30]", out(reg) guard,
        options(pure, readonly, nostack, preserves_flags));
    env.add(JB_RSP).read().rotate_right(17) ^ guard
}

macro_rules! interpose_jump {
    ($($name:ident, $module:ident;)*) => {$(
        #[allow(non_snake_case)]
        mod $module {
            pub(super) static REAL: super::Real =
                super::Real::new(concat!(stringify!($name), "\0").as_bytes());
        }

        /// Interposed: see the module's documentation.
        ///
        /// # Safety
        /// As the libc function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(env: *mut c_void, value: c_int) -> ! {
            raw::jumping_to(target(env as *const u64));
            let real: unsafe extern "C" fn(*mut c_void, c_int) -> ! =
                core::mem::transmute::<usize, _>($module::REAL.get());
            real(env, value)
        }
    )*};
}

interpose_jump! {
    longjmp, longjmp_real;
    _longjmp, _longjmp_real;
    siglongjmp, siglongjmp_real;
    __longjmp_chk, __longjmp_chk_real;
}
