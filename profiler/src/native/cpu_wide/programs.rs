//! The programs of the per-CPU design (`cpu_wide.rs`), hand-assembled: the one at the
//! scheduler's `sched_switch` tracepoint (each departure of a watched thread from its CPU and
//! each return to one, with the thread's time on a CPU counted there), the ones at the start
//! and the end of an `exec` and at a thread's exit (which stop watching the thread), and the part of the sampling
//! program that records a thread's time on a CPU at each sample. Not here: the sampling
//! program itself (`sampling.rs`) and the slot copies (`fragments.rs`), the maps, events and links (`cpu_wide.rs`),
//! the records' parsing (`ring.rs`).

use super::direct::value_of_watched;
use crate::native::asm::{
    insn, Asm, Insn, Label, ADD64_IMM, ADD64_REG, AND64_IMM, CALL, EXIT,
    HELPER_GET_CURRENT_PID_TGID, HELPER_GET_CURRENT_TASK_BTF, HELPER_KTIME_GET_NS,
    HELPER_MAP_DELETE_ELEM, HELPER_PROBE_READ_KERNEL, HELPER_PROBE_READ_USER,
    HELPER_RINGBUF_OUTPUT, HELPER_RINGBUF_QUERY, HELPER_RINGBUF_RESERVE, HELPER_RINGBUF_SUBMIT,
    HELPER_TASK_PT_REGS, JA, JEQ_IMM, JEQ_REG, JGT_IMM, JGT_REG, JLT_REG, JNE_IMM, JNE_REG, LDX_DW,
    LDX_W, LD_IMM64, LSH64_IMM, MOV64_IMM, MOV64_REG, OR64_IMM, OR64_REG, PSEUDO_MAP_FD,
    RB_AVAIL_DATA, RB_NO_WAKEUP, RSH64_IMM, STX_DW, STX_W, ST_DW, ST_W, SUB64_REG,
};
use crate::native::fragments::{output_sized, value_of_thread, watched_index};
use crate::native::layout::CONTEXT;
use crate::native::layout::INDEX_SLOT;
use crate::native::layout::PROCESS_KEY;
use crate::native::layout::SLOTS;
use crate::native::layout::{
    COPY_HEADER, FOLD_KINDS, FOLD_RECORD, VALUE_ADDRESSES, VALUE_BLOCK_COPIED, VALUE_CPU_NS,
    VALUE_DEPARTED, VALUE_FOLDED, VALUE_FOLD_KIND, VALUE_FOLD_LEFT, VALUE_FOLD_RECORD,
    VALUE_NEAR_UNTIL, VALUE_ON_SINCE, VALUE_QUIET, VALUE_SWITCHES, VALUE_SWITCH_RECORD, VALUE_TID,
    VALUE_TIME_RECORD, VALUE_WATCHED_AT,
};
use crate::native::layout::{
    CPU_TIME, DEPARTED, DEPARTURE_STACK, EXECED, FOLDED, FOLD_MOST_NS, JUST_BACK_NS, RETURNED,
    SLOTLESS,
};
use std::os::fd::RawFd;

/// The kinds of folded stretches, as `VALUE_FOLD_KIND` holds them (see `stream::Folded`).
const BLOCKED: i32 = 0;
const NEAR: i32 = 1;
const FAR: i32 = 2;
/// A task's state bit once it has exited, as it leaves its CPU for the last time.
const TASK_DEAD: i32 = 0x80;

/// Part of the sampling program (`sampling::program`, `r6` the value, `r7` the time, the index at
/// `INDEX_SLOT`): the thread's time on a CPU at the sample in the ring `copies` (slot number
/// [`CPU_TIME`]): what it ran up to its latest departure, and since it came back. A thread
/// watched while it ran counts from its watch (see [`on_since_watched`]).
pub(in crate::native) fn cpu_time(p: &mut Asm, copies: RawFd) {
    let (cpu, on, record) = (
        VALUE_CPU_NS as i16,
        VALUE_ON_SINCE as i16,
        VALUE_TIME_RECORD as i16,
    );
    // A sample since: a preemption is near a block's end no more (as `Sampler::keep_sample`).
    p.push(insn(ST_DW, 6, 0, VALUE_NEAR_UNTIL as i16, 0));
    // Not known to be on a CPU: watched while it ran, or its return was not traced.
    let known = p.label();
    on_since_watched(p);
    p.push(insn(LDX_DW, 1, 6, on, 0));
    p.jump(JNE_IMM, 1, 0, 0, known);
    p.push(insn(STX_DW, 6, 7, on, 0));
    inferred_return(p, copies);
    p.push(insn(MOV64_REG, 1, 7, 0, 0));
    p.bind(known);
    p.extend([
        insn(MOV64_REG, 2, 7, 0, 0),
        insn(SUB64_REG, 2, 1, 0, 0),
        insn(LDX_DW, 3, 6, cpu, 0),
        insn(ADD64_REG, 2, 3, 0, 0),
    ]);
    record_event(p, record, CPU_TIME);
    p.extend([
        insn(STX_DW, 6, 2, record + 16, 0),
        insn(ST_DW, 6, 0, record + 24, 0),
    ]);
    output(p, copies, record);
}

