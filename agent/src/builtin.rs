//! The built-in features: when `libfsprof_agent.so` is loaded at start-up (`fsprof run` preloads
//! it with `LD_PRELOAD`, or a program links it), it interposes libc and marks the runtime's own
//! features around each call, the native counterpart of the paper's built-in output, sequence and
//! keyword-protocol features. Feature names are fixed (see [`BUILTIN_NAMES`]):
//!
//! * `output`: write, writev, pwrite*, send, sendto, sendmsg, sendmmsg, and the stdio calls
//!   that end in them (fwrite, fputs, puts, fputc, putc, putchar, fflush, printf, fprintf,
//!   dprintf and their `v`, `_unlocked` and `_chk` forms, and `__overflow` behind inlined `putc`);
//! * `input`: read, readv, pread*, recv, recvfrom, recvmsg, recvmmsg, and stdio's fread, fgets,
//!   fgetc, getc, getline, getdelim (and `__uflow`/`__underflow` behind inlined `getc`);
//! * `allocation`: malloc, calloc, realloc, reallocarray, free, posix_memalign,
//!   aligned_alloc, memalign;
//! * `locks`: *waiting* in pthread mutexes and rwlocks (an uncontended lock is taken with the
//!   `try` form first and not marked), and futex waits made through `syscall` (Rust's std
//!   locks, but also its channels, condition variables and parking, which a futex wait cannot
//!   tell apart from a lock);
//! * `waiting`: condition-variable waits (pthread_cond_wait, timedwait, clockwait), POSIX
//!   semaphore waits and barrier waits: a thread waiting for another to signal it (for work,
//!   say), not lock contention;
//! * `sleep`: nanosleep, clock_nanosleep, usleep, sleep; `poll`: poll, ppoll, select, pselect,
//!   epoll_wait, epoll_pwait;
//! * `process`: fork, posix_spawn, posix_spawnp, execve, execveat, execv, execvp, execvpe,
//!   system, wait, waitpid, waitid, wait3, wait4;
//! * `files`: open, open64, openat, openat64, creat, fopen, fopen64, stat, lstat, fstat,
//!   fstatat, statx (and the `64` forms), fsync, fdatasync.
//!
//! Each mark's instance is its call site: the return address of the interposed call (a
//! `KIND_CALL_SITE` payload) and the stack pointer at its entry, recorded as they are, whoever
//! called. When that address lies in libc (libc calling `malloc` for `strdup`), in Rust's
//! standard library (`FileDesc::write` calling `write`) or in the agent, the profiler, which has
//! the stacks and the symbols, finds the program's own frame above it (see the profiler's
//! `call_sites.rs`): nothing on an interposed call's path looks at the stack or at the loader's
//! tables, so a call costs the same from anywhere.
//!
//! # How
//! Each interposed function is an exported naked trampoline that puts its stack pointer at entry
//! (where the caller's return address is: a `Caller`) in the next free argument register and
//! jumps to the implementation (functions with six arguments, and `syscall`, make a real call
//! instead; the variadic printf family builds a `va_list` and calls the `v` form). The
//! implementation pushes the mark, calls the real function found with `dlsym(RTLD_NEXT, ...)`
//! (so other interposers, such as a malloc replacement, keep working), and pops the mark, also when the call unwinds (`pthread_cancel`, `pthread_exit`,
//! C++ exceptions: the implementations are `C-unwind`).
//!
//! The system-call wrappers (`write`, `read`, `open`, `poll`, `fork`, ...) are different: their
//! trampolines keep the mark in a frame of their own and call out to Rust before and after the
//! real function, so that no `ret` follows the system call where that would be mispredicted
//! (`builtin/syscall_wrappers.rs`).
//!
//! # Recursion and safety
//! * Counted once: a call made while the thread's innermost mark is a built-in one (a `write`
//!   under `fwrite`, a `malloc` under `fopen`, the agent's own allocations) is not marked.
//! * Start-up: until the agent's constructor has run, calls are forwarded unmarked (the dynamic
//!   loader calls `malloc` before then). The constructor finds every real function, and
//!   everything else a call needs, before the agent is ready (`builtin/real.rs`).
//! * Locks: nothing on an interposed call's path takes a lock that the program could hold or
//!   wait for: no `dlsym` (the real functions are known), no `dladdr`, no registration of a fork
//!   handler or a thread-local destructor (the shim does those when it is loaded, and releases a
//!   thread's slot from a `pthread` key's destructor). Only the real function itself may wait.
//! * Allocation: `dlsym` may itself allocate. While a thread resolves a real function (only
//!   before the constructor, or a function this libc lacks), its own allocations that cannot be
//!   forwarded yet come from a small static arena, and `free` and `realloc` recognise its
//!   pointers; other threads' calls are never served from it.
//! * Signal handlers: a thread's first mark claims a slot in the region, which may allocate. The
//!   main thread claims its slot in the constructor and every thread made by `pthread_create` at
//!   its start; functions that handlers may call (`write`, `read`, `open`, ...) never claim, so a
//!   thread made otherwise (a raw `clone`) has its async-signal-safe calls unmarked until it calls
//!   something that may claim (`malloc`, stdio, ...).
//! * Cost: a marked call costs the shim's push and pop (one initial-exec thread-local access
//!   each, see the shim's `thread_state.rs`) and a load of one cache line of shared state (`Hot`),
//!   whether or not a profiler is attached (measured in BENCHMARKS.md). The interposing function
//!   calls nothing before the real function (`enter_fast`); whatever must first be worked out (the
//!   real function, the thread's slot) goes to its out-of-line `slow`, whose entries are counted
//!   for tests ([`fsprof_agent_slow_entries`]).
//! * Off: with `FSPROF_BUILTINS=0` in the environment (`fsprof run` without `--agent` sets it, for
//!   programs that link the agent for its C ABI) nothing is marked, calls are only forwarded.
//! * Signal handlers may call every interposed function: none resolves anything then.
//! * Jumps: `longjmp`, `siglongjmp` and `__longjmp_chk` are interposed (not features), so that a
//!   signal handler that jumps out of a call interrupted in the middle of its mark's push does
//!   not leave the thread's slot "being written" for good (`builtin/jumps.rs`).
//! * Children: a forked child forgets its parent's region (the shim's fork handlers, or the
//!   `_Fork` wrapper) and makes its own, whatever other fork handlers run before the shim's;
//!   an exec'd program loads the agent again through the inherited `LD_PRELOAD`. A `vfork`
//!   child's `exec` is not marked (`syscall_wrappers.rs`).
//!
//! # Not handled
//! `vfork` is not interposed (its child runs on the parent's stack until it execs: a wrapper's
//! frame would be clobbered), nor `clone`; a child made by a raw `clone` system call without
//! `CLONE_VM` keeps a slot in a region not mapped in it, and faults on its first mark (`fork`'s
//! handler and the `_Fork` wrapper make a child forget the region). A mark left by a signal
//! handler's `siglongjmp` stays until the thread's next interposed call. Other libc functions
//! that block (`accept`, `connect`, `flock`, ...) are not features. Calls that libc makes internally without going
//! through its own symbol table (`fclose` flushing, `system`'s fork) are counted by the outer
//! call if it is interposed, and not at all otherwise. Only x86-64 Linux (glibc): elsewhere this
//! module is not compiled and the agent only offers the C ABI. Statically linked programs cannot
//! preload anything.

