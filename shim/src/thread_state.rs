//! Where each thread's marking state lives, and how a mark reaches it without a function call.
//!
//! Rust's `thread_local!` in a shared library (the agent is one) uses the general-dynamic TLS
//! model: every access calls `__tls_get_addr`. Around a system call (an interposed `write`) that
//! call cost about 8 ns of the agent's 16 (BENCHMARKS.md, "Agent: cost of an interposed libc
//! call"). So on x86-64 Linux the state is a block declared in assembly in `.tbss` and reached
//! with the initial-exec model: the thread pointer plus an offset the dynamic loader puts in the
//! GOT (the linker turns it into a constant in an executable). A library with initial-exec TLS
//! gets its block in the static TLS area: always when it is linked or preloaded; with `dlopen`,
//! from glibc's surplus (hundreds of bytes; this block is 32). Elsewhere, `thread_local!`.
//!
//! The block's symbol is global (every crate that inlines a mark refers to it) but hidden (not
//! exported from the module), and its name carries this crate's version: two semver-incompatible
//! copies of the shim linked into one program (which cargo allows) each get a block of their
//! own, instead of sharing one (without LTO) or failing to link (with it).
//!
//! What the fields mean, and every rule about them, is `region.rs`'s business.

use core::cell::Cell;

use crate::abi::Slot;

/// Per-thread state. Valid when all zero (the `.tbss` block starts so), never dropped.
#[repr(C)]
pub(crate) struct ThreadState {
    /// This thread's slot, null until claimed (and after release or fork).
    pub(crate) slot: Cell<*mut Slot>,
    /// Push counter, advanced by two per push; the value after a push tags its record, so a
    /// stale guard cannot pop a newer mark. On targets other than x86-64 it is odd while the
    /// thread is inside `push` (see `stack::push`); on x86-64, odd from the thread's claim on
    /// in a what-if run's process with a progress point (see `progress.rs`).
    pub(crate) serial: Cell<u64>,
    /// The stack pointer of this thread's latest push, written before the push makes its slot's
    /// `seq` odd: while `seq` is odd, where the push in progress is (see `stack::jumping_to`).
    pub(crate) push_sp: Cell<u64>,
    /// Set when this thread must not claim a slot again (its destructors are running).
    pub(crate) exiting: Cell<bool>,
    /// Set while this thread claims its slot, so that a signal handler interrupting the claim
    /// and marking does not claim a second slot.
    pub(crate) claiming: Cell<bool>,
    /// Set by the `fork` prepare handler until the parent or child handler: the slot is hidden
    /// (`slot` null, its index in `hidden`) and must not be claimed again.
    pub(crate) forking: Cell<bool>,
    /// While `forking`: one more than the hidden slot's index (0: none).
    pub(crate) hidden: Cell<u32>,
    /// This thread's labels published for the fleet's profilers (`fleet.rs`): null until its
    /// first slot is claimed with publishing on.
    #[cfg(all(feature = "fleet", target_arch = "x86_64", target_os = "linux"))]
    pub(crate) fleet: Cell<*mut crate::fleet::Published>,
}

/// Runs `f` on the calling thread's state; `None` where the state is gone (only with
/// `thread_local!`, during the thread's last destructors).
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    imp::with(f)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use imp::BLOCK;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::ThreadState;

    const _: () = assert!(core::mem::align_of::<ThreadState>() <= 8);

    /// The block's symbol: versioned, see the module's documentation.
    macro_rules! block {
        () => {
            versioned!("fsprof_shim_thread_state")
        };
    }

    // The symbol is hidden: each module that links the shim (a program and the agent it
    // preloads, say) has its own block.
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        concat!(".globl ", block!()),
        concat!(".hidden ", block!()),
        concat!(".type ", block!(), ", @object"),
        concat!(".size ", block!(), ", {size}"),
        concat!(block!(), ":"),
        ".zero {size}",
        ".popsection",
        size = const core::mem::size_of::<ThreadState>(),
    );

    extern "C" {
        /// The block, for a `sym` operand of assembly that reaches it itself (the agent's
        /// trampolines: see `raw::assembly_pop`).
        /// Declared as a word: only its address is used.
        #[link_name = block!()]
        pub static BLOCK: u64;
    }

    #[inline(always)]
    pub(super) fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
        let address: usize;
        // SAFETY: the initial-exec sequence of the x86-64 TLS ABI: %fs:0 holds the thread
        // pointer, and the GOT entry the offset of this module's block from it. Reads only.
        unsafe {
            core::arch::asm!(
                "mov {0}, qword ptr fs:[0]",
                concat!("add {0}, qword ptr [rip + ", block!(), "@GOTTPOFF]"),
                out(reg) address,
                options(pure, readonly, nostack),
            );
        }
        // SAFETY: the block lives as long as the thread, is only touched by this thread, is
        // aligned (`.p2align 3`), and all-zero is a valid ThreadState.
        Some(f(unsafe { &*(address as *const ThreadState) }))
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::ThreadState;
    use core::cell::Cell;
    use core::ptr::null_mut;

    thread_local! {
        // `const` initialised and without `Drop`: an access never registers a destructor.
        static STATE: ThreadState = const {
            ThreadState {
                slot: Cell::new(null_mut()),
                serial: Cell::new(0),
                push_sp: Cell::new(0),
                exiting: Cell::new(false),
                claiming: Cell::new(false),
                forking: Cell::new(false),
                hidden: Cell::new(0),
            }
        };
    }

    #[inline(always)]
    pub(super) fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
        STATE.try_with(f).ok()
    }
}
