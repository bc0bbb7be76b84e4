//! The unwinder's functions (`_Unwind_*`, and C's personality routine), defined in the agent as
//! forwarders to the process's own unwinder, found on first use: so that the agent does not
//! depend on `libgcc_s.so.1`.
//!
//! Rust's standard library calls these functions (to unwind a panic, to run the landing pads of
//! the agent's frames when something unwinds through them, to print a backtrace), and the
//! system-call trampolines name C's personality routine. Linked the usual way they make the agent
//! depend on `libgcc_s.so.1`, which none of gcc, cc1, as, make, sqlite3, git, xz or python3 loads
//! otherwise: every process the agent was preloaded into paid about 100 µs to load it
//! (BENCHMARKS.md, "Start-up"). With these definitions in the agent, the linker (which rustc runs
//! with `--as-needed`) no longer records the dependency.
//!
//! Why forwarders and not a copy of the unwinder (`libgcc_eh.a`, tried and reverted): the frames
//! of the agent are also unwound by the *program's* unwinder, when `pthread_cancel` or
//! `pthread_exit` unwinds a thread blocked in an interposed `read` (glibc loads `libgcc_s` for
//! that), or a C++ exception passes through. The personality routine of such a frame is handed
//! that unwinder's context, and must call that unwinder's `_Unwind_*` functions, not a second
//! copy's. So each forwarder, on its first call, finds the function of the unwinder the process
//! has: in the global scope (C++ and Rust programs load `libgcc_s` at start-up), else in
//! `libgcc_s.so.1` already loaded privately (glibc's cancellation loads it that way), else by
//! loading `libgcc_s.so.1` (the agent's own panic, which the agent avoids). The address is kept;
//! later calls cost one load and an indirect jump.
//!
//! Not here: which frames of the agent have landing pads (the trampolines of
//! `builtin/syscall_wrappers.rs`, the `C-unwind` implementations of `builtin.rs`).

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The functions forwarded, in the order of [`ADDRESSES`] (the assembly below uses the index).
static NAMES: [&CStr; 14] = [
    c"_Unwind_Backtrace",
    c"_Unwind_DeleteException",
    c"_Unwind_GetDataRelBase",
    c"_Unwind_GetIP",
    c"_Unwind_GetIPInfo",
    c"_Unwind_GetLanguageSpecificData",
    c"_Unwind_GetRegionStart",
    c"_Unwind_GetTextRelBase",
    c"_Unwind_RaiseException",
    c"_Unwind_Resume",
    c"_Unwind_SetGR",
    c"_Unwind_SetIP",
    c"__gcc_personality_v0",
    c"_Unwind_GetCFA",
];

/// Each function's address in the process's unwinder, once found (0 before).
static ADDRESSES: [AtomicUsize; 14] = [const { AtomicUsize::new(0) }; 14];

/// The unwinder's shared library, where the process has not put one in its global scope.
const LIBGCC_S: &CStr = c"libgcc_s.so.1";

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;
const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();

extern "C" {
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void;
    fn abort() -> !;
}

/// Finds and keeps the address of function `index` of [`NAMES`]; called by a forwarder's first
/// call (any thread, any number of times at once: they all find the same address). Aborts the
/// process if there is no unwinder to forward to: the call cannot be carried out, and the caller
/// (an unwinder or a personality routine) has no error path.
extern "C" fn find(index: usize) -> usize {
    let name = NAMES[index];
    // SAFETY: NUL-terminated names; dlopen and dlsym are thread-safe.
    let address = unsafe {
        let mut address = dlsym(RTLD_DEFAULT, name.as_ptr());
        if address.is_null() {
            let mut handle = dlopen(LIBGCC_S.as_ptr(), RTLD_NOW | RTLD_NOLOAD);
            if handle.is_null() {
                handle = dlopen(LIBGCC_S.as_ptr(), RTLD_NOW);
            }
            if !handle.is_null() {
                address = dlsym(handle, name.as_ptr());
            }
        }
        address as usize
    };
    if address == 0 {
        let message = b"libfsprof_agent.so: no unwinder (libgcc_s.so.1) to unwind with\n";
        // SAFETY: `write(2, message)` by a raw system call (not the agent's wrapper), then abort.
        unsafe {
            core::arch::asm!("syscall", inlateout("rax") 1usize => _, in("rdi") 2usize,
                in("rsi") message.as_ptr(), in("rdx") message.len(),
                lateout("rcx") _, lateout("r11") _, options(nostack));
            abort()
        }
    }
    ADDRESSES[index].store(address, Ordering::Release);
    address
}

/// Defines the forwarder `$name` for index `$index` of [`NAMES`]: it jumps to the address found,
/// finding it first if need be (the argument registers saved around [`find`]; none of these
/// functions takes floating-point or stack arguments).
macro_rules! forward {
    ($($index:literal $name:ident,)*) => {$(
        core::arch::global_asm!(
            ".pushsection .text.fsprof_unwinder,\"ax\",@progbits",
            ".p2align 4",
            concat!(".globl ", stringify!($name)),
            concat!(".hidden ", stringify!($name)),
            concat!(".type ", stringify!($name), ", @function"),
            concat!(stringify!($name), ":"),
            ".cfi_startproc",
            concat!("mov rax, qword ptr [rip + {addresses} + 8 * ", stringify!($index), "]"),
            "test rax, rax",
            "jz 2f",
            "jmp rax",
            "2:",
            "push rdi", ".cfi_adjust_cfa_offset 8",
            "push rsi", ".cfi_adjust_cfa_offset 8",
            "push rdx", ".cfi_adjust_cfa_offset 8",
            "push rcx", ".cfi_adjust_cfa_offset 8",
            "push r8", ".cfi_adjust_cfa_offset 8",
            "push r9", ".cfi_adjust_cfa_offset 8",
            "sub rsp, 8", ".cfi_adjust_cfa_offset 8", // the call's 16-byte alignment
            concat!("mov edi, ", stringify!($index)),
            "call {find}",
            "add rsp, 8", ".cfi_adjust_cfa_offset -8",
            "pop r9", ".cfi_adjust_cfa_offset -8",
            "pop r8", ".cfi_adjust_cfa_offset -8",
            "pop rcx", ".cfi_adjust_cfa_offset -8",
            "pop rdx", ".cfi_adjust_cfa_offset -8",
            "pop rsi", ".cfi_adjust_cfa_offset -8",
            "pop rdi", ".cfi_adjust_cfa_offset -8",
            "jmp rax",
            ".cfi_endproc",
            concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
            ".popsection",
            addresses = sym ADDRESSES,
            find = sym find,
        );
    )*};
}

forward! {
    0 _Unwind_Backtrace,
    1 _Unwind_DeleteException,
    2 _Unwind_GetDataRelBase,
    3 _Unwind_GetIP,
    4 _Unwind_GetIPInfo,
    5 _Unwind_GetLanguageSpecificData,
    6 _Unwind_GetRegionStart,
    7 _Unwind_GetTextRelBase,
    8 _Unwind_RaiseException,
    9 _Unwind_Resume,
    10 _Unwind_SetGR,
    11 _Unwind_SetIP,
    12 __gcc_personality_v0,
    13 _Unwind_GetCFA,
}
