//! The program attached to a thread's sampling event (its own, or its CPU's: [`Index`]), and to
//! its context-switch event where there is one: it copies the thread's mark slots at the
//! sample's instant into a ring shared by all threads, with the anchors' words and, for a CPU's
//! event, the thread's time on a CPU, then hands over to the walk (`walk.rs`); and the programs
//! a sampler keeps loaded per map value index ([`Programs`]). Written with `asm.rs`; loaded by
//! `bpf.rs`. Not here: the per-CPU design's other programs (`cpu_wide/programs.rs`).

use crate::native::asm::{
    insn, Asm, Insn, Label, ADD64_IMM, ADD64_REG, CALL, EXIT, HELPER_GET_CURRENT_PID_TGID,
    HELPER_GET_CURRENT_TASK, HELPER_GET_PRANDOM_U32, HELPER_KTIME_GET_NS, HELPER_PROBE_READ_KERNEL,
    HELPER_PROBE_READ_USER, JA, JEQ_IMM, JLE_IMM, JLT_REG, JNE_IMM, JNE_REG, LDX_DW, LDX_H, LDX_W,
    LD_IMM64, MOD64_IMM, MOV64_IMM, MOV64_REG, OR64_IMM, RSH64_IMM, STX_DW, STX_W, ST_DW, ST_W,
};
use crate::native::bpf::load;
use crate::native::fragments::{copy_slots, output_sized, value_of_thread, watched_index};
use crate::native::layout::{
    ANCHORS, ANCHOR_RECORD_SIZE, CONTEXT, COPY_HEADER, INDEX_SLOT, LABELS, LABELS_MOST,
    LABELS_RECORD, LABEL_ENTRY, LABEL_KEY, LABEL_VALUE, PROCESS_KEY, SLOTS, VALUE_ANCHORS,
    VALUE_ANCHOR_RECORD, VALUE_DEPARTED, VALUE_LABELS_FORMAT, VALUE_LABELS_OFFSET,
    VALUE_LABELS_RECORD, VALUE_LABELS_TEMP,
};
use crate::native::layout::{LABELS_OTEL, OTEL_COPIED};
use crate::native::rules::Rules;
use crate::program::otel_context::{MAX_RECORD, RECORD_HEADER};
use nix::errno::Errno;
use std::os::fd::{OwnedFd, RawFd};

/// Where a program finds the map value index of the thread it runs for; it keeps the index in
/// the stack word at [`INDEX_SLOT`] for the rest of the program.
#[derive(Clone, Copy)]
pub(super) enum Index {
    /// The event is the thread's own (one per thread): the index is written into the program.
    Fixed(u32),
    /// The event is a CPU's (`cpu_wide.rs`): the index is looked up by the running thread's id
    /// in the hash map of watched threads; for a thread not there the program returns at once,
    /// writing a bare sample where the thread's process is watched (see `index_of_thread`).
    Watched(RawFd),
}

/// The program for the thread whose map value is `index`: takes the time, then for each slot
/// builds a copy record in the value's scratch area (the time, `index`, the slot's number and
/// address, the copy's result) and puts it in the ring buffer `copies`. The copy is the slot's
/// state, then only the records below its depth (deeper ones may lie on pages never touched,
/// which a copy made without faulting cannot read); a slot without an address, or whose copy
/// failed, gives the header alone. The thread is the one interrupted, so its slots hold still.
/// Returns 1, so the kernel writes the sample (after these copies), for a sampling event. For a
/// context-switch event (`at_switch`: the thread is leaving its CPU), its copies say so (bit 8
/// of the slot's number), to be told apart from the samples' own, and it returns 0 (the event
/// writes nothing of its own) unless the thread's previous such sample is old enough: see
/// [`Departure`]. A CPU's sampling event (`Index::Watched`) also puts the thread's time on a
/// CPU in the ring (`cpu_wide::cpu_time`).
fn program(
    map: RawFd,
    copies: RawFd,
    walk: Option<[RawFd; 2]>,
    index: Index,
    at_switch: Option<Departure>,
) -> Vec<Insn> {
    let departure = at_switch.map(|d| d.gap_ns);
    let at_switch = at_switch.is_some();
    let result = i32::from(!at_switch);
    let mut p = Asm::new();
    p.push(insn(STX_DW, 10, 1, CONTEXT, 0)); // the context, for the walk
    index_of_thread(&mut p, index);
    p.extend(value_of_thread(map));
    let go_on = p.label();
    p.jump(JNE_IMM, 0, 0, 0, go_on); // a value: go on
    p.extend([insn(MOV64_IMM, 0, 0, 0, 1), insn(EXIT, 0, 0, 0, 0)]);
    p.bind(go_on);
    p.extend([
        insn(MOV64_REG, 6, 0, 0, 0), // r6: the value (r6-r9 survive calls)
        insn(CALL, 0, 0, 0, HELPER_KTIME_GET_NS),
        insn(MOV64_REG, 7, 0, 0, 0), // r7: the time
    ]);
    copy_slots(&mut p, copies, at_switch);
    if !at_switch {
        if matches!(index, Index::Watched(_)) {
            crate::native::cpu_wide::programs::cpu_time(&mut p, copies);
        }
        anchors(&mut p, copies);
        if let Some(thread_pointer) = crate::native::btf::thread_pointer_offset() {
            labels(&mut p, copies, thread_pointer);
        }
        if let Some(walk) = walk {
            crate::native::walk::hand_over(&mut p, walk);
        }
    }
    if let Some(gap_ns) = departure {
        departed(&mut p, gap_ns);
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, result), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}