/// For a thread found on a CPU (at a sample, or leaving it; `r6` its value) that is not known
/// to be on one, with no switch since fsprof watched it while it ran, nor a folded departure:
/// it has been on it since its watch (a return onto a CPU would have said otherwise), so that
/// is when it came (`VALUE_ON_SINCE` := `VALUE_WATCHED_AT`; 0 where it was watched blocked, as a
/// process's main thread is: its return may go untraced, rarely, and its blocked time would
/// count). Counted from its first sample or departure
/// instead, a thread watched while it ran lost up to a tick: 30 ms threads a tick found read
/// 26-27 ms, a fifth of them. Uses r1.
fn on_since_watched(p: &mut Asm) {
    let done = p.label();
    p.push(insn(LDX_DW, 1, 6, VALUE_ON_SINCE as i16, 0));
    p.jump(JNE_IMM, 1, 0, 0, done);
    p.push(insn(LDX_DW, 1, 6, VALUE_SWITCHES as i16, 0));
    p.jump(JNE_IMM, 1, 0, 0, done);
    p.push(insn(LDX_DW, 1, 6, VALUE_FOLD_LEFT as i16, 0));
    p.jump(JNE_IMM, 1, 0, 0, done);
    p.push(insn(LDX_DW, 1, 6, VALUE_WATCHED_AT as i16, 0));
    p.jump(JEQ_IMM, 1, 0, 0, done); // not known to run when watched
    p.push(insn(STX_DW, 6, 1, VALUE_ON_SINCE as i16, 0));
    p.bind(done);
}

/// A return record (see [`returned`]) for a thread found on a CPU, at a sample or a departure,
/// though no return was recorded since its latest departure (`r6` its value, `r7` the time):
/// some switches onto a CPU pass without the `sched_switch` tracepoint on some kernels (seen
/// on Linux 6.18: a thread preempted by some tasks came back untraced, 1 return in a few
/// hundred). It says it was inferred; its time is the earliest the thread is known to run.
/// A folded departure's stretch ends there too. Uses r1-r5, r8.
fn inferred_return(p: &mut Asm, copies: RawFd) {
    let (ends, skip) = (p.label(), p.label());
    p.push(insn(LDX_DW, 1, 6, VALUE_FOLD_LEFT as i16, 0));
    p.jump(JNE_IMM, 1, 0, 0, ends); // a folded departure: its stretch ends
    p.push(insn(LDX_DW, 1, 6, VALUE_SWITCHES as i16, 0));
    p.jump(JEQ_IMM, 1, 0, 0, skip); // no switch yet: watched while it ran
    p.bind(ends);
    came_back(p, copies, true);
    p.bind(skip);
}

