//! The walk: once a process had a stack deeper than the kernel's copy (8 KiB), at each sample
//! of its threads whose copy does not hold the whole stack, the BPF program unwinds the thread's stack itself, far enough, and keeps the words it read
//! beyond the copy at the sample's instant: each frame's return-address slot, and the slot its
//! frame pointer was saved in. fsprof then unwinds the sample through the copy and these words
//! (`StackView::instant`) with the same unwinder as ever (framehop): the walk only guesses which
//! words will be wanted, and nothing it guessed is trusted. Where it guessed wrong, the
//! unwinder misses a word and the sample goes on to `complete.rs`; no stack is made of words
//! that were not the thread's at that instant.
//!
//! Each frame's rule (`rules.rs`): the one the unwinder learnt for that return address, else
//! the rule of the body of the function it is in (`walk_tables.rs`, a binary search of the
//! functions' table), taken only if the word it points at is a return address too, else a few
//! CFAs beyond it are tried (a call made with more pushed), and two small ones (a prologue).
//! The walk starts at the instruction pointer, as if called from there; failing that (the
//! innermost function not in the table, the frame not yet set up), from learnt return
//! addresses found among the words at the end of the copy, then at the stack pointer (a stale
//! one, left by an earlier call, makes a walk that soon reads a word that is no return
//! address: the next is tried). The walk ends at the root, or after [`WALK_FRAMES`] frames of
//! one attempt, or [`WALK_PAIRS`] words beyond the copy: a recursion of thousands of frames is
//! left to `complete.rs` beyond them. It reads the stack 2 KiB at a time (a read costs about
//! as much as a word's), and looks each return address up once (a recursion's, not at all:
//! its caller's rule is its own). The walk is a program of its own, which the threads' sampling
//! programs tail-call (the kernel verifies its loops in some 15 ms: once per process, when a
//! stack first needs it); its loops use `may_goto` (Linux 6.9): an older kernel refuses it,
//! and samples are completed from images alone (`complete.rs`). It takes the sample's user
//! registers from a perf event's context, or, called from the tick's tracepoint
//! (`cpu_wide/tick.rs`), whose context has none, from the top of the thread's kernel stack
//! (`Registers`).
//!
//! This module: the walk's layout in a thread's map value and its instructions. Not here: what
//! it knows (`rules.rs`), loading and attaching (`bpf.rs`, `perf.rs`), the ring (`ring.rs`).

use crate::native::asm::{
    insn, Asm, Insn, Label, ADD64_IMM, ADD64_REG, AND64_IMM, ARSH64_IMM, CALL, EXIT,
    HELPER_GET_CURRENT_TASK, HELPER_MAP_LOOKUP_ELEM, HELPER_PROBE_READ_KERNEL,
    HELPER_PROBE_READ_USER, HELPER_RINGBUF_OUTPUT, HELPER_TAIL_CALL, JA, JEQ_IMM, JGE_IMM, JGE_REG,
    JGT_IMM, JGT_REG, JLE_REG, JLT_REG, JNE_IMM, JNE_REG, LDX_B, LDX_DW, LDX_H, LDX_W, LD_IMM64,
    LSH64_IMM, MAY_GOTO, MOV64_IMM, MOV64_REG, PSEUDO_MAP_FD, RB_NO_WAKEUP, RSH64_IMM, RSH64_REG,
    STX_DW, STX_W, ST_DW, ST_W, SUB64_REG, XOR64_REG,
};
use crate::native::layout::CONTEXT;
use crate::native::layout::{BITMAP_BITS, KIND_BP, KIND_ROOT, KIND_SP};
use crate::native::layout::{COPY_HEADER, VALUE_WALK};
use crate::native::layout::{SLOTS, STACK_DUMP};
use std::os::fd::RawFd;

/// Frames walked at most per attempt (those in the copy included): rustc's stacks have up to
/// 75 (median 30).
pub const WALK_FRAMES: i32 = 192;
/// Words read beyond the copy kept at most per sample (a frame's return address, and its
/// saved frame pointer if it saved one).
pub const WALK_PAIRS: usize = 256;
/// Words looked at for return addresses to start from, at the end of the copy and from the
/// stack pointer.
pub const SCAN_WORDS: usize = 256;
/// Bytes of stack the walk reads at once: a read costs about as much for 8 bytes as for 2 KiB
/// (`deep leaves`, 192 frames walked a word at a time: 41 us per run of the program, 11 us read
/// 2 KiB at a time; BENCHMARKS.md), and the next frames' words are mostly just above.
const READ_BYTES: i32 = 2048;

