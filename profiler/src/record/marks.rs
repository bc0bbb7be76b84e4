//! The mark reader: the target's regions (found by the scanner, forgotten once unmapped) and,
//! at each tick, every thread's marks copied from them, with what the copies could not settle:
//! threads whose slot could not be copied, and threads whose slots in several regions may not
//! describe one instant; and the later branches of alternatives the slots' histories gained. It counts what the report's metadata says of the reading. It does not
//! sample: the sampler asks it for a thread's marks and decides what they stand for.

use crate::native::layout::SLOTS;
use crate::profile::Meta;
use crate::program::region::{ReadStats, RegionReader, ThreadMarks};
use crate::record::announce::Registry;
use crate::record::scanner::Scanner;
use fsprof_shim::abi::{self, RecordView};
use std::time::Duration;

/// The regions and this tick's marks.
pub struct MarkReader {
    regions: Vec<RegionReader>,
    /// Finds regions on a thread of its own (see `scanner.rs`).
    scanner: Scanner,
    /// Addresses of every region read during the recording.
    seen: Vec<u64>,
    stats: ReadStats,
    threads_without_slot: u64,
    /// This tick's marks, sorted by thread (regions in their order within a thread).
    marks: Vec<ThreadMarks>,
    /// Threads (own ids) whose slot could not be copied this tick.
    unreadable: Vec<u32>,
    /// The later branches the slots' histories gained since the previous tick.
    later_branches: Vec<RecordView>,
    /// Whether a history lost entries since the previous tick (more were pushed than it holds).
    history_overflowed: bool,
    /// The fastest a history has been filling lately, in entries a second: the most one
    /// history gained between two reads over their interval, or the rate before, halved for
    /// each second since, if greater (see [`MarkReader::history_patience`]).
    history_rate: f64,
    /// Threads (own ids) whose copies from several regions disagree at this tick.
    unsettled: Vec<u32>,
    /// Set when a region could not be read this tick: every thread's time is carried over.
    incomplete: bool,
    /// When this tick's marks began to be read (CLOCK_MONOTONIC, ns).
    read_ns: u64,
}

/// What [`MarkReader::take_regions`] found.
pub struct Taken {
    /// A thread through which the target's memory is to be read from now on, if it changed.
    pub via: Option<u32>,
    /// Whether regions were dropped (cached strings may be stale).
    pub dropped: bool,
    /// Notes for the report.
    pub notes: Vec<String>,
}

impl MarkReader {
    /// A reader of process `pid`'s regions; its scanner starts looking at once (woken by the
    /// process's announcements to `registry`, if any).
    pub fn start(pid: u32, registry: Option<&Registry>) -> MarkReader {
        MarkReader {
            regions: Vec::new(),
            scanner: Scanner::start(pid, registry),
            seen: Vec::new(),
            stats: ReadStats::default(),
            threads_without_slot: 0,
            marks: Vec::new(),
            unreadable: Vec::new(),
            later_branches: Vec::new(),
            history_overflowed: false,
            history_rate: 0.0,
            unsettled: Vec::new(),
            incomplete: false,
            read_ns: 0,
        }
    }

    /// Waits (at most `limit`) for the scanner's first look, so that a program that has marked
    /// already has its regions read from the first tick.
    pub fn wait_for_first_scan(&mut self, limit: Duration) {
        self.scanner.wait_for_first_scan(limit);
    }

    /// Asks the scanner to look at once (the process ran another program).
    pub fn look_again(&mut self) {
        self.scanner
            .ask(self.regions.iter().map(RegionReader::address));
    }

    /// Takes the regions the scanner found, and forgets those no longer mapped.
    pub fn take_regions(&mut self) -> Taken {
        let found = self
            .scanner
            .take(self.regions.iter().map(RegionReader::address));
        let mut dropped = false;
        if let Some(mapped) = found.mapped {
            let before = self.regions.len();
            self.regions
                .retain(|region| mapped.contains(&region.address()));
            dropped = self.regions.len() != before;
        }
        for reader in found.regions {
            let address = reader.address();
            if self.regions.iter().any(|r| r.address() == address) {
                continue;
            }
            self.regions.push(reader);
            if !self.seen.contains(&address) {
                self.seen.push(address);
            }
        }
        Taken {
            via: found.via,
            dropped,
            notes: found.notes,
        }
    }

    /// When this tick's marks began to be read (CLOCK_MONOTONIC, ns): a thread that has not
    /// run since before then still has the marks read.
    pub fn read_ns(&self) -> u64 {
        self.read_ns
    }