use core::ffi::{c_char, c_int, c_long, c_uint, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use fsprof_shim::{raw, Feature};

mod jumps;
mod syscall_wrappers;
use syscall_wrappers::{interpose_syscall, restore_registers, save_registers};

/// The names of the built-in features, in the order of [`BUILTINS`].
pub const BUILTIN_NAMES: [&str; 9] = [
    "output",
    "input",
    "allocation",
    "locks",
    "sleep",
    "poll",
    "process",
    "files",
    "waiting",
];

/// The built-in features' descriptors, contiguous so that "is this mark a built-in one" is a
/// range check.
pub static BUILTINS: [Feature; BUILTIN_NAMES.len()] = [
    Feature::new(BUILTIN_NAMES[0]),
    Feature::new(BUILTIN_NAMES[1]),
    Feature::new(BUILTIN_NAMES[2]),
    Feature::new(BUILTIN_NAMES[3]),
    Feature::new(BUILTIN_NAMES[4]),
    Feature::new(BUILTIN_NAMES[5]),
    Feature::new(BUILTIN_NAMES[6]),
    Feature::new(BUILTIN_NAMES[7]),
    Feature::new(BUILTIN_NAMES[8]),
];

const OUTPUT: usize = 0;
const INPUT: usize = 1;
const ALLOCATION: usize = 2;
const LOCKS: usize = 3;
const SLEEP: usize = 4;
const POLL: usize = 5;
const PROCESS: usize = 6;
const FILES: usize = 7;
const WAITING: usize = 8;
/// `process`, for the `exec` functions (see [`syscall_wrappers::UNLESS_CHILD`]).
const PROCESS_EXEC: usize = PROCESS | syscall_wrappers::UNLESS_CHILD;

/// What every marked call reads, in one cache line: around a system call, each line a wrapper
/// touches costs a few nanoseconds (BENCHMARKS.md, "Agent: cost of an interposed libc call").
#[repr(C, align(64))]
struct Hot {
    /// Set by the constructor: before it, calls are forwarded unmarked.
    ready: AtomicBool,
    /// Set by the constructor where a `ret` after a system call is mispredicted: the system-call
    /// wrappers then call and return by jumps (see `syscall_wrappers.rs`).
    return_by_jump: AtomicBool,
}

static HOT: Hot = Hot {
    ready: AtomicBool::new(false),
    return_by_jump: AtomicBool::new(false),
};

const _: () = assert!(core::mem::size_of::<Hot>() == 64);

/// Runs when the library is loaded, after libc is initialised and before the program's `main`.
extern "C" fn init() {
    // Everything an interposed call needs is worked out before the agent is ready, here, where
    // no lock the program could hold is in the way: no `dlsym` or `dladdr` happens later. The
    // real functions also when nothing is marked: the calls are forwarded all the same.
    real::resolve_all(&[
        allocation::ALLOC,
        &[&allocation::free::REAL],
        stdio::STDIO,
        system_calls::SYSCALL_WRAPPERS_3,
        system_calls::SYSCALL_WRAPPERS,
        system_calls::SPAWN,
        stdio::PRINTF,
        locks::LOCK,
        locks::TIMED_LOCK,
        locks::SEMAPHORE_WAIT,
        locks::BARRIER_WAIT,
        locks::WAKE,
        &[
            &futex::syscall::REAL,
            &lifecycle::fork_without_handlers::REAL,
            &lifecycle::pthread_create::REAL,
            &lifecycle::pthread_join::REAL,
        ],
        jumps::REALS,
    ]);
    // FSPROF_FLEET_LABELS=1: the marks published for the fleet's profilers too (in an agent
    // built with the `fleet` feature; off otherwise). Before anything marks.
    let fleet = environment(c"FSPROF_FLEET_LABELS") == Some(b"1");
    fsprof_shim::raw::publish_for_fleet(fleet);
    // FSPROF_WHATIF: an experiment of `fsprof what-if` (its delays; nothing otherwise).
    whatif::init(environment(c"FSPROF_WHATIF"));
    // `fsprof run` without `--agent` sets FSPROF_BUILTINS=0 for programs that link the agent anyway.
    if environment(c"FSPROF_BUILTINS") == Some(b"0") {
        return;
    }
    syscall_wrappers::choose_return_form();
    syscall_wrappers::remember_pid();
    HOT.ready.store(true, Release);
    claim_slot();
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// The value of an environment variable (read in the constructor, before other threads can
/// change the environment).
fn environment(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv with a NUL-terminated name.
    let value = unsafe { getenv(name.as_ptr()) };
    // SAFETY: getenv returns NULL or a NUL-terminated string that outlives the constructor.
    (!value.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes())
}

/// Reads the start of a file into `buffer` with raw system calls (not the interposed wrappers);
/// returns the length read (0 if the file cannot be read).
fn read_file(path: &core::ffi::CStr, buffer: &mut [u8]) -> usize {
    const AT_FDCWD: c_long = -100;
    const O_RDONLY_CLOEXEC: c_long = 0o2000000;
    // SAFETY: raw openat, read and close on a NUL-terminated path and a writable buffer.
    unsafe {
        let fd = libc_syscall4(257, AT_FDCWD, path.as_ptr() as c_long, O_RDONLY_CLOEXEC, 0);
        if fd < 0 {
            return 0;
        }
        let length = libc_syscall3(0, fd, buffer.as_mut_ptr() as c_long, buffer.len() as c_long);
        libc_syscall3(3, fd, 0, 0);
        length.clamp(0, buffer.len() as c_long) as usize
    }
}

/// Claims the calling thread's slot (and creates the region) outside any signal handler.
fn claim_slot() {
    if let Ok(mark) =
        raw::push_call_site_unless_nested(&builtins()[OUTPUT], 0, 0, 0, 0..0, true, true)
    {
        mark.pop();
    }
}

/// [`BUILTINS`], addressed relative to the instruction pointer rather than through the GOT
/// (which the compiler uses for a static in a shared library): one cache line less per call.
#[inline(always)]
fn builtins() -> &'static [Feature; BUILTIN_NAMES.len()] {
    let address: usize;
    // SAFETY: computes the address of a static of this library; reads nothing.
    unsafe {
        core::arch::asm!(
            "lea {}, [rip + {}]",
            out(reg) address,
            sym BUILTINS,
            options(pure, nomem, nostack, preserves_flags),
        );
        &*(address as *const [Feature; BUILTIN_NAMES.len()])
    }
}

fn builtin_range() -> core::ops::Range<u64> {
    let start = builtins().as_ptr() as u64;
    start..start + core::mem::size_of_val(&BUILTINS) as u64
}

/// A pushed built-in mark; popped when dropped (also when the call unwinds).
struct Marked(raw::CallSiteMark);

impl Marked {
    /// The mark, for the caller to pop (it is not popped when this is forgotten).
    fn keep(self) -> raw::CallSiteMark {
        let mark = self.0;
        core::mem::forget(self);
        mark
    }
}

impl Drop for Marked {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.pop();
    }
}

