//! The rings perf and BPF fill, read from fsprof's side: a thread's sample ring (registers and
//! the top of its stack per sample) and the ring of slot copies (and anchors) the BPF program
//! writes, with the decoding of their records and the matching of copies to their samples. Every size read from a ring is bounded before use; nothing here
//! opens events or loads programs (`perf.rs`, `bpf.rs`; their layout is `layout.rs`).

use crate::native::bpf::map_shared;
use crate::native::bpf::{create_map, BPF_MAP_TYPE_RINGBUF};
use crate::native::layout::COPY_HEADER;
use crate::native::layout::{ANCHORS, SLOTS, STACK_DUMP};
use crate::native::layout::{
    CPU_TIME, DEPARTED, DEPARTURE_STACK, EXECED, FOLDED, LABELS, RETURNED, SLOTLESS,
};
use crate::native::layout::{LABELS_MOST, LABEL_ENTRY, LABEL_KEY, LABEL_VALUE, OTEL_COPIED};
use crate::native::stream::Folded;
use crate::native::stream::{CopiedLabels, PerfSample};
use crate::native::unwind::{Registers, StackView};
use crate::native::walk::{WALK_PAIRS, WALK_RECORD_SIZE};
use crate::program::custom_labels::Label;
use fsprof_shim::abi::SLOT_SIZE;
use nix::errno::Errno;
use nix::libc;
use perf_event_open_sys as sys;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};

/// A thread's user registers and the top of its stack as it left its CPU, copied by the
/// `sched_switch` program just before its departure's record.
#[derive(Debug)]
pub(super) struct DepartureStack {
    pub(super) time: u64,
    pub(super) regs: Registers,
    pub(super) stack: Vec<u8>,
}

/// Decodes a departure's stack record (see `cpu_wide::programs::STACK_HEADER`): the value
/// index it came from and the stack; `None` for any other record. The length the program
/// wrote is bounded by the record's.
pub(super) fn parse_stack(record: &[u8]) -> Option<(u32, DepartureStack)> {
    const HEADER: usize = 48;
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
    };
    let index_and_kind = word(8)?;
    if (index_and_kind >> 32) as usize != DEPARTURE_STACK {
        return None;
    }
    let regs = Registers {
        ip: word(16)?,
        sp: word(24)?,
        bp: Some(word(32)?),
        tp: 0,
    };
    let bytes = record.get(HEADER..)?;
    let len = usize::try_from(word(40)?)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let stack = DepartureStack {
        time: word(0)?,
        regs,
        stack: bytes[..len].to_vec(),
    };
    Some((index_and_kind as u32, stack))
}

/// What a per-CPU program recorded of a thread besides its slots (see [`DEPARTED`]).
#[derive(Debug)]
pub(super) enum ThreadEvent {
    /// It left its CPU at `time`, having run `cpu_ns` in all; `seq`: its switches recorded so
    /// far (a gap in them is a lost record); `stack`: its registers and stack then, where the
    /// program copied them (at most once a period).
    Departed {
        time: u64,
        cpu_ns: u64,
        preempted: bool,
        /// It had no slot known: no copies were made (its marks are known: none).
        slotless: bool,
        seq: u64,
        stack: Option<Box<DepartureStack>>,
    },
    /// It came onto a CPU at `time`; `inferred`: no switch onto a CPU was traced, it was found
    /// running then (see `cpu_wide::inferred_return`).
    Returned {
        time: u64,
        cpu_ns: u64,
        seq: u64,
        inferred: bool,
    },
    /// It was removed from the watched threads as it began an `exec`.
    Execed { time: u64 },
    /// Its short stretches off its CPU since its previous record, folded (see
    /// [`FOLD_MOST_NS`](crate::native::layout::FOLD_MOST_NS)); `seq` as for a departure.
    Folded { folded: Folded, seq: u64 },
}

impl ThreadEvent {
    pub(super) fn time(&self) -> u64 {
        match self {
            ThreadEvent::Departed { time, .. }
            | ThreadEvent::Returned { time, .. }
            | ThreadEvent::Execed { time, .. } => *time,
            ThreadEvent::Folded { folded, .. } => folded.time,
        }
    }
}

