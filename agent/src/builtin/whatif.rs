//! The delays of a what-if experiment (`fsprof what-if`), inserted in the program: a virtual
//! speedup of one feature (or one instance of it), as Coz (Curtsinger and Berger, SOSP 2015)
//! does for a line of code. Off unless `fsprof` started the program with a control page
//! (`fsprof_shim::whatif`, which says what an experiment is); then:
//!
//! * every thread made by `pthread_create`, and the main thread, gets a timer on its own CPU
//!   clock that sends it `SIGPROF` every `period_ns` of its CPU time; the handler ([`on_tick`])
//!   looks at the thread's marks in the region (its own slot, found by its thread id in the
//!   regions `/proc/self/maps` lists: the program's own shim copy writes them, not this
//!   library's) and, in the selected code, adds the speedup's share of that CPU time to the
//!   global delay and to the thread's own count; then the thread pays what it owes: it sleeps
//!   the global delay less its own count;
//! * a thread pays before it wakes another (a futex wake made through `syscall`: Rust's std
//!   locks, channels, condition variables and parking; `pthread_mutex_unlock`,
//!   `pthread_cond_signal`, `pthread_cond_broadcast`, `sem_post` and `pthread_barrier_wait`; an
//!   output call, `write`, `send`, ..., which may wake a reader of a pipe or socket; the end of
//!   a thread, which wakes its joiner), and what accrues while it waits (a futex wait through
//!   `syscall`, a contended pthread lock, a condition-variable, semaphore or barrier wait,
//!   `pthread_join`, an input call or a poll) is forgiven, with what it owed as far as the wait
//!   outlasted it ([`block_end`]): the thread that woke it had paid. What accrues while a
//!   waker waits inside its wake call for its CPU (the woken thread took it) is forgiven too,
//!   where it spent most of the call off the CPU ([`wake_end`]).
//!
//! Not handled yet: threads made without `pthread_create`, processes the program starts (a
//! forked child leaves the experiment), other waits libc makes inside itself (stdio's locks),
//! and waits for something outside the program (a client in another process, a disk), which are
//! forgiven as if another thread had paid.
//! Everything here is async-signal-safe: raw system calls, atomics and the thread's static TLS.

use super::real::libc_syscall4;
use core::ffi::{c_int, c_long, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering::*};
use fsprof_shim::whatif::{
    Control, Experiment, ANY_INSTANCE, CONTROL_MAGIC, CONTROL_SIZE, CONTROL_VERSION,
    MAX_CANDIDATES, NAME_CAPACITY,
};

/// Whether an experiment runs: read by the `syscall` trampoline's fast path (a futex wake then
/// goes through `futex::syscall::imp`, which pays first).
pub(super) static ON: AtomicBool = AtomicBool::new(false);
static CONTROL: AtomicPtr<Control> = AtomicPtr::new(core::ptr::null_mut());

const SIGPROF: c_int = 27;
const SYS_MMAP: c_long = 9;
const SYS_CLOSE: c_long = 3;
const SYS_GETPID: c_long = 39;
const SYS_GETTID: c_long = 186;
const SYS_TIMER_CREATE: c_long = 222;
const SYS_TIMER_SETTIME: c_long = 223;
const SYS_TIMER_DELETE: c_long = 226;
const SYS_CLOCK_GETTIME: c_long = 228;
const SYS_CLOCK_NANOSLEEP: c_long = 230;
const CLOCK_MONOTONIC: c_long = 1;
const CLOCK_THREAD_CPUTIME_ID: c_long = 3;
const SIGEV_THREAD_ID: i32 = 4;