// The walk's part of a thread's map value, at `VALUE_WALK`: whether to walk (set by fsprof).
// Then, in the CPU's scratch (a per-CPU map: the program runs on one CPU, uninterrupted), the
// walk's state (the program's registers do not survive its helper calls), the record it puts
// in the ring (a copy header with slot number SLOTS + 1, then (address, word) pairs), and room
// for a window of words scanned.
const ON: usize = VALUE_WALK;
const SLOT: usize = 0; // the current frame's callee's return-address slot
const RA: usize = 8; // the word there: where the frame is
const BP: usize = 16; // the frame's rbp, or 0 if unknown
const COUNT: usize = 24; // pairs in the record
const END: usize = 32; // where the kernel's copy ends
const WORD: usize = 40; // a word just read
const AT: usize = 48; // where it was read
const FIRST_BP: usize = 56; // rbp at the sample
const NEXT: usize = 64; // the next word of the window to look up
const FRAMES: usize = 72; // frames walked
const ROOT: usize = 80; // whether a walk reached the root
const IP: usize = 88; // the instruction pointer at the sample
const PC: usize = 96; // the address whose function is looked up
const LOW: usize = 104; // the search: the first entry that may be it
const HIGH: usize = 112; // the entry after the last that may be it
const MIDDLE: usize = 120;
const BASE: usize = 128; // the CFA by the frame's rule
const SAVED: usize = 136; // where the rule saved rbp, from the CFA (0: not saved)
const TRY: usize = 144; // CFAs tried (see TRIES)
const NEW_BP: usize = 152; // rbp as the frame saved it
const TIME: usize = 160; // the sample's time (from the sampling program)
const THREAD: usize = 168; // the thread's map value index (from the sampling program)
const RULE: usize = 176; // the rule of RA, found when its slot was taken (see `follow`)
const CACHED: usize = 184; // whether RULE holds it
const WINDOW_AT: usize = 192; // where the words in WINDOW_WORDS were read (0: none yet)
pub(super) const WALK_RECORD: usize = 200;
pub(super) const WALK_RECORD_SIZE: usize = COPY_HEADER + 16 * WALK_PAIRS;
const PAIRS: usize = WALK_RECORD + COPY_HEADER;
/// Then the words of a window scanned for return addresses.
const SCAN: usize = WALK_RECORD + WALK_RECORD_SIZE;
/// Then the words of the stack read last, from WINDOW_AT (see [`read`]).
const WINDOW_WORDS: usize = SCAN + 8 * SCAN_WORDS;
/// The size of the scratch.
pub(super) const SCRATCH_SIZE: usize = WINDOW_WORDS + READ_BYTES as usize;
const _: () = assert!(SCRATCH_SIZE < i16::MAX as usize);
const _: () = assert!(SCAN_WORDS.is_power_of_two() && BITMAP_BITS.is_power_of_two());

/// Offsets on the program's stack: the key for rule lookups, the saved context, the index and
/// bit for bitmap lookups, the stack pointer.
const KEY: i16 = -16;
const INDEX: i16 = -32;
const BIT: i16 = -40;
const STACK_POINTER: i16 = -48;
const WINDOW: i16 = -56;
/// Offsets in `struct pt_regs` (x86-64), the start of a perf event program's context.
const PT_BP: i16 = 32;
const PT_IP: i16 = 128;
const PT_CS: i16 = 136;
const PT_SP: i16 = 152;
const PT_SS: i16 = 160;
const PT_REGS_SIZE: i32 = 168;
/// The size (and alignment) of a thread's kernel stack, x86-64 without KASAN.
const KERNEL_STACK: i32 = 16 * 1024;
/// The user code and stack segments on x86-64 (`__USER_CS`, `__USER_DS`).
const USER_CS: i32 = 0x33;
const USER_SS: i32 = 0x2b;

/// The hand-over at the end of a thread's sampling program (`r6` its map value, `r7` the
/// sample's time, the thread's index at `layout::INDEX_SLOT`): for a thread that walks, the time
/// and the thread's index go in the CPU's
/// scratch, and the program tail-calls the walk (`maps`: the scratch, the program array),
/// which ends the sample's program (returning 1, as it does). Without the walk loaded (the
/// process walks no stack), the call falls through.
pub(super) fn hand_over(p: &mut Asm, maps: [RawFd; 2]) {
    let [scratch, programs] = maps;
    let skip = p.label();
    p.push(insn(LDX_DW, 1, 6, ON as i16, 0));
    p.jump(JEQ_IMM, 1, 0, 0, skip);
    scratch_of(p, scratch, skip);
    p.extend([
        insn(STX_DW, 0, 7, TIME as i16, 0),
        insn(LDX_W, 1, 10, crate::native::layout::INDEX_SLOT, 0),
        insn(STX_DW, 0, 1, THREAD as i16, 0),
        insn(LDX_DW, 1, 10, CONTEXT, 0),
        insn(LD_IMM64, 2, PSEUDO_MAP_FD, 0, programs),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 3, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_TAIL_CALL),
    ]);
    p.bind(skip);
}

/// `r0` = this CPU's scratch; jumps to `none` without it.
fn scratch_of(p: &mut Asm, scratch: RawFd, none: Label) {
    p.push(insn(ST_W, 10, 0, INDEX, 0));
    map_lookup(p, scratch, INDEX);
    p.jump(JEQ_IMM, 0, 0, 0, none);
}