/// Decodes a per-CPU program's event record (32 bytes: time, index, kind, two words; a fold's
/// 48: time, index, kind, three times, its switch number): the value index it came from and
/// the event; `None` for any other record.
pub(super) fn parse_event(record: &[u8]) -> Option<(u32, ThreadEvent)> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
    };
    let (time, index_and_kind, a, b) = (word(0)?, word(8)?, word(16)?, word(24)?);
    let index = index_and_kind as u32;
    let event = match (index_and_kind >> 32) as usize {
        DEPARTED => ThreadEvent::Departed {
            time,
            cpu_ns: a,
            preempted: b & 1 == 1,
            slotless: b & SLOTLESS != 0,
            seq: b >> 2,
            stack: None,
        },
        RETURNED => ThreadEvent::Returned {
            time,
            cpu_ns: a,
            seq: b >> 1,
            inferred: b & 1 == 1,
        },
        EXECED => ThreadEvent::Execed { time },
        FOLDED => ThreadEvent::Folded {
            folded: Folded {
                time,
                blocked_ns: a,
                near_ns: b,
                far_ns: word(32)?,
            },
            seq: word(40)? >> 1,
        },
        _ => return None,
    };
    Some((index, event))
}

/// A slot copy from the shared ring, waiting for its sample or its switch.
pub(super) struct SlotCopy {
    pub(super) time: u64,
    pub(super) slot: usize,
    /// Made as the thread left its CPU (else at a sample).
    pub(super) at_switch: bool,
    pub(super) address: u64,
    pub(super) ok: bool,
    pub(super) bytes: Vec<u8>,
}

/// A thread's sample ring: the metadata page and its data pages.
pub(super) struct Ring {
    base: *mut u8,
    len: usize,
    data_size: usize,
    page: usize,
    /// A record that wraps around the end of the data area, made whole.
    buffer: Vec<u8>,
}

// SAFETY: the mapping is owned by this struct (unmapped on drop) and read or advanced only
// through `&mut self`; the kernel writes its side whichever thread holds it.
unsafe impl Send for Ring {}

impl Ring {
    pub(super) fn new(event: &OwnedFd, page: usize, pages: usize) -> Result<Ring, Errno> {
        let len = (pages + 1) * page;
        let base = map_shared(event, len, true, 0)?;
        Ok(Ring {
            base,
            len,
            data_size: pages * page,
            page,
            buffer: Vec::new(),
        })
    }

    fn meta(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base.cast()
    }

    /// Bytes of records the ring holds at most.
    pub(super) fn data_size(&self) -> usize {
        self.data_size
    }

    /// Where the kernel's writing has got to; records before it are complete.
    pub(super) fn head(&self) -> u64 {
        // SAFETY: the metadata page is mapped; data_head is written by the kernel, so it is
        // read volatile and followed by an acquire fence before the data is read.
        let head = unsafe { std::ptr::addr_of!((*self.meta()).data_head).read_volatile() };
        fence(Ordering::Acquire);
        head
    }