/// Puts the thread's map value index in the stack word at [`INDEX_SLOT`]; for
/// `Index::Watched`, where the running thread is not watched, returns at once: 1 (the kernel
/// writes the sample bare, registers and stack) where its process is watched (its key,
/// [`PROCESS_KEY`] added to its id, is in the map), else 0 (no sample).
fn index_of_thread(p: &mut Asm, index: Index) {
    match index {
        Index::Fixed(index) => p.push(insn(ST_W, 10, 0, INDEX_SLOT, index as i32)),
        Index::Watched(watched) => {
            p.extend([
                insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
                insn(STX_W, 10, 0, INDEX_SLOT, 0), // the thread's id, the lower half
            ]);
            watched_index(p, watched, INDEX_SLOT);
            let found = p.label();
            p.jump(JNE_IMM, 0, 0, 0, found);
            // Not watched: a bare sample if its process is, else none.
            p.extend([
                insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
                insn(RSH64_IMM, 0, 0, 0, 32),
                insn(OR64_IMM, 0, 0, 0, PROCESS_KEY as i32), // the low word is what counts
                insn(STX_W, 10, 0, INDEX_SLOT, 0),
            ]);
            watched_index(p, watched, INDEX_SLOT);
            let process = p.label();
            p.jump(JNE_IMM, 0, 0, 0, process);
            p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
            p.bind(process);
            p.extend([insn(MOV64_IMM, 0, 0, 0, 1), insn(EXIT, 0, 0, 0, 0)]);
            p.bind(found);
            p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
        }
    }
}

/// What the program run as a thread leaves its CPU needs to tell whether the kernel should
/// write a sample of it (its registers and stack, into the thread's ring): the least time
/// between two such samples of one thread.
#[derive(Clone, Copy)]
pub(super) struct Departure {
    pub(super) gap_ns: u64,
}

/// At a departure: returns 1 (the kernel writes the event's sample: the thread's user registers
/// and stack, which show the code it was running, or the system call it blocks in) if its
/// previous such sample is at least `gap_ns` old (the time in `r7`; `r6` is the value, which
/// keeps the sample's time). Preempted, its wait for a CPU gets the stack it was preempted at;
/// blocked, its block gets the stack it blocked at, which the rules' features need (a wait in
/// `pthread_mutex_lock` is `locks`). The gap bounds what this costs a thread that leaves its
/// CPU very often (a copy of up to 64 KiB each) to one per sampling period.
fn departed(p: &mut Asm, gap_ns: u64) {
    let last = VALUE_DEPARTED as i16;
    let gap = gap_ns.min(i32::MAX as u64) as i32;
    let too_recent = p.label();
    p.extend([insn(LDX_DW, 2, 6, last, 0), insn(ADD64_IMM, 2, 0, 0, gap)]);
    p.jump(JLT_REG, 7, 2, 0, too_recent); // the previous one too recent: no sample
    p.extend([
        insn(STX_DW, 6, 7, last, 0),
        insn(MOV64_IMM, 0, 0, 0, 1),
        insn(EXIT, 0, 0, 0, 0),
    ]);
    p.bind(too_recent);
}

