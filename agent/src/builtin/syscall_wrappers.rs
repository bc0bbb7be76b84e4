//! The trampolines of the system-call wrappers (`write`, `read`, `open`, `poll`, ...): how a mark
//! is kept around a real function that returns right after a system call, at the cost of no
//! extra `ret` after it.
//!
//! An interposer that calls the real function and then returns adds one `ret` after the system
//! call. Where the kernel leaves the return stack buffer useless for user space after each
//! system call (AMD's SRSO "Safe RET" mitigation), that `ret` is always mispredicted: about
//! 7 ns on a 130 ns `write` (BENCHMARKS.md, "Agent: cost of an interposed libc call"). Any `ret`
//! whose `call` came before the system call is; one whose `call` came after it is not.
//!
//! So the trampoline (an exported naked function, one per wrapper) is a frame of its own:
//! 1. it saves the argument registers and calls [`enter`] (before the system call: calls and
//!    returns are predicted), which resolves the real function and pushes the mark, keeping what
//!    the pop needs (the mark's token) in the trampoline's frame;
//! 2. unmarked (nested under another built-in mark, the agent not ready or off), it restores the
//!    arguments and jumps to the real function, which returns straight to the caller;
//! 3. marked, it calls the real function. Where returns are mispredicted after system calls it
//!    instead pushes the return address itself and jumps, so that the real function's `ret`
//!    pops the caller's entry of the return stack buffer (mispredicted, as without the agent);
//! 4. after the real function it pops the mark itself, in a few instructions and no call
//!    (`fsprof_shim::raw::assembly_pop`: calling [`leave`] there cost about 1.5 ns more), and
//!    returns to the caller: with `ret`, or, where returns are mispredicted, with `pop; jmp`,
//!    which the indirect-branch predictor predicts. The return stack buffer stays balanced
//!    either way: a CPU whose buffer survives system calls (most Intel ones) keeps the `call`
//!    and `ret` forms, where they cost nothing.
//!
//! Which form is used is decided once, in the constructor: the `jump` form where
//! `/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow` mentions "Safe RET", else the
//! `ret` form; `FSPROF_AGENT_RETURN=jump` or `=ret` overrides it (for benchmarks and tests).
//!
//! The frame has ordinary call-frame information (debuggers and the profiler unwind through it;
//! the jump form's return address is the same instruction as the call form's) and a cleanup
//! landing pad (C's personality routine, `__gcc_personality_v0`), so that a thread cancelled
//! inside the real function (`pthread_cancel` of a blocked `read`) pops its mark.
//!
//! Not here: the wrappers that take stack arguments (`syscall`) or are not system-call wrappers
//! (stdio, allocation, locks): those keep the Rust implementations of `builtin.rs`.

use super::{enter_fast, Caller, Entry, Real, HOT};
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use fsprof_shim::raw::CallSiteMark;

/// What the trampoline keeps in its frame between [`enter`] and [`leave`] (24 bytes there):
/// the mark, written by [`enter`] when it marks, and read only then.
pub(super) type Token = core::mem::MaybeUninit<CallSiteMark>;

const _: () = assert!(core::mem::size_of::<Token>() <= 24);
const _: () = assert!(core::mem::align_of::<Token>() <= 8);

/// [`enter`]'s result, in `rax` and `rdx`.
#[repr(C)]
pub(super) struct Entered {
    /// The real function's address.
    real: usize,
    /// Nonzero when a mark was pushed (its token written): the trampoline must pop it.
    marked: usize,
}

/// Added to the feature number of the `exec` functions: not marked in a `vfork` child. Such a
/// child runs in its parent's memory, thread-locals included, until it execs: a mark pushed
/// there would land in the parent thread's slot, and a successful exec never pops it (Python's
/// `subprocess` left its parent marked `process` for good that way). A child made by `fork` is
/// not marked either: it is not profiled.
pub(super) const UNLESS_CHILD: usize = 1 << 8;

/// The process's id, from the constructor (0 before it).
static PID: AtomicU32 = AtomicU32::new(0);

/// Remembers the process's id; called by the constructor.
pub(super) fn remember_pid() {
    PID.store(getpid(), Relaxed);
}

