//! The programs of the per-CPU design (`cpu_wide.rs`), hand-assembled: the one at the
//! scheduler's `sched_switch` tracepoint (each departure of a watched thread from its CPU and
//! each return to one, with the thread's time on a CPU counted there), the ones at the start
//! and the end of an `exec` (which stop watching the thread), and the part of the sampling
//! program that records a thread's time on a CPU at each sample. Not here: the sampling
//! program itself and the slot copies (`bpf.rs`), the maps, events and links (`cpu_wide.rs`),
//! the records' parsing (`ring.rs`).

use crate::native::bpf::{
    insn, value_of_thread, watched_index, Insn, ADD64_IMM, ADD64_REG, AND64_IMM, CALL, EXIT,
    HELPER_GET_CURRENT_PID_TGID, HELPER_GET_CURRENT_TASK_BTF, HELPER_KTIME_GET_NS,
    HELPER_MAP_DELETE_ELEM, HELPER_PROBE_READ_KERNEL, HELPER_PROBE_READ_USER,
    HELPER_RINGBUF_OUTPUT, HELPER_RINGBUF_QUERY, HELPER_RINGBUF_RESERVE, HELPER_RINGBUF_SUBMIT,
    HELPER_TASK_PT_REGS, INDEX_SLOT, JEQ_IMM, JGT_IMM, JLT_REG, JNE_IMM, LDX_DW, LDX_W, LD_IMM64,
    MOV64_IMM, MOV64_REG, PSEUDO_MAP_FD, RB_AVAIL_DATA, RB_NO_WAKEUP, STX_DW, STX_W, ST_DW, ST_W,
    SUB64_REG,
};
use crate::native::map_value::{
    COPY_HEADER, FOLD_KINDS, FOLD_RECORD, VALUE_ADDRESSES, VALUE_CPU_NS, VALUE_DEPARTED,
    VALUE_FOLDED, VALUE_FOLD_KIND, VALUE_FOLD_LEFT, VALUE_FOLD_RECORD, VALUE_NEAR_UNTIL,
    VALUE_ON_SINCE, VALUE_QUIET, VALUE_SWITCHES, VALUE_SWITCH_RECORD, VALUE_TIME_RECORD,
};
use crate::native::perf::SLOTS;
use crate::native::ring::{
    CPU_TIME, DEPARTED, DEPARTURE_STACK, EXECED, FOLDED, FOLD_MOST_NS, JUST_BACK_NS, RETURNED,
    SLOTLESS,
};
use crate::native::walk::CONTEXT;
use std::os::fd::RawFd;

const LSH64_IMM: u8 = 0x67;
const RSH64_IMM: u8 = 0x77;
const OR64_REG: u8 = 0x4f;
const OR64_IMM: u8 = 0x47;
const JA: u8 = 0x05;
const JEQ_REG: u8 = 0x1d;
const JGT_REG: u8 = 0x2d;
const JNE_REG: u8 = 0x5d;
/// The kinds of folded stretches, as `VALUE_FOLD_KIND` holds them (see `ring::Folded`).
const BLOCKED: i32 = 0;
const NEAR: i32 = 1;
const FAR: i32 = 2;
/// A task's state bit once it has exited, as it leaves its CPU for the last time.
const TASK_DEAD: i32 = 0x80;

