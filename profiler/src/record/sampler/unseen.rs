//! Threads no tick saw: born and gone between two of the sampler's ticks (a thousand busy
//! threads on two CPUs left some 7 to 26 ms old, unseen in half the runs). Per CPU, perf writes
//! a bare sample of each thread of the process that fsprof does not watch (its registers and
//! stack: `native/cpu_wide.rs`'s strangers); a thread a tick sees drops its own (the tick's
//! samples stand for it until perf watches it), and one found gone without being seen is added
//! here from them, each sample standing for its tick. Its marks were never read: in a process
//! that marks (a region is known) or publishes labels, its samples are counted and left out
//! rather than given to no feature. Not here: the ticks' threads (`lifecycle.rs`).

use super::*;
use crate::profile::UnseenThreads;
use foldhash::HashSet;

/// The threads found gone unseen at the previous tick, and what was done with such threads.
#[derive(Default)]
pub(super) struct Unseen {
    /// Handed out at the next tick: the CPUs' rings are read once more before (their last
    /// samples may have been written after this tick's read).
    gone: HashSet<u32>,
    pub(super) counts: UnseenThreads,
}

impl Sampler {
    /// Adds the threads of the process that perf sampled bare and that no tick saw, once they
    /// are gone (or at the recording's end, `ending`, whatever their state: the rings are read
    /// once more first).
    pub(super) fn take_unseen(&mut self, ending: bool) {
        let Some(strangers) = self.native.as_mut().map(|n| n.perf_strangers(ending)) else {
            return;
        };
        self.unseen.gone.retain(|tid| strangers.contains(tid));
        for tid in strangers {
            let Some(native) = self.native.as_mut() else {
                return;
            };
            if self.threads.states.contains_key(&tid) {
                native.ignore_stranger(tid); // a tick saw it: the tick's samples stand for it
                continue;
            }
            if !ending && !self.unseen.gone.contains(&tid) {
                let path = format!("/proc/{}/task/{tid}", self.pid);
                if !std::path::Path::new(&path).exists() {
                    self.unseen.gone.insert(tid);
                }
                continue;
            }
            self.unseen.gone.remove(&tid);
            let samples = native.unseen_samples(tid);
            if samples.is_empty() {
                continue;
            }
            if Self::marks_unknown_to_bare(&self.reader, native) {
                self.unseen.counts.native_unseen_dropped += samples.len() as u64;
                continue;
            }
            self.unseen.counts.native_unseen_threads += 1;
            self.unseen.counts.native_unseen_samples += samples.len() as u64;
            let pid = self.pid;
            let thread = self.builder.thread(tid, || process::thread_name(pid, pid));
            self.add_bare_samples(thread, samples);
        }
    }

    /// Adds thread `tid`'s (sample thread `thread`'s) bare samples held, taken while it ran
    /// unwatched after a tick saw it (`CpuWide::ran`), before perf watches it: a thread that
    /// runs a few milliseconds now and then between the ticks (`rare_threads`: 2 ms every 400
    /// ms) lost its bursts until perf's first sample of it, 7 to 12% of its time at 1 kHz and
    /// up to half at the defaults. Not in a process that marks or publishes labels: their
    /// marks were not read, and they are dropped as before.
    pub(super) fn add_bare(&mut self, tid: u32, thread: u32) {
        let Some(native) = self.native.as_mut() else {
            return;
        };
        if Self::marks_unknown_to_bare(&self.reader, native) {
            native.ignore_stranger(tid);
            return;
        }
        let samples = native.unseen_samples(tid);
        self.add_bare_samples(thread, samples);
    }

    /// Whether the process marks (a region is known) or publishes labels: its threads' bare
    /// samples would lack what they were inside of, and are left out.
    pub(super) fn marks_unknown_to_bare(reader: &MarkReader, native: &NativeSampler) -> bool {
        reader.knows_regions() || native.label_format().is_some()
    }

    /// Adds `samples`, bare, of sample thread `thread`, each standing for its tick, with no
    /// marks.
    fn add_bare_samples(&mut self, thread: u32, samples: Vec<(Captured, u64)>) {
        if samples.is_empty() {
            return;
        }
        let stack = self.intern_records(Vec::new(), None);
        for (captured, tick_ns) in samples {
            let native = capture::place(&captured, &[]).map(|p| self.builder.native_stack(p));
            self.builder
                .add_sample(thread, stack, native, tick_ns, tick_ns);
        }
    }
}