/// What [`enter_fast`] did.
enum Entry {
    /// Pushed the mark: call the real function, then drop this.
    Marked(Marked),
    /// Call the real function unmarked (the agent is not ready or off, or the call is nested).
    Unmarked,
    /// Something must be worked out first (the thread's slot, a push a signal handler
    /// interrupted): take the slow path.
    Slow,
}

/// Where an interposed call comes from: the interposing function's stack pointer at entry,
/// where the caller's return address is, and the frame pointer register (`rbp`) at entry, which
/// is the caller's (0 where a trampoline cannot pass it). Trampolines pass both to the
/// implementations, in two registers (a 16-byte struct of integers is passed like two integers).
///
/// The stack pointer is also the stack address a built-in mark records: the mark's frame is the
/// interposing function's (whose CFA lies just above it), and a later call whose own entry does
/// not lie below it is not nested in that mark's call, whose frame is gone (see the shim's
/// `push_call_site_unless_nested`). The frame pointer lets the profiler unwind the caller's
/// frames when they keep one (Rust's standard library does), to find the program's call site.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Caller {
    sp: usize,
    bp: usize,
}

impl Caller {
    /// The return address: the call site.
    #[inline(always)]
    fn ret(self) -> usize {
        // SAFETY: a trampoline's stack pointer at entry, which holds the return address.
        unsafe { *(self.sp as *const usize) }
    }