/// The thread whose value is `r6` is back on a CPU at the time `r7`: after a folded departure,
/// its stretch is folded into its kind's total, or, longer than [`FOLD_MOST_NS`], recorded
/// whole (the totals so far, the departure at its own time, then the return); else a return
/// record (see [`returned`]). Back from a block, a preemption within [`JUST_BACK_NS`] of CPU
/// time is near its end. Uses r1-r5, r8.
fn came_back(p: &mut Asm, copies: RawFd, inferred: bool) {
    let (left, kind) = (VALUE_FOLD_LEFT as i16, VALUE_FOLD_KIND as i16);
    let (unfolded, long, after) = (p.label(), p.label(), p.label());
    p.push(insn(LDX_DW, 8, 6, left, 0));
    p.jump(JEQ_IMM, 8, 0, 0, unfolded);
    p.extend([
        insn(ST_DW, 6, 0, left, 0),
        insn(MOV64_REG, 2, 7, 0, 0),
        insn(SUB64_REG, 2, 8, 0, 0),
    ]);
    p.jump(JGT_IMM, 2, 0, FOLD_MOST_NS as i32, long);
    p.push(insn(LDX_DW, 3, 6, kind, 0));
    for k in 0..FOLD_KINDS {
        let total = (VALUE_FOLDED + 8 * k) as i16;
        let other = p.label();
        p.jump(JNE_IMM, 3, 0, k as i32, other);
        p.extend([
            insn(LDX_DW, 1, 6, total, 0),
            insn(ADD64_REG, 1, 2, 0, 0),
            insn(STX_DW, 6, 1, total, 0),
        ]);
        p.jump(JA, 0, 0, 0, after);
        p.bind(other);
    }
    // An unknown kind (cannot be): nothing added.
    p.jump(JA, 0, 0, 0, after);
    p.bind(long);
    flush(p, copies, 8);
    // The departure, at its own time, as the switch program would have recorded it.
    let record = VALUE_SWITCH_RECORD as i16;
    record_event(p, record, DEPARTED);
    p.extend([
        insn(STX_DW, 6, 8, record, 0),
        insn(LDX_DW, 2, 6, VALUE_CPU_NS as i16, 0),
        insn(STX_DW, 6, 2, record + 16, 0),
    ]);
    next_switch(p);
    p.extend([
        insn(LSH64_IMM, 1, 0, 0, 1),
        insn(OR64_IMM, 1, 0, 0, SLOTLESS as i32),
        insn(LDX_DW, 3, 6, kind, 0),
    ]);
    let blocked = p.label();
    p.jump(JEQ_IMM, 3, 0, BLOCKED, blocked);
    p.push(insn(OR64_IMM, 1, 0, 0, 1)); // preempted
    p.bind(blocked);
    p.push(insn(STX_DW, 6, 1, record + 24, 0));
    output(p, copies, record);
    returned(p, copies, inferred);
    p.jump(JA, 0, 0, 0, after);
    p.bind(unfolded);
    returned(p, copies, inferred);
    p.bind(after);
    let not_blocked = p.label();
    p.push(insn(LDX_DW, 1, 6, kind, 0));
    p.jump(JNE_IMM, 1, 0, BLOCKED, not_blocked);
    p.extend([
        insn(LDX_DW, 1, 6, VALUE_CPU_NS as i16, 0),
        insn(ADD64_IMM, 1, 0, 0, JUST_BACK_NS as i32),
        insn(STX_DW, 6, 1, VALUE_NEAR_UNTIL as i16, 0),
    ]);
    p.bind(not_blocked);
}

/// The record of the folded totals of the thread whose value is `r6`, at the time in register
/// `time`, if any is not 0; the totals start again from 0. Uses r1-r5.
fn flush(p: &mut Asm, copies: RawFd, time: u8) {
    let record = VALUE_FOLD_RECORD as i16;
    p.push(insn(LDX_DW, 1, 6, VALUE_FOLDED as i16, 0));
    for k in 1..FOLD_KINDS {
        p.extend([
            insn(LDX_DW, 2, 6, (VALUE_FOLDED + 8 * k) as i16, 0),
            insn(OR64_REG, 1, 2, 0, 0),
        ]);
    }
    let skip = p.label();
    p.jump(JEQ_IMM, 1, 0, 0, skip);
    record_event(p, record, FOLDED);
    p.push(insn(STX_DW, 6, time, record, 0));
    for k in 0..FOLD_KINDS {
        let total = (VALUE_FOLDED + 8 * k) as i16;
        p.extend([
            insn(LDX_DW, 1, 6, total, 0),
            insn(STX_DW, 6, 1, record + 16 + 8 * k as i16, 0),
            insn(ST_DW, 6, 0, total, 0),
        ]);
    }
    next_switch(p);
    p.push(insn(STX_DW, 6, 1, record + 16 + 8 * FOLD_KINDS as i16, 0));
    output_sized(p, copies, record, FOLD_RECORD);
    p.bind(skip);
}

/// The return record of the thread whose value is `r6` at the time `r7`: its time on a CPU so
/// far, its switch number, whether `inferred` (see [`inferred_return`]). Uses r1-r5.
fn returned(p: &mut Asm, copies: RawFd, inferred: bool) {
    let record = VALUE_SWITCH_RECORD as i16;
    record_event(p, record, RETURNED);
    p.extend([
        insn(LDX_DW, 2, 6, VALUE_CPU_NS as i16, 0),
        insn(STX_DW, 6, 2, record + 16, 0),
    ]);
    next_switch(p);
    p.extend([
        insn(OR64_IMM, 1, 0, 0, i32::from(inferred)),
        insn(STX_DW, 6, 1, record + 24, 0),
    ]);
    output(p, copies, record);
}

/// The header of an event record at `record` in the value `r6`: the time (`r7`), the index
/// (at `INDEX_SLOT`), the kind; uses r1.
fn record_event(p: &mut Asm, record: i16, kind: usize) {
    p.extend([
        insn(STX_DW, 6, 7, record, 0),
        insn(LDX_W, 1, 10, INDEX_SLOT, 0),
        insn(STX_W, 6, 1, record + 8, 0),
        insn(ST_W, 6, 0, record + 12, kind as i32),
    ]);
}

