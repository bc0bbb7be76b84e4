//! The layout the BPF programs and fsprof share: what one sample copies (stack bytes, slots,
//! anchors, registers), each sampled thread's map value (the slot addresses and anchors fsprof
//! writes, the programs' scratch and state), the records the programs put in the rings (their
//! slot numbers), the program stack words they pass between them, and the frame rules in the
//! walk's maps (`encode`, `decode`). Every other part of `native/` imports it; it imports
//! nothing of `native/` but the frame rule's type (`unwind.rs`). Not here: the maps and rings themselves (`bpf.rs`, `map_value.rs`, `ring.rs`), the
//! programs (`sampling.rs`, `walk.rs`, `cpu_wide/programs.rs`).

use crate::native::unwind::FrameRule;
use fsprof_shim::abi::{MARK_CAPACITY, RECORDS_OFFSET, RECORD_SIZE};

/// Bytes of stack copied per sample, from the stack pointer up, as `perf record` copies. At most
/// 65528 (a sample record's size is a 16-bit number); deeper stacks are walked by the BPF program
/// (`walk.rs`) or completed from a stack image (`complete.rs`), else cut (and marked as such).
/// The kernel writes this many bytes per sample whatever the stack's depth, in the thread's
/// time: 48 KiB cost two busy threads 5% at 1 kHz; 16 KiB cost their CPU 0.4 to 0.8 points more
/// than 8 KiB at 1 kHz, in every part of the run (`cost-model.sh`'s segments), which put fsprof
/// over `perf record -F 1000`; python3's and ripgrep's stacks unwind as completely with 8
/// (BENCHMARKS.md).
pub const STACK_DUMP: u32 = 8 * 1024;
/// Bytes of stack copied as a thread leaves its CPU (`sampling::Departure`): the most a record holds
/// (per CPU, the `sched_switch` program copies 16 pages from the stack pointer's page up, less
/// what lies below the stack pointer in its page: `cpu_wide/programs.rs`). A departure's stack that does not reach its root is not used, and the latest sample's stands
/// in; with 16 KiB, the deep stacks of `Regex::new` were cut at nearly every departure, so the
/// waits drawn at their own stack were those of shallower code: `regex-compile` read 3 to 6
/// points low beside two busy loops.
pub const DEPARTURE_STACK_DUMP: u32 = 65_528;

/// Slots copied per sample: one per region the thread marks in (the program's shim, the agent's).
pub const SLOTS: usize = 2;

/// Stack words the program reads at each sample besides the top of the stack, for threads
/// that have some: where fsprof completes a deep stack with an image of the thread's outer
/// stack read later (beyond what the walk read, `walk.rs`: a recursion of thousands of
/// frames), the words at a few of that image's return-address slots, as they were at the
/// sample, tell whether the image was still the thread's stack then (`native/complete.rs`).
/// A read costs the sampled thread tens of ns.
pub const ANCHORS: usize = 32;

/// Offset of `depth` in a slot (after `seq` and `tid`).
pub(in crate::native) const DEPTH_OFFSET: i32 = 8;

/// Registers perf copies (bits of `enum perf_event_x86_regs`): bp, sp, ip, in this order.
#[cfg(target_arch = "x86_64")]
pub(in crate::native) const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
#[cfg(not(target_arch = "x86_64"))]
pub(in crate::native) const REGS_MASK: u64 = 0;

/// Layout of one map value (one per sampled thread): slot addresses (set by fsprof), then, per
/// slot, the ring record the BPF program builds at each sample: a header (the sample's time, the
/// value's index, the slot's number, the address copied from, the copy's result: 0 or an error)
/// and the slot's bytes (its state, then the records below its depth).
pub(in crate::native) const VALUE_ADDRESSES: usize = 0;
pub(in crate::native) const VALUE_SCRATCH: usize = 8 * SLOTS;
pub(in crate::native) const COPY_HEADER: usize = 32;
/// Room for what the program copies of a slot: its state and its records, not the history of
/// later branches after them (read apart, see `region.rs`). With the history the map was three
/// times larger (13 MB), and making it took several milliseconds per process recorded.
pub(in crate::native) const SCRATCH_SIZE: usize =
    COPY_HEADER + RECORDS_OFFSET + MARK_CAPACITY * RECORD_SIZE;