extern "C" {
    fn sigaction(signal: c_int, action: *const SigAction, old: *mut SigAction) -> c_int;
    fn unsetenv(name: *const core::ffi::c_char) -> c_int;
    fn atexit(function: extern "C" fn()) -> c_int;
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

/// glibc's `struct sigaction` on x86-64.
#[repr(C)]
struct SigAction {
    handler: usize,
    mask: [u64; 16],
    flags: c_int,
    restorer: usize,
}

/// A thread's state, in a block of static TLS (reached like `real.rs`'s word: no
/// `__tls_get_addr` in a signal handler).
#[repr(C)]
struct Thread {
    /// The delay this thread has paid or caused, in ns (the handler adds to it too: atomic).
    local: AtomicU64,
    /// Its CPU time at its previous look.
    last_cpu: AtomicU64,
    /// Its timer's id plus one; 0: none.
    timer: AtomicU64,
    /// Its slot's address in a region, or 0 while not found.
    slot: AtomicU64,
    /// When its slot may be looked for in the memory map again (monotonic ns).
    next_search: AtomicU64,
    /// Set while it pays (a tick meanwhile does not pay again).
    paying: AtomicU64,
    /// Its thread id, 0 until known.
    tid: AtomicU64,
    /// Waits begun by [`block_start`] and not ended by [`block_end`], and wake calls begun by
    /// [`wake_start`] and not ended by [`wake_end`]: a tick then does not pay (what accrued is
    /// forgiven, or left owed, when the wait or the call ends). A thread woken from `pthread_join` ran on inside it long
    /// enough for a tick, which paid the whole global delay: the program ended that much later.
    waiting: AtomicU64,
    /// The real functions of the system-call wrappers entered and not yet called (see
    /// [`wrap`]), innermost last: a signal handler's calls nest inside.
    pending: [AtomicU64; PENDING],
    pending_depth: AtomicU64,
    /// The epoch of the experiment it last counted in (see [`catch_up`]).
    epoch: AtomicU64,
    /// The period its timer has now (see [`Control::looks_period_ns`]).
    period: AtomicU64,
    _padding: [u64; 1],
}

const PENDING: usize = 4;

core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 6",
    ".globl fsprof_agent_whatif",
    ".hidden fsprof_agent_whatif",
    ".type fsprof_agent_whatif, @object",
    ".size fsprof_agent_whatif, 128",
    "fsprof_agent_whatif:",
    ".zero 128",
    ".popsection",
);
const _: () = assert!(core::mem::size_of::<Thread>() == 128);

#[inline(always)]
fn thread() -> &'static Thread {
    let address: usize;
    // SAFETY: the initial-exec TLS sequence (see the shim's `thread_state.rs`); the block lives
    // as long as the thread, starts zeroed (a valid `Thread`) and only this thread touches it.
    unsafe {
        core::arch::asm!(
            "mov {0}, qword ptr fs:[0]",
            "add {0}, qword ptr [rip + fsprof_agent_whatif@GOTTPOFF]",
            out(reg) address,
            options(pure, readonly, nostack),
        );
        &*(address as *const Thread)
    }
}

fn control() -> Option<&'static Control> {
    // SAFETY: set once to a shared mapping of CONTROL_SIZE bytes that is never unmapped.
    unsafe { CONTROL.load(Acquire).as_ref() }
}

fn syscall(number: c_long, a: c_long, b: c_long, c: c_long, d: c_long) -> c_long {
    // SAFETY: every caller passes arguments valid for its system call.
    unsafe { libc_syscall4(number, a, b, c, d) }
}

