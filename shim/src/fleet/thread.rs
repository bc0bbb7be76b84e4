//! One thread's published labels: the exported thread-locals (`custom_labels_current_set`,
//! `otel_thread_ctx_v1`, and the constant `custom_labels_abi_version`), the per-thread label set
//! and OpenTelemetry records they point to, and how they change when the thread's innermost
//! mark does.
//!
//! The exported thread-locals are declared in assembly (Rust has no stable way to name a
//! thread-local's symbol) and reached through TLS descriptors, as the custom-labels ABI asks of
//! a library; in an executable the linker turns that into a constant offset. A reader
//! interrupts the thread at any instruction (a perf sample, a ptrace stop), so what it can
//! reach is never written: a thread keeps the labels of its latest [`CACHED`] marks written
//! (the feature's name, the instance's text, an OpenTelemetry record, valid), and showing a
//! mark points at its entry: the label set's values, between a `count` of 0 and 2, and the
//! record pointer (swapped, as OTEP 4947 allows; a record's `valid` never changes while it may
//! be read). A mark with no entry gets the oldest one not shown, written before it is pointed
//! at. Showing nothing: `count` 0, the record pointer null. A signal handler that marks while
//! the labels change publishes nothing (the change it interrupted finishes after it).
//!
//! Not here: what text an instance is (`text.rs`), the process context (`process_context.rs`).

use super::{text, FEATURE_KEY, INSTANCE_KEY, MAX_VALUE};
use crate::abi::{self, Slot};
use core::cell::UnsafeCell;
use core::ptr::{addr_of, addr_of_mut, null, null_mut, write_volatile};
use core::sync::atomic::{compiler_fence, Ordering::*};

/// This module's own names for its exported thread-locals: global but hidden, so bound to this
/// module's definitions whatever the program defines (versioned, as `thread_state.rs`'s block).
macro_rules! own {
    ($name:literal) => {
        versioned!("fsprof_shim_fleet_", $name)
    };
}

core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl custom_labels_current_set",
    ".type custom_labels_current_set, @object",
    ".size custom_labels_current_set, 8",
    concat!(".globl ", own!("labels")),
    concat!(".hidden ", own!("labels")),
    concat!(".type ", own!("labels"), ", @object"),
    concat!(".size ", own!("labels"), ", 8"),
    "custom_labels_current_set:",
    concat!(own!("labels"), ":"),
    ".zero 8",
    ".globl otel_thread_ctx_v1",
    ".type otel_thread_ctx_v1, @object",
    ".size otel_thread_ctx_v1, 8",
    concat!(".globl ", own!("record")),
    concat!(".hidden ", own!("record")),
    concat!(".type ", own!("record"), ", @object"),
    concat!(".size ", own!("record"), ", 8"),
    "otel_thread_ctx_v1:",
    concat!(own!("record"), ":"),
    ".zero 8",
    ".popsection",
    ".pushsection .rodata.custom_labels_abi_version,\"a\",@progbits",
    ".p2align 2",
    ".globl custom_labels_abi_version",
    ".type custom_labels_abi_version, @object",
    ".size custom_labels_abi_version, 4",
    "custom_labels_abi_version:",
    ".long 1",
    ".popsection",
);

/// A custom-labels string: `len` bytes at `buf`.
#[repr(C)]
struct Text {
    len: usize,
    buf: *const u8,
}

/// A custom-labels label.
#[repr(C)]
struct Label {
    key: Text,
    value: Text,
}

/// A custom-labels label set.
#[repr(C)]
struct LabelSet {
    storage: *const Label,
    count: usize,
    capacity: usize,
}

/// Bytes of attributes a record holds: two, each `{key index, length, bytes}`.
const ATTRIBUTES: usize = 2 * (2 + MAX_VALUE);

/// An OpenTelemetry thread record (OTEP 4947): 28 bytes, then the attributes.
#[repr(C)]
struct Record {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    valid: u8,
    trace_flags: u8,
    attrs_data_size: u16,
    attrs: [u8; ATTRIBUTES],
}

const _: () = assert!(core::mem::offset_of!(Record, attrs) == 28);

/// A mark as published: its record's words that its labels depend on (the others zero, so
/// that the same mark pushed again, or found again under a pop, is known).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shown {
    feature: u64,
    kind: u32,
    payload: u64,
    len: u64,
    position: u64,
    extra: [u64; 2],
}

impl Shown {
    const NONE: Shown = Shown {
        feature: 0,
        kind: 0,
        payload: 0,
        len: 0,
        position: 0,
        extra: [0, 0],
    };