    /// Hands every record before `head` to `each` (header included), and frees them. A record
    /// is handed in place (the kernel does not write over it until it is freed), unless it
    /// wraps around the end of the data area. Returns the room the ring had left (the kernel
    /// drops a record that does not fit, and says so in a lost record once one fits again).
    pub(super) fn drain(&mut self, head: u64, mut each: impl FnMut(&[u8])) -> usize {
        let meta = self.meta();
        // SAFETY: as in `head`; only we write data_tail.
        let mut tail = unsafe { std::ptr::addr_of!((*meta).data_tail).read_volatile() };
        let size = self.data_size as u64;
        let room = size.saturating_sub(head.saturating_sub(tail)) as usize;
        // SAFETY: the data area follows the metadata page.
        let data = unsafe { self.base.add(self.page) };
        while tail + 8 <= head {
            let mut header = [0u8; 8];
            copy_out(data, self.data_size, tail, &mut header);
            let len = u16::from_ne_bytes([header[6], header[7]]) as u64;
            if len < 8 || tail + len > head || len > size {
                break; // cannot happen with a sane kernel; stop rather than read garbage
            }
            let start = (tail % size) as usize;
            if start + len as usize <= self.data_size {
                // SAFETY: inside the data area, and complete (before `head`).
                each(unsafe { std::slice::from_raw_parts(data.add(start), len as usize) });
            } else {
                self.buffer.resize(len as usize, 0);
                copy_out(data, self.data_size, tail, &mut self.buffer);
                each(&self.buffer);
            }
            tail += len;
        }
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { std::ptr::addr_of_mut!((*meta).data_tail).write_volatile(head.max(tail)) };
        room
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps what `new` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
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
pub(super) enum Record<'a> {
    /// A sample (its slots not yet matched), boxed: it is the largest. A ring holds its
    /// sampling event's samples and its context-switch event's (`departure`: the stack a thread
    /// left its CPU with), told apart by their stacks' size (see [`is_departure`]).
    Sample {
        departure: bool,
        tid: u32,
        /// Its process.
        pid: u32,
        sample: Box<PerfSample<'a>>,
    },
    /// The thread left its CPU (`out`, and `preempted` if it stayed runnable) or came back to
    /// one, at `time`.
    Switch {
        time: u64,
        out: bool,
        preempted: bool,
    },
    /// Thread `parent` made thread or process `tid` at `time`.
    Fork { tid: u32, time: u64, parent: u32 },
    /// Samples lost (the ring was full).
    Lost(u64),
    /// Anything else, or a malformed record.
    Other,
}

/// Decodes a `PERF_RECORD_SAMPLE` (IDENTIFIER, TID, TIME, READ, REGS_USER, STACK_USER), a
/// `PERF_RECORD_SWITCH` or a `PERF_RECORD_FORK`, or counts a `PERF_RECORD_LOST`. A sample without user registers (the thread was exiting) or a malformed
/// one is `Other`.
pub(super) fn parse(record: &[u8]) -> Record<'_> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
    };
    let Some(kind) = record
        .get(0..4)
        .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
    else {
        return Record::Other; // shorter than a header: the ring never gives one, but refuse it
    };
    if kind == sys::bindings::PERF_RECORD_LOST {
        return word(16).map_or(Record::Other, Record::Lost); // header, id, lost
    }
    if kind == sys::bindings::PERF_RECORD_SWITCH {
        // header (8: type, misc, size), then the sample id: pid+tid (8), time (8)
        let misc = u16::from_ne_bytes([record[4], record[5]]) as u32;
        return word(16).map_or(Record::Other, |time| Record::Switch {
            time,
            out: misc & sys::bindings::PERF_RECORD_MISC_SWITCH_OUT != 0,
            preempted: misc & sys::bindings::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
        });
    }
    if kind == sys::bindings::PERF_RECORD_FORK {
        // header (8), pid, ppid, tid, ptid (4 each), time (8)
        let u32_at = |at: usize| {
            record
                .get(at..at + 4)
                .map(|b| u32::from_ne_bytes(b.try_into().expect("4")))
        };
        return match (u32_at(16), u32_at(20), word(24)) {
            (Some(tid), Some(parent), Some(time)) => Record::Fork { tid, time, parent },
            _ => Record::Other,
        };
    }
    if kind != sys::bindings::PERF_RECORD_SAMPLE {
        return Record::Other;
    }
    // header (8), event id (8), pid+tid (8), time (8), count (8), regs abi (8), bp, sp, ip,
    // stack size (8), bytes, dyn size (8)
    let (Some(time), Some(cpu_ns), Some(abi)) = (word(24), word(32), word(40)) else {
        return Record::Other;
    };
    let ids = word(16).unwrap_or(0);
    let (pid, tid) = (ids as u32, (ids >> 32) as u32);
    let (Some(bp), Some(sp), Some(ip), Some(size)) = (word(48), word(56), word(64), word(72))
    else {
        return Record::Other;
    };
    let size = size as usize;
    let Some(bytes) = record.get(80..80usize.saturating_add(size)) else {
        return Record::Other;
    };
    if abi == 0 {
        return Record::Other;
    }
    let dynamic = word(80 + size).unwrap_or(0) as usize;
    let sample = Box::new(PerfSample {
        time,
        cpu_ns,
        regs: Registers {
            ip,
            sp,
            bp: Some(bp),
            tp: 0,
        },
        stack: StackView::new(sp, &bytes[..dynamic.min(size)]),
        slots: Default::default(),
        marks_known: false,
        anchors: Vec::new(),
        instant: Vec::new(),
        labels: None,
        tick_ns: 0,
        trimmed: false,
    });
    Record::Sample {
        departure: is_departure(size),
        tid,
        pid,
        sample,
    }
}