/// Puts the 32-byte record at `record` in the value `r6` in the ring `copies`.
fn output(p: &mut Asm, copies: RawFd, record: i16) {
    output_sized(p, copies, record, COPY_HEADER);
}

/// The next switch number of the value `r6` in `r1`, counted.
fn next_switch(p: &mut Asm) {
    let switches = VALUE_SWITCHES as i16;
    p.extend([
        insn(LDX_DW, 1, 6, switches, 0),
        insn(MOV64_REG, 2, 1, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, 1),
        insn(STX_DW, 6, 2, switches, 0),
        insn(LSH64_IMM, 1, 0, 0, 1),
    ]);
}

/// The program at `sched_switch` (its arguments: whether the switch is a preemption, the task
/// leaving, the task coming, the state the leaving one left in). The leaving task is the
/// current one: if watched, its time on a CPU is counted up to now, and its departure is
/// folded or recorded (see [`departed`]). The coming one's pid is read from its `task_struct` at
/// `pid_offset`: if watched, it is on a CPU from now, and a return record says so, or its
/// folded stretch ends (see [`came_back`]). A thread no longer followed (its value's `VALUE_QUIET`) has its time counted and
/// no record. Other switches cost an array load each side (`direct.rs`; and no read of the
/// clock: the switches of threads fsprof does not watch, every switch of the machine, run this
/// program).
/// `typed`: the program is loaded for the tracepoint's typed hook (`tp_btf`), and reads both
/// pids from the tasks its arguments point to with a plain load each; otherwise (a raw
/// tracepoint) the leaving one's through a helper and the coming one's through
/// `bpf_probe_read_kernel`, two calls that were most of the cost of a switch fsprof does not
/// watch.
pub(super) fn switch_program(
    map: RawFd,
    (copies, copies_size): (RawFd, usize),
    (watched, direct): (RawFd, RawFd),
    pid_offset: u32,
    gap_ns: u64,
    typed: bool,
) -> Vec<Insn> {
    let (cpu, on) = (VALUE_CPU_NS as i16, VALUE_ON_SINCE as i16);
    const LEAVING: i16 = -12;
    let mut p = Asm::new();
    p.extend([
        insn(STX_DW, 10, 1, CONTEXT, 0),
        insn(MOV64_IMM, 7, 0, 0, 0), // r7: the time, read once a watched thread is found
    ]);
    match typed {
        true => p.extend([
            insn(LDX_DW, 2, 1, 8, 0), // the leaving task
            insn(LDX_W, 0, 2, pid_offset as i16, 0),
        ]),
        false => p.push(insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID)),
    }
    p.push(insn(STX_W, 10, 0, LEAVING, 0));
    let (coming, end) = (p.label(), p.label());
    value_of_watched(&mut p, (direct, watched, map), LEAVING, coming);
    p.extend([
        insn(MOV64_REG, 6, 0, 0, 0), // r6: the leaving thread's value
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0),
    ]);
    on_since_watched(&mut p);
    let known = p.label();
    p.push(insn(LDX_DW, 1, 6, on, 0));
    p.jump(JNE_IMM, 1, 0, 0, known);
    inferred_return(&mut p, copies);
    p.bind(known);
    p.extend([insn(LDX_DW, 1, 6, on, 0), insn(LDX_DW, 2, 6, cpu, 0)]);
    let counted = p.label();
    p.jump(JEQ_IMM, 1, 0, 0, counted); // not known to be on a CPU: nothing to add
    p.extend([
        insn(MOV64_REG, 3, 7, 0, 0),
        insn(SUB64_REG, 3, 1, 0, 0),
        insn(ADD64_REG, 2, 3, 0, 0),
    ]);
    p.bind(counted);
    p.extend([
        insn(STX_DW, 6, 2, cpu, 0),
        insn(ST_DW, 6, 0, on, 0),
        insn(LDX_DW, 1, 6, VALUE_QUIET as i16, 0),
    ]);
    let quiet = p.label();
    p.jump(JNE_IMM, 1, 0, 0, quiet); // quiet: no record
    departed(&mut p, copies, copies_size, gap_ns);
    p.bind(quiet);
    // Its last switch (it is dead): watched no more, so that its id, once reused, is not (its
    // value no longer its either, for `direct.rs`'s table).
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 2, 1, 24, 0),
        insn(AND64_IMM, 2, 0, 0, TASK_DEAD),
    ]);
    p.jump(JEQ_IMM, 2, 0, 0, coming);
    p.extend([
        insn(ST_DW, 6, 0, VALUE_TID as i16, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(LEAVING)),
        insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
    ]);
    p.bind(coming);
    p.extend([insn(LDX_DW, 1, 10, CONTEXT, 0), insn(LDX_DW, 3, 1, 16, 0)]);
    match typed {
        true => p.extend([
            insn(LDX_W, 0, 3, pid_offset as i16, 0),
            insn(STX_W, 10, 0, -8, 0),
        ]),
        false => {
            p.extend([
                insn(ADD64_IMM, 3, 0, 0, pid_offset as i32),
                insn(MOV64_REG, 1, 10, 0, 0),
                insn(ADD64_IMM, 1, 0, 0, -8),
                insn(MOV64_IMM, 2, 0, 0, 4),
                insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
            ]);
            p.jump(JNE_IMM, 0, 0, 0, end);
        }
    }
    value_of_watched(&mut p, (direct, watched, map), -8, end);
    p.push(insn(MOV64_REG, 6, 0, 0, 0)); // r6: the coming thread's value
    let timed = p.label();
    p.jump(JNE_IMM, 7, 0, 0, timed);
    p.extend([
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0),
    ]);
    p.bind(timed);
    p.extend([
        insn(STX_DW, 6, 7, on, 0),
        insn(LDX_DW, 1, 6, VALUE_QUIET as i16, 0),
    ]);
    p.jump(JNE_IMM, 1, 0, 0, end); // quiet: no record
    came_back(&mut p, copies, false);
    p.bind(end);
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}