/// The walk, a program of its own (its loops take the kernel's verifier some 15 ms: once per
/// process, not per thread), tail-called by [`hand_over`] (see the module's documentation).
/// `maps`: the rules, the bitmap, the functions' table, the scratch; `copies`: the ring.
/// `source`: where it finds the sample's user registers.
pub(super) fn program(maps: [RawFd; 4], copies: RawFd, source: Registers) -> Vec<Insn> {
    let mut p = Asm::new();
    p.push(insn(STX_DW, 10, 1, CONTEXT, 0));
    let end = p.label();
    let [rules, bitmap, functions, scratch] = maps;
    let maps = [rules, bitmap, functions];
    scratch_of(&mut p, scratch, end);
    p.extend([
        insn(MOV64_REG, 6, 0, 0, 0), // r6: the scratch
        insn(LDX_DW, 7, 6, TIME as i16, 0),
    ]);
    walk(&mut p, maps, copies, source, end);
    p.bind(end);
    p.extend([insn(MOV64_IMM, 0, 0, 0, 1), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}

/// The walk's instructions: `r6` is the scratch, `r7` the sample's time; ends jumping to
/// `end`, or at its end.
fn walk(p: &mut Asm, maps: [RawFd; 3], copies: RawFd, source: Registers, end: Label) {
    registers(p, source, end);
    p.extend([
        insn(STX_DW, 6, 2, FIRST_BP as i16, 0),
        insn(STX_DW, 10, 9, STACK_POINTER, 0),
        insn(ADD64_IMM, 9, 0, 0, STACK_DUMP as i32),
        insn(STX_DW, 6, 9, END as i16, 0),
        insn(ST_DW, 6, 0, COUNT as i16, 0),
        insn(ST_DW, 6, 0, ROOT as i16, 0),
        // The words read for another sample (this scratch is the CPU's) are not this one's.
        insn(ST_DW, 6, 0, WINDOW_AT as i16, 0),
    ]);
    // From the innermost frame, by its function's body rule (as if it had been called from
    // the instruction after the one it is at, its return address in the slot below the stack
    // pointer).
    let out = p.label();
    p.extend([
        insn(LDX_DW, 1, 10, STACK_POINTER, 0),
        insn(ADD64_IMM, 1, 0, 0, -8),
        insn(STX_DW, 6, 1, SLOT as i16, 0),
        insn(LDX_DW, 1, 6, IP as i16, 0),
        insn(ADD64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, RA as i16, 0),
        insn(LDX_DW, 1, 6, FIRST_BP as i16, 0),
        insn(STX_DW, 6, 1, BP as i16, 0),
    ]);
    follow(p, maps);
    p.push(insn(LDX_DW, 1, 6, ROOT as i16, 0));
    p.jump(JNE_IMM, 1, 0, 0, out);
    // Else from return addresses found among the words at the end of the copy first (the
    // fewest frames to walk), then among those from the stack pointer. None where the end of
    // the copy cannot be read: the copy held the whole stack (most threads).
    let next = p.label();
    p.extend([
        insn(LDX_DW, 9, 6, END as i16, 0),
        insn(ADD64_IMM, 9, 0, 0, -8 * SCAN_WORDS as i32),
    ]);
    window(p, maps, AT_THE_END, [out, next, end]);
    p.bind(next);
    p.push(insn(LDX_DW, 9, 10, STACK_POINTER, 0));
    let none = p.label();
    window(p, maps, AT_THE_TOP, [out, none, end]);
    p.bind(none);
    p.bind(out);
    output(p, copies, end);
}

/// Walk attempts from the words at the end of the copy, and from the stack pointer: a word
/// that is a return address may be a stale one, left by an earlier call in a local's room,
/// whose walk soon reads a word that is none; then the next is tried.
const AT_THE_END: usize = 6;
const AT_THE_TOP: usize = 3;

/// Reads the [`SCAN_WORDS`] words from the address in `r9` and tries up to `attempts` of them
/// that are learnt return addresses, in order, as the walk's start: jumps to `out` after
/// the first walk that reached the root or a bound, to `none` when none did, to `unreadable`
/// if the words cannot be read.
fn window(p: &mut Asm, maps: [RawFd; 3], attempts: usize, to: [Label; 3]) {
    let [out, none, unreadable] = to;
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, SCAN as i32),
        insn(MOV64_IMM, 2, 0, 0, (SCAN_WORDS * 8) as i32),
        insn(MOV64_REG, 3, 9, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, unreadable);
    p.push(insn(ST_DW, 6, 0, NEXT as i16, 0));
    for _ in 0..attempts {
        let found = p.label();
        scan(p, maps, [found, none]);
        p.bind(found);
        p.extend([
            insn(LDX_DW, 1, 6, FIRST_BP as i16, 0),
            insn(STX_DW, 6, 1, BP as i16, 0),
        ]);
        follow(p, maps);
        // At the root, or at a bound (the frames walked, the words kept: a deep recursion):
        // out; else the next attempt (keeping the words read: all of them are the stack's at
        // the sample, whichever the unwinder will need).
        p.push(insn(LDX_DW, 1, 6, ROOT as i16, 0));
        p.jump(JNE_IMM, 1, 0, 0, out);
        p.push(insn(LDX_DW, 1, 6, FRAMES as i16, 0));
        p.jump(JGE_IMM, 1, 0, WALK_FRAMES, out);
        p.push(insn(LDX_DW, 1, 6, COUNT as i16, 0));
        p.jump(JGE_IMM, 1, 0, WALK_PAIRS as i32, out);
    }
    p.jump(JA, 0, 0, 0, none);
}

/// Looks up the words of the window (read at SCAN, from the address in `r9`) from the NEXT
/// one, in the bitmap, then the rules: at the first that is a learnt return address, sets
/// SLOT, RA and NEXT (the one after it) and jumps to `found`; if none, to `none`. Uses
/// `r8`.
fn scan(p: &mut Asm, maps: [RawFd; 3], to: [Label; 2]) {
    let [rules, bitmap, _] = maps;
    let [found, none] = to;
    let (next_word, exhausted) = (p.label(), p.label());
    let top = p.here();
    p.jump(MAY_GOTO, 0, 0, 0, exhausted);
    p.push(insn(LDX_DW, 8, 6, NEXT as i16, 0));
    p.jump(JGE_IMM, 8, 0, SCAN_WORDS as i32, exhausted);
    p.extend([
        insn(MOV64_REG, 1, 8, 0, 0),
        insn(LSH64_IMM, 1, 0, 0, 3),
        insn(MOV64_REG, 2, 6, 0, 0),
        insn(ADD64_REG, 2, 1, 0, 0),
        insn(LDX_DW, 3, 2, SCAN as i16, 0), // r3: the word
        insn(ADD64_IMM, 8, 0, 0, 1),
        insn(STX_DW, 6, 8, NEXT as i16, 0),
        insn(STX_DW, 10, 3, KEY, 0),
        // Its bit: BITMAP_BITS of them, by a hash of the word (see `bit`).
        insn(MOV64_REG, 4, 3, 0, 0),
        insn(RSH64_IMM, 4, 0, 0, 17),
        insn(XOR64_REG, 4, 3, 0, 0),
        insn(MOV64_REG, 5, 4, 0, 0),
        insn(AND64_IMM, 5, 0, 0, 63),
        insn(STX_DW, 10, 5, BIT, 0),
        insn(RSH64_IMM, 4, 0, 0, 6),
        insn(AND64_IMM, 4, 0, 0, (BITMAP_BITS / 64 - 1) as i32),
        insn(STX_W, 10, 4, INDEX, 0),
    ]);
    map_lookup(p, bitmap, INDEX);
    p.jump(JEQ_IMM, 0, 0, 0, next_word);
    p.extend([
        insn(LDX_DW, 3, 0, 0, 0),
        insn(LDX_DW, 5, 10, BIT, 0),
        insn(RSH64_REG, 3, 5, 0, 0),
        insn(AND64_IMM, 3, 0, 0, 1),
    ]);
    p.jump(JEQ_IMM, 3, 0, 0, next_word);
    map_lookup(p, rules, KEY);
    p.jump(JEQ_IMM, 0, 0, 0, next_word);
    p.extend([
        insn(LDX_DW, 1, 10, KEY, 0),
        insn(STX_DW, 6, 1, RA as i16, 0),
        insn(LDX_DW, 1, 6, NEXT as i16, 0),
        insn(ADD64_IMM, 1, 0, 0, -1),
        insn(LSH64_IMM, 1, 0, 0, 3),
        insn(ADD64_REG, 1, 9, 0, 0),
        insn(STX_DW, 6, 1, SLOT as i16, 0),
    ]);
    p.jump(JA, 0, 0, 0, found);
    p.bind(next_word);
    p.jump(JA, 0, 0, 0, top);
    p.bind(exhausted);
    p.jump(JA, 0, 0, 0, none);
}

/// The walk from SLOT and RA, with rbp as in BP, keeping the words read beyond the
/// copy (COUNT of them); ends at a frame it cannot follow, or after
/// [`WALK_FRAMES`]. Uses `r9`.
fn follow(p: &mut Asm, maps: [RawFd; 3]) {
    p.extend([
        insn(STX_DW, 10, 9, WINDOW, 0),
        insn(ST_DW, 6, 0, FRAMES as i16, 0),
        insn(ST_DW, 6, 0, CACHED as i16, 0),
    ]);
    let out = p.label();
    let top = p.here();
    p.jump(MAY_GOTO, 0, 0, 0, out);
    p.push(insn(LDX_DW, 1, 6, FRAMES as i16, 0));
    p.jump(JGE_IMM, 1, 0, WALK_FRAMES, out);
    p.extend([
        insn(ADD64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, FRAMES as i16, 0),
        insn(LDX_DW, 1, 6, RA as i16, 0),
        insn(STX_DW, 10, 1, KEY, 0),
    ]);
    frame_rule(p, maps, out);
    p.extend([
        insn(LDX_B, 2, 0, 6, 0), // r2: the kind
        insn(LDX_W, 3, 0, 0, 0), // r3: the CFA's offset
        insn(LDX_H, 4, 0, 4, 0), // r4: where rbp was saved, from the CFA
        insn(LSH64_IMM, 4, 0, 0, 48),
        insn(ARSH64_IMM, 4, 0, 0, 48),
    ]);
    let (by_sp, by_bp, cfa) = (p.label(), p.label(), p.label());
    p.jump(JEQ_IMM, 2, 0, KIND_SP, by_sp);
    p.jump(JEQ_IMM, 2, 0, KIND_BP, by_bp);
    p.jump(JNE_IMM, 2, 0, KIND_ROOT, out); // unknown
    p.push(insn(ST_DW, 6, 0, ROOT as i16, 1));
    p.jump(JA, 0, 0, 0, out);
    p.bind(by_bp);
    p.push(insn(LDX_DW, 1, 6, BP as i16, 0));
    p.jump(JEQ_IMM, 1, 0, 0, out);
    p.jump(JA, 0, 0, 0, cfa);
    p.bind(by_sp);
    p.extend([
        insn(LDX_DW, 1, 6, SLOT as i16, 0), // the stack pointer: after the callee returned
        insn(ADD64_IMM, 1, 0, 0, 8),
    ]);
    p.bind(cfa);
    p.extend([
        insn(ADD64_REG, 1, 3, 0, 0), // r1: the CFA
        insn(STX_DW, 6, 1, BASE as i16, 0),
        insn(STX_DW, 6, 4, SAVED as i16, 0),
        insn(ST_DW, 6, 0, TRY as i16, 0),
    ]);
    // The CFA the rule gives, else a few others (see TRIES), until the word below it is a
    // return address.
    let retry = p.here();
    p.jump(MAY_GOTO, 0, 0, 0, out);
    p.push(insn(LDX_DW, 1, 6, TRY as i16, 0));
    p.jump(JGE_IMM, 1, 0, TRIES.len() as i32, out);
    p.extend([
        insn(ADD64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, TRY as i16, 0),
        insn(LDX_DW, 2, 6, BASE as i16, 0),
    ]);
    for (at, try_) in TRIES.iter().enumerate().skip(1) {
        let other = p.label();
        p.jump(JNE_IMM, 1, 0, at as i32 + 1, other);
        match *try_ {
            Try::Beyond(more) => p.push(insn(ADD64_IMM, 2, 0, 0, more)),
            Try::Small(cfa) => p.extend([
                insn(LDX_DW, 2, 6, SLOT as i16, 0),
                insn(ADD64_IMM, 2, 0, 0, 8 + cfa),
            ]),
        }
        p.bind(other);
    }
    let next_try = p.label();
    p.extend([
        insn(MOV64_REG, 1, 2, 0, 0),
        insn(LDX_DW, 2, 6, SLOT as i16, 0),
    ]);
    p.jump(JLE_REG, 1, 2, 0, next_try); // not above the callee's: garbage
    p.extend([
        insn(MOV64_REG, 9, 1, 0, 0), // r9: the CFA
        insn(LDX_DW, 4, 6, SAVED as i16, 0),
    ]);
    let bp_kept = p.label();
    p.jump(JEQ_IMM, 4, 0, 0, bp_kept); // rbp not saved: unchanged
    p.push(insn(ADD64_REG, 1, 4, 0, 0));
    read(p, next_try);
    p.extend([
        insn(LDX_DW, 1, 6, WORD as i16, 0),
        insn(STX_DW, 6, 1, NEW_BP as i16, 0),
    ]);
    keep(p);
    p.bind(bp_kept);
    p.extend([insn(MOV64_REG, 1, 9, 0, 0), insn(ADD64_IMM, 1, 0, 0, -8)]);
    read(p, next_try);
    keep(p);
    // A return address: one with a rule (this frame's, if it is the same: a recursion).
    p.extend([
        insn(LDX_DW, 1, 6, WORD as i16, 0),
        insn(STX_DW, 10, 1, KEY, 0),
        insn(LDX_DW, 2, 6, RA as i16, 0),
    ]);
    let (other, same, taken) = (p.label(), p.label(), p.label());
    p.jump(JNE_REG, 1, 2, 0, other);
    p.extend([
        insn(MOV64_REG, 0, 6, 0, 0),
        insn(ADD64_IMM, 0, 0, 0, RULE as i32),
    ]);
    p.jump(JA, 0, 0, 0, same);
    p.bind(other);
    rule_of(p, maps, next_try);
    p.bind(same);
    p.jump(JA, 0, 0, 0, taken);
    p.bind(next_try);
    p.jump(JA, 0, 0, 0, retry);
    // Taken: the frame's caller is there (`r0`: its rule).
    p.bind(taken);
    p.extend([
        insn(LDX_DW, 1, 0, 0, 0),
        insn(STX_DW, 6, 1, RULE as i16, 0),
        insn(ST_DW, 6, 0, CACHED as i16, 1),
        insn(LDX_DW, 1, 6, SAVED as i16, 0),
    ]);
    let bp_unsaved = p.label();
    p.jump(JEQ_IMM, 1, 0, 0, bp_unsaved);
    p.extend([
        insn(LDX_DW, 1, 6, NEW_BP as i16, 0),
        insn(STX_DW, 6, 1, BP as i16, 0),
    ]);
    p.bind(bp_unsaved);
    p.extend([
        insn(MOV64_REG, 1, 9, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, -8),
        insn(STX_DW, 6, 1, SLOT as i16, 0),
        insn(LDX_DW, 1, 10, KEY, 0),
        insn(STX_DW, 6, 1, RA as i16, 0),
    ]);
    p.jump(JA, 0, 0, 0, top);
    p.bind(out);
    p.push(insn(LDX_DW, 9, 10, WINDOW, 0));
}

/// `r0` = a pointer to the rule of the frame at RA, which RULE then holds: the one found when
/// its slot was taken (all but the first frame of a walk: one lookup per frame, not two),
/// else [`rule_of`]'s; jumps to `none` without one.
fn frame_rule(p: &mut Asm, maps: [RawFd; 3], none: Label) {
    let (lookup, cached) = (p.label(), p.label());
    p.push(insn(LDX_DW, 1, 6, CACHED as i16, 0));
    p.jump(JEQ_IMM, 1, 0, 0, lookup);
    p.extend([
        insn(ST_DW, 6, 0, CACHED as i16, 0),
        insn(MOV64_REG, 0, 6, 0, 0),
        insn(ADD64_IMM, 0, 0, 0, RULE as i32),
    ]);
    p.jump(JA, 0, 0, 0, cached);
    p.bind(lookup);
    rule_of(p, maps, none);
    p.extend([insn(LDX_DW, 1, 0, 0, 0), insn(STX_DW, 6, 1, RULE as i16, 0)]);
    p.bind(cached);
}

/// A CFA tried after the rule's: beyond it by so many bytes (a call made with more pushed than
/// the function's body has: arguments, alignment), or a small one (a sample in a prologue).
#[derive(Clone, Copy)]
enum Try {
    Beyond(i32),
    Small(i32),
}

/// The CFAs tried for a frame (the first: its rule's own; the others matter where the rule is
/// its function's body's, not learnt), as a stack scan of the words just beyond would, each
/// taken only if the word below it is a return address: rustc's mismatches were 16 to 48 bytes
/// more at calls, and 8 or 16 in total at the innermost frame's prologue.
const TRIES: [Try; 11] = [
    Try::Beyond(0),
    Try::Beyond(16),
    Try::Beyond(32),
    Try::Beyond(8),
    Try::Beyond(24),
    Try::Beyond(48),
    Try::Beyond(40),
    Try::Beyond(56),
    Try::Beyond(64),
    Try::Small(8),
    Try::Small(16),
];

/// Puts the record in the ring: a copy header, then COUNT pairs.
fn output(p: &mut Asm, copies: RawFd, end: Label) {
    p.push(insn(LDX_DW, 3, 6, COUNT as i16, 0));
    p.jump(JEQ_IMM, 3, 0, 0, end);
    p.jump(JGT_IMM, 3, 0, WALK_PAIRS as i32, end);
    let record = WALK_RECORD as i16;
    p.extend([
        insn(STX_DW, 6, 7, record, 0),
        insn(LDX_DW, 1, 6, THREAD as i16, 0),
        insn(STX_W, 6, 1, record + 8, 0),
        insn(ST_W, 6, 0, record + 12, SLOTS as i32 + 1),
        insn(ST_DW, 6, 0, record + 16, 0),
        insn(ST_DW, 6, 0, record + 24, 0),
        insn(LSH64_IMM, 3, 0, 0, 4),
        insn(ADD64_IMM, 3, 0, 0, COPY_HEADER as i32),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 6, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, WALK_RECORD as i32),
        insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
    ]);
}