/// Part of the sampling program (`bpf::program`, `r6` the value, `r7` the time, the index at
/// `INDEX_SLOT`): the thread's time on a CPU at the sample in the ring `copies` (slot number
/// [`CPU_TIME`]): what it ran up to its latest departure, and since it came back. A thread
/// watched while it ran counts from its first sample.
pub(in crate::native) fn cpu_time(p: &mut Vec<Insn>, copies: RawFd) {
    let (cpu, on, record) = (
        VALUE_CPU_NS as i16,
        VALUE_ON_SINCE as i16,
        VALUE_TIME_RECORD as i16,
    );
    // A sample since: a preemption is near a block's end no more (as `Sampler::keep_sample`).
    p.push(insn(ST_DW, 6, 0, VALUE_NEAR_UNTIL as i16, 0));
    // Not known to be on a CPU: watched while it ran, or its return was not traced.
    p.extend([insn(LDX_DW, 1, 6, on, 0), insn(JNE_IMM, 1, 0, 0, 0)]);
    let known = p.len() - 1;
    p.push(insn(STX_DW, 6, 7, on, 0));
    inferred_return(p, copies);
    p.push(insn(MOV64_REG, 1, 7, 0, 0));
    p[known].off = (p.len() - known - 1) as i16;
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

/// A return record (see [`returned`]) for a thread found on a CPU, at a sample or a departure,
/// though no return was recorded since its latest departure (`r6` its value, `r7` the time):
/// some switches onto a CPU pass without the `sched_switch` tracepoint on some kernels (seen
/// on Linux 6.18: a thread preempted by some tasks came back untraced, 1 return in a few
/// hundred). It says it was inferred; its time is the earliest the thread is known to run.
/// A folded departure's stretch ends there too. Uses r1-r5, r8.
fn inferred_return(p: &mut Vec<Insn>, copies: RawFd) {
    p.extend([
        insn(LDX_DW, 1, 6, VALUE_FOLD_LEFT as i16, 0),
        insn(JNE_IMM, 1, 0, 2, 0), // a folded departure: its stretch ends
        insn(LDX_DW, 1, 6, VALUE_SWITCHES as i16, 0),
        insn(JEQ_IMM, 1, 0, 0, 0), // no switch yet: watched while it ran
    ]);
    let skip = p.len() - 1;
    came_back(p, copies, true);
    p[skip].off = (p.len() - skip - 1) as i16;
}

/// The thread whose value is `r6` is back on a CPU at the time `r7`: after a folded departure,
/// its stretch is folded into its kind's total, or, longer than [`FOLD_MOST_NS`], recorded
/// whole (the totals so far, the departure at its own time, then the return); else a return
/// record (see [`returned`]). Back from a block, a preemption within [`JUST_BACK_NS`] of CPU
/// time is near its end. Uses r1-r5, r8.
fn came_back(p: &mut Vec<Insn>, copies: RawFd, inferred: bool) {
    let (left, kind) = (VALUE_FOLD_LEFT as i16, VALUE_FOLD_KIND as i16);
    p.extend([insn(LDX_DW, 8, 6, left, 0), insn(JEQ_IMM, 8, 0, 0, 0)]);
    let to_record = p.len() - 1;
    p.extend([
        insn(ST_DW, 6, 0, left, 0),
        insn(MOV64_REG, 2, 7, 0, 0),
        insn(SUB64_REG, 2, 8, 0, 0),
        insn(JGT_IMM, 2, 0, 0, FOLD_MOST_NS as i32),
    ]);
    let to_long = p.len() - 1;
    let mut to_after = Vec::new();
    p.push(insn(LDX_DW, 3, 6, kind, 0));
    for k in 0..FOLD_KINDS {
        let total = (VALUE_FOLDED + 8 * k) as i16;
        p.push(insn(JNE_IMM, 3, 0, 4, k as i32));
        p.extend([
            insn(LDX_DW, 1, 6, total, 0),
            insn(ADD64_REG, 1, 2, 0, 0),
            insn(STX_DW, 6, 1, total, 0),
            insn(JA, 0, 0, 0, 0),
        ]);
        to_after.push(p.len() - 1);
    }
    // An unknown kind (cannot be): nothing added.
    p.push(insn(JA, 0, 0, 0, 0));
    to_after.push(p.len() - 1);
    p[to_long].off = (p.len() - to_long - 1) as i16;
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
        insn(JEQ_IMM, 3, 0, 1, BLOCKED),
        insn(OR64_IMM, 1, 0, 0, 1), // preempted
        insn(STX_DW, 6, 1, record + 24, 0),
    ]);
    output(p, copies, record);
    returned(p, copies, inferred);
    p.push(insn(JA, 0, 0, 0, 0));
    to_after.push(p.len() - 1);
    p[to_record].off = (p.len() - to_record - 1) as i16;
    returned(p, copies, inferred);
    let after = p.len();
    for at in to_after {
        p[at].off = (after - at - 1) as i16;
    }
    p.extend([
        insn(LDX_DW, 1, 6, kind, 0),
        insn(JNE_IMM, 1, 0, 3, BLOCKED),
        insn(LDX_DW, 1, 6, VALUE_CPU_NS as i16, 0),
        insn(ADD64_IMM, 1, 0, 0, JUST_BACK_NS as i32),
        insn(STX_DW, 6, 1, VALUE_NEAR_UNTIL as i16, 0),
    ]);
}

