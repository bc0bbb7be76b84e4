//! Opens the perf events the perf sampler (`perf.rs`) reads: per thread, a task-clock event
//! that samples the thread every period of its CPU time (its time, count, registers and stack,
//! its switches in and out of its CPU, and the threads it makes), and a context-switch event whose every overflow runs
//! a program that copies the thread's slots as it leaves; or, in the per-CPU design
//! (`cpu_wide.rs`), a cpu-clock and a context-switch event per CPU. It chooses the attributes
//! and opens the events disabled, and holds the requests made of an open event (a program
//! attached, a ring shared, the timer re-phased); it does not map their rings, load programs or
//! decide when to enable them.

use crate::native::layout::{DEPARTURE_STACK_DUMP, REGS_MASK, STACK_DUMP};
use nix::errno::Errno;
use nix::libc;
use perf_event_open_sys as sys;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A task-clock event on `tid`, disabled, sampling time (CLOCK_MONOTONIC, the clock of the BPF
/// program's `ktime_get_ns`), its count, registers and stack every `period_ns` of the thread's
/// CPU time, and, if `follow`, its switches.
pub(super) fn open_event(tid: i32, period_ns: u64, follow: bool) -> Result<OwnedFd, Errno> {
    let mut attr = software_event(sys::bindings::PERF_COUNT_SW_TASK_CLOCK, period_ns, SAMPLE);
    attr.sample_regs_user = REGS_MASK;
    attr.sample_stack_user = STACK_DUMP;
    // Kernel time counts: a thread inside a system call is sampled there (with its user
    // registers and stack), as it would be by a timer, not only once back in user space.
    attr.set_exclude_hv(1);
    attr.set_exclude_callchain_kernel(1);
    // The thread's switches in and out of its CPU, in the same ring, with their time.
    attr.set_context_switch(u64::from(follow));
    // The threads it makes, with the time each was born (the sampler counts a new thread's
    // time from then, not from the tick before it found it).
    attr.set_task(1);
    attr.set_sample_id_all(1);
    open(attr, tid)
}

/// A task-clock event on `tid` that only counts, enabled: the thread's time on a CPU as the
/// kernel's clock measures it, which, unlike the thread's CPU-time clock, includes time a
/// hypervisor took from the CPU while the thread ran on it (steal), as the samplers' times do.
/// Read with [`counted_ns`]. For tests that compare those times with the thread's.
#[cfg(test)]
pub(super) fn open_counter(tid: i32) -> Result<OwnedFd, Errno> {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        config: sys::bindings::PERF_COUNT_SW_TASK_CLOCK as u64,
        ..Default::default()
    };
    attr.set_exclude_hv(1);
    open(attr, tid)
}

/// What the counter [`open_counter`] made has counted, in ns.
#[cfg(test)]
pub(super) fn counted_ns(counter: &OwnedFd) -> u64 {
    let mut value = 0u64;
    // SAFETY: reads 8 bytes into a u64 of our own.
    let read = unsafe { libc::read(counter.as_raw_fd(), (&raw mut value).cast(), 8) };
    assert_eq!(read, 8, "reading a task-clock counter");
    value
}

/// What a sample of either event holds, in the order the kernel writes it: the event's id
/// first (the two share a ring), the thread, the time, its count, registers and stack.
const SAMPLE: u32 = sys::bindings::PERF_SAMPLE_IDENTIFIER
    | sys::bindings::PERF_SAMPLE_TID
    | sys::bindings::PERF_SAMPLE_TIME
    | sys::bindings::PERF_SAMPLE_READ
    | sys::bindings::PERF_SAMPLE_REGS_USER
    | sys::bindings::PERF_SAMPLE_STACK_USER;

/// A software event that counts `tid`'s departures from its CPU, each one an overflow (so that
/// its program copies the slots then). Its program has it write a sample (as the task-clock
/// event's, into that event's ring) only where the thread was preempted (`sampling::Departure`).
pub(super) fn open_switch_event(tid: i32) -> Result<OwnedFd, Errno> {
    let mut attr = software_event(sys::bindings::PERF_COUNT_SW_CONTEXT_SWITCHES, 1, SAMPLE);
    attr.sample_regs_user = REGS_MASK;
    attr.sample_stack_user = DEPARTURE_STACK_DUMP;
    attr.set_exclude_hv(1);
    attr.set_exclude_callchain_kernel(1);
    open(attr, tid)
}

/// The attributes of a disabled software event `config` that overflows every `period` and
/// samples `sample_type`, timed with CLOCK_MONOTONIC.
fn software_event(config: u32, period: u64, sample_type: u32) -> sys::bindings::perf_event_attr {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        config: config as u64,
        sample_type: sample_type as u64,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = period;
    attr.set_disabled(1);
    attr.set_use_clockid(1);
    attr
}

/// Opens the event `attr` on thread `tid`, any CPU.
fn open(attr: sys::bindings::perf_event_attr, tid: i32) -> Result<OwnedFd, Errno> {
    open_on(attr, tid, -1)
}