/// The calling process's id, from the kernel (not a cache a `vfork` child would share).
fn getpid() -> u32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { super::libc_syscall3(39, 0, 0, 0) as u32 }
}

/// Called by a trampoline before the real function: resolves it, and marks `feature` with the
/// caller's call site unless the call is nested or the agent not ready. Never claims a slot
/// (signal handlers call these functions).
///
/// # Safety
/// `token` points to writable memory for a [`Token`] that lives until [`leave`].
pub(super) unsafe extern "C" fn enter(
    feature: usize,
    real: &'static Real,
    caller: Caller,
    token: *mut Token,
) -> Entered {
    let entered = enter_marking(feature, real, caller, token);
    if !super::whatif::active() {
        return entered;
    }
    let wrap = match feature & !UNLESS_CHILD {
        super::OUTPUT => super::whatif::Wrap::Pay,
        super::INPUT | super::POLL => super::whatif::Wrap::Wait,
        _ => return entered,
    };
    Entered {
        real: super::whatif::wrap(wrap, entered.real),
        ..entered
    }
}

/// [`enter`] without what-if experiments.
unsafe fn enter_marking(
    feature: usize,
    real: &'static Real,
    caller: Caller,
    token: *mut Token,
) -> Entered {
    if feature & UNLESS_CHILD != 0 {
        if getpid() != PID.load(Relaxed) {
            return Entered {
                real: real.get(),
                marked: 0,
            };
        }
        return enter_marking(feature & !UNLESS_CHILD, real, caller, token);
    }
    let address = real.address.load(Relaxed);
    if address != 0 {
        match enter_fast(feature, caller, false) {
            Entry::Marked(marked) => {
                token.write(core::mem::MaybeUninit::new(marked.keep()));
                return Entered {
                    real: address,
                    marked: 1,
                };
            }
            Entry::Unmarked => {
                return Entered {
                    real: address,
                    marked: 0,
                }
            }
            Entry::Slow => {}
        }
    }
    enter_slow(feature, real, caller, token)
}

#[cold]
#[inline(never)]
unsafe fn enter_slow(
    feature: usize,
    real: &'static Real,
    caller: Caller,
    token: *mut Token,
) -> Entered {
    super::count_slow_entry();
    let address = real.get();
    match super::enter(feature, caller, false) {
        Some(marked) => {
            token.write(core::mem::MaybeUninit::new(marked.keep()));
            Entered {
                real: address,
                marked: 1,
            }
        }
        None => Entered {
            real: address,
            marked: 0,
        },
    }
}

/// Called by a trampoline's landing pad when the real function unwinds (a cancelled thread):
/// pops the mark [`enter`] pushed. (After a return the trampoline pops it inline, the same way.)
///
/// # Safety
/// `token` is the one [`enter`] wrote, on the same thread.
pub(super) unsafe extern "C" fn leave(token: *const Token) {
    (*token).assume_init().pop();
}

/// Chooses the trampolines' return form (see the module's documentation); called by the
/// constructor before the agent is ready.
pub(super) fn choose_return_form() {
    let jump = match super::environment(c"FSPROF_AGENT_RETURN") {
        Some(b"jump") => true,
        Some(b"ret") => false,
        _ => returns_mispredicted_after_system_calls(),
    };
    HOT.return_by_jump.store(jump, Relaxed);
}

/// Whether the kernel reports the SRSO "Safe RET" mitigation, which leaves the return stack
/// buffer useless for user space after each system call.
fn returns_mispredicted_after_system_calls() -> bool {
    let mut buffer = [0u8; 256];
    let length = super::read_file(
        c"/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow",
        &mut buffer,
    );
    buffer[..length].windows(8).any(|w| w == b"Safe RET")
}

extern "C" {
    pub(super) fn _Unwind_Resume(exception: *mut core::ffi::c_void) -> !;
}

// The personality routine's address, for the trampolines' `.cfi_personality` (indirect, as the
// `.eh_frame` section is read-only: the loader fills this word).
core::arch::global_asm!(
    ".pushsection .data.rel.ro.fsprof_agent_personality,\"aw\",@progbits",
    ".p2align 3",
    ".globl fsprof_agent_personality",
    ".hidden fsprof_agent_personality",
    ".type fsprof_agent_personality, @object",
    ".size fsprof_agent_personality, 8",
    "fsprof_agent_personality:",
    ".quad __gcc_personality_v0",
    ".popsection",
);