/// Then the anchors (see `layout::ANCHORS`): their addresses (set by fsprof, 0 for none), and the
/// record the program builds of them at each sample (a copy header, then an address and the
/// word read there, per anchor), put in the ring like a slot's copy with slot number `SLOTS`.
pub(in crate::native) const VALUE_ANCHORS: usize = VALUE_SCRATCH + SLOTS * SCRATCH_SIZE;
pub(in crate::native) const VALUE_ANCHOR_RECORD: usize = VALUE_ANCHORS + 8 * ANCHORS;
pub(in crate::native) const ANCHOR_RECORD_SIZE: usize = COPY_HEADER + 16 * ANCHORS;
/// Then the walk's part (`walk.rs`).
pub(in crate::native) const VALUE_WALK: usize = VALUE_ANCHOR_RECORD + ANCHOR_RECORD_SIZE;
/// Then when the thread's latest departure sample was taken (see `sampling::Departure`).
pub(in crate::native) const VALUE_DEPARTED: usize = VALUE_WALK + 8;
/// Then what the per-CPU programs keep of the thread (`cpu_wide.rs`): its time on a CPU up to
/// its latest departure (ns), when it came onto its CPU (0: not known to be on one), how many
/// of its switches were recorded (a gap in their numbers is a lost record), and the records
/// built there (a switch's, the CPU time's at a sample).
pub(in crate::native) const VALUE_CPU_NS: usize = VALUE_DEPARTED + 8;
pub(in crate::native) const VALUE_ON_SINCE: usize = VALUE_CPU_NS + 8;
pub(in crate::native) const VALUE_SWITCHES: usize = VALUE_ON_SINCE + 8;
pub(in crate::native) const VALUE_SWITCH_RECORD: usize = VALUE_SWITCHES + 8;
pub(in crate::native) const VALUE_TIME_RECORD: usize = VALUE_SWITCH_RECORD + COPY_HEADER;
/// Then whether the thread's switches are no longer recorded (set by fsprof: not 0), only
/// counted into its time on a CPU (see `perf::MAX_SWITCH_RATE`).
pub(in crate::native) const VALUE_QUIET: usize = VALUE_TIME_RECORD + COPY_HEADER;
/// Then the folding of short stretches off the CPU (`cpu_wide/programs.rs`, `fold`): when the
/// thread left its CPU in a departure folded (0: none open), how it left (one of the
/// [`FOLD_KINDS`]; for a departure recorded too, whether it blocked), the CPU time up to which a preemption is near
/// the end of a block (see `layout::JUST_BACK_NS`), the folded time not yet recorded per kind,
/// and the record that carries it.
pub(in crate::native) const VALUE_FOLD_LEFT: usize = VALUE_QUIET + 8;
pub(in crate::native) const VALUE_FOLD_KIND: usize = VALUE_FOLD_LEFT + 8;
pub(in crate::native) const VALUE_NEAR_UNTIL: usize = VALUE_FOLD_KIND + 8;
pub(in crate::native) const VALUE_FOLDED: usize = VALUE_NEAR_UNTIL + 8;
pub(in crate::native) const VALUE_FOLD_RECORD: usize = VALUE_FOLDED + 8 * FOLD_KINDS;
/// A fold record: time, index and kind, the folded time per kind, the switch number.
pub(in crate::native) const FOLD_RECORD: usize = 16 + 8 * FOLD_KINDS + 8;
/// Then where the thread's labels lie: the offset of their thread-local pointer from its
/// thread pointer (set by fsprof; 0: none) and their format ([`LABELS_CUSTOM`]: a custom-labels
/// set, `program/custom_labels.rs`; [`LABELS_OTEL`]: an OpenTelemetry thread-context record,
/// `program/otel_context.rs`), the record that carries the labels copied at a sample (a copy
/// header with slot number [`LABELS`], the set's or record's address in its address field;
/// then, for a set, how many labels, and each: its key's and value's lengths, then their
/// bytes, cut to [`LABEL_KEY`] and [`LABEL_VALUE`]; for a record, [`OTEL_COPIED`] and how many
/// of its bytes follow, its header and attributes as they are, at most
/// `otel_context::MAX_RECORD`), and room to read a set's header or a label into.
pub(in crate::native) const VALUE_LABELS_OFFSET: usize = VALUE_FOLD_RECORD + FOLD_RECORD;
pub(in crate::native) const VALUE_LABELS_FORMAT: usize = VALUE_LABELS_OFFSET + 8;
pub(in crate::native) const VALUE_LABELS_RECORD: usize = VALUE_LABELS_FORMAT + 8;
pub(in crate::native) const LABELS_CUSTOM: u64 = 0;
pub(in crate::native) const LABELS_OTEL: u64 = 1;
/// The flag of a labels record's count word that says it holds an OpenTelemetry record's bytes
/// (a set's count is at most [`LABELS_MOST`]).
pub(in crate::native) const OTEL_COPIED: u64 = 1 << 16;
pub(in crate::native) const LABELS_MOST: usize = 6;
pub(in crate::native) const LABEL_KEY: usize = 32;
pub(in crate::native) const LABEL_VALUE: usize = 64;
pub(in crate::native) const LABEL_ENTRY: usize = 16 + LABEL_KEY + LABEL_VALUE;
pub(in crate::native) const LABELS_RECORD: usize = COPY_HEADER + 8 + LABELS_MOST * LABEL_ENTRY;
pub(in crate::native) const VALUE_LABELS_TEMP: usize = VALUE_LABELS_RECORD + LABELS_RECORD;
/// Then, per CPU, when fsprof watched the thread (CLOCK_MONOTONIC, ns): a thread found on a CPU
/// with no switch since has been on it from then (see `cpu_wide/programs.rs`).
pub(in crate::native) const VALUE_WATCHED_AT: usize = VALUE_LABELS_TEMP + 32;
/// Then, per CPU, when the thread's latest departure that blocked had its stack copied (a
/// block's copies are counted apart from a preemption's: see `cpu_wide/programs.rs`,
/// `departure_stack`).
pub(in crate::native) const VALUE_BLOCK_COPIED: usize = VALUE_WATCHED_AT + 8;
/// Then the id of the thread the value is for (set by fsprof; 0: none, as the programs leave
/// it when they remove a thread from the watched ones), which the switch program checks where
/// `cpu_wide/direct.rs`'s table gave it the value.
pub(in crate::native) const VALUE_TID: usize = VALUE_BLOCK_COPIED + 8;
pub(in crate::native) const VALUE_SIZE: usize = VALUE_TID + 8;
const _: () = assert!(
    LABELS_RECORD >= COPY_HEADER + 8 + crate::program::otel_context::MAX_RECORD,
    "a labels record holds an OpenTelemetry record whole"
);
/// The kinds of folded stretches: blocked, preempted near the end of a block, preempted
/// elsewhere (their numbers in `VALUE_FOLD_KIND` and the order of `VALUE_FOLDED`).
pub(in crate::native) const FOLD_KINDS: usize = 3;
const _: () = assert!(VALUE_SIZE.is_multiple_of(8), "values hold aligned words");