/// At a sample: the anchors' record (see `layout::ANCHORS`) in the value's scratch, the time
/// (`r7`), the index (at [`INDEX_SLOT`]) and slot number SLOTS, then each anchor's address and the word read there (0
/// when it has none or the read fails), put in the ring `copies`. `r6` is the value.
fn anchors(p: &mut Asm, copies: RawFd) {
    let record = VALUE_ANCHOR_RECORD as i16;
    // No record at all while the thread has no anchors (most threads: shallow stacks).
    let skip = p.label();
    p.push(insn(LDX_DW, 3, 6, VALUE_ANCHORS as i16, 0));
    p.jump(JEQ_IMM, 3, 0, 0, skip);
    p.extend([
        insn(STX_DW, 6, 7, record, 0),
        insn(LDX_W, 1, 10, INDEX_SLOT, 0),
        insn(STX_W, 6, 1, record + 8, 0),
        insn(ST_W, 6, 0, record + 12, SLOTS as i32),
        insn(ST_DW, 6, 0, record + 16, 0),
        insn(ST_DW, 6, 0, record + 24, 0),
    ]);
    for anchor in 0..ANCHORS {
        let address = (VALUE_ANCHORS + 8 * anchor) as i16;
        let pair = record + (COPY_HEADER + 16 * anchor) as i16;
        let none = p.label();
        p.extend([
            insn(LDX_DW, 3, 6, address, 0),
            insn(STX_DW, 6, 3, pair, 0),
            insn(ST_DW, 6, 0, pair + 8, 0),
        ]);
        p.jump(JEQ_IMM, 3, 0, 0, none); // no anchor
        p.extend([
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, i32::from(pair) + 8),
            insn(MOV64_IMM, 2, 0, 0, 8),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
        ]);
        p.bind(none);
    }
    output_sized(p, copies, record, ANCHOR_RECORD_SIZE);
    p.bind(skip);
}

/// At a sample of a thread whose labels fsprof reads (the value's labels offset is not 0):
/// its labels as they are at that instant, put in the ring `copies` (see
/// `layout::VALUE_LABELS_RECORD`): the pointer to its label set or record, read at its thread
/// pointer (the task's `thread.fsbase`, at `thread_pointer` in its `task_struct`) plus that
/// offset; then for a custom-labels set, the set's first [`LABELS_MOST`] labels, each key and
/// value copied (cut to [`LABEL_KEY`] and [`LABEL_VALUE`] bytes; a null key as empty); for an
/// OpenTelemetry record ([`otel_record`]), its bytes. A read that fails ends the copy there.
/// `r6` is the value, `r7` the time; `r8` and `r9` are used.
fn labels(p: &mut Asm, copies: RawFd, thread_pointer: u32) {
    let record = VALUE_LABELS_RECORD as i16;
    let temp = VALUE_LABELS_TEMP as i16;
    let skip = p.label();
    let output = p.label();
    p.push(insn(LDX_DW, 1, 6, VALUE_LABELS_OFFSET as i16, 0));
    p.jump(JEQ_IMM, 1, 0, 0, skip);
    p.extend([
        insn(STX_DW, 6, 7, record, 0),
        insn(LDX_W, 1, 10, INDEX_SLOT, 0),
        insn(STX_W, 6, 1, record + 8, 0),
        insn(ST_W, 6, 0, record + 12, LABELS as i32),
        insn(ST_DW, 6, 0, record + 16, 0),
        insn(ST_DW, 6, 0, record + 24, 0),
        insn(ST_DW, 6, 0, record + 32, 0), // no label copied yet
        // The thread pointer, into the temporary words.
        insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_TASK),
        insn(MOV64_REG, 3, 0, 0, 0),
        insn(ADD64_IMM, 3, 0, 0, thread_pointer as i32),
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, i32::from(temp)),
        insn(MOV64_IMM, 2, 0, 0, 8),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_KERNEL),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, output);
    // The set's address, into the record's address field.
    p.extend([
        insn(LDX_DW, 3, 6, temp, 0),
        insn(LDX_DW, 1, 6, VALUE_LABELS_OFFSET as i16, 0),
        insn(ADD64_REG, 3, 1, 0, 0),
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, i32::from(record) + 16),
        insn(MOV64_IMM, 2, 0, 0, 8),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
        insn(LDX_DW, 3, 6, record + 16, 0),
    ]);
    p.jump(JEQ_IMM, 3, 0, 0, output); // no set
    let custom = p.label();
    p.push(insn(LDX_DW, 1, 6, VALUE_LABELS_FORMAT as i16, 0));
    p.jump(JNE_IMM, 1, 0, LABELS_OTEL as i32, custom);
    otel_record(p, record, output);
    p.bind(custom);
    // Its header: storage (r8) and count (r9, at most LABELS_MOST).
    p.extend([
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, i32::from(temp)),
        insn(MOV64_IMM, 2, 0, 0, 24),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, output);
    p.extend([insn(LDX_DW, 8, 6, temp, 0), insn(LDX_DW, 9, 6, temp + 8, 0)]);
    for label in 0..LABELS_MOST {
        let entry = record + (COPY_HEADER + 8 + label * LABEL_ENTRY) as i16;
        p.jump(JLE_IMM, 9, 0, label as i32, output); // no more labels
        p.extend([
            insn(MOV64_REG, 3, 8, 0, 0),
            insn(ADD64_IMM, 3, 0, 0, 32 * label as i32),
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, i32::from(temp)),
            insn(MOV64_IMM, 2, 0, 0, 32),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
        ]);
        p.jump(JNE_IMM, 0, 0, 0, output);
        // The key: its length (0 for a null key), cut, then its bytes.
        let (key_kept, key_cut) = (p.label(), p.label());
        p.extend([insn(LDX_DW, 2, 6, temp, 0), insn(LDX_DW, 3, 6, temp + 8, 0)]);
        p.jump(JNE_IMM, 3, 0, 0, key_kept);
        p.push(insn(MOV64_IMM, 2, 0, 0, 0));
        p.bind(key_kept);
        p.jump(JLE_IMM, 2, 0, LABEL_KEY as i32, key_cut);
        p.push(insn(MOV64_IMM, 2, 0, 0, LABEL_KEY as i32));
        p.bind(key_cut);
        p.extend([
            insn(STX_DW, 6, 2, entry, 0),
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, i32::from(entry) + 16),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
        ]);
        // The value: its length, cut, then its bytes.
        let value_cut = p.label();
        p.extend([
            insn(LDX_DW, 2, 6, temp + 16, 0),
            insn(LDX_DW, 3, 6, temp + 24, 0),
        ]);
        p.jump(JLE_IMM, 2, 0, LABEL_VALUE as i32, value_cut);
        p.push(insn(MOV64_IMM, 2, 0, 0, LABEL_VALUE as i32));
        p.bind(value_cut);
        p.extend([
            insn(STX_DW, 6, 2, entry + 8, 0),
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(
                ADD64_IMM,
                1,
                0,
                0,
                i32::from(entry) + (16 + LABEL_KEY) as i32,
            ),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
            insn(ST_DW, 6, 0, record + 32, label as i32 + 1),
        ]);
    }
    p.bind(output);
    output_sized(p, copies, record, LABELS_RECORD);
    p.bind(skip);
}