    #[inline(always)]
    fn sp(self) -> u64 {
        self.sp as u64
    }

    #[inline(always)]
    fn bp(self) -> u64 {
        self.bp as u64
    }
}

/// The fast path of [`enter`], for a call whose real function is known: everything it needs is
/// known already, and it calls nothing, so an interposing function whose slow path is a
/// separate function saves no registers for it (around a system call each instruction shows:
/// BENCHMARKS.md, "Agent: cost of an interposed libc call").
#[inline(always)]
fn enter_fast(feature: usize, caller: Caller, claim: bool) -> Entry {
    if !HOT.ready.load(Relaxed) {
        return Entry::Unmarked;
    }
    match raw::push_call_site_unless_nested(
        &builtins()[feature],
        caller.ret() as u64,
        caller.bp(),
        caller.sp(),
        builtin_range(),
        false,
        false,
    ) {
        Ok(mark) => Entry::Marked(Marked(mark)),
        Err(raw::NotPushed::NoSlot) if claim => Entry::Slow,
        Err(raw::NotPushed::Busy) => Entry::Slow,
        Err(_) => Entry::Unmarked,
    }
}

/// Marks `feature` with the caller's call site unless the agent is not ready yet or the call is
/// nested in another built-in mark. `claim`: whether this call may claim the thread's slot
/// (false for functions that signal handlers may call).
#[inline(always)]
fn enter(feature: usize, caller: Caller, claim: bool) -> Option<Marked> {
    if !HOT.ready.load(Relaxed) {
        return None;
    }
    raw::push_call_site_unless_nested(
        &builtins()[feature],
        caller.ret() as u64,
        caller.bp(),
        caller.sp(),
        builtin_range(),
        claim,
        true,
    )
    .ok()
    .map(Marked)
}