/// The record of the folded totals of the thread whose value is `r6`, at the time in register
/// `time`, if any is not 0; the totals start again from 0. Uses r1-r5.
fn flush(p: &mut Vec<Insn>, copies: RawFd, time: u8) {
    let record = VALUE_FOLD_RECORD as i16;
    p.push(insn(LDX_DW, 1, 6, VALUE_FOLDED as i16, 0));
    for k in 1..FOLD_KINDS {
        p.extend([
            insn(LDX_DW, 2, 6, (VALUE_FOLDED + 8 * k) as i16, 0),
            insn(OR64_REG, 1, 2, 0, 0),
        ]);
    }
    p.push(insn(JEQ_IMM, 1, 0, 0, 0));
    let skip = p.len() - 1;
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
    p[skip].off = (p.len() - skip - 1) as i16;
}

/// The return record of the thread whose value is `r6` at the time `r7`: its time on a CPU so
/// far, its switch number, whether `inferred` (see [`inferred_return`]). Uses r1-r5.
fn returned(p: &mut Vec<Insn>, copies: RawFd, inferred: bool) {
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
fn record_event(p: &mut Vec<Insn>, record: i16, kind: usize) {
    p.extend([
        insn(STX_DW, 6, 7, record, 0),
        insn(LDX_W, 1, 10, INDEX_SLOT, 0),
        insn(STX_W, 6, 1, record + 8, 0),
        insn(ST_W, 6, 0, record + 12, kind as i32),
    ]);
}

/// Puts the 32-byte record at `record` in the value `r6` in the ring `copies`.
fn output(p: &mut Vec<Insn>, copies: RawFd, record: i16) {
    output_sized(p, copies, record, COPY_HEADER);
}

/// Puts the `size`-byte record at `record` in the value `r6` in the ring `copies`.
fn output_sized(p: &mut Vec<Insn>, copies: RawFd, record: i16, size: usize) {
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 6, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(record)),
        insn(MOV64_IMM, 3, 0, 0, size as i32),
        insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
    ]);
}

/// The next switch number of the value `r6` in `r1`, counted.
fn next_switch(p: &mut Vec<Insn>) {
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
/// no record. Other switches cost two lookups.
pub(super) fn switch_program(
    map: RawFd,
    (copies, copies_size): (RawFd, usize),
    watched: RawFd,
    pid_offset: u32,
    gap_ns: u64,
) -> Vec<Insn> {
    let (cpu, on) = (VALUE_CPU_NS as i16, VALUE_ON_SINCE as i16);
    const LEAVING: i16 = -12;
    let mut p = vec![
        insn(STX_DW, 10, 1, CONTEXT, 0),
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0), // r7: the time
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(STX_W, 10, 0, INDEX_SLOT, 0),
        insn(STX_W, 10, 0, LEAVING, 0),
    ];
    let mut to_coming = Vec::new();
    watched_index(&mut p, watched, INDEX_SLOT);
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_coming.push(p.len() - 1);
    p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
    p.extend(value_of_thread(map));
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_coming.push(p.len() - 1);
    p.push(insn(MOV64_REG, 6, 0, 0, 0)); // r6: the leaving thread's value
    p.extend([insn(LDX_DW, 1, 6, on, 0), insn(JNE_IMM, 1, 0, 0, 0)]);
    let known = p.len() - 1;
    inferred_return(&mut p, copies);
    p[known].off = (p.len() - known - 1) as i16;
    p.extend([
        insn(LDX_DW, 1, 6, on, 0),
        insn(LDX_DW, 2, 6, cpu, 0),
        insn(JEQ_IMM, 1, 0, 3, 0), // not known to be on a CPU: nothing to add
        insn(MOV64_REG, 3, 7, 0, 0),
        insn(SUB64_REG, 3, 1, 0, 0),
        insn(ADD64_REG, 2, 3, 0, 0),
        insn(STX_DW, 6, 2, cpu, 0),
        insn(ST_DW, 6, 0, on, 0),
        insn(LDX_DW, 1, 6, VALUE_QUIET as i16, 0),
        insn(JNE_IMM, 1, 0, 0, 0), // quiet: no record (patched below)
    ]);
    let quiet_leaving = p.len() - 1;
    departed(&mut p, copies, copies_size, gap_ns);
    p[quiet_leaving].off = (p.len() - quiet_leaving - 1) as i16;
    // Its last switch (it is dead): watched no more, so that its id, once reused, is not.
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 2, 1, 24, 0),
        insn(AND64_IMM, 2, 0, 0, TASK_DEAD),
        insn(JEQ_IMM, 2, 0, 5, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(LEAVING)),
        insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
    ]);
    let coming = p.len();
    for at in to_coming {
        p[at].off = (coming - at - 1) as i16;
    }
    let mut to_end = Vec::new();
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 3, 1, 16, 0),
        insn(ADD64_IMM, 3, 0, 0, pid_offset as i32),
        insn(MOV64_REG, 1, 10, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, -8),
        insn(MOV64_IMM, 2, 0, 0, 4),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
        insn(JNE_IMM, 0, 0, 0, 0),
    ]);
    to_end.push(p.len() - 1);
    watched_index(&mut p, watched, -8);
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_end.push(p.len() - 1);
    p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
    p.extend(value_of_thread(map));
    p.push(insn(JEQ_IMM, 0, 0, 0, 0));
    to_end.push(p.len() - 1);
    p.extend([
        insn(MOV64_REG, 6, 0, 0, 0), // r6: the coming thread's value
        insn(STX_DW, 6, 7, on, 0),
        insn(LDX_DW, 1, 6, VALUE_QUIET as i16, 0),
        insn(JNE_IMM, 1, 0, 0, 0), // quiet: no record
    ]);
    to_end.push(p.len() - 1);
    came_back(&mut p, copies, false);
    let end = p.len();
    for at in to_end {
        p[at].off = (end - at - 1) as i16;
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p
}