/// Part of the program at `sched_switch`, for a watched thread leaving its CPU and followed
/// (`r6` its value, `r7` the time, its time on a CPU counted): its stack, at most once per
/// `gap_ns` (see [`departure_stack`]); then, without marks (no slot known), without a stack
/// copied now and not at its last switch, its departure is folded (see `layout::FOLD_MOST_NS`:
/// when and how it left are kept in its value, and its return adds the stretch to its kind's
/// total); else the folded totals are recorded, then its slots' copies and its departure.
fn departed(p: &mut Asm, copies: RawFd, copies_size: usize, gap_ns: u64) {
    let record = VALUE_SWITCH_RECORD as i16;
    departure_stack(p, copies, copies_size, gap_ns);
    // r9: preempted, as the switch says, or as the thread left still runnable (state 0).
    p.extend([
        insn(LDX_DW, 2, 10, CONTEXT, 0),
        insn(LDX_DW, 3, 2, 0, 0),
        insn(LDX_DW, 4, 2, 24, 0),
        insn(MOV64_IMM, 9, 0, 0, 1),
    ]);
    let preempted = p.label();
    p.jump(JNE_IMM, 3, 0, 0, preempted);
    p.jump(JEQ_IMM, 4, 0, 0, preempted);
    p.push(insn(MOV64_IMM, 9, 0, 0, 0));
    p.bind(preempted);
    // r8: not 0 where some slot is known (a thread that marked).
    p.push(insn(LDX_DW, 8, 6, VALUE_ADDRESSES as i16, 0));
    for slot in 1..SLOTS {
        p.extend([
            insn(LDX_DW, 3, 6, (VALUE_ADDRESSES + 8 * slot) as i16, 0),
            insn(OR64_REG, 8, 3, 0, 0),
        ]);
    }
    // Folded (see `layout::FOLD_MOST_NS`): no slot, no stack copied now, not its last switch.
    let (recorded, leaving_end) = (p.label(), p.label());
    p.jump(JNE_IMM, 8, 0, 0, recorded);
    p.push(insn(LDX_DW, 1, 6, VALUE_DEPARTED as i16, 0));
    p.jump(JEQ_REG, 1, 7, 0, recorded);
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 2, 1, 24, 0),
        insn(AND64_IMM, 2, 0, 0, TASK_DEAD),
    ]);
    p.jump(JNE_IMM, 2, 0, 0, recorded);
    let (kind, near) = (VALUE_FOLD_KIND as i16, VALUE_NEAR_UNTIL as i16);
    p.push(insn(STX_DW, 6, 7, VALUE_FOLD_LEFT as i16, 0));
    let folded_preempted = p.label();
    p.jump(JNE_IMM, 9, 0, 0, folded_preempted);
    p.extend([insn(ST_DW, 6, 0, kind, BLOCKED), insn(ST_DW, 6, 0, near, 0)]);
    p.jump(JA, 0, 0, 0, leaving_end);
    // Preempted: near the end of a block while its CPU time is within `VALUE_NEAR_UNTIL`.
    p.bind(folded_preempted);
    p.extend([
        insn(LDX_DW, 1, 6, VALUE_CPU_NS as i16, 0),
        insn(LDX_DW, 2, 6, near, 0),
        insn(ST_DW, 6, 0, kind, FAR),
    ]);
    let far = p.label();
    p.jump(JGT_REG, 1, 2, 0, far);
    p.push(insn(ST_DW, 6, 0, kind, NEAR));
    p.bind(far);
    p.jump(JA, 0, 0, 0, leaving_end);
    // Recorded: the folded totals first, then the departure. Blocked, no preemption is near
    // a block's end until it comes back; preempted with its stack copied, the ones after it
    // are near it until a block or a sample.
    p.bind(recorded);
    flush(p, copies, 7);
    let (recorded_preempted, kind_set) = (p.label(), p.label());
    p.jump(JNE_IMM, 9, 0, 0, recorded_preempted);
    p.extend([insn(ST_DW, 6, 0, kind, BLOCKED), insn(ST_DW, 6, 0, near, 0)]);
    p.jump(JA, 0, 0, 0, kind_set);
    p.bind(recorded_preempted);
    p.extend([
        insn(ST_DW, 6, 0, kind, FAR),
        insn(LDX_DW, 1, 6, VALUE_DEPARTED as i16, 0),
    ]);
    p.jump(JNE_REG, 1, 7, 0, kind_set);
    p.push(insn(ST_DW, 6, 0, near, -1));
    p.bind(kind_set);
    p.push(insn(LDX_DW, 2, 6, VALUE_CPU_NS as i16, 0));
    record_event(p, record, DEPARTED);
    p.push(insn(STX_DW, 6, 2, record + 16, 0));
    next_switch(p);
    // The switch number above two flags (see `ring::parse_event`): preempted, and no slot
    // known (a thread that never marked, as most are): no copies, and the departure says so,
    // rather than a record per slot that says there is none.
    p.extend([insn(LSH64_IMM, 1, 0, 0, 1), insn(OR64_REG, 1, 9, 0, 0)]);
    let marked = p.label();
    p.jump(JNE_IMM, 8, 0, 0, marked);
    p.push(insn(OR64_IMM, 1, 0, 0, SLOTLESS as i32));
    p.bind(marked);
    p.extend([
        insn(STX_DW, 6, 1, record + 24, 0),
        insn(AND64_IMM, 1, 0, 0, SLOTLESS as i32),
    ]);
    let slotless = p.label();
    p.jump(JNE_IMM, 1, 0, 0, slotless); // over the copies
    crate::native::fragments::copy_slots(p, copies, true);
    p.bind(slotless);
    output(p, copies, record);
    p.bind(leaving_end);
}