fn clock(id: c_long) -> u64 {
    let mut time = [0i64; 2];
    syscall(SYS_CLOCK_GETTIME, id, time.as_mut_ptr() as c_long, 0, 0);
    (time[0] as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(time[1] as u64)
}

/// Called by the constructor with the value of `FSPROF_WHATIF`: maps the control page, checks
/// it, installs the handler and arms the main thread's timer. Does nothing without the variable
/// or with a page it does not understand.
pub(super) fn init(variable: Option<&[u8]>) {
    let Some(fd) = variable.and_then(parse_number) else {
        return;
    };
    const PROT_READ_WRITE: c_long = 3;
    const MAP_SHARED: c_long = 1;
    // SAFETY: a raw mmap of the descriptor fsprof passed; r9 (the offset) is 0.
    let address = unsafe {
        let ret: c_long;
        core::arch::asm!("syscall", inlateout("rax") SYS_MMAP => ret, in("rdi") 0,
            in("rsi") CONTROL_SIZE, in("rdx") PROT_READ_WRITE, in("r10") MAP_SHARED,
            in("r8") fd as c_long, in("r9") 0, lateout("rcx") _, lateout("r11") _,
            options(nostack));
        ret
    };
    syscall(SYS_CLOSE, fd as c_long, 0, 0, 0);
    // SAFETY: a NUL-terminated name; the constructor runs before other threads exist.
    unsafe { unsetenv(c"FSPROF_WHATIF".as_ptr()) };
    if (-4095..0).contains(&address) {
        return;
    }
    let page = address as *mut Control;
    // SAFETY: a fresh shared mapping of CONTROL_SIZE bytes, at least a `Control`.
    let control = unsafe { &*page };
    if control.magic != CONTROL_MAGIC
        || control.version != CONTROL_VERSION
        || control.candidate_count as usize > MAX_CANDIDATES
        || control.period_ns == 0
    {
        return;
    }
    let candidates = &control.candidates[..control.candidate_count as usize];
    if candidates.iter().any(|c| {
        c.feature_len as usize > NAME_CAPACITY
            || (c.instance_len != ANY_INSTANCE && c.instance_len as usize > NAME_CAPACITY)
    }) {
        return;
    }
    let action = SigAction {
        handler: on_tick as *const () as usize,
        mask: [0; 16],
        flags: 0x4 | 0x1000_0000, // SA_SIGINFO | SA_RESTART
        restorer: 0,
    };
    // SAFETY: installs a handler that only does async-signal-safe work.
    if unsafe { sigaction(SIGPROF, &action, core::ptr::null_mut()) } != 0 {
        return;
    }
    // SAFETY: registers a handler that only stores to atomics.
    unsafe { pthread_atfork(None, None, Some(leave_in_child)) };
    // SAFETY: registers a function that reads mapped memory and stores to atomics.
    unsafe { atexit(at_exit) };
    control.signal.store(SIGPROF as u64, Relaxed);
    CONTROL.store(page, Release);
    ON.store(true, Release);
    thread_start();
}

fn parse_number(text: &[u8]) -> Option<c_int> {
    if text.is_empty() || text.len() > 9 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0, |n, d| n * 10 + c_int::from(d - b'0')))
}

/// A forked child is no part of the experiment (its threads have no timers; the page is shared).
pub(super) extern "C" fn leave_in_child() {
    ON.store(false, Relaxed);
    CONTROL.store(core::ptr::null_mut(), Relaxed);
}

/// Whether a built-in feature's calls wait for another thread (`locks`, `waiting`): during an
/// experiment what accrues meanwhile is forgiven.
#[inline(always)]
pub(super) const fn waits_for_another(feature: usize) -> bool {
    feature == super::LOCKS || feature == super::WAITING
}

/// Whether an experiment runs in this process.
#[inline(always)]
pub(super) fn active() -> bool {
    ON.load(Relaxed)
}

/// A new thread (or the main one) joins the experiment: it owes nothing of the past, and its
/// timer starts.
pub(super) fn thread_start() {
    let Some(control) = control() else {
        return;
    };
    let me = thread();
    let tid = syscall(SYS_GETTID, 0, 0, 0, 0);
    me.tid.store(tid as u64, Relaxed);
    me.epoch.store(epoch_of(control), Relaxed);
    me.local
        .store(control.global_delay_ns.load(Acquire), Relaxed);
    me.last_cpu.store(clock(CLOCK_THREAD_CPUTIME_ID), Relaxed);
    let period = looks_period(control);
    me.period.store(period, Relaxed);
    let timer = match perf_clock(tid as i32, period) {
        Some(fd) => fd as u64 | PERF_TIMER,
        None => match cpu_timer(tid as i32, period) {
            Some(id) => id as u64 + 1,
            None => {
                control.failures.fetch_add(1, Relaxed);
                return;
            }
        },
    };
    me.timer.store(timer, Relaxed);
    control.threads.fetch_add(1, Relaxed);
}