    /// Copies every thread's marks from every region. Returns `false` when a region could not
    /// be read (it is dropped, and looked for again): this tick's marks are incomplete.
    pub fn read(&mut self) -> bool {
        let previous_ns = std::mem::replace(&mut self.read_ns, crate::os::time::monotonic_ns());
        self.marks.clear();
        self.unreadable.clear();
        let before = self.regions.len();
        let (marks, unreadable, stats) = (&mut self.marks, &mut self.unreadable, &mut self.stats);
        let mut without_slot = self.threads_without_slot;
        let mut kept = 0;
        self.regions.retain_mut(|region| {
            let start = marks.len();
            match region.read(marks, unreadable, stats) {
                Ok(()) => {
                    without_slot = without_slot.max(region.threads_without_slot);
                    marks[start..].iter_mut().for_each(|m| m.region = kept);
                    kept += 1;
                    true
                }
                // Unmapped (the program called exec, or is exiting): drop it, look again soon.
                Err(_) => false,
            }
        });
        self.threads_without_slot = without_slot;
        self.later_branches.clear();
        let lost = self.stats.later_branches_lost;
        let mut most = 0;
        for region in &mut self.regions {
            most = most.max(region.read_history(&mut self.later_branches, &mut self.stats));
        }
        self.history_overflowed = self.stats.later_branches_lost > lost;
        if previous_ns != 0 {
            let since = self.read_ns.saturating_sub(previous_ns).max(1) as f64 / 1e9;
            self.history_rate = (most as f64 / since).max(self.history_rate * 0.5f64.powf(since));
        }
        // Sorted by thread (stable: regions keep their order), for `of`'s lookups.
        self.marks.sort_by_key(|marks| marks.tid);
        self.unsettled.clear();
        if self.regions.len() > 1 {
            self.find_unsettled();
        }
        self.incomplete = self.regions.len() != before;
        if self.incomplete {
            self.scanner
                .ask(self.regions.iter().map(RegionReader::address));
        }
        !self.incomplete
    }

    /// Whether this tick's marks of thread `own_tid` are missing (a region or its slot could
    /// not be read): its time is carried to its next sample.
    pub fn missing(&self, own_tid: u32) -> bool {
        self.incomplete || self.unreadable.contains(&own_tid)
    }

    /// Whether a region of the process is known: before one is, where its threads mark is not.
    pub fn knows_regions(&self) -> bool {
        !self.regions.is_empty()
    }

    /// This tick's marks of thread `own_tid`, one per region it marks in.
    pub fn of(&self, own_tid: u32) -> &[ThreadMarks] {
        let first = self.marks.partition_point(|m| m.tid < own_tid);
        let count = self.marks[first..]
            .iter()
            .take_while(|m| m.tid == own_tid)
            .count();
        &self.marks[first..first + count]
    }

    /// The later branches of alternatives that the program's threads pushed since the previous
    /// tick (from the slots' histories: see `fsprof_shim::abi`), whether or not a sample saw them.
    pub fn later_branches(&self) -> &[RecordView] {
        &self.later_branches
    }

    /// Whether a history lost entries since the previous tick: ticks must come faster.
    pub fn history_overflowed(&self) -> bool {
        self.history_overflowed
    }

    /// How long the fastest-filling history lately would take to fill from empty (`None` if
    /// none is filling): the ticks that read the histories must come sooner, as they must
    /// before perf's rings fill. A parser pushing 3300 later branches a second filled its 128
    /// entries in 39 ms, about as long as a slow tick: each slow tick after a while at the full
    /// rate lost some (140-180 of 6600 in 2 s), and its `wasted` read 0.8-2.4 points low.
    pub fn history_patience(&self) -> Option<std::time::Duration> {
        (self.history_rate > 0.0).then(|| {
            std::time::Duration::from_secs_f64(abi::HISTORY_CAPACITY as f64 / self.history_rate)
        })
    }

    /// The slot `old` was copied from, copied again now.
    pub fn again(&self, old: &ThreadMarks) -> Option<ThreadMarks> {
        self.regions.get(old.region)?.read_slot(old.slot, old.tid)
    }

    /// Whether marks come from more than one region (the program's and the agent's, say).
    pub fn several_regions(&self) -> bool {
        self.regions.len() > 1
    }

    /// Whether thread `own_tid`'s copies from several regions may not be of one instant.
    pub fn unsettled(&self, own_tid: u32) -> bool {
        self.unsettled.contains(&own_tid)
    }

    /// Thread `own_tid`'s marks were taken from elsewhere (a perf sample's copy).
    pub fn settled(&mut self, own_tid: u32) {
        self.unsettled.retain(|t| *t != own_tid);
    }

    /// A sample kept marks that may not be of one instant, for want of a perf sample.
    pub fn count_unsettled(&mut self) {
        self.stats.unsettled += 1;
    }

