//! The BPF side of the perf backend: raw `bpf(2)` commands (maps, program loading) and the
//! program attached to each thread's perf event, which copies the thread's mark slots at the
//! sample's instant into a ring shared by all threads (written with `asm.rs`'s instructions
//! and labels). It only builds and loads; `perf.rs` attaches, `ring.rs` reads.

use crate::native::asm::{
    insn, Asm, Insn, ADD64_IMM, CALL, EXIT, HELPER_GET_CURRENT_PID_TGID, HELPER_KTIME_GET_NS,
    HELPER_MAP_LOOKUP_ELEM, HELPER_PROBE_READ_USER, HELPER_RINGBUF_OUTPUT, JEQ_IMM, JLE_IMM,
    JLT_REG, JNE_IMM, LDX_DW, LDX_W, LD_IMM64, MOV64_IMM, MOV64_REG, MUL64_IMM, PSEUDO_MAP_FD,
    RB_NO_WAKEUP, STX_DW, STX_W, ST_DW, ST_W,
};
use crate::native::map_value::{
    ANCHOR_RECORD_SIZE, COPY_HEADER, SCRATCH_SIZE, VALUE_ADDRESSES, VALUE_ANCHORS,
    VALUE_ANCHOR_RECORD, VALUE_DEPARTED, VALUE_SCRATCH,
};
use crate::native::perf::{ANCHORS, DEPTH_OFFSET, SLOTS};
use crate::native::rules::Rules;
use crate::native::walk::CONTEXT;
use fsprof_shim::abi::{MARK_CAPACITY, RECORDS_OFFSET, RECORD_SIZE, SLOT_STATE_SIZE};
use nix::errno::Errno;
use nix::libc;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_PROG_LOAD: u32 = 5;
const BPF_RAW_TRACEPOINT_OPEN: u32 = 17;
pub(super) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(super) const BPF_MAP_TYPE_PROG_ARRAY: u32 = 3;
pub(super) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub(super) const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub(super) const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_F_NO_PREALLOC: u32 = 1;
const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

fn bpf_call<T>(command: u32, attr: &mut T) -> Result<libc::c_long, Errno> {
    // SAFETY: `attr` is a valid, zero-padded attribute block of the size passed.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command as libc::c_long,
            attr as *mut T,
            std::mem::size_of::<T>(),
        )
    };
    if result < 0 {
        return Err(Errno::last());
    }
    Ok(result)
}

/// A command that makes a descriptor.
fn bpf<T>(command: u32, attr: &mut T) -> Result<OwnedFd, Errno> {
    let fd = bpf_call(command, attr)?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[repr(C)]
#[derive(Default)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Sets `key` to `value` in the map `map` (8-byte keys and values).
pub(super) fn update_elem(map: RawFd, key: u64, value: u64) -> Result<(), Errno> {
    update_bytes(map, &key.to_ne_bytes(), &value.to_ne_bytes())
}

/// Removes `key` from the hash map `map` (8-byte keys).
pub(super) fn delete_elem(map: RawFd, key: u64) -> Result<(), Errno> {
    delete_bytes(map, &key.to_ne_bytes())
}

/// Sets `key` to `value` in the map `map` (keys and values of these sizes).
pub(super) fn update_bytes(map: RawFd, key: &[u8], value: &[u8]) -> Result<(), Errno> {
    let mut attr = MapUpdate {
        map_fd: map as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..Default::default()
    };
    bpf_call(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// Removes `key` from the hash map `map` (keys of this size).
pub(super) fn delete_bytes(map: RawFd, key: &[u8]) -> Result<(), Errno> {
    let mut attr = MapUpdate {
        map_fd: map as u32,
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    bpf_call(BPF_MAP_DELETE_ELEM, &mut attr).map(|_| ())
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// An array (mapped into fsprof: the slot addresses are written there), a hash map or a ring
/// buffer (of `max_entries` bytes).
pub(super) fn create_map(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> Result<OwnedFd, Errno> {
    let flags = if map_type == BPF_MAP_TYPE_ARRAY {
        BPF_F_MMAPABLE
    } else {
        0
    };
    create_map_with(map_type, key_size, value_size, max_entries, flags)
}

/// A hash map whose elements the kernel allocates as fsprof adds them, not all `max_entries`
/// up front (the rules' 32768 were megabytes and milliseconds for each process recorded). Only
/// for maps that programs needing Linux 6.9 use (the walk's): before 6.1 the verifier refuses a
/// perf-event program that uses such a map, so the maps of the sampling programs are
/// preallocated.
pub(super) fn create_sparse_hash(
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> Result<OwnedFd, Errno> {
    create_map_with(
        BPF_MAP_TYPE_HASH,
        key_size,
        value_size,
        max_entries,
        BPF_F_NO_PREALLOC,
    )
}

fn create_map_with(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
) -> Result<OwnedFd, Errno> {
    let mut attr = MapCreate {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags,
        map_name: *b"fsprof_slots\0\0\0\0",
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut attr)
}

/// Where a program finds the map value index of the thread it runs for; it keeps the index in
/// the stack word at [`INDEX_SLOT`] for the rest of the program.
#[derive(Clone, Copy)]
pub(super) enum Index {
    /// The event is the thread's own (one per thread): the index is written into the program.
    Fixed(u32),
    /// The event is a CPU's (`cpu_wide.rs`): the index is looked up by the running thread's id
    /// in the hash map of watched threads; for a thread not there the program returns 0 (no
    /// sample is written) at once.
    Watched(RawFd),
}

/// The stack word (u32) that holds the thread's map value index (see [`Index`]).
pub(super) const INDEX_SLOT: i16 = -4;

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
    walk: [RawFd; 2],
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
            crate::native::cpu_wide::cpu_time(&mut p, copies);
        }
        anchors(&mut p, copies);
        crate::native::walk::hand_over(&mut p, walk);
    }
    if let Some(gap_ns) = departure {
        departed(&mut p, gap_ns);
    }
    p.extend([insn(MOV64_IMM, 0, 0, 0, result), insn(EXIT, 0, 0, 0, 0)]);
    p.finish()
}

/// Puts the thread's map value index in the stack word at [`INDEX_SLOT`]; for
/// `Index::Watched`, returns 0 at once where the running thread is not watched.
fn index_of_thread(p: &mut Asm, index: Index) {
    match index {
        Index::Fixed(index) => p.push(insn(ST_W, 10, 0, INDEX_SLOT, index as i32)),
        Index::Watched(watched) => {
            p.extend([
                insn(CALL, 0, 0, 0, HELPER_GET_CURRENT_PID_TGID),
                insn(STX_W, 10, 0, INDEX_SLOT, 0), // the thread's id, the lower half
            ]);
            watched_index(p, watched, INDEX_SLOT);
            let watched = p.label();
            p.jump(JNE_IMM, 0, 0, 0, watched);
            p.extend([
                insn(MOV64_IMM, 0, 0, 0, 0), // not watched: no sample
                insn(EXIT, 0, 0, 0, 0),
            ]);
            p.bind(watched);
            p.extend([insn(LDX_W, 1, 0, 0, 0), insn(STX_W, 10, 1, INDEX_SLOT, 0)]);
        }
    }
}

/// `r0` = the entry of the thread whose id is the stack word at `key` in the hash map
/// `watched` (a pointer to its u32 map value index), or 0.
pub(super) fn watched_index(p: &mut Asm, watched: RawFd, key: i16) {
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, watched),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(key)),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
    ]);
}

