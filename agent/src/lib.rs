//! `libfsprof_agent.so`: the C ABI of fsprof's feature marks, declared in `include/fsprof.h`, so
//! that C, C++ and any language with a C FFI can mark features the way Rust code does with
//! `fsprof-shim` (whose region, and so whose profiler, it shares).
//!
//! ```c
//! static const fsprof_feature *parsing;
//! parsing = fsprof_feature_new("parsing");   // once: interned, the same name gives the same pointer
//! fsprof_mark(parsing, "statement");         // instance: a string that outlives the mark
//! fsprof_antimark(parsing);                  // user callback: not parsing's cost
//! fsprof_unmark();                           // pops the antimark
//! fsprof_unmark();                           // pops the mark
//! fsprof_mark(parsing, NULL);                // instance: this call site (a return address)
//! fsprof_unmark();
//! fsprof_mark_alternative(parsing, "item", 1, offset); // a parser's branch 1 of "item" at offset
//! fsprof_unmark();
//! fsprof_mark_boundary(checks, "positive?", "client", "matrix"); // a check between components
//! fsprof_unmark();
//! ```
//!
//! Loaded at start-up (`fsprof run` preloads it with `LD_PRELOAD`; a program may also link it),
//! it also marks the runtime's own features by interposing libc: output, input, allocation,
//! locks, sleep, poll, process and files (see [`builtin`], x86-64 Linux only). The profiler
//! symbolizes call-site instances as `function (file:line)`.
//!
//! # Contract
//! * `fsprof_unmark` pops the calling thread's innermost mark or antimark, whoever pushed it (a C
//!   mark or a Rust guard of the same process's shim copy); on an empty stack it does nothing.
//!   Pairing is the caller's business: an extra unmark pops an enclosing mark.
//! * Marking with a NULL feature (what `fsprof_feature_new(NULL)` returns) records nothing; its
//!   matching unmark then pops the enclosing mark, if any.
//! * Marks, antimarks and unmarks are as cheap and as async-signal-safe as the shim's (no
//!   allocation, lock or syscall after a thread's first mark, which must happen outside a signal
//!   handler; see the shim's guarantees for the one exception, after a jump out of a push).
//!   `fsprof_feature_new` allocates and locks: call it outside signal handlers.
//! * A signal handler may `siglongjmp` out of a mark, even one interrupted halfway: the agent
//!   interposes `longjmp` and `siglongjmp` and closes the push the jump leaves
//!   (`builtin/jumps.rs`; x86-64 Linux).
//! * A payload string must stay valid and unchanged while the profiler may still read it (string
//!   literals are ideal); the first 4096 bytes at most are recorded.
//!
//! # Panic policy
//! No exported function unwinds into C. `fsprof_feature_new` catches any panic and returns NULL;
//! the mark functions only call the shim's push and pop, which never panic (and an `extern "C"`
//! function that did would abort, not unwind).
//!
//! # The stack pointer of a mark
//! The profiler places a mark among native frames by the stack pointer recorded with it, which
//! must be the stack pointer of the function that marks, not of an agent function it called (whose
//! frame lies below it). So on x86-64 and aarch64 `fsprof_mark` and `fsprof_antimark` are
//! two-instruction assembly trampolines: they put the caller's stack pointer and the return address
//! in the next argument registers and tail-jump to the Rust implementation, which returns straight
//! to the caller. On x86-64 the caller's stack pointer (its value at the `call`) is `rsp + 8` at
//! the trampoline's first instruction, `call` having pushed the return address; on aarch64 `bl`
//! pushes nothing, so it is `sp` itself, and the return address is in `x30`. Elsewhere the
//! functions are plain Rust and record an address in their own frame, a little below the caller's
//! (marks may then be placed one frame too deep).
//!
//! The trampolines are naked functions (Rust 1.88, hence this crate's `rust-version`): unlike
//! `global_asm!` symbols, which a `cdylib`'s version script hides, they are exported like any
//! `#[no_mangle]` function.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod builtin;
mod structured;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod unwinder;

use fsprof_shim::{abi, raw, Feature};
use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::ptr::null;
use std::sync::Mutex;

/// Longest payload string recorded, in bytes.
pub(crate) const MAX_PAYLOAD: usize = 4096;

extern "C" {
    fn strnlen(s: *const c_char, max: usize) -> usize;
}

/// Returns the feature named `name` (lossily decoded as UTF-8), the same pointer for the same name,
/// valid until the process exits; NULL for a NULL name (or if interning panicked).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fsprof_feature_new(name: *const c_char) -> *const Feature {
    if name.is_null() {
        return null();
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    std::panic::catch_unwind(|| intern_feature(bytes)).unwrap_or(null())
}