    /// The addresses in the target of the slots of `marks` (one thread's, one per region it
    /// marks in), as perf arms them; `None` if they do not fit. A thread that holds no slot yet
    /// gets the slots it will likely claim at its first mark (the lowest free ones, of each
    /// region in turn): until the next tick finds its slot, its samples would otherwise read
    /// no marks where it has some (new threads of `requests` lost a third of their first marks,
    /// `handling` 2 points low). A copy of a slot that is not the thread's reads as no marks
    /// (`sampler/native_stacks.rs`).
    pub fn slot_addresses(&self, marks: &[ThreadMarks]) -> Option<[u64; SLOTS]> {
        if marks.len() > SLOTS {
            return None;
        }
        let mut addresses = [0; SLOTS];
        if marks.is_empty() {
            let free = (self.regions.iter()).flat_map(|region| {
                (region.free_slots().iter()).map(|&slot| (region.address(), slot))
            });
            for (address, (region, slot)) in addresses.iter_mut().zip(free) {
                *address = abi::slot_address(region, slot);
            }
            return Some(addresses);
        }
        for (address, marks) in addresses.iter_mut().zip(marks) {
            *address = abi::slot_address(self.regions.get(marks.region)?.address(), marks.slot);
        }
        Some(addresses)
    }

    /// Fills `meta`'s fields about the reading of marks.
    pub fn fill(&self, meta: &mut Meta) {
        meta.reading.regions = self.seen.len() as u32;
        meta.reading.torn_retries = self.stats.retries;
        meta.reading.torn_dropped = self.stats.dropped;
        meta.reading.marks_unsettled = self.stats.unsettled;
        meta.reading.threads_without_slot = self.threads_without_slot;
        meta.reading.later_branches = self.stats.later_branches;
        meta.reading.later_branches_lost = self.stats.later_branches_lost;
    }

    /// Finds the threads whose slots in several regions (the program's shim, the agent's) may
    /// not describe one instant. The regions are read one after the other, so a thread that
    /// marks every microsecond can have a push in one region missing from the copy of another
    /// (a built-in `write` seen without the program's own `output` mark around it). Each of its
    /// slots is checked once more: a push advances `seq`, a pop lowers `depth`; if none moved,
    /// every copy held at the instant between the reads and the check. Copying again until they
    /// agree would not do: it picks the instants at which nothing changes for a while, which
    /// favours the marks held longest (it took FizzBuzz's `formatting` from 8% to 5%). Such a
    /// thread's marks are taken from its perf sample instead, copied at one instant by the
    /// kernel at a moment that does not depend on this check (see `Sampler::tick`).
    fn find_unsettled(&mut self) {
        let mut start = 0;
        while start < self.marks.len() {
            let tid = self.marks[start].tid;
            let end = start
                + self.marks[start..]
                    .iter()
                    .take_while(|m| m.tid == tid)
                    .count();
            let moved = end - start > 1
                && self.marks[start..end].iter().any(|marks| {
                    self.again(marks)
                        .is_none_or(|again| (again.seq, again.depth) != (marks.seq, marks.depth))
                });
            if moved {
                self.unsettled.push(tid);
            }
            start = end;
        }
    }
}
/// Decodes the slots the kernel copied at a perf sample into the thread's records (all slots,
/// in order) and the logical depth if some were not recorded. A copy of a slot the thread does
/// not hold has none of its marks: a free slot it may have claimed since (see
/// `MarkReader::slot_addresses`), or its own slot, released as it exits. `None` if a copy
/// cannot be parsed.
pub(in crate::record) fn snapshot_records(
    own_tid: u32,
    slots: &[Option<Vec<u8>>; SLOTS],
) -> Option<(Vec<RecordView>, Option<u32>)> {
    let mut records = Vec::new();
    let mut truncated_depth = None;
    for bytes in slots.iter().flatten() {
        let state = abi::parse_slot_state(bytes.get(..abi::SLOT_STATE_SIZE)?)?;
        // An odd `seq` (a push under way) is fine here: the thread was interrupted, so the copy
        // is its slot at one instant of its own order of writes, in which the records below
        // `depth` are always whole (a push writes its record before raising `depth`).
        if state.tid != own_tid {
            continue;
        }
        let recorded = (state.depth as usize).min(abi::MARK_CAPACITY);
        for index in 0..recorded {
            let at = abi::RECORDS_OFFSET + index * abi::RECORD_SIZE;
            records.push(abi::parse_record(bytes.get(at..at + abi::RECORD_SIZE)?)?);
        }
        if state.depth as usize > recorded {
            truncated_depth = Some(state.depth);
        }
    }
    Some((records, truncated_depth))
}