/// Whether a sample whose user stack dump is `size` bytes is a context-switch event's (asked
/// for `layout::DEPARTURE_STACK_DUMP` bytes, which the kernel may trim to fit a record, never to
/// [`STACK_DUMP`] or less) rather than a sampling event's ([`STACK_DUMP`]). Not by the event id
/// a sample carries: where several context-switch events fire at one switch (two fsprof
/// sessions, or one per process of a tree, each with its own per CPU), the kernel prepares the
/// sample data once and every event's sample carries the first event's id (Linux 6.18: 28 to
/// 44 of about 230 samples of a test's thread were taken for sampling events' without their
/// slots, with three sessions at once).
fn is_departure(size: usize) -> bool {
    size > STACK_DUMP as usize
}

/// Decodes one slot copy from the shared ring: the value index it came from and the copy.
pub(super) fn parse_copy(record: &[u8]) -> Option<(u32, SlotCopy)> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
    };
    let time = word(0)?;
    let index_and_slot = word(8)?;
    let index = index_and_slot as u32;
    let (slot, at_switch) = (
        (index_and_slot >> 32) as u8 as usize,
        index_and_slot >> 40 & 1 == 1,
    );
    // Slot number SLOTS: the anchors' record (see `layout::ANCHORS`); SLOTS + 1: the walk's
    // (`walk.rs`); CPU_TIME: the thread's time on a CPU at the sample (`cpu_wide.rs`); LABELS:
    // its custom labels' pointer (`sampling.rs`).
    if (slot > CPU_TIME && slot != LABELS) || index_and_slot >> 41 != 0 {
        return None;
    }
    let address = word(16)?;
    let ok = word(24)? == 0;
    let bytes = record.get(COPY_HEADER..)?;
    let bytes = bytes[..bytes.len().min(SLOT_SIZE.max(WALK_RECORD_SIZE))].to_vec();
    Some((
        index,
        SlotCopy {
            time,
            slot,
            at_switch,
            address,
            ok,
            bytes,
        },
    ))
}

/// The BPF ring buffer the programs write slot copies to, mapped: the consumer page (ours to
/// write), then the producer page and the data, which the kernel maps twice in a row so that a
/// record never wraps.
pub(super) struct CopyRing {
    fd: OwnedFd,
    consumer: *mut u8,
    producer: *mut u8,
    size: usize,
    page: usize,
}

// SAFETY: as for `Ring`: both mappings are owned by this struct and the consumer position is
// advanced only through `&mut self`.
unsafe impl Send for CopyRing {}