/// The program at an `exec`: removes the current thread and its process's leader (whose id it
/// takes) from the watched threads, with a record of each it removes, and the process's own
/// key (`layout::PROCESS_KEY`); `done` (the program at
/// `sched_process_exec`, whose second argument is the id the thread had before) removes that
/// id too. A thread removed has its value (of the array `map`) say it is no one's. A process
/// removed wakes the recording through `forks`, where given (see `forks.rs`).
pub(super) fn exec_program(
    map: RawFd,
    (copies, forks): (RawFd, Option<super::forks::Wake>),
    watched: RawFd,
    done: bool,
) -> Vec<Insn> {
    const KEY: i16 = -8;
    const RECORD: i16 = -64;
    let mut p = Asm::new();
    p.extend([
        insn(STX_DW, 10, 1, CONTEXT, 0),
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(MOV64_REG, 6, 0, 0, 0), // r6: tgid << 32 | tid
        insn(STX_W, 10, 6, KEY, 0),
    ]);
    let remove = |p: &mut Asm| {
        watched_index(p, watched, KEY);
        let skip = p.label();
        p.jump(JEQ_IMM, 0, 0, 0, skip);
        p.extend([
            insn(LDX_W, 1, 0, 0, 0),
            insn(STX_DW, 10, 7, RECORD, 0),
            insn(STX_W, 10, 1, RECORD + 8, 0),
            insn(ST_W, 10, 0, RECORD + 12, EXECED as i32),
            insn(LDX_W, 2, 10, KEY, 0),
            insn(STX_DW, 10, 2, RECORD + 16, 0),
            insn(ST_DW, 10, 0, RECORD + 24, 0),
            insn(STX_W, 10, 1, INDEX_SLOT, 0),
        ]);
        unwatch(p, map, watched, KEY);
        p.extend([
            insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_REG, 2, 10, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, i32::from(RECORD)),
            insn(MOV64_IMM, 3, 0, 0, COPY_HEADER as i32),
            insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
            insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
        ]);
        p.bind(skip);
    };
    remove(&mut p);
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(RSH64_IMM, 1, 0, 0, 32),
        insn(STX_W, 10, 1, KEY, 0),
    ]);
    remove(&mut p);
    // And the process's key: its threads not watched get no bare samples until fsprof
    // watches the process again, past its exec gate.
    p.extend([
        insn(LDX_W, 1, 10, KEY, 0),
        insn(OR64_IMM, 1, 0, 0, PROCESS_KEY as i32),
        insn(STX_W, 10, 1, KEY, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(KEY)),
        insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
    ]);
    // A process followed that execs (removed: 0) wakes the recording as a fork does: its
    // forks wake nothing until fsprof watches it again, and a shell's `exec` is often followed
    // by one at once.
    if let Some(forks) = forks {
        let kept = p.label();
        p.jump(JNE_IMM, 0, 0, 0, kept);
        super::forks::wake(&mut p, forks, KEY, 7);
        p.bind(kept);
    }
    if done {
        p.extend([
            insn(LDX_DW, 1, 10, CONTEXT, 0),
            insn(LDX_DW, 2, 1, 8, 0),
            insn(STX_W, 10, 2, KEY, 0),
        ]);
        remove(&mut p);
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}