/// Where the walk finds a sample's user registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::native) enum Registers {
    /// In its context, a perf event's (`struct pt_regs`, the interrupted registers).
    Context,
    /// At the top of the current thread's kernel stack, whose address is at this offset in its
    /// `task_struct` (`btf::task_stack_offset`): for the tick's tracepoint (`cpu_wide/tick.rs`),
    /// whose context is the tracepoint's record.
    Task(u32),
}

/// `r9` = the user stack pointer at the sample, `r2` = its rbp; jumps to `end` if there
/// are none. In user code they are the interrupted registers; in the kernel (a system call, a
/// page fault), the user registers saved at the top of the thread's kernel stack, 16 KiB
/// aligned on x86-64, if they look like user registers (user code and stack segments). With
/// `Registers::Task`, always the latter: the kernel saves the user registers there at every
/// entry from user code, an interrupt's included.
fn registers(p: &mut Asm, source: Registers, end: Label) {
    let user = p.label();
    let regs = SCAN as i32;
    match source {
        Registers::Context => {
            let kernel = p.label();
            p.extend([
                insn(LDX_DW, 1, 10, CONTEXT, 0),
                insn(LDX_DW, 2, 1, PT_CS, 0),
                insn(AND64_IMM, 2, 0, 0, 3), // the privilege level
            ]);
            p.jump(JEQ_IMM, 2, 0, 0, kernel);
            p.extend([
                insn(LDX_DW, 9, 1, PT_SP, 0),
                insn(LDX_DW, 2, 1, PT_IP, 0),
                insn(STX_DW, 6, 2, IP as i16, 0),
                insn(LDX_DW, 2, 1, PT_BP, 0),
            ]);
            p.jump(JA, 0, 0, 0, user);
            p.bind(kernel);
            p.extend([
                insn(LDX_DW, 3, 1, PT_SP, 0),
                insn(AND64_IMM, 3, 0, 0, -KERNEL_STACK),
            ]);
        }
        Registers::Task(stack) => {
            // r3 = current->stack, read into the scratch's window.
            p.extend([
                insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_TASK),
                insn(MOV64_REG, 3, 0, 0, 0),
                insn(ADD64_IMM, 3, 0, 0, stack as i32),
                insn(MOV64_REG, 1, 6, 0, 0),
                insn(ADD64_IMM, 1, 0, 0, regs),
                insn(MOV64_IMM, 2, 0, 0, 8),
                insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
            ]);
            p.jump(JNE_IMM, 0, 0, 0, end);
            p.push(insn(LDX_DW, 3, 6, regs as i16, 0));
            p.jump(JEQ_IMM, 3, 0, 0, end);
        }
    }
    p.extend([
        insn(ADD64_IMM, 3, 0, 0, KERNEL_STACK - PT_REGS_SIZE),
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, regs),
        insn(MOV64_IMM, 2, 0, 0, PT_REGS_SIZE),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, end);
    p.push(insn(LDX_DW, 2, 6, (regs + i32::from(PT_CS)) as i16, 0));
    p.jump(JNE_IMM, 2, 0, USER_CS, end);
    p.push(insn(LDX_DW, 2, 6, (regs + i32::from(PT_SS)) as i16, 0));
    p.jump(JNE_IMM, 2, 0, USER_SS, end);
    p.extend([
        insn(LDX_DW, 9, 6, (regs + i32::from(PT_SP)) as i16, 0),
        insn(LDX_DW, 2, 6, (regs + i32::from(PT_IP)) as i16, 0),
        insn(STX_DW, 6, 2, IP as i16, 0),
        insn(LDX_DW, 2, 6, (regs + i32::from(PT_BP)) as i16, 0),
    ]);
    p.bind(user);
}