impl CopyRing {
    pub(super) fn new(page: usize, size: usize) -> Result<CopyRing, Errno> {
        let fd = create_map(BPF_MAP_TYPE_RINGBUF, 0, 0, size as u32)?;
        // The kernel's layout: the consumer page, then the producer page and the data.
        let consumer = map_shared(&fd, page, true, 0)?;
        let producer = match map_shared(&fd, page + 2 * size, false, page) {
            Ok(producer) => producer,
            Err(errno) => {
                // SAFETY: unmaps what was just mapped.
                unsafe { libc::munmap(consumer.cast(), page) };
                return Err(errno);
            }
        };
        Ok(CopyRing {
            fd,
            consumer,
            producer,
            size,
            page,
        })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Its data's size in bytes.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Hands every committed record's data to `each`, and frees them.
    pub(super) fn drain(&mut self, mut each: impl FnMut(&[u8])) {
        const BUSY: u32 = 1 << 31;
        const DISCARD: u32 = 1 << 30;
        // SAFETY: the positions are the first words of their pages; the producer's is written
        // by the kernel (read volatile, then an acquire fence), the consumer's only by us.
        let producer = unsafe { self.producer.cast::<u64>().read_volatile() };
        fence(Ordering::Acquire);
        let mut consumer = unsafe { self.consumer.cast::<u64>().read_volatile() };
        let mask = self.size as u64 - 1;
        // SAFETY: the data follows the producer page.
        let data = unsafe { self.producer.add(self.page) };
        while consumer < producer {
            let at = (consumer & mask) as usize;
            // SAFETY: `at` < size and the data is mapped twice, so 8 + len ≤ size bytes from
            // `at` are mapped; the header is read volatile and fenced (the kernel clears BUSY
            // last, with release ordering).
            let header = unsafe { data.add(at).cast::<u32>().read_volatile() };
            fence(Ordering::Acquire);
            if header & BUSY != 0 {
                break; // still being written
            }
            let len = (header & !(BUSY | DISCARD)) as usize;
            if len + 8 > self.size {
                break; // cannot happen with a sane kernel
            }
            if header & DISCARD == 0 {
                // SAFETY: as above.
                each(unsafe { std::slice::from_raw_parts(data.add(at + 8), len) });
            }
            consumer += (len as u64 + 8).div_ceil(8) * 8;
        }
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { self.consumer.cast::<u64>().write_volatile(consumer) };
    }
}

impl Drop for CopyRing {
    fn drop(&mut self) {
        // SAFETY: unmaps what `new` mapped.
        unsafe {
            libc::munmap(self.consumer.cast(), self.page);
            libc::munmap(self.producer.cast(), self.page + 2 * self.size);
        }
    }
}

/// What the shared ring gave, per map value index, not yet matched with its sample or switch:
/// slot copies made at samples and at departures, and the per-CPU programs' events.
pub(super) struct Unmatched {
    pub(super) at_samples: Vec<VecDeque<SlotCopy>>,
    pub(super) at_switches: Vec<VecDeque<SlotCopy>>,
    pub(super) events: Vec<VecDeque<ThreadEvent>>,
    /// The latest departure's stack read per index, for the departure record that follows it.
    stacks: Vec<Option<Box<DepartureStack>>>,
}

impl Unmatched {
    pub(super) fn new(capacity: u32) -> Unmatched {
        let queues = || (0..capacity).map(|_| VecDeque::new()).collect();
        Unmatched {
            at_samples: queues(),
            at_switches: queues(),
            events: (0..capacity).map(|_| VecDeque::new()).collect(),
            stacks: (0..capacity).map(|_| None).collect(),
        }
    }

    /// Forgets what value `index` had (its thread is gone, or a new one takes it).
    pub(super) fn clear(&mut self, index: u32) {
        let index = index as usize;
        self.at_samples[index].clear();
        self.at_switches[index].clear();
        self.events[index].clear();
        self.stacks[index] = None;
    }