/// Out-of-line entries of interposed calls (their `slow` paths), for tests: after start-up a
/// call takes one only to claim its thread's slot, or when a signal handler interrupted a push.
static SLOW_ENTRIES: AtomicU64 = AtomicU64::new(0);

#[cold]
fn count_slow_entry() {
    SLOW_ENTRIES.fetch_add(1, Relaxed);
}

/// How many interposed calls of this process took the out-of-line path so far: a debug counter
/// for tests (a loop of calls after warm-up takes it at most a handful of times, wherever the
/// calls come from). Not part of `fsprof.h`.
#[no_mangle]
pub extern "C" fn fsprof_agent_slow_entries() -> u64 {
    SLOW_ENTRIES.load(Relaxed)
}

/// Returns `$call` (a call of the real function), marked, if [`enter_fast`] can take the fast
/// path; else does nothing, for the slow path to follow.
macro_rules! return_fast {
    ($feature:expr, $caller:expr, $claim:expr, $call:expr) => {
        match enter_fast($feature, $caller, $claim) {
            Entry::Marked(_marked) => return $call,
            Entry::Unmarked => return $call,
            Entry::Slow => {}
        }
    };
}

/// The implementation behind an interposing trampoline, for a function of the given arguments
/// whose real definition is `$real`: `imp` takes the fast path when it can, and otherwise tail-
/// calls `slow`, out of line, which works out what is missing (resolving the real function,
/// the thread's slot).
macro_rules! imp {
    ($feature:expr, $claim:literal, $real:path, fn($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        pub(super) unsafe extern "C-unwind" fn imp($($arg: $ty,)* caller: Caller) -> $ret {
            if whatif::waits_for_another($feature) && whatif::active() {
                // A lock or condition-variable wait during a what-if experiment: forgiven.
                let real: unsafe extern "C" fn($($ty),*) -> $ret =
                    core::mem::transmute::<usize, _>($real.get());
                let _marked = enter($feature, caller, $claim);
                let waiting = whatif::block_start();
                let result = real($($arg),*);
                whatif::block_end(waiting);
                return result;
            }
            let address = $real.address.load(Relaxed);
            if address != 0 {
                let real: unsafe extern "C" fn($($ty),*) -> $ret =
                    core::mem::transmute::<usize, _>(address);
                return_fast!($feature, caller, $claim, real($($arg),*));
            }
            slow($($arg,)* caller)
        }

        #[cold]
        #[inline(never)]
        unsafe extern "C-unwind" fn slow($($arg: $ty,)* caller: Caller) -> $ret {
            count_slow_entry();
            let real: unsafe extern "C" fn($($ty),*) -> $ret =
                core::mem::transmute::<usize, _>($real.get());
            let _marked = enter($feature, caller, $claim);
            real($($arg),*)
        }
    };
}

// ---- Resolving the real functions, and the bootstrap arena: see `real.rs` ------------------

mod real;
use real::{arena, getenv, libc_syscall3, libc_syscall4, Real};

// ---- Trampolines ---------------------------------------------------------------------------------

/// The instructions that pass the [`Caller`] in the two registers after the function's
/// arguments: the stack pointer, then the frame pointer.
macro_rules! pass_caller {
    () => {
        "mov rdi, rsp\nmov rsi, rbp"
    };
    ($a:ident) => {
        "mov rsi, rsp\nmov rdx, rbp"
    };
    ($a:ident $b:ident) => {
        "mov rdx, rsp\nmov rcx, rbp"
    };
    ($a:ident $b:ident $c:ident) => {
        "mov rcx, rsp\nmov r8, rbp"
    };
    ($a:ident $b:ident $c:ident $d:ident) => {
        "mov r8, rsp\nmov r9, rbp"
    };
}

/// Interposes functions of up to four arguments: an exported trampoline `name` that passes its
/// stack and frame pointers (a [`Caller`]) as an extra argument to `name::imp`, which marks `feature` around the real
/// function (see the module's documentation). `claim`: whether the call may claim a slot.
macro_rules! interpose {
    (list $list:ident; $($feature:ident $claim:literal fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            pub(super) static REAL: Real = Real::new(concat!(stringify!($name), "\0").as_bytes());

            imp!($feature, $claim, REAL, fn($($arg: $ty),*) -> $ret);
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

/// Interposes functions of six arguments: the trampoline pushes its stack and frame pointers at
/// entry (a [`Caller`]) as a seventh (stack) argument and calls `name::imp`.
macro_rules! interpose6 {
    (list $list:ident; $($feature:ident $claim:literal fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            pub(super) static REAL: Real = Real::new(concat!(stringify!($name), "\0").as_bytes());

            imp!($feature, $claim, REAL, fn($($arg: $ty),*) -> $ret);
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
                // The Caller, in memory at the call (no register is left): entry rsp, rbp.
                "sub rsp, 8",
                ".cfi_adjust_cfa_offset 8",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                "lea r11, [rsp + 16]",
                "push r11",
                ".cfi_adjust_cfa_offset 8",
                "call {imp}",
                "add rsp, 24",
                ".cfi_adjust_cfa_offset -24",
                "ret",
                ".cfi_endproc",
                imp = sym $name::imp,
            )
        }
    )*
    };
}

/// Interposes a variadic printf-like function of `k` fixed arguments by building a `va_list`
/// (the System V register save area and overflow area) and calling `name::imp(fixed..., ap,
/// caller)`, which calls the `v` form.
macro_rules! interpose_variadic {
    (list $list:ident; $($feature:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $v:ident, $gp:literal, $ap_reg:literal, $ret_reg:literal, $bp_reg:literal;)*) => {
        /// The real functions of this group, resolved by the constructor.
        pub(super) static $list: &[&Real] = &[$(&$name::REAL),*];
        $(
        #[allow(non_snake_case)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            pub(super) static REAL: Real = Real::new(concat!(stringify!($v), "\0").as_bytes());

            imp!($feature, true, REAL, fn($($arg: $ty,)* ap: *mut c_void) -> $ret);
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
                "push rbp",
                ".cfi_def_cfa_offset 16",
                ".cfi_offset rbp, -16",
                "mov rbp, rsp",
                ".cfi_def_cfa_register rbp",
                "sub rsp, 208",
                // The register save area at rsp+32: six general registers, then xmm0-7.
                "mov [rsp + 32], rdi",
                "mov [rsp + 40], rsi",
                "mov [rsp + 48], rdx",
                "mov [rsp + 56], rcx",
                "mov [rsp + 64], r8",
                "mov [rsp + 72], r9",
                "test al, al",
                "je 2f",
                "movaps [rsp + 80], xmm0",
                "movaps [rsp + 96], xmm1",
                "movaps [rsp + 112], xmm2",
                "movaps [rsp + 128], xmm3",
                "movaps [rsp + 144], xmm4",
                "movaps [rsp + 160], xmm5",
                "movaps [rsp + 176], xmm6",
                "movaps [rsp + 192], xmm7",
                "2:",
                // The va_list at rsp: gp_offset, fp_offset, overflow_arg_area, reg_save_area.
                concat!("mov dword ptr [rsp], ", $gp),
                "mov dword ptr [rsp + 4], 48",
                "lea rax, [rbp + 16]",
                "mov [rsp + 8], rax",
                "lea rax, [rsp + 32]",
                "mov [rsp + 16], rax",
                concat!("mov ", $ap_reg, ", rsp"),
                concat!("lea ", $ret_reg, ", [rbp + 8]"),
                concat!("mov ", $bp_reg, ", [rbp]"),
                "call {imp}",
                "leave",
                ".cfi_def_cfa rsp, 8",
                "ret",
                ".cfi_endproc",
                imp = sym $name::imp,
            )
        }
    )*
    };
}

type File = c_void;
type SizeT = usize;
type SsizeT = isize;

// ---- The interposed families, one file each ---------------------------------------------------
// (After the macros above, which they use; each file sees this module's items.)

mod allocation;
mod futex;
mod lifecycle;
mod locks;
mod stdio;
mod system_calls;
mod whatif;