/// The OpenTelemetry record at the address in `r3` (and in the labels record's address
/// field), after the labels record's count word: its header, then as much of its attributes as
/// its size says, at most [`MAX_RECORD`] bytes in all; the count word says [`OTEL_COPIED`] and
/// how many bytes were copied (none where its header could not be read). Jumps to `output`.
fn otel_record(p: &mut Asm, record: i16, output: Label) {
    let bytes = record + COPY_HEADER as i16 + 8;
    let (counted, fits) = (p.label(), p.label());
    p.extend([
        insn(MOV64_IMM, 8, 0, 0, 0), // r8: the bytes copied
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, i32::from(bytes)),
        insn(MOV64_IMM, 2, 0, 0, RECORD_HEADER as i32),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, counted);
    // Its attributes' size (native endian, at 26), cut to what the record may hold.
    p.extend([
        insn(MOV64_IMM, 8, 0, 0, RECORD_HEADER as i32),
        insn(LDX_H, 2, 6, bytes + 26, 0),
    ]);
    p.jump(JLE_IMM, 2, 0, (MAX_RECORD - RECORD_HEADER) as i32, fits);
    p.push(insn(
        MOV64_IMM,
        2,
        0,
        0,
        (MAX_RECORD - RECORD_HEADER) as i32,
    ));
    p.bind(fits);
    p.jump(JEQ_IMM, 2, 0, 0, counted);
    p.extend([
        insn(MOV64_REG, 9, 2, 0, 0),
        insn(LDX_DW, 3, 6, record + 16, 0),
        insn(ADD64_IMM, 3, 0, 0, RECORD_HEADER as i32),
        insn(MOV64_REG, 1, 6, 0, 0),
        insn(ADD64_IMM, 1, 0, 0, i32::from(bytes) + RECORD_HEADER as i32),
        insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
    ]);
    p.jump(JNE_IMM, 0, 0, 0, counted);
    p.push(insn(ADD64_REG, 8, 9, 0, 0));
    p.bind(counted);
    p.extend([
        insn(OR64_IMM, 8, 0, 0, OTEL_COPIED as i32),
        insn(STX_DW, 6, 8, record + 32, 0),
    ]);
    p.jump(JA, 0, 0, 0, output);
}

