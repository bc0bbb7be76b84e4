//! Opens the perf events the perf sampler (`perf.rs`) reads: per thread, a task-clock event
//! that samples the thread every period of its CPU time (its time, count, registers and stack,
//! its switches in and out of its CPU, and the threads it makes), and a context-switch event whose every overflow runs
//! a program that copies the thread's slots as it leaves. It chooses the attributes and opens
//! the events disabled; it does not map their rings, attach programs or enable them.

use super::perf::{DEPARTURE_STACK_DUMP, REGS_MASK, STACK_DUMP};
use nix::errno::Errno;
use nix::libc;
use perf_event_open_sys as sys;
use std::os::fd::{FromRawFd, OwnedFd};

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
/// event's, into that event's ring) only where the thread was preempted (`bpf::Departure`).
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
fn open(mut attr: sys::bindings::perf_event_attr, tid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: a valid attribute block; the result is checked.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            tid,
            -1,
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