    /// A record's words; `extra` only where its kind writes them.
    #[inline(always)]
    pub(crate) fn new(
        feature: u64,
        kind: u32,
        payload: u64,
        len: u64,
        position: u64,
        extra: [u64; 2],
    ) -> Shown {
        let (position, extra) = match kind {
            // The input offset is not in the instance's text.
            abi::KIND_ALTERNATIVE => (0, [extra[0], 0]),
            abi::KIND_BOUNDARY => (position, extra),
            _ => (position, [0, 0]),
        };
        Shown {
            feature,
            kind,
            payload,
            len,
            position,
            extra,
        }
    }

    pub(crate) fn kind(&self) -> u32 {
        self.kind
    }

    pub(crate) fn payload(&self) -> (u64, u64) {
        (self.payload, self.len)
    }

    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    pub(crate) fn extra(&self) -> [u64; 2] {
        self.extra
    }
}

/// Marks whose labels a thread keeps written, so that going back and forth between them (a
/// loop's mark and pop, nested marks) only points at them.
const CACHED: usize = 4;

/// One mark's labels, written: its instance's text, its feature's name (cut), its record.
#[repr(C)]
struct Entry {
    mark: Shown,
    name: Text,
    instance: [u8; text::CAPACITY],
    instance_len: usize,
    record: Record,
}

/// A thread's published labels.
#[repr(C)]
pub(crate) struct Published {
    set: LabelSet,
    labels: [Label; 2],
    entries: [Entry; CACHED],
    /// This thread's `otel_thread_ctx_v1`.
    record_pointer: *mut u64,
    /// One more than the index of the entry shown (0: none).
    shown: usize,
    /// The entry written next when a mark has none.
    next: usize,
    /// While the labels change, the stack pointer of the frame changing them (0: none): a
    /// signal handler's mark then leaves them alone, unless that frame is gone (a jump out of a
    /// handler that interrupted it: see [`busy`]).
    busy: usize,
    /// Set by [`clear`] during a change, which then shows nothing when it ends.
    cleared: bool,
}

const EMPTY_TEXT: Text = Text {
    len: 0,
    buf: null(),
};

const EMPTY_ENTRY: Entry = Entry {
    mark: Shown::NONE,
    name: EMPTY_TEXT,
    instance: [0; text::CAPACITY],
    instance_len: 0,
    record: Record {
        trace_id: [0; 16],
        span_id: [0; 8],
        valid: 0,
        trace_flags: 0,
        attrs_data_size: 0,
        attrs: [0; ATTRIBUTES],
    },
};

thread_local! {
    // `const` initialised, without `Drop`: no destructor is registered; it lives until the
    // thread's end, as the exported pointers to it do.
    static PUBLISHED: UnsafeCell<Published> = const {
        UnsafeCell::new(Published {
            set: LabelSet { storage: null(), count: 0, capacity: 0 },
            labels: [
                Label { key: EMPTY_TEXT, value: EMPTY_TEXT },
                Label { key: EMPTY_TEXT, value: EMPTY_TEXT },
            ],
            entries: [EMPTY_ENTRY, EMPTY_ENTRY, EMPTY_ENTRY, EMPTY_ENTRY],
            record_pointer: null_mut(),
            shown: 0,
            next: 0,
            busy: 0,
            cleared: false,
        })
    };
}

/// The calling thread's storage, its exported label set pointer set to it (slow path: may
/// allocate, in a library loaded by `dlopen`, the first time); null where the program defines
/// the exported thread-locals itself (a library preloaded into a program that publishes its
/// own labels: the program's names win, and its labels are left alone).
pub(crate) fn attach() -> *mut Published {
    if custom_labels_current_set() != own_labels() || otel_thread_ctx_v1() != own_record() {
        return null_mut();
    }
    let published = PUBLISHED.with(UnsafeCell::get);
    // SAFETY: this thread's own storage; nothing else on this thread holds a reference to it,
    // and the exported thread-locals are this thread's too.
    unsafe {
        let keys = [FEATURE_KEY, INSTANCE_KEY];
        for (label, key) in (*published).labels.iter_mut().zip(keys) {
            label.key = Text {
                len: key.len(),
                buf: key.as_ptr(),
            };
        }
        (*published).set.storage = addr_of!((*published).labels).cast();
        (*published).set.capacity = 2;
        (*published).record_pointer = otel_thread_ctx_v1();
        compiler_fence(SeqCst);
        write_volatile(
            custom_labels_current_set(),
            addr_of!((*published).set) as u64,
        );
    }
    published
}