/// The bit of the bitmap that stands for `word`: its index, and the bit in that u64.
pub(super) fn bit(word: u64) -> (usize, u32) {
    let hash = word ^ (word >> 17);
    (
        ((hash >> 6) as usize) & (BITMAP_BITS / 64 - 1),
        (hash & 63) as u32,
    )
}

/// `r0` = a pointer to the rule of the return address at [`KEY`] (as the program reads a
/// rule: see [`encode`](crate::native::layout::encode)): the one learnt, else its function's body rule; jumps to `none`
/// without one.
fn rule_of(p: &mut Asm, maps: [RawFd; 3], none: Label) {
    let [rules, _, functions] = maps;
    map_lookup(p, rules, KEY);
    let learnt = p.label();
    p.jump(JNE_IMM, 0, 0, 0, learnt);
    p.extend([
        insn(LDX_DW, 1, 10, KEY, 0),
        insn(ADD64_IMM, 1, 0, 0, -1),
        insn(STX_DW, 6, 1, PC as i16, 0),
    ]);
    find(p, functions, none);
    p.push(insn(ADD64_IMM, 0, 0, 0, 8));
    p.bind(learnt);
    // None for a function the walk cannot follow, or past the end of a module's code.
    p.push(insn(LDX_B, 1, 0, 6, 0));
    p.jump(JEQ_IMM, 1, 0, 0, none);
}

