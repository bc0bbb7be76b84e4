//! The C ABI of the structured marks (`fsprof.h`): `fsprof_mark_alternative` (an alternative a
//! parser tries) and `fsprof_mark_boundary` (a check at a boundary between two components), the
//! C counterparts of the shim's `Feature::mark_alternative` and `Feature::mark_boundary`, popped
//! by `fsprof_unmark`.
//!
//! As `fsprof_mark`, each is a naked trampoline on x86-64 and aarch64 that passes the caller's
//! stack pointer to its implementation as a fifth argument (see the crate's documentation, "The
//! stack pointer of a mark"); elsewhere, plain functions that record an address in their own
//! frame. Strings are read up to their NUL, at most 4096 bytes each; NULL strings are empty.
//!
//! Not here: the plain marks (`lib.rs`), the built-in features (`builtin.rs`).

use crate::MAX_PAYLOAD;
use fsprof_shim::{abi, raw, Feature};
use std::ffi::c_char;

extern "C" {
    fn strnlen(s: *const c_char, max: usize) -> usize;
}

/// The address and length of `text`, a NUL-terminated string or NULL (empty).
///
/// # Safety
/// `text` is NULL or a NUL-terminated string.
unsafe fn string(text: *const c_char) -> (u64, usize) {
    if text.is_null() {
        return (0, 0);
    }
    // SAFETY: the caller passes a NUL-terminated string; strnlen reads no further.
    (text as u64, unsafe { strnlen(text, MAX_PAYLOAD) })
}

/// `fsprof_mark_alternative` behind its trampoline: `sp` is the caller's stack pointer.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`; `choice` is NULL or a NUL-terminated
/// string.
unsafe extern "C" fn mark_alternative(
    feature: *const Feature,
    choice: *const c_char,
    branch: u32,
    offset: u64,
    sp: u64,
) {
    // SAFETY: non-null features come from `fsprof_feature_new`, which leaks them.
    let Some(feature) = (unsafe { feature.as_ref() }) else {
        return;
    };
    // SAFETY: as documented.
    let (payload, len) = unsafe { string(choice) };
    let extra = Some([branch as u64, 0]);
    raw::push_extended(
        feature,
        abi::KIND_ALTERNATIVE,
        payload,
        len,
        offset,
        sp,
        extra,
    );
}

/// `fsprof_mark_boundary` behind its trampoline: `sp` is the caller's stack pointer.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`; each string is NULL or NUL-terminated.
unsafe extern "C" fn mark_boundary(
    feature: *const Feature,
    value: *const c_char,
    from: *const c_char,
    to: *const c_char,
    sp: u64,
) {
    // SAFETY: as in `mark_alternative`.
    let Some(feature) = (unsafe { feature.as_ref() }) else {
        return;
    };
    // SAFETY: as documented.
    let ((value, value_len), (from, from_len), (to, to_len)) =
        unsafe { (string(value), string(from), string(to)) };
    let extra = Some([to, (from_len as u64) << 32 | to_len as u64]);
    raw::push_extended(
        feature,
        abi::KIND_BOUNDARY,
        value,
        value_len,
        from,
        sp,
        extra,
    );
}

/// Marks an alternative a parser tries: the choice point, which branch (0 the first one tried),
/// the input offset. A naked trampoline: the caller's stack pointer (`rsp + 8`) becomes the
/// fifth argument.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`; `choice` is NULL or a NUL-terminated
/// string that stays valid while it is marked.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark_alternative(
    feature: *const Feature,
    choice: *const c_char,
    branch: u32,
    offset: u64,
) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "lea r8, [rsp + 8]",
        "jmp {imp}",
        ".cfi_endproc",
        imp = sym mark_alternative,
    )
}

/// Marks a check at a boundary between two components: what is checked, the calling side and
/// the called side. A naked trampoline, as `fsprof_mark_alternative`.
///
/// # Safety
/// `feature` is NULL or came from `fsprof_feature_new`; each string is NULL or a NUL-terminated
/// string that stays valid while it is marked.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark_boundary(
    feature: *const Feature,
    value: *const c_char,
    from: *const c_char,
    to: *const c_char,
) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "lea r8, [rsp + 8]",
        "jmp {imp}",
        ".cfi_endproc",
        imp = sym mark_boundary,
    )
}

/// As on x86-64; aarch64's `bl` pushes nothing, so `sp` is the caller's stack pointer.
///
/// # Safety
/// As on x86-64.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark_alternative(
    feature: *const Feature,
    choice: *const c_char,
    branch: u32,
    offset: u64,
) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov x4, sp",
        "b {imp}",
        ".cfi_endproc",
        imp = sym mark_alternative,
    )
}

/// As on x86-64, with the aarch64 trampoline of `fsprof_mark_alternative`.
///
/// # Safety
/// As on x86-64.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark_boundary(
    feature: *const Feature,
    value: *const c_char,
    from: *const c_char,
    to: *const c_char,
) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov x4, sp",
        "b {imp}",
        ".cfi_endproc",
        imp = sym mark_boundary,
    )
}

/// Other architectures: an address in this function's own frame stands in for the caller's
/// stack pointer.
///
/// # Safety
/// As for `mark_alternative`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark_alternative(
    feature: *const Feature,
    choice: *const c_char,
    branch: u32,
    offset: u64,
) {
    let anchor = 0u8;
    let sp = std::hint::black_box(&anchor) as *const u8 as u64;
    // SAFETY: forwarded from our caller.
    unsafe { mark_alternative(feature, choice, branch, offset, sp) }
}

/// Other architectures: as `fsprof_mark_alternative`.
///
/// # Safety
/// As for `mark_boundary`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[no_mangle]
pub unsafe extern "C" fn fsprof_mark_boundary(
    feature: *const Feature,
    value: *const c_char,
    from: *const c_char,
    to: *const c_char,
) {
    let anchor = 0u8;
    let sp = std::hint::black_box(&anchor) as *const u8 as u64;
    // SAFETY: forwarded from our caller.
    unsafe { mark_boundary(feature, value, from, to, sp) }
}