/// The interned descriptor for `bytes`. Descriptors and names are leaked: features are few.
fn intern_feature(bytes: &[u8]) -> *const Feature {
    static FEATURES: Mutex<BTreeMap<Vec<u8>, &'static Feature>> = Mutex::new(BTreeMap::new());
    let mut features = FEATURES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(feature) = features.get(bytes) {
        return *feature;
    }
    let name: &'static str =
        Box::leak(String::from_utf8_lossy(bytes).into_owned().into_boxed_str());
    let feature: &'static Feature = Box::leak(Box::new(Feature::new(name)));
    features.insert(bytes.to_vec(), feature);
    feature
}

/// `fsprof_mark` behind its trampoline: `sp` is the caller's stack pointer, `return_address` the
/// caller's call site.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`; `payload` is NULL or a NUL-terminated
/// string.
unsafe extern "C" fn mark(
    feature: *const Feature,
    payload: *const c_char,
    sp: u64,
    return_address: u64,
) {
    // SAFETY: non-null features come from `fsprof_feature_new`, which leaks them.
    let Some(feature) = (unsafe { feature.as_ref() }) else {
        return;
    };
    if payload.is_null() {
        raw::push(feature, abi::KIND_CALL_SITE, return_address, 0, 0, sp);
    } else {
        // SAFETY: the caller passes a NUL-terminated string; strnlen reads no further.
        let len = unsafe { strnlen(payload, MAX_PAYLOAD) };
        raw::push(feature, abi::KIND_NAME, payload as u64, len, 0, sp);
    }
}

/// `fsprof_antimark` behind its trampoline: `sp` is the caller's stack pointer.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`.
unsafe extern "C" fn antimark(feature: *const Feature, sp: u64) {
    // SAFETY: as in `mark`.
    if let Some(feature) = unsafe { feature.as_ref() } {
        raw::push(feature, abi::KIND_ANTIMARK, 0, 0, 0, sp);
    }
}

/// Pops the calling thread's innermost mark or antimark; does nothing if it has none.
#[no_mangle]
pub extern "C" fn fsprof_unmark() {
    raw::pop_innermost();
}

/// Marks the calling thread as running `feature`, instance `payload` (NULL: the call site).
///
/// A naked trampoline. x86-64: at its first instruction `[rsp]` holds the return address the
/// caller's `call` pushed, so the caller's stack pointer is `rsp + 8`; they become the third and
/// fourth arguments (rdx, rcx) of `mark`, and `jmp` leaves the return address on the stack, so
/// `mark` returns straight to the caller. The CFI is the default entry state (CFA = rsp + 8), so
/// an unwinder stopping here sees a frameless
/// function (the `.cfi_*` directives give the trampoline an FDE; naked functions get none).
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`; `payload` is NULL or a NUL-terminated
/// string that stays valid while it is marked.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark(feature: *const Feature, payload: *const c_char) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "lea rdx, [rsp + 8]",
        "mov rcx, [rsp]",
        "jmp {mark}",
        ".cfi_endproc",
        mark = sym mark,
    )
}

/// Stops attributing time to `feature` until the matching `fsprof_unmark`.
///
/// A naked trampoline, as `fsprof_mark`: the caller's stack pointer becomes the second argument.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_antimark(feature: *const Feature) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "lea rsi, [rsp + 8]",
        "jmp {antimark}",
        ".cfi_endproc",
        antimark = sym antimark,
    )
}

/// As on x86-64. aarch64: `bl` pushes nothing, so `sp` is the caller's stack pointer and `x30`
/// its return address; `b` leaves `x30` alone, so `mark` returns straight to the caller.
///
/// # Safety
/// As on x86-64.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark(feature: *const Feature, payload: *const c_char) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov x2, sp",
        "mov x3, x30",
        "b {mark}",
        ".cfi_endproc",
        mark = sym mark,
    )
}

/// As on x86-64, with the aarch64 trampoline of `fsprof_mark`.
///
/// # Safety
/// As on x86-64.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_antimark(feature: *const Feature) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov x1, sp",
        "b {antimark}",
        ".cfi_endproc",
        antimark = sym antimark,
    )
}

/// Other architectures: an address in this function's own frame stands in for the caller's
/// stack pointer, and the call site is not known (recorded as 0).
///
/// # Safety
/// As for `mark`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark(feature: *const Feature, payload: *const c_char) {
    let anchor = 0u8;
    let sp = std::hint::black_box(&anchor) as *const u8 as u64;
    // SAFETY: forwarded from our caller.
    unsafe { mark(feature, payload, sp, 0) }
}

/// Other architectures: as `fsprof_mark`.
///
/// # Safety
/// As for `antimark`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[no_mangle]
pub unsafe extern "C" fn fsprof_antimark(feature: *const Feature) {
    let anchor = 0u8;
    let sp = std::hint::black_box(&anchor) as *const u8 as u64;
    // SAFETY: forwarded from our caller.
    unsafe { antimark(feature, sp) }
}