    /// Moves the shared ring's records to their threads' queues (bounded: a queue longer than
    /// its thread's ring could ever need loses its oldest).
    pub(super) fn read(&mut self, copies: &mut CopyRing, bound: usize) {
        fn push<T>(queue: Option<&mut VecDeque<T>>, item: T, bound: usize) {
            if let Some(queue) = queue {
                if queue.len() >= bound {
                    queue.pop_front();
                }
                queue.push_back(item);
            }
        }
        let stacks = &mut self.stacks;
        copies.drain(|record| {
            if let Some((index, mut event)) = parse_event(record) {
                // Its stack, if the program copied it just before (at the same instant).
                if let ThreadEvent::Departed { time, stack, .. } = &mut event {
                    let held = stacks.get_mut(index as usize).and_then(Option::take);
                    *stack = held.filter(|held| held.time == *time);
                }
                // Two a switch, and a few words each: room for a thread that switches often.
                push(self.events.get_mut(index as usize), event, 32 * bound);
            } else if let Some((index, stack)) = parse_stack(record) {
                if let Some(held) = stacks.get_mut(index as usize) {
                    *held = Some(Box::new(stack));
                }
            } else if let Some((index, copy)) = parse_copy(record) {
                let queues = if copy.at_switch {
                    &mut self.at_switches
                } else {
                    &mut self.at_samples
                };
                push(queues.get_mut(index as usize), copy, bound);
            }
        });
    }
}

/// What was copied at a sample or a switch (see [`match_copies`]).
#[derive(Default)]
pub(super) struct Matched {
    /// Each slot's bytes (all `None` unless `known`).
    pub(super) slots: [Option<Vec<u8>>; SLOTS],
    /// Every slot was copied.
    pub(super) known: bool,
    /// The anchors read then, (address, word), if the thread had some.
    pub(super) anchors: Vec<(u64, u64)>,
    /// The words the walk read then (`walk.rs`), by address.
    pub(super) instant: Vec<(u64, u64)>,
    /// The thread's time on a CPU then, where a per-CPU program said (`cpu_wide.rs`).
    pub(super) cpu_ns: Option<u64>,
    /// Its custom labels then, as the program copied them (`sampling.rs`).
    pub(super) labels: Option<CopiedLabels>,
}

/// What was copied at `time` (a sample's or a switch's), from its thread's queue: copies made
/// at most `within[0]` ns before `time` and `within[1]` after; drops older copies (their
/// samples were lost or not written).
pub(super) fn match_copies(
    waiting: &mut VecDeque<SlotCopy>,
    time: u64,
    within: [u64; 2],
) -> Matched {
    while waiting
        .front()
        .is_some_and(|c| c.time.saturating_add(within[0]) < time)
    {
        waiting.pop_front();
    }
    let mut slots: [Option<Vec<u8>>; SLOTS] = Default::default();
    let mut found = [false; SLOTS];
    let mut ok = true;
    let (mut anchors, mut instant, mut cpu_ns, mut labels) = (Vec::new(), Vec::new(), None, None);
    while let Some(copy) = waiting.front() {
        if copy.time > time.saturating_add(within[1]) {
            break;
        }
        let copy = waiting.pop_front().expect("front");
        if copy.slot == SLOTS {
            anchors = parse_pairs(&copy.bytes, ANCHORS);
            continue;
        }
        if copy.slot == SLOTS + 1 {
            instant = parse_pairs(&copy.bytes, WALK_PAIRS);
            instant.sort_unstable();
            instant.dedup_by_key(|(address, _)| *address);
            continue;
        }
        if copy.slot == CPU_TIME {
            cpu_ns = Some(copy.address);
            continue;
        }
        if copy.slot == LABELS {
            labels = Some(parse_labels(&copy.bytes));
            continue;
        }
        found[copy.slot] = true;
        ok &= copy.ok;
        if copy.address != 0 && copy.ok {
            slots[copy.slot] = Some(copy.bytes);
        }
    }
    let known = ok && found.iter().all(|f| *f);
    Matched {
        slots: if known { slots } else { Default::default() },
        known,
        anchors,
        instant,
        cpu_ns,
        labels,
    }
}

/// The labels of a labels record's bytes (after its header; see `layout::VALUE_LABELS_RECORD`):
/// an OpenTelemetry record's bytes as many as were copied, bounded by their room; or a set's
/// labels, as many as it says, at most [`LABELS_MOST`], lengths bounded by their room, labels
/// with an empty key (a null one) left out, and of two with one key the first kept.
pub(super) fn parse_labels(bytes: &[u8]) -> CopiedLabels {
    let word = |at: usize| -> u64 {
        (bytes.get(at..at + 8)).map_or(0, |w| u64::from_ne_bytes(w.try_into().expect("8")))
    };
    if word(0) & OTEL_COPIED != 0 {
        let copied = (word(0) & !OTEL_COPIED) as usize;
        let room = bytes.len().saturating_sub(8);
        return CopiedLabels::Otel(bytes.get(8..8 + copied.min(room)).unwrap_or(&[]).to_vec());
    }
    CopiedLabels::Set(parse_set(bytes))
}

fn parse_set(bytes: &[u8]) -> Vec<Label> {
    let word = |at: usize| -> u64 {
        (bytes.get(at..at + 8)).map_or(0, |w| u64::from_ne_bytes(w.try_into().expect("8")))
    };
    let count = (word(0) as usize).min(LABELS_MOST);
    let mut labels: Vec<Label> = Vec::with_capacity(count);
    for entry in (0..count).map(|i| 8 + i * LABEL_ENTRY) {
        let text = |at: usize, len: u64, most: usize| {
            let len = (len as usize).min(most);
            let bytes = bytes.get(at..at + len).unwrap_or(&[]);
            String::from_utf8_lossy(bytes).into_owned()
        };
        let key = text(entry + 16, word(entry), LABEL_KEY);
        if key.is_empty() || labels.iter().any(|l| l.key == key) {
            continue;
        }
        let value = text(entry + 16 + LABEL_KEY, word(entry + 8), LABEL_VALUE);
        labels.push(Label { key, value });
    }
    labels
}

/// The (address, word) pairs of an anchors' or a walk's record (after its header), at most
/// `most`, those with an address.
fn parse_pairs(bytes: &[u8], most: usize) -> Vec<(u64, u64)> {
    bytes
        .chunks_exact(16)
        .take(most)
        .map(|pair| {
            let word = |at: usize| u64::from_ne_bytes(pair[at..at + 8].try_into().expect("8"));
            (word(0), word(8))
        })
        .filter(|(address, _)| *address != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_decoded_and_bounded() {
        let mut record = vec![0u8; 80];
        record[0..4].copy_from_slice(&sys::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
        record[8..16].copy_from_slice(&11u64.to_ne_bytes()); // the event's id
        record[16..20].copy_from_slice(&40u32.to_ne_bytes()); // pid
        record[20..24].copy_from_slice(&42u32.to_ne_bytes()); // tid
        record[24..32].copy_from_slice(&5u64.to_ne_bytes()); // time
        record[32..40].copy_from_slice(&3u64.to_ne_bytes()); // count
        record[40..48].copy_from_slice(&2u64.to_ne_bytes()); // abi 64
        record[48..56].copy_from_slice(&7u64.to_ne_bytes()); // bp
        record[56..64].copy_from_slice(&0x1000u64.to_ne_bytes()); // sp
        record[64..72].copy_from_slice(&0x4000u64.to_ne_bytes()); // ip
        record[72..80].copy_from_slice(&16u64.to_ne_bytes());
        record.extend_from_slice(&[9u8; 16]);
        record.extend_from_slice(&8u64.to_ne_bytes()); // only 8 of the 16 bytes are valid
        let Record::Sample {
            departure: false,
            sample,
            pid: 40,
            tid: 42,
        } = parse(&record)
        else {
            panic!("not decoded");
        };
        assert_eq!(
            (sample.regs.ip, sample.regs.sp, sample.regs.bp),
            (0x4000, 0x1000, Some(7))
        );
        assert_eq!((sample.time, sample.cpu_ns), (5, 3));
        assert_eq!(sample.stack.bytes, &[9u8; 8]);
        // A size that runs past the record is refused, not trusted.
        record[72..80].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(matches!(parse(&record), Record::Other));
    }

    /// Arbitrary records, and valid ones mutated, are decoded or refused: never a panic, and a
    /// sample's stack never longer than its record.
    #[test]
    fn labels_are_decoded_within_their_room() {
        let mut bytes = vec![0u8; 8 + LABELS_MOST * LABEL_ENTRY];
        bytes[..8].copy_from_slice(&99u64.to_ne_bytes()); // more than there is room for
        let mut put = |index: usize, key: &[u8], key_len: u64, value: &[u8]| {
            let at = 8 + index * LABEL_ENTRY;
            bytes[at..at + 8].copy_from_slice(&key_len.to_ne_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&(value.len() as u64).to_ne_bytes());
            bytes[at + 16..at + 16 + key.len()].copy_from_slice(key);
            let v = at + 16 + LABEL_KEY;
            bytes[v..v + value.len()].copy_from_slice(value);
        };
        put(0, b"request", 7, b"GET /a");
        put(1, b"", 0, b"a null key");
        put(2, b"request", 7, b"a duplicate");
        put(3, b"tenant", u64::MAX, b"acme"); // a length past its room: cut to it
        let CopiedLabels::Set(labels) = parse_labels(&bytes) else {
            panic!("a set's labels read as a record's");
        };
        assert_eq!(labels.len(), 2, "{labels:?}");
        assert_eq!(
            (labels[0].key.as_str(), labels[0].value.as_str()),
            ("request", "GET /a")
        );
        assert_eq!(labels[1].key.len(), LABEL_KEY);
        assert!(labels[1].key.starts_with("tenant"));
        assert_eq!(parse_labels(&bytes[..3]), CopiedLabels::Set(Vec::new()));
        // A record's bytes: as many as were copied, within their room.
        let mut record = (OTEL_COPIED | 3).to_ne_bytes().to_vec();
        record.extend([1, 2, 3, 4]);
        assert_eq!(parse_labels(&record), CopiedLabels::Otel(vec![1, 2, 3]));
        record[..8].copy_from_slice(&(OTEL_COPIED | 9999).to_ne_bytes());
        assert_eq!(parse_labels(&record), CopiedLabels::Otel(vec![1, 2, 3, 4]));
    }

    #[test]
    fn a_birth_is_decoded_and_a_short_one_refused() {
        let mut record = vec![0u8; 32];
        record[0..4].copy_from_slice(&sys::bindings::PERF_RECORD_FORK.to_ne_bytes());
        record[16..20].copy_from_slice(&4242u32.to_ne_bytes()); // tid
        record[24..32].copy_from_slice(&99u64.to_ne_bytes()); // time
        assert!(matches!(
            parse(&record),
            Record::Fork {
                tid: 4242,
                time: 99,
                ..
            }
        ));
        assert!(matches!(parse(&record[..31]), Record::Other));
    }

    #[test]
    fn arbitrary_records_are_decoded_or_refused() {
        let mut rng = fastrand::Rng::with_seed(14);
        let mut valid = vec![0u8; 80];
        valid[0..4].copy_from_slice(&sys::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
        valid[40..48].copy_from_slice(&2u64.to_ne_bytes());
        valid[72..80].copy_from_slice(&16u64.to_ne_bytes());
        valid.extend_from_slice(&[9u8; 16]);
        valid.extend_from_slice(&16u64.to_ne_bytes());
        let cases = crate::fuzz::cases(200_000);
        let (mut samples, mut copies) = (0, 0);
        for case in 0..cases {
            let record = if case % 2 == 0 {
                let len = rng.usize(..256);
                let mut bytes = crate::fuzz::bytes(&mut rng, len);
                if bytes.len() >= 4 && rng.bool() {
                    bytes[0..4].copy_from_slice(&sys::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
                }
                bytes
            } else {
                crate::fuzz::mutate(&mut rng, &valid)
            };
            if let Record::Sample { sample, .. } = parse(&record) {
                assert!(sample.stack.bytes.len() <= record.len());
                samples += 1;
            }
            if let Some((_, copy)) = parse_copy(&record) {
                assert!(copy.bytes.len() <= record.len());
                copies += 1;
            }
        }
        assert!(
            samples > 0,
            "the mutations never kept a sample valid: {cases} cases"
        );
        let _ = copies;
    }
}
