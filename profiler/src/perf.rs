//! Samples running threads' registers, the top of their stacks and their mark slots, at one
//! instant each, without stopping them: a per-thread `perf_event_open` task-clock event samples
//! the thread every period of its own CPU time (the timer fires on the thread's CPU, as for
//! `perf record`), writing registers and stack into a ring buffer, and a small BPF program
//! attached to the event copies the thread's slots from the region at that same instant (the
//! thread is interrupted, so its slots cannot change meanwhile).
//!
//! This module owns the kernel objects (events, rings, the BPF map and programs) and decodes what
//! they hold. It does not unwind (`unwind.rs`), decode slots (`fsprof_shim::abi`) or decide which
//! threads to sample (the sampler). Everything read from a ring or the map came from the target's
//! memory or the kernel's copy of it and is bounded before use.
//!
//! The BPF program is hand-assembled (about fifty instructions): the BPF toolchains in the Rust
//! ecosystem (aya, libbpf-rs) need a separate compiler for the program, which a profiler built
//! with `cargo build` cannot assume. It needs `CAP_BPF` and `CAP_PERFMON` (or root); where the
//! kernel refuses, [`PerfSampler::new`] says why and the sampler falls back to ptrace.

use crate::unwind::{Registers, StackCopy};
use fsprof_shim::abi::{MARK_CAPACITY, RECORDS_OFFSET, RECORD_SIZE, SLOT_SIZE, SLOT_STATE_SIZE};
use nix::errno::Errno;
use nix::libc;
use perf_event_open_sys as sys;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};

/// Bytes of stack copied per sample, from the stack pointer up. At most 65528 (a sample record's
/// size is a 16-bit number); deeper stacks are cut (and marked as such).
pub const STACK_DUMP: u32 = 48 * 1024;
/// Slots copied per sample: one per region the thread marks in (the program's shim, the agent's).
pub const SLOTS: usize = 2;
/// Threads sampled this way at once; further threads fall back to ptrace.
pub const MAX_THREADS: u32 = 1024;
/// Data pages of each thread's ring: room for five samples of [`STACK_DUMP`] bytes, so that a
/// sampler late by a few periods loses none.
const RING_PAGES: usize = 64;

/// Layout of one map value: slot addresses (set by fsprof); then, written by the BPF program at
/// each sample: a run counter, the addresses it copied from, each copy's result (0 or an error)
/// and the copies.
const VALUE_ADDRESSES: usize = 0;
const VALUE_COUNT: usize = 8 * SLOTS;
const VALUE_USED: usize = VALUE_COUNT + 8;
const VALUE_RESULTS: usize = VALUE_USED + 8 * SLOTS;
const VALUE_COPIES: usize = VALUE_RESULTS + 8 * SLOTS;
const VALUE_SIZE: usize = VALUE_COPIES + SLOTS * SLOT_SIZE;

/// Offset of `depth` in a slot (after `seq` and `tid`).
const DEPTH_OFFSET: i32 = 8;

/// Registers perf copies (bits of `enum perf_event_x86_regs`): bp, sp, ip, in this order.
#[cfg(target_arch = "x86_64")]
const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
#[cfg(not(target_arch = "x86_64"))]
const REGS_MASK: u64 = 0;

/// One sample of one thread.
#[derive(Debug, Default)]
pub struct PerfSample {
    /// Registers at the sample.
    pub regs: Registers,
    /// The top of its stack.
    pub stack: StackCopy,
    /// The raw bytes of each slot whose address was given, copied at the sample: its state and
    /// the records below its depth (the rest is stale). `None` where no address was given, and
    /// all `None` when the copies could not be matched to this sample (see [`PerfSampler::take`]).
    pub slots: [Option<Vec<u8>>; SLOTS],
    /// Whether `slots` are this sample's (else its marks are unknown).
    pub marks_known: bool,
}

struct Thread {
    index: u32,
    _event: OwnedFd,
    _program: OwnedFd,
    ring: Ring,
    addresses: [u64; SLOTS],
    /// Program runs seen so far (samples read plus samples lost).
    runs: u64,
}

/// The perf side of a sampler: one event per sampled thread.
pub struct PerfSampler {
    map: OwnedFd,
    /// `MAX_THREADS` map values, mapped into fsprof.
    values: *mut u8,
    threads: HashMap<u32, Thread>,
    free: Vec<u32>,
    page: usize,
    period_ns: u64,
}