/// The instructions that save the argument registers while `enter` runs, and restore them:
/// all six and `rax` (the vector count of a variadic call), or, for functions of at most three
/// arguments, those three and `rax` (four instructions fewer on every call).
macro_rules! save_registers {
    (7) => {
        concat!(
            "push rdi\n.cfi_adjust_cfa_offset 8\n",
            "push rsi\n.cfi_adjust_cfa_offset 8\n",
            "push rdx\n.cfi_adjust_cfa_offset 8\n",
            "push rcx\n.cfi_adjust_cfa_offset 8\n",
            "push r8\n.cfi_adjust_cfa_offset 8\n",
            "push r9\n.cfi_adjust_cfa_offset 8\n",
            "push rax\n.cfi_adjust_cfa_offset 8\n",
            "sub rsp, 8\n.cfi_adjust_cfa_offset 8\n", // padding: see `interpose_syscall`
        )
    };
    (4) => {
        concat!(
            "push rdi\n.cfi_adjust_cfa_offset 8\n",
            "push rsi\n.cfi_adjust_cfa_offset 8\n",
            "push rdx\n.cfi_adjust_cfa_offset 8\n",
            "push rax\n.cfi_adjust_cfa_offset 8\n",
        )
    };
}
pub(super) use save_registers;

/// See [`save_registers`].
macro_rules! restore_registers {
    (7) => {
        concat!(
            "add rsp, 8\n.cfi_adjust_cfa_offset -8\n",
            "pop rax\n.cfi_adjust_cfa_offset -8\n",
            "pop r9\n.cfi_adjust_cfa_offset -8\n",
            "pop r8\n.cfi_adjust_cfa_offset -8\n",
            "pop rcx\n.cfi_adjust_cfa_offset -8\n",
            "pop rdx\n.cfi_adjust_cfa_offset -8\n",
            "pop rsi\n.cfi_adjust_cfa_offset -8\n",
            "pop rdi\n.cfi_adjust_cfa_offset -8\n",
        )
    };
    (4) => {
        concat!(
            "pop rax\n.cfi_adjust_cfa_offset -8\n",
            "pop rdx\n.cfi_adjust_cfa_offset -8\n",
            "pop rsi\n.cfi_adjust_cfa_offset -8\n",
            "pop rdi\n.cfi_adjust_cfa_offset -8\n",
        )
    };
}
pub(super) use restore_registers;