/// Loads [`program`] for the thread whose map value is `index`; `walk`: the scratch and the
/// program array of its hand-over to the walk (`walk.rs`).
pub(super) fn load_program(
    map: RawFd,
    copies: RawFd,
    walk: [RawFd; 2],
    index: Index,
    at_switch: Option<Departure>,
) -> Result<OwnedFd, String> {
    load(program(map, copies, Some(walk), index, at_switch))
}

/// The program of a CPU's event at the scheduler's tick (`cpu_wide/tick.rs`): the hits of the
/// tracepoint `hrtimer_expire_entry` whose timer's function is not `handler` (the tick's) are
/// left at once, and of the others one in `every` at random is kept: [`program`] with
/// `Index::Watched(watched)`, handing over to a walk of the tracepoint's type through `walk`
/// where given (`Rules::walk_at_tick`).
pub(super) fn load_tick_program(
    map: RawFd,
    copies: RawFd,
    walk: Option<[RawFd; 2]>,
    watched: RawFd,
    (handler, every): (u64, u32),
) -> Result<OwnedFd, String> {
    let function = crate::native::cpu_wide::tick::FUNCTION_OFFSET;
    let mut p = Asm::new();
    let (leave, keep) = (p.label(), p.label());
    p.extend([
        insn(LDX_DW, 2, 1, function, 0),
        insn(LD_IMM64, 3, 0, 0, handler as u32 as i32),
        insn(0, 0, 0, 0, (handler >> 32) as u32 as i32),
    ]);
    p.jump(JNE_REG, 2, 3, 0, leave);
    if every > 1 {
        p.extend([
            insn(MOV64_REG, 6, 1, 0, 0), // the context, kept across the call
            insn(CALL, 0, 0, 0, HELPER_GET_PRANDOM_U32),
            insn(MOD64_IMM, 0, 0, 0, every as i32),
            insn(MOV64_REG, 1, 6, 0, 0),
        ]);
        p.jump(JNE_IMM, 0, 0, 0, leave);
    }
    p.jump(JA, 0, 0, 0, keep);
    p.bind(leave);
    p.extend([insn(MOV64_IMM, 0, 0, 0, 0), insn(EXIT, 0, 0, 0, 0)]);
    p.bind(keep);
    let mut insns = p.finish();
    insns.extend(program(map, copies, walk, Index::Watched(watched), None));
    crate::native::bpf::load_tracepoint_event_program(insns)
}

/// The programs a perf sampler attaches to its threads' events, per map value index (the one
/// copying at samples, and the one copying at departures), with the rules their walks follow
/// and what a departure samples.
pub(super) struct Programs {
    loaded: [Vec<Option<OwnedFd>>; 2],
    pub(super) rules: Rules,
    departure: Departure,
}

impl Programs {
    pub(super) fn new(rules: Rules, departure: Departure) -> Programs {
        Programs {
            loaded: Default::default(),
            rules,
            departure,
        }
    }

    /// Keeps `loaded` as the program [`Programs::get`] gives for `index` and `switch`.
    pub(super) fn keep(&mut self, index: u32, switch: bool, loaded: OwnedFd) {
        let cache = &mut self.loaded[usize::from(switch)];
        if cache.len() <= index as usize {
            cache.resize_with(index as usize + 1, || None);
        }
        cache[index as usize] = Some(loaded);
    }

    /// The program for map value `index` (the one that copies slots at samples, or at
    /// departures if `switch`) of the map `map`, putting its copies in `copies`: loaded once per
    /// index and kept, since a thread that ends frees its index for the next. Loading one (the
    /// kernel checks it) takes about 300 µs, which a new thread spent running before perf
    /// counted it: twice per thread, 0.6 ms of the 0.9 ms between the tick that found it and its
    /// event's enabling (`requests`, strace -T).
    pub(super) fn get(
        &mut self,
        map: RawFd,
        copies: RawFd,
        index: u32,
        switch: bool,
    ) -> Result<OwnedFd, Errno> {
        let cache = &self.loaded[usize::from(switch)];
        if cache.get(index as usize).is_none_or(|kept| kept.is_none()) {
            let departure = switch.then_some(self.departure);
            let walk = self.rules.hand_over();
            let loaded = load_program(map, copies, walk, Index::Fixed(index), departure)
                .map_err(|_| Errno::EPERM)?;
            self.keep(index, switch, loaded);
        }
        let program = self.loaded[usize::from(switch)][index as usize]
            .as_ref()
            .expect("loaded");
        program
            .try_clone()
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
    }
}