/// `r0` = the map value (of the array `map`) whose index is at [`INDEX_SLOT`], or 0.
pub(super) fn value_of_thread(map: RawFd) -> [Insn; 5] {
    [
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(INDEX_SLOT)),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
    ]
}

/// For each slot, its copy record (see [`program`]) put in the ring `copies`: `r6` is the
/// value, `r7` the time, the index at [`INDEX_SLOT`]; uses r1-r5, r8, r9.
pub(super) fn copy_slots(p: &mut Asm, copies: RawFd, at_switch: bool) {
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

/// At a sample: the anchors' record (see `perf::ANCHORS`) in the value's scratch, the time
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
    p.extend([
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, copies),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 6, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, i32::from(record)),
        insn(MOV64_IMM, 3, 0, 0, ANCHOR_RECORD_SIZE as i32),
        insn(MOV64_IMM, 4, 0, 0, RB_NO_WAKEUP),
        insn(CALL, 0, 0, 0, HELPER_RINGBUF_OUTPUT),
    ]);
    p.bind(skip);
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
    load(program(map, copies, walk, index, at_switch))
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

/// Loads the walk (`walk.rs`), which the threads' programs tail-call; `maps`: the rules, the
/// bitmap, the functions' table, the scratch. Its loops need Linux 6.9 (`may_goto`).
pub(super) fn load_walk(maps: [RawFd; 4], copies: RawFd) -> Result<OwnedFd, String> {
    load(crate::native::walk::program(maps, copies))
}

fn load(insns: Vec<Insn>) -> Result<OwnedFd, String> {
    load_as(BPF_PROG_TYPE_PERF_EVENT, insns)
}

/// Loads a program run at a tracepoint (`cpu_wide.rs`), attached with [`attach_tracepoint`].
pub(super) fn load_tracepoint_program(insns: Vec<Insn>) -> Result<OwnedFd, String> {
    load_as(BPF_PROG_TYPE_RAW_TRACEPOINT, insns)
}

#[repr(C)]
#[derive(Default)]
struct RawTracepointOpen {
    name: u64,
    prog_fd: u32,
    _pad: u32,
    cookie: u64,
}

/// Runs `program` at every hit of the kernel's tracepoint `name` (`sched_switch`, ...), with
/// the tracepoint's arguments as its context, until the returned descriptor is closed. Needs
/// no tracefs.
pub(super) fn attach_tracepoint(
    name: &std::ffi::CStr,
    program: &OwnedFd,
) -> Result<OwnedFd, Errno> {
    let mut attr = RawTracepointOpen {
        name: name.as_ptr() as u64,
        prog_fd: program.as_raw_fd() as u32,
        ..Default::default()
    };
    bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

fn load_as(prog_type: u32, insns: Vec<Insn>) -> Result<OwnedFd, String> {
    let license = c"GPL"; // probe_read_user is a GPL-only helper
    let mut log = vec![0u8; 1 << 20];
    let mut attr = ProgLoad {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: *b"fsprof_marks\0\0\0\0",
        ..Default::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        Err(Errno::EACCES | Errno::EINVAL | Errno::EFAULT) => {
            // Load again with the verifier's log, to say why.
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let again = bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            // The verifier's complaint: its log's last line but for the statistics after it.
            let last = text
                .lines()
                .rev()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("processed "))
                .find(|l| !l.starts_with("verification time"))
                .unwrap_or("");
            match again {
                Ok(fd) => Ok(fd),
                Err(e) => Err(format!("{}: {last}", e.desc())),
            }
        }
        Err(e) => Err(e.desc().to_owned()),
    }
}

/// Maps `len` bytes of `fd` from `offset`, shared, readable (and writable if `write`).
pub(super) fn map_shared(
    fd: &OwnedFd,
    len: usize,
    write: bool,
    offset: usize,
) -> Result<*mut u8, Errno> {
    let protection = if write {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: a new mapping chosen by the kernel; the result is checked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            protection,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    Ok(base.cast())
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}