/// Interposes system-call wrappers of up to six register arguments: an exported trampoline
/// `name` that marks `feature` around the real function (see the module's documentation).
/// `registers`: how many registers are saved while `enter` runs (see [`save_registers`]): 4 for
/// functions of at most three arguments, else 7.
///
/// The frame, from the entry stack pointer E (where the caller's return address is): the token
/// at E-24..E; while `enter` runs, the saved registers below it and, for an odd count, a word of
/// padding (calls need rsp 16-aligned: it is E-88 (7 registers) or E-56 (4) before `enter`'s
/// call, E-24 before the real function's, E-40 before the landing pad's call of `leave`).
/// Labels: 22 the start, 23..24 the real call (the landing pad's range), 25 the landing pad, 26
/// marked, 27 the call form, 28 the jump form's return, 29 after the inline pop, 30..31 the
/// LSDA's call-site table.
///
/// Only for functions whose arguments are all in registers and whose result is in `rax` (the
/// inline pop changes `rcx`, `rdx` and `r10`).
macro_rules! interpose_syscall {
    (list $list:ident; registers $registers:tt; $($feature:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            pub(super) static REAL: super::Real =
                super::Real::new(concat!(stringify!($name), "\0").as_bytes());
        }

        /// Interposed: see the module's documentation.
        ///
        /// # Safety
        /// As the libc function of this name.
        #[unsafe(naked)]
        #[no_mangle]
        #[allow(named_asm_labels)] // the LSDA's: a naked function is emitted once
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                ".cfi_startproc",
                ".cfi_personality 0x9b, fsprof_agent_personality",
                concat!(".cfi_lsda 0x1b, .Lfsprof_lsda_", stringify!($name)),
                ".p2align 6",
                "22:",
                "sub rsp, 24",
                ".cfi_adjust_cfa_offset 24",
                save_registers!($registers),
                "mov edi, {feature}",
                "lea rsi, [rip + {real}]",
                "lea rdx, [rsp + {caller}]",
                "mov rcx, rbp",
                "lea r8, [rsp + {token}]",
                "call {enter}",
                "mov r11, rax",
                "mov r10, rdx",
                restore_registers!($registers),
                "test r10, r10",
                "jnz 26f",
                // Unmarked: the real function returns to the caller.
                "add rsp, 24",
                ".cfi_adjust_cfa_offset -24",
                "jmp r11",
                ".cfi_adjust_cfa_offset 24",
                "26:",
                "test byte ptr [rip + {hot} + {jump_offset}], 1",
                "jz 27f",
                "lea r10, [rip + 24f]",
                "push r10",
                ".cfi_adjust_cfa_offset 8",
                "23:",
                "jmp r11",
                ".cfi_adjust_cfa_offset -8",
                "27:",
                "call r11",
                "24:",
                ".cfi_remember_state",
                // Pops the mark as `leave` would, without calling it (`raw::assembly_pop`).
                "mov r10, qword ptr [rip + {state}@GOTTPOFF]",
                "mov rcx, qword ptr fs:[r10 + {state_slot}]",
                "cmp rcx, qword ptr [rsp + {mark_slot}]",
                "jne 29f",
                "mov edx, dword ptr [rsp + {mark_index}]",
                "lea r10d, [rdx + 1]",
                "cmp dword ptr [rcx + {slot_depth}], r10d",
                "jne 29f",
                "mov dword ptr [rcx + {slot_depth}], edx",
                "29:",
                "add rsp, 24",
                ".cfi_adjust_cfa_offset -24",
                "test byte ptr [rip + {hot} + {jump_offset}], 1",
                "jnz 28f",
                "ret",
                "28:",
                "pop rcx",
                ".cfi_adjust_cfa_offset -8",
                ".cfi_register rip, rcx",
                "jmp rcx",
                // The landing pad: rsp as at the real call, rax the exception.
                // (Absolute offsets from here: the assembler's running offset does not follow
                // `.cfi_restore_state`.)
                ".cfi_restore_state",
                "25:",
                "push rax",
                ".cfi_def_cfa_offset 40",
                "sub rsp, 8",
                ".cfi_def_cfa_offset 48",
                "lea rdi, [rsp + 16]",
                "call {leave}",
                "add rsp, 8",
                ".cfi_def_cfa_offset 40",
                "pop rdi",
                ".cfi_def_cfa_offset 32",
                "call {resume}",
                "ud2",
                ".cfi_endproc",
                // The LSDA: no type table; one call-site entry, the real call, whose landing
                // pad only cleans up (action 0).
                ".pushsection .gcc_except_table,\"a\",@progbits",
                concat!(".Lfsprof_lsda_", stringify!($name), ":"),
                ".byte 0xff",
                ".byte 0xff",
                ".byte 0x01",
                ".uleb128 31f - 30f",
                "30:",
                ".uleb128 23b - 22b",
                ".uleb128 24b - 23b",
                ".uleb128 25b - 22b",
                ".uleb128 0",
                "31:",
                ".popsection",
                feature = const $feature,
                caller = const 24 + 8 * $registers + 8 * ($registers % 2),
                token = const 8 * $registers + 8 * ($registers % 2),
                real = sym $name::REAL,
                hot = sym HOT,
                jump_offset = const core::mem::offset_of!(Hot, return_by_jump),
                enter = sym syscall_wrappers::enter,
                leave = sym syscall_wrappers::leave,
                state = sym fsprof_shim::raw::assembly_pop::THREAD_STATE,
                state_slot = const fsprof_shim::raw::assembly_pop::STATE_SLOT,
                mark_slot = const fsprof_shim::raw::assembly_pop::MARK_SLOT,
                mark_index = const fsprof_shim::raw::assembly_pop::MARK_INDEX,
                slot_depth = const fsprof_shim::raw::assembly_pop::SLOT_DEPTH,
                resume = sym syscall_wrappers::_Unwind_Resume,
            )
        }
    )*
    };
}
pub(super) use interpose_syscall;