/// The stack word (u32) that holds the thread's map value index (see `sampling::Index`).
pub(in crate::native) const INDEX_SLOT: i16 = -4;

/// Added to a process id, the key under which the per-CPU design's map of watched threads
/// holds a watched process (`cpu_wide.rs`): thread ids stay below 2^22 (`pid_max`), so no
/// thread's key is one. A sample of a thread of such a process that is not watched yet is
/// written bare (registers and stack, no copies): a thread born and gone between two reads.
pub(in crate::native) const PROCESS_KEY: u32 = 1 << 31;

/// The stack word where a program keeps its context (`walk.rs` reads it after the hand-over).
pub(in crate::native) const CONTEXT: i16 = -24;

/// Slot numbers of the records the per-CPU programs add (`cpu_wide.rs`): the thread's time on a
/// CPU at a sample (matched with the sample as its slots are), its departure from its CPU, its
/// return to one, and its removal from the watched threads at an `exec`.
pub(in crate::native) const CPU_TIME: usize = SLOTS + 2;
pub(in crate::native) const DEPARTED: usize = SLOTS + 3;
/// The flag of a departure's last word (switch number << 2 | flags, preempted the lowest) that
/// says the thread had no slot known, so no copies precede it.
pub(in crate::native) const SLOTLESS: u64 = 2;
pub(in crate::native) const RETURNED: usize = SLOTS + 4;
pub(in crate::native) const EXECED: usize = SLOTS + 5;
/// The record of a thread's registers and stack as it left its CPU (`cpu_wide/programs.rs`).
pub(in crate::native) const DEPARTURE_STACK: usize = SLOTS + 6;
/// The record of a thread's short stretches off its CPU folded since its previous record.
pub(in crate::native) const FOLDED: usize = SLOTS + 7;
/// The record of a thread's custom-labels pointer at a sample (see [`VALUE_LABELS_OFFSET`]).
pub(in crate::native) const LABELS: usize = SLOTS + 8;