/// The program at `sched_process_exit`, which the exiting thread runs: removes it from the
/// watched threads (its value says it is no one's), so that its id, once reused, is not watched.
/// Attached only while the `sched_switch` program is not (see `CpuWide::exit`), which does so at
/// the thread's last switch, after recording its departure.
pub(super) fn exit_program(map: RawFd, watched: RawFd) -> Vec<Insn> {
    const KEY: i16 = -8;
    let mut p = Asm::new();
    p.extend([
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(STX_W, 10, 0, KEY, 0),
    ]);
    watched_index(&mut p, watched, KEY);
    let end = p.label();
    p.jump(JEQ_IMM, 0, 0, 0, end);
    p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
    unwatch(&mut p, map, watched, KEY);
    p.bind(end);
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}

/// Removes the thread whose id is the stack word at `key` from the watched threads (the hash
/// map `watched`), its value (of the array `map`, its index at [`INDEX_SLOT`]) made no one's
/// (see `direct.rs`). Uses r0-r5.
fn unwatch(p: &mut Asm, map: RawFd, watched: RawFd, key: i16) {
    p.extend(value_of_thread(map));
    let no_value = p.label();
    p.jump(JEQ_IMM, 0, 0, 0, no_value);
    p.push(insn(ST_DW, 0, 0, VALUE_TID as i16, 0));
    p.bind(no_value);
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(key)),
        insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
    ]);
}

/// The stack record's header: the time, the index and kind ([`DEPARTURE_STACK`]), the user
/// registers the thread left with (ip, sp, bp), and how many bytes of its stack follow.
pub(in crate::native) const STACK_HEADER: usize = 48;
/// Bytes of stack room in a departure's stack record: 16 pages from the stack pointer's page
/// on, less what lies below the stack pointer in its page.
const STACK_ROOM: usize = 16 * PAGE;
const PAGE: usize = 4096;
/// The stack word that keeps the first (partial) page's length across the copy's calls.
const FIRST: i16 = -32;

/// Jumps to `to` where the thread leaving its CPU blocks: the switch is no preemption and the
/// thread did not leave runnable (state 0). Uses r1-r3.
fn jump_if_it_blocks(p: &mut Asm, to: Label) {
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 2, 1, 0, 0),
        insn(LDX_DW, 3, 1, 24, 0),
    ]);
    let runnable = p.label();
    p.jump(JNE_IMM, 2, 0, 0, runnable); // preempted
    p.jump(JEQ_IMM, 3, 0, 0, runnable); // left runnable
    p.jump(JA, 0, 0, 0, to);
    p.bind(runnable);
}