/// `r0` = the entry of the functions' table for the function at PC (the last that starts at
/// or before it), by binary search; jumps to `none` without one.
fn find(p: &mut Asm, functions: RawFd, none: Label) {
    let entry = |p: &mut Asm| {
        map_lookup(p, functions, INDEX);
        p.jump(JEQ_IMM, 0, 0, 0, none);
    };
    p.push(insn(ST_W, 10, 0, INDEX, 0));
    entry(p);
    p.push(insn(LDX_DW, 1, 0, 0, 0));
    p.jump(JEQ_IMM, 1, 0, 0, none);
    p.extend([
        insn(ADD64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, HIGH as i16, 0),
        insn(ST_DW, 6, 0, LOW as i16, 1),
    ]);
    let (done, before, next) = (p.label(), p.label(), p.label());
    let top = p.here();
    p.jump(MAY_GOTO, 0, 0, 0, none);
    p.extend([
        insn(LDX_DW, 1, 6, LOW as i16, 0),
        insn(LDX_DW, 2, 6, HIGH as i16, 0),
    ]);
    p.jump(JGE_REG, 1, 2, 0, done);
    p.extend([
        insn(ADD64_REG, 1, 2, 0, 0),
        insn(RSH64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, MIDDLE as i16, 0),
        insn(STX_W, 10, 1, INDEX, 0),
    ]);
    entry(p);
    p.extend([
        insn(LDX_DW, 4, 0, 0, 0),
        insn(LDX_DW, 5, 6, PC as i16, 0),
        insn(LDX_DW, 1, 6, MIDDLE as i16, 0),
    ]);
    p.jump(JGT_REG, 4, 5, 0, before); // starts after it: before the middle
    p.extend([
        insn(ADD64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, LOW as i16, 0),
    ]);
    p.jump(JA, 0, 0, 0, next);
    p.bind(before);
    p.push(insn(STX_DW, 6, 1, HIGH as i16, 0));
    p.bind(next);
    p.jump(JA, 0, 0, 0, top);
    p.bind(done);
    p.extend([
        insn(LDX_DW, 1, 6, LOW as i16, 0),
        insn(ADD64_IMM, 1, 0, 0, -1),
    ]);
    p.jump(JEQ_IMM, 1, 0, 0, none);
    p.push(insn(STX_W, 10, 1, INDEX, 0));
    entry(p);
}