// SAFETY: `values` is owned by this struct (unmapped on drop) and only used through `&mut self`.
unsafe impl Send for PerfSampler {}

impl PerfSampler {
    /// Creates the map and checks that this process may load the program and open events that
    /// sample every `period_ns` of a thread's CPU time. The error says what the kernel refused
    /// and what to do.
    pub fn new(period_ns: u64) -> Result<PerfSampler, String> {
        if !cfg!(target_arch = "x86_64") {
            return Err("the perf backend is x86-64 only".to_owned());
        }
        let map = create_map().map_err(|e| {
            format!("cannot create a BPF map ({}): the perf backend needs root, or CAP_BPF and CAP_PERFMON", e.desc())
        })?;
        let page = page_size();
        let len = values_len(page);
        // SAFETY: maps the BPF array (created mmapable) shared; checked for failure.
        let values = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if values == libc::MAP_FAILED {
            return Err(format!("cannot map the BPF map ({})", Errno::last().desc()));
        }
        let sampler = PerfSampler {
            map,
            values: values.cast(),
            threads: HashMap::new(),
            free: (0..MAX_THREADS).rev().collect(),
            page,
            period_ns: period_ns.max(10_000),
        };
        load_program(sampler.map.as_raw_fd(), 0).map_err(|e| {
            format!("cannot load a BPF program ({e}): the perf backend needs root, or CAP_BPF and CAP_PERFMON")
        })?;
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        open_event(me, sampler.period_ns).map_err(|e| {
            format!(
                "perf_event_open refused ({}; kernel.perf_event_paranoid is {}): run as root, or grant CAP_PERFMON",
                e.desc(),
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .map_or("unknown".to_owned(), |s| s.trim().to_owned())
            )
        })?;
        Ok(sampler)
    }

    /// Makes sure `tid` is being sampled, copying the slots at `addresses` (0 for none) with
    /// each sample from now on. Fails if the thread cannot be sampled this way.
    pub fn watch(&mut self, tid: u32, addresses: [u64; SLOTS]) -> Result<(), Errno> {
        if !self.threads.contains_key(&tid) {
            let thread = self.open(tid)?;
            self.threads.insert(tid, thread);
        }
        let value = value_at(self.values, self.threads[&tid].index);
        let thread = self.threads.get_mut(&tid).expect("inserted");
        if thread.addresses != addresses {
            for (i, address) in addresses.iter().enumerate() {
                // SAFETY: `value` points at this thread's map value, VALUE_SIZE bytes, 8-aligned.
                unsafe {
                    value
                        .add(VALUE_ADDRESSES + 8 * i)
                        .cast::<u64>()
                        .write_volatile(*address)
                };
            }
            thread.addresses = addresses;
        }
        Ok(())
    }