/// Part of the program at `sched_switch`, for a watched thread leaving its CPU (`r6` its value,
/// `r7` the time, the index at `INDEX_SLOT`): at most once per `gap_ns` for its departures
/// that block and once per `gap_ns` for any (a block within `gap_ns` of a preemption's copy
/// may copy too), while the ring `copies` is less than half full, a record of the user
/// registers the thread left with
/// (`bpf_task_pt_regs`: where it entered the kernel, the system call it blocks in or where it
/// was preempted) and the top of its stack, copied page by page from the stack pointer up
/// (`bpf_probe_read_user` fails at an unmapped page: the copy ends there, whatever the stack's
/// depth, up to [`STACK_ROOM`]), put in the ring just before the departure's record (`ring.rs`
/// attaches it to the departure of the same time). This is what a context-switch event's
/// sample gave, without an event that every switch of every thread pays for. Uses r1-r5, r8,
/// r9.
fn departure_stack(p: &mut Asm, copies: RawFd, copies_size: usize, gap_ns: u64) {
    let (last, block_last) = (VALUE_DEPARTED as i16, VALUE_BLOCK_COPIED as i16);
    let gap = gap_ns.min(i32::MAX as u64) as i32;
    let half = (copies_size / 2).min(i32::MAX as usize) as i32;
    let (end, submit, query) = (p.label(), p.label(), p.label());
    // A block has a budget of its own: a preemption's copy stands in for the next
    // preemptions (the latest sample's stack does too), not for a block, whose call only its
    // own copy shows. An event loop preempted as it answered and blocking 20 us later in
    // `epoll_wait` had every block's copy refused, and its waits had no stack (no built-in
    // feature's) until a block came without a preemption just before it: 49 ms of 1 s in 1
    // run of 10 here, 271 ms in a CI run.
    let blocks = p.label();
    jump_if_it_blocks(p, blocks);
    p.extend([insn(LDX_DW, 2, 6, last, 0), insn(ADD64_IMM, 2, 0, 0, gap)]);
    p.jump(JLT_REG, 7, 2, 0, end); // the previous one too recent
    p.jump(JA, 0, 0, 0, query);
    p.bind(blocks);
    p.extend([
        insn(LDX_DW, 2, 6, block_last, 0),
        insn(ADD64_IMM, 2, 0, 0, gap),
    ]);
    p.jump(JLT_REG, 7, 2, 0, end); // the previous block's too recent
    p.bind(query);
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, RB_AVAIL_DATA),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_QUERY),
    ]);
    p.jump(JGT_IMM, 0, 0, half, end); // the ring too full: its room is for the records
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, (STACK_HEADER + STACK_ROOM) as i32),
        insn(MOV64_IMM, 3, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_RESERVE),
    ]);
    p.jump(JEQ_IMM, 0, 0, 0, end);
    p.push(insn(MOV64_REG, 9, 0, 0, 0)); // r9: the record
    let (counted, block_copied) = (p.label(), p.label());
    jump_if_it_blocks(p, block_copied);
    p.jump(JA, 0, 0, 0, counted);
    p.bind(block_copied);
    p.push(insn(STX_DW, 6, 7, block_last, 0));
    p.bind(counted);
    p.extend([
        insn(STX_DW, 6, 7, last, 0),
        insn(STX_DW, 9, 7, 0, 0),
        insn(LDX_W, 1, 10, INDEX_SLOT, 0),
        insn(STX_W, 9, 1, 8, 0),
        insn(ST_W, 9, 0, 12, DEPARTURE_STACK as i32),
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_TASK_BTF),
        insn(MOV64_REG, 1, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_TASK_PT_REGS),
    ]);
    // x86-64's `struct pt_regs`: ip at 128, sp at 152, bp at 32.
    for (from, to) in [(128, 16), (152, 24), (32, 32)] {
        p.extend([insn(LDX_DW, 1, 0, from, 0), insn(STX_DW, 9, 1, to, 0)]);
    }
    p.extend([
        insn(ST_DW, 9, 0, 40, 0),
        // The first page's part: from the stack pointer to its page's end.
        insn(LDX_DW, 3, 9, 24, 0),
        insn(MOV64_REG, 4, 3, 0, 0),
        insn(AND64_IMM, 4, 0, 0, PAGE as i32 - 1),
        insn(MOV64_IMM, 2, 0, 0, PAGE as i32),
        insn(SUB64_REG, 2, 4, 0, 0),
        insn(STX_DW, 10, 2, FIRST, 0),
        insn(MOV64_REG, 1, 9, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, STACK_HEADER as i32),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, submit);
    p.push(insn(LDX_DW, 2, 10, FIRST, 0));
    p.jump(JGT_IMM, 2, 0, PAGE as i32, submit); // cannot be: tells the verifier
    p.extend([
        insn(STX_DW, 9, 2, 40, 0),
        insn(MOV64_REG, 8, 9, 0, 0), // r8: where the next page goes
        insn(ADD64_IMM, 8, 0, 0, STACK_HEADER as i32),
        insn(ADD64_REG, 8, 2, 0, 0),
    ]);
    for _ in 1..STACK_ROOM / PAGE {
        p.extend([
            insn(MOV64_REG, 1, 8, 0, 0),
            insn(MOV64_IMM, 2, 0, 0, PAGE as i32),
            insn(LDX_DW, 3, 9, 24, 0),
            insn(LDX_DW, 4, 9, 40, 0),
            insn(ADD64_REG, 3, 4, 0, 0),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
        ]);
        p.jump(JNE_IMM, 0, 0, 0, submit);
        p.extend([
            insn(LDX_DW, 1, 9, 40, 0),
            insn(ADD64_IMM, 1, 0, 0, PAGE as i32),
            insn(STX_DW, 9, 1, 40, 0),
            insn(ADD64_IMM, 8, 0, 0, PAGE as i32),
        ]);
    }
    p.bind(submit);
    p.extend([
        insn(MOV64_REG, 1, 9, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, RB_NO_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_SUBMIT),
    ]);
    p.bind(end);
}