/// Shows `mark`'s labels, unless they are shown already or a change is under way.
#[inline(always)]
pub(crate) fn show(published: *mut Published, mark: Shown) {
    // SAFETY: the calling thread's storage (`attach`); only this thread writes it, and a signal
    // handler that interrupts a change finds `busy` set and leaves it alone.
    unsafe {
        let p = published;
        if (*p).busy != 0 && busy(p) {
            return;
        }
        if let Some(index) = (*p).shown.checked_sub(1) {
            if (*p).entries[index].mark == mark {
                return;
            }
        }
        change(p, mark);
    }
}

/// Whether a change of the labels is under way below this frame (else it was left by a jump
/// out of a signal handler that interrupted it, and is forgotten). A handler runs below the
/// frame it interrupted, except on an alternate signal stack, where nothing is forgotten.
///
/// # Safety
/// `p` is the calling thread's storage, `busy` set.
#[cold]
#[inline(never)]
unsafe fn busy(p: *mut Published) -> bool {
    if stack_pointer() < (*p).busy || crate::stack::on_alternate_stack() {
        return true;
    }
    (*p).busy = 0;
    false
}

/// The stack pointer, in this frame.
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads a register.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// [`show`]'s change (out of line: the mark path stays short): points at `mark`'s entry,
/// written first where it has none.
///
/// # Safety
/// As in [`show`], with `busy` clear.
#[inline(never)]
unsafe fn change(p: *mut Published, mark: Shown) {
    (*p).busy = stack_pointer().max(1);
    (*p).cleared = false;
    compiler_fence(SeqCst);
    let found = (0..CACHED).find(|&i| (*p).entries[i].mark == mark);
    let index = match found {
        Some(index) => index,
        None => {
            // Not the entry shown: the readers see none of what is written here.
            let mut index = (*p).next;
            if index + 1 == (*p).shown {
                index = (index + 1) % CACHED;
            }
            (*p).next = (index + 1) % CACHED;
            write(addr_of_mut!((*p).entries[index]), mark);
            index
        }
    };
    let entry = addr_of!((*p).entries[index]);
    write_volatile(addr_of_mut!((*p).set.count), 0);
    compiler_fence(SeqCst);
    (*p).labels[0].value = Text { ..(*entry).name };
    (*p).labels[1].value = Text {
        len: (*entry).instance_len,
        buf: addr_of!((*entry).instance).cast(),
    };
    compiler_fence(SeqCst);
    write_volatile(addr_of_mut!((*p).set.count), 2);
    write_volatile((*p).record_pointer, addr_of!((*entry).record) as u64);
    (*p).shown = index + 1;
    compiler_fence(SeqCst);
    if (*p).cleared {
        // A child of `fork` made by a signal handler that interrupted this (`clear`).
        conceal(p);
    }
    (*p).busy = 0;
}

/// Writes `entry` for `mark`: its name, instance and record (valid, never changed while a
/// reader may be pointed at it).
///
/// # Safety
/// `entry` is an entry of the calling thread's storage that is not shown; `mark` a record of
/// this thread's stack, whose feature and strings are alive while it is marked (the shim's
/// contract).
unsafe fn write(entry: *mut Entry, mark: Shown) {
    let feature = &*(mark.feature as *const crate::Feature);
    let name = text::cut(feature.name().as_bytes(), MAX_VALUE);
    let instance = text::instance(&mut (*entry).instance, &mark);
    (*entry).name = Text {
        len: name.len(),
        buf: name.as_ptr(),
    };
    (*entry).instance_len = instance;
    let written = &(&(*entry).instance)[..instance];
    let record = &mut (*entry).record;
    let mut at = 0;
    for (index, value) in [name, written].into_iter().enumerate() {
        record.attrs[at] = index as u8;
        record.attrs[at + 1] = value.len() as u8;
        record.attrs[at + 2..at + 2 + value.len()].copy_from_slice(value);
        at += 2 + value.len();
    }
    record.attrs_data_size = at as u16;
    record.valid = 1;
    (*entry).mark = mark;
}

/// Forgets the text written for the mark of `record` (just popped), unless it is shown: its
/// strings may be a C caller's buffer, reused for a later mark at the same address.
pub(crate) fn forget(published: *mut Published, record: &abi::Record) {
    let meta = record.meta.load(Relaxed);
    let mark = Shown::new(
        record.feature.load(Relaxed),
        (meta >> 32) as u32,
        record.payload.load(Relaxed),
        meta & u64::from(u32::MAX),
        record.position.load(Relaxed),
        [record.extra[0].load(Relaxed), record.extra[1].load(Relaxed)],
    );
    // SAFETY: as in `show`; an entry not shown is read by no reader.
    unsafe {
        if (*published).busy != 0 {
            return;
        }
        for index in 0..CACHED {
            if (*published).entries[index].mark == mark && (*published).shown != index + 1 {
                (*published).entries[index].mark = Shown::NONE;
            }
        }
    }
}