/// In [`Thread::timer`]: the rest is a perf event's descriptor, not a timer's id plus one.
const PERF_TIMER: u64 = 1 << 62;

/// A perf event on the thread's own CPU clock (`task-clock`, a high-resolution timer of the
/// thread) that sends it `SIGPROF` every `period` ns of it; `None` where perf events are
/// refused (`perf_event_paranoid`). Its resolution is what Coz relies on: a POSIX timer on a
/// thread's CPU clock expires only at the scheduler's tick (4 ms at HZ=250), and the selected
/// code's delay came in lumps that large: a thread paying one slept as long, and stalled a
/// pipeline behind it.
fn perf_clock(tid: i32, period: u64) -> Option<i32> {
    const SYS_PERF_EVENT_OPEN: c_long = 298;
    const SYS_FCNTL: c_long = 72;
    const PERF_TYPE_SOFTWARE: u32 = 1;
    const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
    const PERF_FLAG_FD_CLOEXEC: c_long = 8;
    const EXCLUDE_KERNEL_HV: u64 = (1 << 5) | (1 << 6);
    const F_SETFL: c_long = 4;
    const F_SETSIG: c_long = 10;
    const F_SETOWN_EX: c_long = 15;
    const F_OWNER_TID: i32 = 0;
    const O_ASYNC: c_long = 0o20000;
    // `struct perf_event_attr` in its first published size (64 bytes): type, size, config,
    // sample_period, sample_type, read_format, flags, wakeup_events.
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&PERF_TYPE_SOFTWARE.to_ne_bytes());
    attr[4..8].copy_from_slice(&64u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&PERF_COUNT_SW_TASK_CLOCK.to_ne_bytes());
    attr[16..24].copy_from_slice(&period.to_ne_bytes());
    attr[40..48].copy_from_slice(&EXCLUDE_KERNEL_HV.to_ne_bytes());
    attr[48..52].copy_from_slice(&1u32.to_ne_bytes());
    let fd: c_long;
    // SAFETY: perf_event_open(attr, this thread, any CPU, no group, close-on-exec): five
    // arguments, one more than `libc_syscall4` passes.
    unsafe {
        core::arch::asm!("syscall", inlateout("rax") SYS_PERF_EVENT_OPEN => fd,
            in("rdi") attr.as_ptr() as c_long, in("rsi") 0, in("rdx") -1, in("r10") -1,
            in("r8") PERF_FLAG_FD_CLOEXEC, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    if fd < 0 {
        return None;
    }
    let owner = [F_OWNER_TID, tid];
    let ready = syscall(SYS_FCNTL, fd, F_SETSIG, c_long::from(SIGPROF), 0) == 0
        && syscall(SYS_FCNTL, fd, F_SETOWN_EX, owner.as_ptr() as c_long, 0) == 0
        && syscall(SYS_FCNTL, fd, F_SETFL, O_ASYNC, 0) == 0;
    if !ready {
        syscall(SYS_CLOSE, fd, 0, 0, 0);
        return None;
    }
    Some(fd as i32)
}

/// The period the looks should have now: [`Control::looks_period_ns`], or the page's own.
fn looks_period(control: &Control) -> u64 {
    match control.looks_period_ns.load(Relaxed) {
        0 => control.period_ns,
        slowed => slowed,
    }
}

/// Gives the calling thread's timer (its [`Thread::timer`] word) a new period, from its next
/// expiry on; whether the kernel agreed.
fn rearm(timer: u64, period: u64) -> bool {
    const SYS_IOCTL: c_long = 16;
    // `_IOW('$', 4, u64)`: the perf event's sample period, read through the pointer.
    const PERF_EVENT_IOC_PERIOD: c_long = 0x4008_2404;
    if timer & PERF_TIMER != 0 {
        let mut value = period;
        let fd = (timer & !PERF_TIMER) as c_long;
        return syscall(
            SYS_IOCTL,
            fd,
            PERF_EVENT_IOC_PERIOD,
            &mut value as *mut u64 as c_long,
            0,
        ) == 0;
    }
    set_cpu_timer((timer - 1) as i32, period)
}

/// Sets POSIX timer `id` to expire every `period` ns from now; whether the kernel agreed.
fn set_cpu_timer(id: i32, period: u64) -> bool {
    let (seconds, nanoseconds) = (
        (period / 1_000_000_000) as i64,
        (period % 1_000_000_000) as i64,
    );
    let spec = [seconds, nanoseconds, seconds, nanoseconds];
    syscall(
        SYS_TIMER_SETTIME,
        id as c_long,
        0,
        spec.as_ptr() as c_long,
        0,
    ) == 0
}

/// A POSIX timer on the thread's CPU clock that sends it `SIGPROF` every `period` ns of it
/// (expiring at the scheduler's ticks only: see [`perf_clock`]); its id.
fn cpu_timer(tid: i32, period: u64) -> Option<i32> {
    // The kernel's `struct sigevent`: value, signal, notify, thread id.
    let mut event = [0u8; 64];
    event[8..12].copy_from_slice(&SIGPROF.to_ne_bytes());
    event[12..16].copy_from_slice(&SIGEV_THREAD_ID.to_ne_bytes());
    event[16..20].copy_from_slice(&tid.to_ne_bytes());
    let mut id: i32 = 0;
    let created = syscall(
        SYS_TIMER_CREATE,
        CLOCK_THREAD_CPUTIME_ID,
        event.as_ptr() as c_long,
        &mut id as *mut i32 as c_long,
        0,
    );
    if created < 0 {
        return None;
    }
    if !set_cpu_timer(id, period) {
        syscall(SYS_TIMER_DELETE, id as c_long, 0, 0, 0);
        return None;
    }
    Some(id)
}

/// A thread made by `pthread_create` returns from its routine: it pays (its joiner may wait for
/// it) and its timer is deleted.
pub(super) fn thread_end() {
    if !active() {
        return;
    }
    pay();
    let me = thread();
    let timer = me.timer.swap(0, Relaxed);
    if timer & PERF_TIMER != 0 {
        syscall(SYS_CLOSE, (timer & !PERF_TIMER) as c_long, 0, 0, 0);
    } else if timer != 0 {
        syscall(SYS_TIMER_DELETE, (timer - 1) as c_long, 0, 0, 0);
    }
}

/// The thread sleeps what it owes: the global delay less its own count (what it slept beyond is
/// credit).
pub(super) fn pay() {
    let Some(control) = control() else {
        return;
    };
    let me = thread();
    if me.paying.swap(1, Relaxed) != 0 {
        return;
    }
    catch_up(control, me);
    let global = control.global_delay_ns.load(Acquire);
    let local = me.local.load(Relaxed);
    if global > local {
        let owed = global - local;
        let start = clock(CLOCK_MONOTONIC);
        let request = [(owed / 1_000_000_000) as i64, (owed % 1_000_000_000) as i64];
        syscall(
            SYS_CLOCK_NANOSLEEP,
            CLOCK_MONOTONIC,
            0,
            request.as_ptr() as c_long,
            0,
        );
        let slept = clock(CLOCK_MONOTONIC).saturating_sub(start);
        me.local.fetch_add(slept, Relaxed);
        control.paid_ns.fetch_add(slept, Relaxed);
    }
    me.paying.store(0, Relaxed);
}

/// The epoch of the experiment now running.
fn epoch_of(control: &Control) -> u64 {
    u64::from(Experiment::from_word(control.current.load(Acquire)).epoch)
}

/// Where the experiment changed since the thread last counted (`fsprof` runs them in turn),
/// what it owed is forgiven: that delay was the experiment before's, whose stretch is over.
/// Paid now, it would slow the new experiment's stretch instead (a baseline's, say).
fn catch_up(control: &Control, me: &Thread) {
    let epoch = epoch_of(control);
    if me.epoch.swap(epoch, Relaxed) == epoch {
        return;
    }
    let global = control.global_delay_ns.load(Acquire);
    let local = me.local.load(Relaxed);
    if global > local {
        me.local.store(global, Relaxed);
        control.forgiven_ns.fetch_add(global - local, Relaxed);
    }
}

/// Where a thread stood when it began to wait for another (see [`block_end`]).
pub(super) struct Waiting {
    global: u64,
    since: u64,
    owed: u64,
}

/// Before a wait for another thread (`None` without an experiment).
#[inline(always)]
pub(super) fn block_start() -> Option<Waiting> {
    if !active() {
        return None;
    }
    let control = control()?;
    let global = control.global_delay_ns.load(Acquire);
    thread().waiting.fetch_add(1, Relaxed);
    Some(Waiting {
        global,
        since: clock(CLOCK_MONOTONIC),
        owed: global.saturating_sub(thread().local.load(Relaxed)),
    })
}

/// After the wait: what accrued meanwhile is forgiven (the thread that woke this one had paid),
/// and so is what the thread owed before, as far as the wait outlasted it: with the selected
/// code faster, the thread would have begun waiting that much later, and been woken at the
/// same moment. Paid after the wait, that debt delayed what the thread does next: a consumer
/// that paid its debts in bursts let its producer's bounded queue fill up, and the producer's
/// waits, real time no delay accounts for, made the predictions 10 points low.
pub(super) fn block_end(waiting: Option<Waiting>) {
    let (Some(waiting), Some(control)) = (waiting, control()) else {
        return;
    };
    let accrued = control
        .global_delay_ns
        .load(Acquire)
        .saturating_sub(waiting.global);
    let waited = clock(CLOCK_MONOTONIC).saturating_sub(waiting.since);
    thread().waiting.fetch_sub(1, Relaxed);
    let absorbed = waiting.owed.min(waited.saturating_sub(accrued));
    thread().local.fetch_add(accrued + absorbed, Relaxed);
    control.forgiven_ns.fetch_add(accrued + absorbed, Relaxed);
}

/// Where a thread stood when it began to wake another (see [`wake_end`]).
pub(super) struct Waking {
    global: u64,
    since: u64,
    cpu: u64,
}

/// Before a call that may wake another thread (an output call, a futex wake, an unlock, a
/// signal, a post): the thread pays what it owes, then notes where it stands (`None` without
/// an experiment).
pub(super) fn wake_start() -> Option<Waking> {
    if !active() {
        return None;
    }
    pay();
    let control = control()?;
    // No look pays inside the call (as in a wait): what accrues there is settled at its end.
    thread().waiting.fetch_add(1, Relaxed);
    Some(Waking {
        global: control.global_delay_ns.load(Acquire),
        since: clock(CLOCK_MONOTONIC),
        cpu: clock(CLOCK_THREAD_CPUTIME_ID),
    })
}

/// After the wake: where the thread spent most of the call off its CPU, what accrued meanwhile
/// is forgiven. A woken thread often takes the waker's CPU at once (the scheduler puts it on
/// the CPU of the thread that woke it when no other is idle) and the waker waits inside the call
/// until the woken one blocks: it waits for that thread as surely as in a read, and with the
/// woken one's selected code faster it would get its CPU back that much sooner. Owed, that delay
/// was paid at the waker's next wake-up, inside the request it answered: on two CPUs with a third
/// busy thread, a loopback client's `prepare` 50% faster was predicted +1% against +16% (the
/// server's thread paid 54 of the 58 us a request accrued; 2026-12-05). Forgiven only in the
/// share of the call spent off the CPU, 6% of it was still paid and the prediction read 2 points
/// low: a look of the woken thread lands while it runs, which on a shared CPU is while the waker
/// waits, not at random through the call. A call run through on the CPU (the woken thread went
/// to another) forgives nothing. A waker preempted by another process, or blocked in an output
/// call (a full pipe, a disk), is forgiven alike: a wait for the outside world, forgiven as a
/// read's is. Costs each wake call two clock reads (system calls) during an experiment, the
/// baselines' stretches as much as the experiments'.
pub(super) fn wake_end(waking: Option<Waking>) {
    let Some(waking) = waking else {
        return;
    };
    thread().waiting.fetch_sub(1, Relaxed);
    let Some(control) = control() else {
        return;
    };
    let accrued = control
        .global_delay_ns
        .load(Acquire)
        .saturating_sub(waking.global);
    if accrued == 0 {
        return;
    }
    let wall = clock(CLOCK_MONOTONIC).saturating_sub(waking.since);
    let ran = clock(CLOCK_THREAD_CPUTIME_ID).saturating_sub(waking.cpu);
    if wall.saturating_sub(ran) <= ran {
        return;
    }
    // At most what the thread still owes: a look inside the call may have added the thread's
    // own delay (it pays nothing there: a tick delivered on the way out of the system call
    // paid, inside the call, what was then forgiven again), a signal handler's own wake paid.
    let me = thread();
    let owed = control
        .global_delay_ns
        .load(Acquire)
        .saturating_sub(me.local.load(Relaxed));
    let forgiven = accrued.min(owed);
    me.local.fetch_add(forgiven, Relaxed);
    control.forgiven_ns.fetch_add(forgiven, Relaxed);
}

/// What a system-call wrapper does during an experiment (see [`wrap`]).
#[derive(Clone, Copy)]
pub(super) enum Wrap {
    /// Output (`write`, `send`, ...): it may wake a thread reading a pipe or socket: pay first.
    Pay,
    /// Input and polls (`read`, `recv`, `poll`, `epoll_wait`, ...): a wait, forgiven.
    Wait,
}

/// Called by a system-call wrapper's `enter` during an experiment with the real function it is
/// about to call: the function to call instead ([`pay_then`] or [`wait_for`], which call the
/// real one, kept here until then), or `real` itself where signal handlers nest too deep.
pub(super) fn wrap(kind: Wrap, real: usize) -> usize {
    let me = thread();
    let depth = me.pending_depth.load(Relaxed) as usize;
    if depth >= PENDING {
        return real;
    }
    // The depth first: a handler that runs between the two stores takes the next entry.
    me.pending_depth.store(depth as u64 + 1, Relaxed);
    me.pending[depth].store(real as u64, Relaxed);
    match kind {
        Wrap::Pay => pay_then as *const () as usize,
        Wrap::Wait => wait_for as *const () as usize,
    }
}

/// The real function [`wrap`] kept last.
fn take_pending() -> usize {
    let me = thread();
    let depth = me.pending_depth.load(Relaxed) as usize - 1;
    let real = me.pending[depth].load(Relaxed) as usize;
    me.pending_depth.store(depth as u64, Relaxed);
    real
}

type Six = unsafe extern "C-unwind" fn(usize, usize, usize, usize, usize, usize) -> usize;

/// An output function during an experiment: a wake-up (see [`wake_end`]) around the real one
/// (with six register arguments, of which it reads those it has).
unsafe extern "C-unwind" fn pay_then(
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
    f: usize,
) -> usize {
    let real: Six = core::mem::transmute::<usize, Six>(take_pending());
    let waking = wake_start();
    let result = real(a, b, c, d, e, f);
    wake_end(waking);
    result
}

/// An input function or a poll during an experiment: a wait (see [`block_end`]).
unsafe extern "C-unwind" fn wait_for(
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
    f: usize,
) -> usize {
    let real: Six = core::mem::transmute::<usize, Six>(take_pending());
    let waiting = block_start();
    let result = real(a, b, c, d, e, f);
    block_end(waiting);
    result
}

/// At the program's exit (`exit`, or a return from `main`): the progress point's counts into
/// the control page (a program that ends otherwise leaves them zero: `fsprof` says so).
extern "C" fn at_exit() {
    if let Some(control) = control() {
        selected::progress_counts(control);
        control.exited.store(1, Release);
    }
}

/// The timer's handler: the CPU time this look stands for counts as the selected code's if the
/// thread's marks say it is there now; then it pays.
///
/// What a look stands for: from the perf clock, exactly one period, and the looks' own cost in
/// proportion to it (`Control::credit_ppm`, which `fsprof` measures). That clock counts user and
/// kernel time alike but, opened with `exclude_kernel` (all `perf_event_paranoid=2` allows),
/// drops a period that ends in the kernel: looks land in user code only, each one period
/// apart on average, so one period each credits the selected code its own time. The thread's
/// CPU time since its previous look, credited before, held the dropped periods too: a thread
/// that spent a fifth of its time in system calls (a loopback server's, on reads and writes)
/// had its selected code credited a fifth too much, and a speedup of it was predicted 3-6
/// points above what the real one bought (2026-12-03). From a POSIX timer, which counts the
/// same clock but expires only at the scheduler's ticks and is delivered on the way back to
/// user code (so even a tick in the kernel looks), the time since the previous look (which holds
/// the looks' own cost).
extern "C" fn on_tick(_signal: c_int, _info: *mut c_void, _context: *mut c_void) {
    let Some(control) = control() else {
        return;
    };
    let me = thread();
    let now = clock(CLOCK_THREAD_CPUTIME_ID);
    let since = now.saturating_sub(me.last_cpu.swap(now, Relaxed));
    let timer = me.timer.load(Relaxed);
    let period = me.period.load(Relaxed);
    let ran = match timer & PERF_TIMER {
        0 => since,
        // With the looks' own cost, which the perf clock does not count (`Control::credit_ppm`).
        _ => {
            let credit = u128::from(control.credit_ppm.load(Relaxed).min(1_000_000));
            period + (u128::from(period) * credit / 1_000_000) as u64
        }
    };
    // A new period asked for (a quiet stretch begins or ends): from this look on.
    let wanted = looks_period(control);
    if wanted != period && timer != 0 && rearm(timer, wanted) {
        me.period.store(wanted, Relaxed);
    }
    control.samples.fetch_add(1, Relaxed);
    let experiment = Experiment::from_word(control.current.load(Acquire));
    let selected = experiment.candidate.map(usize::from);
    if selected.is_some_and(|candidate| selected::is_selected(control, me, candidate)) {
        catch_up(control, me);
        let delay = (u128::from(ran) * u128::from(experiment.speedup_ppm) / 1_000_000) as u64;
        me.local.fetch_add(delay, Relaxed);
        control.global_delay_ns.fetch_add(delay, Release);
        selected::delay_added(delay);
        control.selected_samples.fetch_add(1, Relaxed);
    }
    if me.waiting.load(Relaxed) == 0 {
        pay();
    }
}

mod selected;

fn getpid() -> u64 {
    syscall(SYS_GETPID, 0, 0, 0, 0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_numbers_are_parsed_strictly() {
        assert_eq!(parse_number(b"3"), Some(3));
        assert_eq!(parse_number(b"1023"), Some(1023));
        assert_eq!(parse_number(b""), None);
        assert_eq!(parse_number(b"-1"), None);
        assert_eq!(parse_number(b"12x"), None);
        assert_eq!(parse_number(b"9999999999"), None);
    }
}