/// A stretch off the CPU of a thread without marks, that left with no stack copied (most of its
/// departures: one a period has its stack), is folded into its thread's totals by kind rather
/// than recorded, if it lasts at most this long. Following python3's four threads through
/// 80 000 switches a second, a record at each departure and each return cost 386 ns per run of
/// the `sched_switch` program, and fsprof read them with 110 to 150 ms of its CPU in 2 s;
/// folded, 161 ns and 50 to 60 ms (BENCHMARKS.md, issue 39). Longer ones are recorded whole as
/// they end (a departure at its own time, then its return): at most one per this much of the
/// thread's time; a tick reads the stack of a thread blocked that long in a folded departure
/// (`Sampler::refresh_folded`).
pub const FOLD_MOST_NS: u64 = 1_000_000;
/// A thread preempted within this much running after a block ended is still on its way out of
/// the blocking call (see `Sampler::switch`). In a CPU-limited cgroup, where a woken thread
/// is throttled as soon as it runs, 20 us and 200 us gave the same shares (`builtins.c`'s
/// `waiting` 528 and 611 ms against 530 and 608 measured; with none, 412 against 647).
pub const JUST_BACK_NS: u64 = 50_000;

/// Bits of the bitmap of learnt return addresses, which the scan looks at before the rules.
pub const BITMAP_BITS: usize = 1 << 20;

/// The kinds of [`FrameRule`] in the map's values.
pub(in crate::native) const KIND_SP: i32 = 1;
pub(in crate::native) const KIND_BP: i32 = 2;
pub(in crate::native) const KIND_ROOT: i32 = 3;

/// A rule as the program reads it: the CFA's offset (u32), then where rbp was saved relative
/// to the CFA (i16, 0 for not saved), then the kind (u8). Never 0.
pub(in crate::native) fn encode(rule: FrameRule) -> u64 {
    let (kind, cfa, saved) = match rule {
        FrameRule::StackPointer { cfa, bp_saved } => (KIND_SP, cfa, bp_saved),
        FrameRule::FramePointer { cfa, bp_saved } => (KIND_BP, cfa, bp_saved),
        FrameRule::Root => (KIND_ROOT, 0, 0),
    };
    u64::from(cfa) | u64::from(saved as u16) << 32 | (kind as u64) << 48
}

/// The rule [`encode`] made `word` from; `None` if it made none (`word` read from a file).
pub(in crate::native) fn decode(word: u64) -> Option<FrameRule> {
    let (cfa, bp_saved) = ((word & 0xffff_ffff) as u32, (word >> 32) as u16 as i16);
    let rule = match (word >> 48) as i32 {
        KIND_SP => FrameRule::StackPointer { cfa, bp_saved },
        KIND_BP => FrameRule::FramePointer { cfa, bp_saved },
        KIND_ROOT => FrameRule::Root,
        _ => return None,
    };
    (encode(rule) == word && cfa < 1 << 30).then_some(rule)
}