/// Part of the program at `sched_switch`, for a watched thread leaving its CPU and followed
/// (`r6` its value, `r7` the time, its time on a CPU counted): its stack, at most once per
/// `gap_ns` (see [`departure_stack`]); then, without marks (no slot known), without a stack
/// copied now and not at its last switch, its departure is folded (see `ring::FOLD_MOST_NS`:
/// when and how it left are kept in its value, and its return adds the stretch to its kind's
/// total); else the folded totals are recorded, then its slots' copies and its departure.
fn departed(p: &mut Vec<Insn>, copies: RawFd, copies_size: usize, gap_ns: u64) {
    let record = VALUE_SWITCH_RECORD as i16;
    departure_stack(p, copies, copies_size, gap_ns);
    // r9: preempted, as the switch says, or as the thread left still runnable (state 0).
    p.extend([
        insn(LDX_DW, 2, 10, CONTEXT, 0),
        insn(LDX_DW, 3, 2, 0, 0),
        insn(LDX_DW, 4, 2, 24, 0),
        insn(MOV64_IMM, 9, 0, 0, 1),
        insn(JNE_IMM, 3, 0, 2, 0),
        insn(JEQ_IMM, 4, 0, 1, 0),
        insn(MOV64_IMM, 9, 0, 0, 0),
    ]);
    // r8: not 0 where some slot is known (a thread that marked).
    p.push(insn(LDX_DW, 8, 6, VALUE_ADDRESSES as i16, 0));
    for slot in 1..SLOTS {
        p.extend([
            insn(LDX_DW, 3, 6, (VALUE_ADDRESSES + 8 * slot) as i16, 0),
            insn(OR64_REG, 8, 3, 0, 0),
        ]);
    }
    // Folded (see `ring::FOLD_MOST_NS`): no slot, no stack copied now, not its last switch.
    let mut to_record = Vec::new();
    let mut to_leaving_end = Vec::new();
    p.push(insn(JNE_IMM, 8, 0, 0, 0));
    to_record.push(p.len() - 1);
    p.extend([
        insn(LDX_DW, 1, 6, VALUE_DEPARTED as i16, 0),
        insn(JEQ_REG, 1, 7, 0, 0),
    ]);
    to_record.push(p.len() - 1);
    p.extend([
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LDX_DW, 2, 1, 24, 0),
        insn(AND64_IMM, 2, 0, 0, TASK_DEAD),
        insn(JNE_IMM, 2, 0, 0, 0),
    ]);
    to_record.push(p.len() - 1);
    let (kind, near) = (VALUE_FOLD_KIND as i16, VALUE_NEAR_UNTIL as i16);
    p.extend([
        insn(STX_DW, 6, 7, VALUE_FOLD_LEFT as i16, 0),
        insn(JNE_IMM, 9, 0, 3, 0),
        insn(ST_DW, 6, 0, kind, BLOCKED),
        insn(ST_DW, 6, 0, near, 0),
        insn(JA, 0, 0, 0, 0),
    ]);
    to_leaving_end.push(p.len() - 1);
    // Preempted: near the end of a block while its CPU time is within `VALUE_NEAR_UNTIL`.
    p.extend([
        insn(LDX_DW, 1, 6, VALUE_CPU_NS as i16, 0),
        insn(LDX_DW, 2, 6, near, 0),
        insn(ST_DW, 6, 0, kind, FAR),
        insn(JGT_REG, 1, 2, 1, 0),
        insn(ST_DW, 6, 0, kind, NEAR),
        insn(JA, 0, 0, 0, 0),
    ]);
    to_leaving_end.push(p.len() - 1);
    let recorded = p.len();
    for at in to_record {
        p[at].off = (recorded - at - 1) as i16;
    }
    // Recorded: the folded totals first, then the departure. Blocked, no preemption is near
    // a block's end until it comes back; preempted with its stack copied, the ones after it
    // are near it until a block or a sample.
    flush(p, copies, 7);
    p.extend([
        insn(JNE_IMM, 9, 0, 3, 0),
        insn(ST_DW, 6, 0, kind, BLOCKED),
        insn(ST_DW, 6, 0, near, 0),
        insn(JA, 0, 0, 4, 0),
        insn(ST_DW, 6, 0, kind, FAR),
        insn(LDX_DW, 1, 6, VALUE_DEPARTED as i16, 0),
        insn(JNE_REG, 1, 7, 1, 0),
        insn(ST_DW, 6, 0, near, -1),
    ]);
    p.push(insn(LDX_DW, 2, 6, VALUE_CPU_NS as i16, 0));
    record_event(p, record, DEPARTED);
    p.push(insn(STX_DW, 6, 2, record + 16, 0));
    next_switch(p);
    // The switch number above two flags (see `ring::parse_event`): preempted, and no slot
    // known (a thread that never marked, as most are): no copies, and the departure says so,
    // rather than a record per slot that says there is none.
    p.extend([
        insn(LSH64_IMM, 1, 0, 0, 1),
        insn(OR64_REG, 1, 9, 0, 0),
        insn(JNE_IMM, 8, 0, 1, 0),
        insn(OR64_IMM, 1, 0, 0, SLOTLESS as i32),
        insn(STX_DW, 6, 1, record + 24, 0),
        insn(AND64_IMM, 1, 0, 0, SLOTLESS as i32),
        insn(JNE_IMM, 1, 0, 0, 0), // patched: over the copies
    ]);
    let slotless = p.len() - 1;
    crate::native::bpf::copy_slots(p, copies, true);
    p[slotless].off = (p.len() - slotless - 1) as i16;
    output(p, copies, record);
    for at in to_leaving_end {
        p[at].off = (p.len() - at - 1) as i16;
    }
}