    /// The latest sample `tid` took since the previous call, if it took any. Its slots are
    /// those the program copied for it: the program runs (and counts) before the kernel writes
    /// each sample, so the copies are this sample's if the count is exactly the samples seen
    /// (read or lost), before and after they are copied out, and they came from the addresses
    /// the thread is watched with.
    pub fn take(&mut self, tid: u32, into: &mut PerfSample) -> bool {
        let values = self.values;
        let Some(thread) = self.threads.get_mut(&tid) else {
            return false;
        };
        let mut found = false;
        let mut runs = 0u64;
        drain(&mut thread.ring, |record| match parse(record, into) {
            Record::Sample => {
                found = true;
                runs += 1;
            }
            Record::Lost(lost) => runs = runs.saturating_add(lost),
            Record::Other => {}
        });
        if !found {
            thread.runs = thread.runs.saturating_add(runs);
            return false;
        }
        let value = value_at(values, thread.index);
        let word = |offset: usize| -> u64 {
            // SAFETY: a word inside this thread's map value.
            unsafe { value.add(offset).cast::<u64>().read_volatile() }
        };
        // The counter is twice the program's runs, odd while one writes.
        let before = word(VALUE_COUNT);
        fence(Ordering::Acquire);
        let mut known = true;
        for (i, slot) in into.slots.iter_mut().enumerate() {
            known &= word(VALUE_USED + 8 * i) == thread.addresses[i];
            *slot = None;
            if thread.addresses[i] == 0 || word(VALUE_RESULTS + 8 * i) != 0 {
                known &= thread.addresses[i] == 0;
                continue;
            }
            let mut bytes = vec![0u8; SLOT_SIZE];
            // SAFETY: reads the copy inside this thread's value.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    value.add(VALUE_COPIES + i * SLOT_SIZE),
                    bytes.as_mut_ptr(),
                    SLOT_SIZE,
                )
            };
            *slot = Some(bytes);
        }
        fence(Ordering::Acquire);
        let after = word(VALUE_COUNT);
        let expected = thread.runs.saturating_add(runs);
        // A run whose sample is not in the ring yet (the program runs first) makes the count
        // one ahead: then the copies are that sample's, not this one's.
        into.marks_known = known && before == after && after == 2 * expected;
        thread.runs = expected;
        if !into.marks_known {
            into.slots = Default::default();
        }
        true
    }

    /// Closes the event of a thread that is gone.
    pub fn forget(&mut self, tid: u32) {
        if let Some(thread) = self.threads.remove(&tid) {
            self.free.push(thread.index);
        }
    }

    fn open(&mut self, tid: u32) -> Result<Thread, Errno> {
        let index = self.free.pop().ok_or(Errno::EMFILE)?;
        let value = value_at(self.values, index);
        // SAFETY: this (free) thread's map value; no program uses it.
        let runs = unsafe {
            std::ptr::write_bytes(value, 0, VALUE_COUNT);
            value.add(VALUE_COUNT).cast::<u64>().read_volatile() / 2
        };
        let opened = (|| {
            let event = open_event(tid as i32, self.period_ns)?;
            let ring = Ring::new(&event, self.page)?;
            let program = load_program(self.map.as_raw_fd(), index).map_err(|_| Errno::EPERM)?;
            // SAFETY: valid descriptors.
            unsafe {
                if sys::ioctls::SET_BPF(event.as_raw_fd(), program.as_raw_fd() as u32) != 0
                    || sys::ioctls::ENABLE(event.as_raw_fd(), 0) != 0
                {
                    return Err(Errno::last());
                }
            }
            Ok(Thread {
                index,
                _event: event,
                _program: program,
                ring,
                addresses: [0; SLOTS],
                runs,
            })
        })();
        if opened.is_err() {
            self.free.push(index);
        }
        opened
    }
}