/// Shows nothing: the set empty, the record pointer null.
///
/// # Safety
/// `p` is the calling thread's storage.
unsafe fn conceal(p: *mut Published) {
    (*p).shown = 0;
    compiler_fence(SeqCst);
    write_volatile(addr_of_mut!((*p).set.count), 0);
    if !(*p).record_pointer.is_null() {
        write_volatile((*p).record_pointer, 0);
    }
    compiler_fence(SeqCst);
}

/// Shows nothing, unless a change is under way (a signal handler's pop inside one).
#[inline(always)]
fn hide(published: *mut Published) {
    // SAFETY: as in `show`.
    unsafe {
        if (*published).busy != 0 && busy(published) {
            return;
        }
        if (*published).shown != 0 {
            conceal(published);
        }
    }
}

/// Shows nothing, whatever is under way (the thread's end, a child of `fork`). Stores only.
pub(crate) fn clear(published: *mut Published) {
    // SAFETY: as in `show`; a change this interrupted shows nothing when it ends.
    unsafe {
        (*published).cleared = true;
        compiler_fence(SeqCst);
        conceal(published);
    }
}

/// Most records looked at for the innermost mark that counts.
const SCAN: usize = 32;
/// Most antimarked features passed over.
const ANTIMARKS: usize = 4;

/// Shows the innermost mark of `slot` that counts (not a call site, its feature not antimarked
/// above it), or nothing; past [`SCAN`] records or [`ANTIMARKS`] antimarks, nothing.
#[inline(never)]
pub(crate) fn show_innermost(published: *mut Published, slot: &Slot) {
    let depth = (slot.depth.load(Relaxed) as usize).min(slot.records.len());
    let mut antimarked = [0u64; ANTIMARKS];
    let mut antimarks = 0;
    for record in slot.records[..depth].iter().rev().take(SCAN) {
        let feature = record.feature.load(Relaxed);
        let meta = record.meta.load(Relaxed);
        let kind = (meta >> 32) as u32;
        match kind {
            abi::KIND_CALL_SITE => continue,
            abi::KIND_ANTIMARK if antimarks < ANTIMARKS => {
                antimarked[antimarks] = feature;
                antimarks += 1;
            }
            abi::KIND_ANTIMARK => break,
            _ if antimarked[..antimarks].contains(&feature) => continue,
            _ => {
                let mark = Shown::new(
                    feature,
                    kind,
                    record.payload.load(Relaxed),
                    meta & u64::from(u32::MAX),
                    record.position.load(Relaxed),
                    [record.extra[0].load(Relaxed), record.extra[1].load(Relaxed)],
                );
                return show(published, mark);
            }
        }
    }
    hide(published);
}

/// The x86-64 TLS descriptor sequence for `$symbol`: this thread's address of it. The resolver
/// preserves every register but rax; all the C ABI's are declared clobbered all the same (glibc
/// before 2.40 lost vector registers in the resolver of a module loaded by `dlopen`: its bug
/// 31372), which costs nothing once a thread.
macro_rules! tls_address {
    ($symbol:expr) => {{
        let address: usize;
        // SAFETY: reads the thread's TLS descriptor, and the thread pointer.
        unsafe {
            core::arch::asm!(
                concat!("lea rax, [rip + ", $symbol, "@TLSDESC]"),
                concat!("call qword ptr [rax + ", $symbol, "@TLSCALL]"),
                "add rax, qword ptr fs:[0]",
                out("rax") address,
                clobber_abi("C"),
            );
        }
        address as *mut u64
    }};
}

/// This thread's `custom_labels_current_set`, as the program's names bind it.
fn custom_labels_current_set() -> *mut u64 {
    tls_address!("custom_labels_current_set")
}

/// This thread's `otel_thread_ctx_v1`, as the program's names bind it.
fn otel_thread_ctx_v1() -> *mut u64 {
    tls_address!("otel_thread_ctx_v1")
}

/// This module's own `custom_labels_current_set`.
fn own_labels() -> *mut u64 {
    tls_address!(own!("labels"))
}

/// This module's own `otel_thread_ctx_v1`.
fn own_record() -> *mut u64 {
    tls_address!(own!("record"))
}