/// The program at an `exec`: removes the current thread and its process's leader (whose id it
/// takes) from the watched threads, with a record of each it removes; `done` (the program at
/// `sched_process_exec`, whose second argument is the id the thread had before) removes that
/// id too.
pub(super) fn exec_program(copies: RawFd, watched: RawFd, done: bool) -> Vec<Insn> {
    const KEY: i16 = -8;
    const RECORD: i16 = -64;
    let mut p = vec![
        insn(STX_DW, 10, 1, CONTEXT, 0),
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
        insn(MOV64_REG, 6, 0, 0, 0), // r6: tgid << 32 | tid
        insn(STX_W, 10, 6, KEY, 0),
    ];
    let remove = |p: &mut Vec<Insn>| {
        watched_index(p, watched, KEY);
        let skip = p.len();
        p.extend([
            insn(JEQ_IMM, 0, 0, 0, 0),
            insn(LDX_W, 1, 0, 0, 0),
            insn(STX_DW, 10, 7, RECORD, 0),
            insn(STX_W, 10, 1, RECORD + 8, 0),
            insn(ST_W, 10, 0, RECORD + 12, EXECED as i32),
            insn(LDX_W, 2, 10, KEY, 0),
            insn(STX_DW, 10, 2, RECORD + 16, 0),
            insn(ST_DW, 10, 0, RECORD + 24, 0),
            insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_REG, 2, 10, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, i32::from(KEY)),
            insn(CALL, 0, 0, 0, HELPER_MAP_DELETE_ELEM),
            insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_REG, 2, 10, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, i32::from(RECORD)),
            insn(MOV64_IMM, 3, 0, 0, COPY_HEADER as i32),
            insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
            insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
        ]);
        p[skip].off = (p.len() - skip - 1) as i16;
    };
    remove(&mut p);
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(RSH64_IMM, 1, 0, 0, 32),
        insn(STX_W, 10, 1, KEY, 0),
    ]);
    remove(&mut p);
    if done {
        p.extend([
            insn(LDX_DW, 1, 10, CONTEXT, 0),
            insn(LDX_DW, 2, 1, 8, 0),
            insn(STX_W, 10, 2, KEY, 0),
        ]);
        remove(&mut p);
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p
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

/// Part of the program at `sched_switch`, for a watched thread leaving its CPU (`r6` its value,
/// `r7` the time, the index at `INDEX_SLOT`): at most once per `gap_ns`, while the ring
/// `copies` is less than half full, a record of the user registers the thread left with
/// (`bpf_task_pt_regs`: where it entered the kernel, the system call it blocks in or where it
/// was preempted) and the top of its stack, copied page by page from the stack pointer up
/// (`bpf_probe_read_user` fails at an unmapped page: the copy ends there, whatever the stack's
/// depth, up to [`STACK_ROOM`]), put in the ring just before the departure's record (`ring.rs`
/// attaches it to the departure of the same time). This is what a context-switch event's
/// sample gave, without an event that every switch of every thread pays for. Uses r1-r5, r8,
/// r9.
fn departure_stack(p: &mut Vec<Insn>, copies: RawFd, copies_size: usize, gap_ns: u64) {
    let last = VALUE_DEPARTED as i16;
    let gap = gap_ns.min(i32::MAX as u64) as i32;
    let half = (copies_size / 2).min(i32::MAX as usize) as i32;
    let mut to_end = Vec::new();
    p.extend([
        insn(LDX_DW, 2, 6, last, 0),
        insn(ADD64_IMM, 2, 0, 0, gap),
        insn(JLT_REG, 7, 2, 0, 0), // the previous one too recent
    ]);
    to_end.push(p.len() - 1);
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, RB_AVAIL_DATA),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_QUERY),
        insn(JGT_IMM, 0, 0, 0, half), // the ring too full: its room is for the records
    ]);
    to_end.push(p.len() - 1);
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, (STACK_HEADER + STACK_ROOM) as i32),
        insn(MOV64_IMM, 3, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_RESERVE),
        insn(JEQ_IMM, 0, 0, 0, 0),
    ]);
    to_end.push(p.len() - 1);
    p.extend([
        insn(MOV64_REG, 9, 0, 0, 0), // r9: the record
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
    let mut to_submit = Vec::new();
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
        insn(JNE_IMM, 0, 0, 0, 0),
    ]);
    to_submit.push(p.len() - 1);
    p.extend([
        insn(LDX_DW, 2, 10, FIRST, 0),
        insn(JGT_IMM, 2, 0, 0, PAGE as i32), // cannot be: tells the verifier
    ]);
    to_submit.push(p.len() - 1);
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
            insn(JNE_IMM, 0, 0, 0, 0),
        ]);
        to_submit.push(p.len() - 1);
        p.extend([
            insn(LDX_DW, 1, 9, 40, 0),
            insn(ADD64_IMM, 1, 0, 0, PAGE as i32),
            insn(STX_DW, 9, 1, 40, 0),
            insn(ADD64_IMM, 8, 0, 0, PAGE as i32),
        ]);
    }
    let submit = p.len();
    for at in to_submit {
        p[at].off = (submit - at - 1) as i16;
    }
    p.extend([
        insn(MOV64_REG, 1, 9, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, RB_NO_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_SUBMIT),
    ]);
    let end = p.len();
    for at in to_end {
        p[at].off = (end - at - 1) as i16;
    }
}
