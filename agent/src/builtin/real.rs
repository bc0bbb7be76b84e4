//! The real libc functions behind the interposed ones, and the small arena that serves
//! allocations while they cannot be known yet.
//!
//! Every real function is found with `dlsym(RTLD_NEXT, ...)` (so that other interposers, a
//! malloc replacement say, keep working), and all of them are found by the agent's constructor
//! ([`resolve_all`]): `dlsym` takes the dynamic loader's lock and is not async-signal-safe, so an
//! interposed call made later (by a signal handler, or by a thread that a thread inside `dlopen`
//! waits for) must never call it. Only calls made before the constructor (the loader's own
//! `malloc`, other libraries' constructors) resolve on first use, and calls of functions this
//! libc lacks (which resolve again, and abort: there is nothing to forward them to).
//!
//! `dlsym` may allocate. While a thread resolves, its own allocations that cannot be forwarded
//! yet come from the arena; other threads are not affected (whether a thread is resolving is
//! kept per thread, in a static-TLS word reached like the shim's thread state). Not here: which
//! functions are interposed, and how (`builtin.rs`).

use core::ffi::{c_char, c_long, c_void};
use core::sync::atomic::{AtomicUsize, Ordering::*};

extern "C" {
    pub(super) fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    pub(super) fn getenv(name: *const c_char) -> *const c_char;
}

pub(super) const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

// The calling thread's count of resolutions in progress: a word of static TLS, reached with the
// initial-exec model (no `__tls_get_addr`, which may allocate). Hidden: the agent's own.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl fsprof_agent_resolving",
    ".hidden fsprof_agent_resolving",
    ".type fsprof_agent_resolving, @object",
    ".size fsprof_agent_resolving, 8",
    "fsprof_agent_resolving:",
    ".zero 8",
    ".popsection",
);

/// The calling thread's count of resolutions in progress.
#[inline(always)]
fn resolving() -> &'static core::cell::Cell<usize> {
    let address: usize;
    // SAFETY: the initial-exec TLS sequence (see the shim's `thread_state.rs`); reads only.
    unsafe {
        core::arch::asm!(
            "mov {0}, qword ptr fs:[0]",
            "add {0}, qword ptr [rip + fsprof_agent_resolving@GOTTPOFF]",
            out(reg) address,
            options(pure, readonly, nostack),
        );
        // The word lives as long as the thread and only this thread touches it ('static is a
        // white lie kept inside this module).
        &*(address as *const core::cell::Cell<usize>)
    }
}

/// Resolves every real function the agent interposes, in the constructor (see the module's
/// documentation); a function this libc lacks stays unresolved.
pub(super) fn resolve_all(groups: &[&[&Real]]) {
    for group in groups {
        for real in group.iter() {
            if real.address.load(Relaxed) == 0 {
                real.address.store(real.lookup(), Relaxed);
            }
        }
    }
}

/// The next definition of a libc function after this library.
pub(super) struct Real {
    pub(super) address: AtomicUsize,
    name: &'static [u8],
}

impl Real {
    pub(super) const fn new(name: &'static [u8]) -> Real {
        Real {
            address: AtomicUsize::new(0),
            name,
        }
    }

    #[inline(always)]
    pub(super) fn get(&self) -> usize {
        match self.address.load(Relaxed) {
            0 => self.resolve(),
            address => address,
        }
    }

    /// The address, or 0 while the calling thread resolves a function and this one is not known
    /// yet (for the allocation functions, which `dlsym` may call).
    #[inline(always)]
    pub(super) fn get_unless_resolving(&self) -> usize {
        match self.address.load(Relaxed) {
            0 if resolving().get() > 0 => 0,
            0 => self.resolve(),
            address => address,
        }
    }

    /// `dlsym`'s answer, 0 if there is none; allocations of this thread meanwhile that cannot
    /// be forwarded come from the arena.
    fn lookup(&self) -> usize {
        let resolving = resolving();
        resolving.set(resolving.get() + 1);
        // SAFETY: `name` is NUL-terminated.
        let address = unsafe { dlsym(RTLD_NEXT, self.name.as_ptr() as *const c_char) } as usize;
        resolving.set(resolving.get() - 1);
        address
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> usize {
        let address = self.lookup();
        if address == 0 {
            missing(self.name);
        }
        self.address.store(address, Relaxed);
        address
    }
}

/// A program called a function that libc does not define: say so and abort (there is nothing
/// to forward the call to).
#[cold]
fn missing(name: &[u8]) -> ! {
    let say = |bytes: &[u8]| {
        // SAFETY: writes a valid buffer to stderr with the raw system call (not our wrapper).
        unsafe { libc_syscall3(1, 2, bytes.as_ptr() as c_long, bytes.len() as c_long) };
    };
    say(b"fsprof agent: no definition of ");
    say(&name[..name.len().saturating_sub(1)]);
    say(b" after libfsprof_agent.so; aborting\n");
    std::process::abort()
}

/// A raw three-argument system call (no libc wrapper, so no interposition).
pub(super) unsafe fn libc_syscall3(number: c_long, a: c_long, b: c_long, c: c_long) -> c_long {
    libc_syscall4(number, a, b, c, 0)
}

/// A raw four-argument system call.
pub(super) unsafe fn libc_syscall4(
    number: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
) -> c_long {
    let ret: c_long;
    core::arch::asm!("syscall", inlateout("rax") number => ret, in("rdi") a, in("rsi") b,
        in("rdx") c, in("r10") d, lateout("rcx") _, lateout("r11") _, options(nostack));
    ret
}

// ---- The bootstrap arena ----------------------------------------------------------------------

pub(super) mod arena {
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    const SIZE: usize = 64 * 1024;
    #[repr(C, align(64))]
    struct Bytes(core::cell::UnsafeCell<[u8; SIZE]>);
    // SAFETY: disjoint pieces are handed out by an atomic bump pointer.
    unsafe impl Sync for Bytes {}
    static ARENA: Bytes = Bytes(core::cell::UnsafeCell::new([0; SIZE]));
    static USED: AtomicUsize = AtomicUsize::new(0);
    /// Each piece is preceded by its size, in the 16 bytes before it.
    const HEADER: usize = 16;

    /// Zeroed memory from the arena (never reused), or null when it is exhausted.
    pub fn alloc(size: usize, align: usize) -> *mut u8 {
        let align = align.max(16);
        let base = ARENA.0.get() as usize;
        let mut used = USED.load(Relaxed);
        loop {
            // Checked: a huge size (or alignment) must fail, not wrap around into the arena.
            let Some((start, end)) = (base + used + HEADER)
                .checked_next_multiple_of(align)
                .and_then(|start| Some((start, start.checked_add(size)?)))
            else {
                return core::ptr::null_mut();
            };
            if end > base + SIZE {
                return core::ptr::null_mut();
            }
            match USED.compare_exchange(used, end - base, Relaxed, Relaxed) {
                Ok(_) => {
                    // SAFETY: [start - HEADER, end) is ours and inside the arena.
                    unsafe { *((start - 8) as *mut usize) = size };
                    return start as *mut u8;
                }
                Err(now) => used = now,
            }
        }
    }

    /// Whether `p` came from the arena.
    pub fn contains(p: *const u8) -> bool {
        let base = ARENA.0.get() as usize;
        (base..base + SIZE).contains(&(p as usize))
    }

    /// The size asked for when `p` (from the arena) was allocated.
    pub fn size_of(p: *const u8) -> usize {
        // SAFETY: pieces are preceded by their size.
        unsafe { *((p as usize - 8) as *const usize) }
    }
}

// ---- Call sites ---------------------------------------------------------------------------------