/// `r0` = the value of `map` for the key at `key` on the program's stack, or 0.
fn map_lookup(p: &mut Asm, map: RawFd, key: i16) {
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(key)),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
    ]);
}

/// Reads the word at the address in `r1` into WORD (and the address into AT): from the words
/// read last (WINDOW_WORDS) if they hold it, else from the stack, [`READ_BYTES`] from there
/// on, else (the end of the stack is nearer) that word alone; a failed read jumps to
/// `failed`.
fn read(p: &mut Asm, failed: Label) {
    let (done, from_stack, word_alone) = (p.label(), p.label(), p.label());
    p.extend([
        insn(STX_DW, 6, 1, AT as i16, 0),
        insn(LDX_DW, 2, 6, WINDOW_AT as i16, 0),
    ]);
    p.jump(JEQ_IMM, 2, 0, 0, from_stack); // no words read yet
    p.push(insn(SUB64_REG, 1, 2, 0, 0));
    p.jump(JGT_IMM, 1, 0, READ_BYTES - 8, from_stack); // not among them
    p.extend([
        insn(ADD64_REG, 1, 6, 0, 0),
        insn(LDX_DW, 1, 1, WINDOW_WORDS as i16, 0),
        insn(STX_DW, 6, 1, WORD as i16, 0),
    ]);
    p.jump(JA, 0, 0, 0, done);
    p.bind(from_stack);
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, WINDOW_WORDS as i32),
        insn(MOV64_IMM, 2, 0, 0, READ_BYTES),
        insn(LDX_DW, 3, 6, AT as i16, 0),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, word_alone);
    p.extend([
        insn(LDX_DW, 1, 6, AT as i16, 0),
        insn(STX_DW, 6, 1, WINDOW_AT as i16, 0),
        insn(LDX_DW, 1, 6, WINDOW_WORDS as i16, 0),
        insn(STX_DW, 6, 1, WORD as i16, 0),
    ]);
    p.jump(JA, 0, 0, 0, done);
    p.bind(word_alone);
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, WORD as i32),
        insn(MOV64_IMM, 2, 0, 0, 8),
        insn(LDX_DW, 3, 6, AT as i16, 0),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, failed);
    p.bind(done);
}

/// Puts (AT, WORD) in the record if AT lies beyond the copy and there is room.
fn keep(p: &mut Asm) {
    let skip = p.label();
    p.extend([
        insn(LDX_DW, 1, 6, AT as i16, 0),
        insn(LDX_DW, 2, 6, END as i16, 0),
    ]);
    p.jump(JLT_REG, 1, 2, 0, skip); // in the copy
    p.push(insn(LDX_DW, 3, 6, COUNT as i16, 0));
    p.jump(JGE_IMM, 3, 0, WALK_PAIRS as i32, skip); // full
    p.extend([
        insn(MOV64_REG, 4, 3, 0, 0),
        insn(ADD64_IMM, 4, 0, 0, 1),
        insn(STX_DW, 6, 4, COUNT as i16, 0),
        insn(LSH64_IMM, 3, 0, 0, 4),
        insn(MOV64_REG, 5, 6, 0, 0),
        insn(ADD64_REG, 5, 3, 0, 0),
        insn(STX_DW, 5, 1, PAIRS as i16, 0),
        insn(LDX_DW, 2, 6, WORD as i16, 0),
        insn(STX_DW, 5, 2, PAIRS as i16 + 8, 0),
    ]);
    p.bind(skip);
}
