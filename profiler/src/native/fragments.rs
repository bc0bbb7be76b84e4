//! Pieces the hand-written programs share (`sampling.rs`, `cpu_wide/programs.rs`): finding the
//! running thread's map value, by its id or by the index a program keeps, copying its mark
//! slots into the ring of copies, and putting a record built in its value there. Not here: the
//! programs themselves.

use crate::native::asm::{
    insn, Asm, Insn, ADD64_IMM, CALL, HELPER_MAP_LOOKUP_ELEM, HELPER_PROBE_READ_USER,
    HELPER_RINGBUF_OUTPUT, JEQ_IMM, JLE_IMM, JNE_IMM, LDX_DW, LDX_W, LD_IMM64, MOV64_IMM,
    MOV64_REG, MUL64_IMM, PSEUDO_MAP_FD, RB_NO_WAKEUP, STX_DW, STX_W, ST_DW, ST_W,
};
use crate::native::layout::{
    COPY_HEADER, DEPTH_OFFSET, INDEX_SLOT, SCRATCH_SIZE, SLOTS, VALUE_ADDRESSES, VALUE_SCRATCH,
};
use fsprof_shim::abi::{MARK_CAPACITY, RECORDS_OFFSET, RECORD_SIZE, SLOT_STATE_SIZE};
use std::os::fd::RawFd;

/// `r0` = the entry of the thread whose id is the stack word at `key` in the hash map
/// `watched` (a pointer to its u32 map value index), or 0.
pub(in crate::native) fn watched_index(p: &mut Asm, watched: RawFd, key: i16) {
    lookup(p, watched, key);
}

/// `r0` = a pointer to the value of the key at stack word `key` in the map `map`, or 0.
/// Uses r1-r5.
pub(in crate::native) fn lookup(p: &mut Asm, map: RawFd, key: i16) {
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(key)),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
    ]);
}

/// `r0` = the map value (of the array `map`) whose index is at [`INDEX_SLOT`], or 0.
pub(in crate::native) fn value_of_thread(map: RawFd) -> [Insn; 5] {
    [
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(INDEX_SLOT)),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
    ]
}

/// For each slot, its copy record (see `sampling::program`) put in the ring `copies`: `r6` is the
/// value, `r7` the time, the index at [`INDEX_SLOT`]; uses r1-r5, r8, r9.
pub(in crate::native) fn copy_slots(p: &mut Asm, copies: RawFd, at_switch: bool) {
    let kind = i32::from(at_switch) << 8;
    for slot in 0..SLOTS {
        let address = (VALUE_ADDRESSES + 8 * slot) as i16;
        let header = (VALUE_SCRATCH + slot * SCRATCH_SIZE) as i16;
        let copy = header as i32 + COPY_HEADER as i32;
        let result = header + 24;
        let output = p.label();
        p.extend([
            insn(STX_DW, 6, 7, header, 0),
            insn(LDX_W, 1, 10, INDEX_SLOT, 0),
            insn(STX_W, 6, 1, header + 8, 0),
            insn(ST_W, 6, 0, header + 12, slot as i32 | kind),
            insn(LDX_DW, 3, 6, address, 0),
            insn(STX_DW, 6, 3, header + 16, 0),
            insn(ST_DW, 6, 0, result, 0),
            insn(MOV64_IMM, 8, 0, 0, COPY_HEADER as i32), // r8: the record's size
        ]);
        p.jump(JEQ_IMM, 3, 0, 0, output); // no slot
        p.extend([
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, copy),
            insn(MOV64_IMM, 2, 0, 0, SLOT_STATE_SIZE as i32),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
            insn(STX_DW, 6, 0, result, 0),
        ]);
        p.jump(JNE_IMM, 0, 0, 0, output); // unreadable
        p.extend([
            insn(MOV64_IMM, 8, 0, 0, (COPY_HEADER + SLOT_STATE_SIZE) as i32),
            insn(LDX_W, 2, 6, (copy + DEPTH_OFFSET) as i16, 0),
        ]);
        let within = p.label();
        p.jump(JLE_IMM, 2, 0, MARK_CAPACITY as i32, within);
        p.push(insn(MOV64_IMM, 2, 0, 0, MARK_CAPACITY as i32));
        p.bind(within);
        p.push(insn(MUL64_IMM, 2, 0, 0, RECORD_SIZE as i32));
        p.jump(JEQ_IMM, 2, 0, 0, output); // no records
        p.extend([
            insn(MOV64_REG, 9, 2, 0, 0),
            insn(LDX_DW, 3, 6, address, 0),
            insn(ADD64_IMM, 3, 0, 0, RECORDS_OFFSET as i32),
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, copy + RECORDS_OFFSET as i32),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
            insn(STX_DW, 6, 0, result, 0),
        ]);
        p.jump(JNE_IMM, 0, 0, 0, output); // unreadable
        p.extend([
            insn(MOV64_REG, 8, 9, 0, 0),
            insn(ADD64_IMM, 8, 0, 0, (COPY_HEADER + RECORDS_OFFSET) as i32),
        ]);
        p.bind(output);
        p.extend([
            insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_REG, 2, 6, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, header as i32),
            insn(MOV64_REG, 3, 8, 0, 0),
            insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
            insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
        ]);
    }
}

/// Puts the `size`-byte record at `record` in the value `r6` in the ring `copies`.
pub(in crate::native) fn output_sized(p: &mut Asm, copies: RawFd, record: i16, size: usize) {
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