impl Drop for PerfSampler {
    fn drop(&mut self) {
        self.threads.clear();
        // SAFETY: unmaps what `new` mapped.
        unsafe { libc::munmap(self.values.cast(), values_len(self.page)) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

fn values_len(page: usize) -> usize {
    (MAX_THREADS as usize * VALUE_SIZE).div_ceil(page) * page
}

fn value_at(values: *mut u8, index: u32) -> *mut u8 {
    // SAFETY: index < MAX_THREADS, so the value lies inside the mapping.
    unsafe { values.add(index as usize * VALUE_SIZE) }
}

/// A task-clock event on `tid`, disabled, sampling registers and stack every `period_ns` of the
/// thread's CPU time.
fn open_event(tid: i32, period_ns: u64) -> Result<OwnedFd, Errno> {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        config: sys::bindings::PERF_COUNT_SW_TASK_CLOCK as u64,
        sample_type: (sys::bindings::PERF_SAMPLE_TID
            | sys::bindings::PERF_SAMPLE_REGS_USER
            | sys::bindings::PERF_SAMPLE_STACK_USER) as u64,
        sample_regs_user: REGS_MASK,
        sample_stack_user: STACK_DUMP,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = period_ns;
    attr.set_disabled(1);
    // Kernel time counts: a thread inside a system call is sampled there (with its user
    // registers and stack), as it would be by a timer, not only once back in user space.
    attr.set_exclude_hv(1);
    attr.set_exclude_callchain_kernel(1);
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

/// A thread's sample ring: the metadata page and `RING_PAGES` data pages.
struct Ring {
    base: *mut u8,
    len: usize,
    data_size: usize,
    page: usize,
    buffer: Vec<u8>,
}

impl Ring {
    fn new(event: &OwnedFd, page: usize) -> Result<Ring, Errno> {
        let len = (RING_PAGES + 1) * page;
        // SAFETY: maps the event's ring; checked for failure.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                event.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Ring {
            base: base.cast(),
            len,
            data_size: RING_PAGES * page,
            page,
            buffer: Vec::new(),
        })
    }

    fn meta(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base.cast()
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Hands every record in the ring to `each` (header included), and frees them.
fn drain(ring: &mut Ring, mut each: impl FnMut(&[u8])) {
    let meta = ring.meta();
    // SAFETY: the metadata page is mapped; data_head is written by the kernel, so it is read
    // volatile and followed by an acquire fence before the data is read.
    let head = unsafe { std::ptr::addr_of!((*meta).data_head).read_volatile() };
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    // SAFETY: as above; only we write data_tail.
    let mut tail = unsafe { std::ptr::addr_of!((*meta).data_tail).read_volatile() };
    let size = ring.data_size as u64;
    // SAFETY: the data area follows the metadata page.
    let data = unsafe { ring.base.add(ring.page) };
    while tail + 8 <= head {
        let mut header = [0u8; 8];
        copy_out(data, ring.data_size, tail, &mut header);
        let len = u16::from_ne_bytes([header[6], header[7]]) as u64;
        if len < 8 || tail + len > head || len > size {
            break; // cannot happen with a sane kernel; stop rather than read garbage
        }
        ring.buffer.resize(len as usize, 0);
        copy_out(data, ring.data_size, tail, &mut ring.buffer);
        each(&ring.buffer);
        tail += len;
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    // SAFETY: as above.
    unsafe { std::ptr::addr_of_mut!((*meta).data_tail).write_volatile(head.max(tail)) };
}

/// Copies `out.len()` bytes at ring position `at`, wrapping around the data area.
fn copy_out(data: *const u8, size: usize, at: u64, out: &mut [u8]) {
    let start = (at % size as u64) as usize;
    let first = out.len().min(size - start);
    // SAFETY: both ranges lie inside the data area (start < size, first ≤ size - start,
    // and the rest ≤ out.len() ≤ size).
    unsafe {
        std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
    }
}

/// What a ring record was.
enum Record {
    /// A sample, decoded into the caller's [`PerfSample`].
    Sample,
    /// Samples lost (the ring was full).
    Lost(u64),
    /// Anything else, or a malformed record.
    Other,
}

/// Decodes a `PERF_RECORD_SAMPLE` (TID, REGS_USER, STACK_USER) into `into`, or counts a
/// `PERF_RECORD_LOST`. A sample without user registers (the thread was exiting) or a malformed
/// one is `Other`.
fn parse(record: &[u8], into: &mut PerfSample) -> Record {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
    };
    let kind = u32::from_ne_bytes(record[0..4].try_into().expect("8-byte header"));
    if kind == sys::bindings::PERF_RECORD_LOST {
        return word(16).map_or(Record::Other, Record::Lost); // header, id, lost
    }
    if kind != sys::bindings::PERF_RECORD_SAMPLE {
        return Record::Other;
    }
    // header (8), pid+tid (8), regs abi (8), bp, sp, ip, stack size (8), bytes, dyn size (8)
    let Some(abi) = word(16) else {
        return Record::Other;
    };
    let (Some(bp), Some(sp), Some(ip), Some(size)) = (word(24), word(32), word(40), word(48))
    else {
        return Record::Other;
    };
    let size = size as usize;
    let Some(bytes) = record.get(56..56usize.saturating_add(size)) else {
        return Record::Other;
    };
    if abi == 0 {
        return Record::Other;
    }
    let dynamic = word(56 + size).unwrap_or(0) as usize;
    into.regs = Registers { ip, sp, bp };
    into.stack.start = sp;
    into.stack.bytes.clear();
    into.stack
        .bytes
        .extend_from_slice(&bytes[..dynamic.min(size)]);
    Record::Sample
}

// --- The BPF side: raw bpf(2) commands and the program. ---

const BPF_MAP_CREATE: u32 = 0;
const BPF_PROG_LOAD: u32 = 5;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;

fn bpf<T>(command: u32, attr: &mut T) -> Result<OwnedFd, Errno> {
    // SAFETY: `attr` is a valid, zero-padded attribute block of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command as libc::c_long,
            attr as *mut T,
            std::mem::size_of::<T>(),
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
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

fn create_map() -> Result<OwnedFd, Errno> {
    let mut attr = MapCreate {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: VALUE_SIZE as u32,
        max_entries: MAX_THREADS,
        map_flags: BPF_F_MMAPABLE,
        map_name: *b"fsprof_slots\0\0\0\0",
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut attr)
}

/// One BPF instruction.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

// Opcodes used below (linux/bpf.h, bpf_common.h).
const ST_W: u8 = 0x62; // *(u32 *)(dst + off) = imm
const STX_DW: u8 = 0x7b; // *(u64 *)(dst + off) = src
const LDX_DW: u8 = 0x79; // dst = *(u64 *)(src + off)
const LD_IMM64: u8 = 0x18;
const MOV64_REG: u8 = 0xbf;
const MOV64_IMM: u8 = 0xb7;
const ADD64_IMM: u8 = 0x07;
const JEQ_IMM: u8 = 0x15;
const JNE_IMM: u8 = 0x55;
const JLE_IMM: u8 = 0xb5;
const MUL64_IMM: u8 = 0x27;
const LDX_W: u8 = 0x61; // dst = *(u32 *)(src + off)
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const PSEUDO_MAP_FD: u8 = 1;
const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
const HELPER_PROBE_READ_USER: i32 = 112;

/// The program for the thread whose map value is `index`: copies each slot whose address is set
/// (the thread is the one interrupted, so its slots hold still), its state first, then only the
/// records below its depth (deeper ones may lie on pages never touched, which the copy, made
/// without faulting, cannot read). The counter goes up by one before and after (odd while
/// writing), so a reader can tell a finished copy. Returns 1, so the kernel writes the sample.
fn program(map: RawFd, index: u32) -> Vec<Insn> {
    let count = VALUE_COUNT as i16;
    let bump = [
        insn(LDX_DW, 1, 6, count, 0),
        insn(ADD64_IMM, 1, 0, 0, 1),
        insn(STX_DW, 6, 1, count, 0),
    ];
    let mut p = vec![
        insn(ST_W, 10, 0, -4, index as i32),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, -4),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
        insn(JNE_IMM, 0, 0, 2, 0), // a value: go on
        insn(MOV64_IMM, 0, 0, 0, 1),
        insn(EXIT, 0, 0, 0, 0),
        insn(MOV64_REG, 6, 0, 0, 0),
    ];
    p.extend(bump);
    for slot in 0..SLOTS {
        let address = (VALUE_ADDRESSES + 8 * slot) as i16;
        let used = (VALUE_USED + 8 * slot) as i16;
        let result = (VALUE_RESULTS + 8 * slot) as i16;
        let copy = (VALUE_COPIES + slot * SLOT_SIZE) as i32;
        // Jump offsets count from the next instruction; the block is 20 long.
        let block = [
            insn(LDX_DW, 3, 6, address, 0),
            insn(STX_DW, 6, 3, used, 0),
            insn(JEQ_IMM, 3, 0, 17, 0), // no slot: next
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, copy),
            insn(MOV64_IMM, 2, 0, 0, SLOT_STATE_SIZE as i32),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
            insn(STX_DW, 6, 0, result, 0),
            insn(JNE_IMM, 0, 0, 11, 0), // unreadable: next
            insn(LDX_W, 2, 6, (copy + DEPTH_OFFSET) as i16, 0),
            insn(JLE_IMM, 2, 0, 1, MARK_CAPACITY as i32),
            insn(MOV64_IMM, 2, 0, 0, MARK_CAPACITY as i32),
            insn(MUL64_IMM, 2, 0, 0, RECORD_SIZE as i32),
            insn(JEQ_IMM, 2, 0, 6, 0), // no records: next
            insn(LDX_DW, 3, 6, address, 0),
            insn(ADD64_IMM, 3, 0, 0, RECORDS_OFFSET as i32),
            insn(MOV64_REG, 1, 6, 0, 0),
            insn(ADD64_IMM, 1, 0, 0, copy + RECORDS_OFFSET as i32),
            insn(CALL, 0, 0, 0, HELPER_PROBE_READ_USER),
            insn(STX_DW, 6, 0, result, 0),
        ];
        p.extend(block);
    }
    p.extend(bump);
    p.extend([insn(MOV64_IMM, 0, 0, 0, 1), insn(EXIT, 0, 0, 0, 0)]);
    p
}

fn load_program(map: RawFd, index: u32) -> Result<OwnedFd, String> {
    let insns = program(map, index);
    let license = c"GPL"; // probe_read_user is a GPL-only helper
    let mut log = vec![0u8; 4096];
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_PERF_EVENT,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: *b"fsprof_marks\0\0\0\0",
        ..Default::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        Err(Errno::EACCES | Errno::EINVAL) => {
            // Load again with the verifier's log, to say why.
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let again = bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            match again {
                Ok(fd) => Ok(fd),
                Err(e) => Err(format!("{}: {last}", e.desc())),
            }
        }
        Err(e) => Err(e.desc().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn records_are_decoded_and_bounded() {
        let mut record = vec![0u8; 56];
        record[0..4].copy_from_slice(&sys::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
        record[16..24].copy_from_slice(&2u64.to_ne_bytes()); // abi 64
        record[24..32].copy_from_slice(&7u64.to_ne_bytes()); // bp
        record[32..40].copy_from_slice(&0x1000u64.to_ne_bytes()); // sp
        record[40..48].copy_from_slice(&0x4000u64.to_ne_bytes()); // ip
        record[48..56].copy_from_slice(&16u64.to_ne_bytes());
        record.extend_from_slice(&[9u8; 16]);
        record.extend_from_slice(&8u64.to_ne_bytes()); // only 8 of the 16 bytes are valid
        let mut sample = PerfSample::default();
        assert!(matches!(parse(&record, &mut sample), Record::Sample));
        assert_eq!(
            (sample.regs.ip, sample.regs.sp, sample.regs.bp),
            (0x4000, 0x1000, 7)
        );
        assert_eq!(sample.stack.bytes, vec![9u8; 8]);
        // A size that runs past the record is refused, not trusted.
        record[48..56].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(matches!(parse(&record, &mut sample), Record::Other));
    }

    /// A thread of this process spins while "marking": its fake slot (two words that change
    /// together) must come back from the sample exactly as it was at the sample's instant.
    #[test]
    fn a_running_thread_is_sampled_with_its_slot_at_the_same_instant() {
        let mut perf = match PerfSampler::new(1_000_000) {
            Ok(perf) => perf,
            // Only root is sure to have perf events and BPF; elsewhere this backend is off.
            Err(why) if unsafe { libc::geteuid() } != 0 => {
                eprintln!("skipped: {why}");
                return;
            }
            Err(why) => panic!("perf backend unavailable as root: {why}"),
        };
        let slot = Arc::new(
            (0..SLOT_SIZE / 4)
                .map(|_| AtomicU32::new(0))
                .collect::<Vec<_>>(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU32::new(0));
        let worker = {
            let (slot, stop, tid) = (slot.clone(), stop.clone(), tid.clone());
            std::thread::spawn(move || {
                tid.store(
                    unsafe { libc::syscall(libc::SYS_gettid) } as u32,
                    Ordering::SeqCst,
                );
                slot[2].store(2, Ordering::Relaxed); // depth: two records
                let last = RECORDS_OFFSET / 4 + 2 * RECORD_SIZE / 4 - 1;
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    slot[0].store(n, Ordering::Relaxed);
                    slot[1].store(n, Ordering::Relaxed);
                    slot[last].store(n, Ordering::Relaxed); // the second record's last word
                    slot[last + 1].store(n, Ordering::Relaxed); // beyond the depth: not copied
                }
            })
        };
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let tid = tid.load(Ordering::SeqCst);
        let address = slot.as_ptr() as u64;
        let mut sample = PerfSample::default();
        let mut taken = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        perf.watch(tid, [address, 0]).unwrap();
        while taken < 20 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
            if perf.take(tid, &mut sample) {
                if !sample.marks_known {
                    continue; // a sample came while the slots were copied out: rare
                }
                taken += 1;
                let copy = sample.slots[0].as_ref().unwrap();
                let a = u32::from_ne_bytes(copy[0..4].try_into().unwrap());
                let b = u32::from_ne_bytes(copy[4..8].try_into().unwrap());
                // A copy made while the thread ran could catch it between the two stores; one
                // made while it is interrupted cannot (well, a == b + 1 in that instant: the
                // first store done, the second not yet).
                assert!(a == b || a == b.wrapping_add(1), "{a} {b}");
                assert!(a != 0);
                let at = RECORDS_OFFSET + 2 * RECORD_SIZE - 4;
                let c = u32::from_ne_bytes(copy[at..at + 4].try_into().unwrap());
                let d = u32::from_ne_bytes(copy[at + 4..at + 8].try_into().unwrap());
                assert!(c == b || c.wrapping_add(1) == b, "{b} {c}");
                assert_eq!(d, 0, "only the records below the depth are copied");
                assert!(sample.slots[1].is_none());
                assert!(!sample.stack.bytes.is_empty());
                assert_eq!(sample.stack.start, sample.regs.sp);
            }
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        assert_eq!(taken, 20, "samples taken within 10 s");
        perf.forget(tid);
    }
}
