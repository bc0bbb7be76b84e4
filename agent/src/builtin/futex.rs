//! `syscall`: futex waits made through it (Rust's std locks, channels, condition variables and
//! parking) are `locks`, or `waiting` where the profiler recognises the runtime's condition
//! variables; other system calls pass through unmarked. During a what-if experiment a futex wake
//! pays the thread's delay first, and a wait is forgiven what accrued meanwhile (`whatif.rs`).

use super::*;

pub(super) mod syscall {
    use super::*;
    pub(crate) static REAL: Real = Real::new(b"syscall\0");
    pub(super) const SYS_FUTEX: c_long = 202;
    pub(super) const SYS_FUTEX_WAITV: c_long = 449;
    pub(super) const FUTEX_CMD_MASK: c_int = !(128 | 256);

    /// Whether a futex call waits: FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET,
    /// FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2 (the trampoline `syscall` checks the same).
    fn waits(number: c_long, op: c_long) -> bool {
        // `op` is an `int` in a variadic call: the upper half of its register is undefined.
        number == SYS_FUTEX_WAITV
            || number == SYS_FUTEX && matches!(op as c_int & FUTEX_CMD_MASK, 0 | 6 | 9 | 11 | 13)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe extern "C-unwind" fn imp(
        number: c_long,
        a1: c_long,
        a2: c_long,
        a3: c_long,
        a4: c_long,
        a5: c_long,
        a6: c_long,
        caller: Caller,
    ) -> c_long {
        let real: unsafe extern "C" fn(
            c_long,
            c_long,
            c_long,
            c_long,
            c_long,
            c_long,
            c_long,
        ) -> c_long = core::mem::transmute::<usize, _>(REAL.get());
        let waits = waits(number, a2);
        // A futex wake, here only during a what-if experiment: pay before waking.
        let waking = if waits {
            None
        } else {
            super::whatif::wake_start()
        };
        let _marked = if waits {
            enter(LOCKS, caller, false)
        } else {
            None
        };
        let waited = if waits {
            super::whatif::block_start()
        } else {
            None
        };
        let result = real(number, a1, a2, a3, a4, a5, a6);
        super::whatif::block_end(waited);
        super::whatif::wake_end(waking);
        result
    }
}

/// Interposed `syscall` (variadic in C; up to six arguments after the number, the last on the
/// stack): marks futex waits under `locks`, forwards everything else unmarked.
///
/// Everything but a futex wait (`syscall::waits`, which `imp` checks again) goes straight to the
/// real function once it is known, with a jump: no frame of ours, so no `ret` after the system
/// call (a futex wake, which Rust's locks make on each contended unlock, cost about 8 ns more
/// through `imp` on a host where such a `ret` is mispredicted).
///
/// # Safety
/// As libc's `syscall`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn syscall(number: c_long) -> c_long {
    // At entry [rsp] is the return address and [rsp + 8] the sixth argument after the number.
    // The call to `imp` needs, at rsp (16-aligned), that argument and then the `Caller`: the
    // entry stack pointer and rbp.
    core::arch::naked_asm!(
        ".cfi_startproc",
        "cmp rdi, {futex_waitv}",
        "je 3f",
        "cmp rdi, {futex}",
        "jne 2f",
        // The futex operation (the second argument after the number, an `int`: the register's
        // upper half is undefined) without its flags.
        "mov r11d, edx",
        "and r11d, {cmd_mask}",
        "cmp r11d, 0",
        "je 3f",
        "cmp r11d, 6",
        "je 3f",
        "cmp r11d, 9",
        "je 3f",
        "cmp r11d, 11",
        "je 3f",
        "cmp r11d, 13",
        "je 3f",
        // Another futex operation (a wake): through `imp` during a what-if experiment.
        "cmp byte ptr [rip + {whatif}], 0",
        "jne 3f",
        "2:",
        "mov r11, [rip + {real} + {address}]",
        "test r11, r11",
        "jz 3f",
        "jmp r11",
        "3:",
        "push rbp",
        ".cfi_adjust_cfa_offset 8",
        "lea r11, [rsp + 8]",
        "push r11",
        ".cfi_adjust_cfa_offset 8",
        "push qword ptr [rsp + 24]",
        ".cfi_adjust_cfa_offset 8",
        "call {imp}",
        "add rsp, 24",
        ".cfi_adjust_cfa_offset -24",
        "ret",
        ".cfi_endproc",
        futex = const syscall::SYS_FUTEX,
        futex_waitv = const syscall::SYS_FUTEX_WAITV,
        cmd_mask = const syscall::FUTEX_CMD_MASK,
        real = sym syscall::REAL,
        address = const core::mem::offset_of!(Real, address),
        imp = sym syscall::imp,
        whatif = sym super::whatif::ON,
    )
}