/// Opens the event `attr` on thread `tid` (-1: any) and CPU `cpu` (-1: any).
fn open_on(mut attr: sys::bindings::perf_event_attr, tid: i32, cpu: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: a valid attribute block; the result is checked.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            tid,
            cpu,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A software event `config` on `cpu`, disabled, writing what a thread's own events write
/// (the per-CPU design, `cpu_wide.rs`): the cpu-clock every `period` ns of any thread but the
/// idle one, with the births of threads and processes; or the context switches, a sample every
/// `period`-th.
pub(super) fn open_cpu_event(cpu: u32, config: u32, period: u64) -> Result<OwnedFd, Errno> {
    let clock = config == sys::bindings::PERF_COUNT_SW_CPU_CLOCK;
    let mut attr = software_event(config, period, SAMPLE);
    attr.sample_regs_user = REGS_MASK;
    attr.sample_stack_user = if clock {
        STACK_DUMP
    } else {
        DEPARTURE_STACK_DUMP
    };
    attr.set_exclude_hv(1);
    attr.set_exclude_idle(u64::from(clock));
    attr.set_exclude_callchain_kernel(1);
    attr.set_task(u64::from(clock));
    attr.set_sample_id_all(1);
    open_on(attr, -1, cpu as i32)
}

/// Opens a sampling event on CPU `cpu` at the tracepoint `tracepoint` (its id in tracefs) that
/// writes a sample at every hit its program keeps, with the registers and stack of the thread
/// the hit interrupted, as `open_cpu_event`'s clock does (the kernel takes a tracepoint's user
/// registers from the task's saved ones), and the births of threads and processes as the
/// clock's event writes them: the scheduler's own tick, in `cpu_wide::tick`. (Without the
/// births, a thread was first known at fsprof's next tick and stood for that tick's whole
/// interval: `requests`' short threads read 7.8 points high.)
pub(super) fn open_tracepoint_event(cpu: u32, tracepoint: u64) -> Result<OwnedFd, Errno> {
    let mut attr = software_event(0, 1, SAMPLE);
    attr.type_ = sys::bindings::PERF_TYPE_TRACEPOINT;
    attr.config = tracepoint;
    attr.sample_regs_user = REGS_MASK;
    attr.sample_stack_user = STACK_DUMP;
    attr.set_exclude_hv(1);
    attr.set_exclude_callchain_kernel(1);
    attr.set_task(1);
    attr.set_sample_id_all(1);
    open_on(attr, -1, cpu as i32)
}

/// How many BPF programs are attached to `event`'s tracepoint (by any process: a tracepoint's
/// programs are the tracepoint's); `None` where the kernel does not say.
pub(super) fn tracepoint_programs(event: &OwnedFd) -> Option<u32> {
    #[repr(C)]
    struct Query {
        ids_len: u32,
        prog_cnt: u32,
    }
    let mut query = Query {
        ids_len: 0,
        prog_cnt: 0,
    };
    // SAFETY: a valid descriptor and a query block the kernel fills (no ids asked for).
    let done = unsafe {
        libc::ioctl(
            event.as_raw_fd(),
            sys::bindings::QUERY_BPF as _,
            std::ptr::from_mut(&mut query),
        )
    } == 0;
    done.then_some(query.prog_cnt)
}

/// Gives a thread's timer a tick of a new length, drawn around `tick_ns` (its rate half to one
/// and a half times `1 / tick_ns`, uniformly: see below), from its next tick on, which then
/// comes that long after now (or after the thread's next return to a CPU). Called at each read of the thread's ring that has samples
/// (see `perf::REPHASE_SAMPLES`), it moves the grid of ticks, which otherwise stays fixed in the
/// thread's CPU time: keeping a random tick of several (as 0817dca to 27873a6 did) does not
/// move the grid, and a loop whose CPU time is near a multiple of the tick length kept in step
/// with it (`contracts`, checks of 8, 3 and 6 us in a fixed loop: 5 points low at 250 Hz, 12 high at
/// 1000 Hz; `blocking`'s `work` 9% high beside a busy loop). Starting again from a random place
/// every few ms, the grid is systematic sampling with a random start, which has no bias.
/// The kernel asks the thread's CPU to restart the timer if the thread is running (an
/// interprocessor interrupt). Returns the new tick's length; a refusal leaves the timer as it
/// was.
pub(super) fn rephase(event: &OwnedFd, tick_ns: u64) -> Option<u64> {
    // The rate is drawn, not the length: a timer is re-phased at reads, every so much time
    // rather than every so many samples, so its samples in a stretch are the stretch over its
    // length, and their mean rate is the mean of the rates drawn. Lengths drawn uniformly
    // from half to one and a half ticks gave ln 3 = 1.099 times the rate asked: at 1 kHz,
    // 1539 samples of a 1.42 s thread against perf's 1406 of 1.41 s, and the kernel's work
    // for them on the program's CPU (2026-12-05, issue 39).
    let mut period = (tick_ns as f64 / (0.5 + fastrand::f64())) as u64;
    period = period.max(10_000);
    // SAFETY: a valid descriptor, and the kernel reads a u64 through the pointer (the crate's
    // `ioctls::PERIOD` passes the value itself, which the kernel would take for an address).
    let done = unsafe {
        libc::ioctl(
            event.as_raw_fd(),
            sys::bindings::PERIOD as _,
            std::ptr::from_mut(&mut period),
        )
    } == 0;
    done.then_some(period)
}

/// Has `event` write its samples into `ring_event`'s ring (both the same thread's or CPU's,
/// timed by the same clock); whether the kernel agreed.
pub(super) fn output_to(event: &OwnedFd, ring_event: &OwnedFd) -> bool {
    // SAFETY: valid descriptors.
    unsafe { sys::ioctls::SET_OUTPUT(event.as_raw_fd(), ring_event.as_raw_fd()) == 0 }
}

/// Attaches `program` to `event`.
pub(super) fn attach(event: &OwnedFd, program: &OwnedFd) -> Result<(), Errno> {
    // SAFETY: valid descriptors.
    match unsafe { sys::ioctls::SET_BPF(event.as_raw_fd(), program.as_raw_fd() as u32) } {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}
