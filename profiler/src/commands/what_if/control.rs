//! The control page of `fsprof what-if`, fsprof's side (the layout and its contract are
//! `fsprof_shim::whatif`): made once per run of the program, with every candidate written in
//! before the program starts (or, after `what-if --progress`'s look at the program's features,
//! before its first experiment); the experiment set in it (at the start, or in turn while the
//! program runs); its counters, and the progress point's counts in the program's regions, read
//! as [`Counters`] at any moment. Not here: which experiment runs when (`what_if.rs`,
//! `rotation.rs`), nor what the counts predict (`results.rs`).

use super::Candidate;
use crate::program::remote::Remote;
use crate::program::scanned::ScannedFiles;
use anyhow::{Context, Result};
use fsprof_shim::abi::{self, PROGRESS_OFFSET};
use fsprof_shim::whatif::{Candidate as Slot, CONTROL_VERSION, MAX_CANDIDATES};
use fsprof_shim::whatif::{Control, Experiment, ANY_INSTANCE, CONTROL_MAGIC, CONTROL_SIZE};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// The most of the looks' cost a look credits: the looks cost 2-7% of the programs' time on
/// the 2-CPU virtual machines here (2026-12-03); a first measure from one pair of baselines
/// may be far off (12% once, for the pipeline), and no more than this is believed.
pub const MOST_CREDIT: f64 = 0.10;

/// A thread's CPU time between two looks at its marks (Coz's period too). Every 250 us an
/// experiment cost the ground truths 6-9% against 1.3-3.9% here, and that cost, in the
/// baseline but not scaled by a speedup, pulled the predictions down with it: a request's
/// latency with `handle` 50% faster read 3-7 points low (2026-12-03); here within 1.6-4.0.
const PERIOD_NS: u64 = 1_000_000;

/// A control page, shared with the program's agent.
pub struct ControlPage {
    /// The memfd, which the program inherits (its number in `FSPROF_WHATIF`).
    file: File,
    map: memmap2::MmapMut,
    /// Experiments set so far (the next one's epoch).
    epoch: u16,
}

/// What the agent and the shim counted up to a moment; the difference of two is an experiment's
/// (see [`Counters::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// The global delay: the selected code's time the experiment removed, ns.
    pub delay_ns: u64,
    /// What the program's threads slept, all together, ns.
    pub paid_ns: u64,
    /// What blocked threads (and threads that owed an experiment before) were forgiven, ns.
    pub forgiven_ns: u64,
    /// Looks at a thread's marks.
    pub samples: u64,
    /// Looks that found a thread in the selected code.
    pub selected_samples: u64,
    /// Marks of the progress feature that ended.
    pub progress_ends: u64,
    /// Of those, the ones timed, and their latencies in virtual time added up, ns.
    pub progress_timed: u64,
    pub progress_latency_ns: u64,
}

impl Counters {
    /// What was counted between `before` and these.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            delay_ns: self.delay_ns.saturating_sub(before.delay_ns),
            paid_ns: self.paid_ns.saturating_sub(before.paid_ns),
            forgiven_ns: self.forgiven_ns.saturating_sub(before.forgiven_ns),
            samples: self.samples.saturating_sub(before.samples),
            selected_samples: self
                .selected_samples
                .saturating_sub(before.selected_samples),
            progress_ends: self.progress_ends.saturating_sub(before.progress_ends),
            progress_timed: self.progress_timed.saturating_sub(before.progress_timed),
            // A sum of latencies some of which may be negative (`abi::Progress`): wrapping.
            progress_latency_ns: (self.progress_latency_ns)
                .wrapping_sub(before.progress_latency_ns),
        }
    }
}

impl ControlPage {
    /// A page with `candidates` written in (at most [`MAX_CANDIDATES`], names within
    /// `NAME_CAPACITY`: the options checked both) and a baseline set.
    pub fn new(candidates: &[Candidate]) -> Result<ControlPage> {
        let fd = nix::sys::memfd::memfd_create(
            c"fsprof-whatif",
            nix::sys::memfd::MemFdCreateFlag::empty(),
        )
        .context("creating the experiments' control page (memfd_create)")?;
        let file = File::from(fd);
        file.set_len(CONTROL_SIZE as u64)?;
        // SAFETY: a memfd of this process, mapped shared; the program's agent writes its
        // counters through atomics, fsprof reads them through the same atomics.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }?;
        let mut page = ControlPage {
            file,
            map,
            epoch: 0,
        };
        let control = page.control_mut();
        control.magic = CONTROL_MAGIC;
        control.version = CONTROL_VERSION;
        control.period_ns = PERIOD_NS;
        page.set_candidates(candidates);
        Ok(page)
    }

    /// The descriptor the program inherits.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn control(&self) -> &Control {
        // SAFETY: the mapping is page-aligned and CONTROL_SIZE bytes long, initialized by
        // `new`: a valid `Control`, whose fields the agent changes only through atomics.
        unsafe { &*(self.map.as_ptr() as *const Control) }
    }

    fn control_mut(&mut self) -> &mut Control {
        // SAFETY: as in `control`; only before the program starts.
        unsafe { &mut *(self.map.as_mut_ptr() as *mut Control) }
    }

    /// Writes `candidates` in (at most [`MAX_CANDIDATES`], names within `NAME_CAPACITY`: the
    /// options and the survey checked both): before the program starts, or while it runs
    /// before the first experiment is set (the agent reads them only while one runs, after
    /// the experiment's word, which [`ControlPage::set`] stores after them with `Release`).
    /// Written field by field through raw pointers: the agent changes the page's atomics
    /// meanwhile, so no `&mut Control` may cover them.
    pub fn set_candidates(&mut self, candidates: &[Candidate]) {
        let control = self.map.as_mut_ptr() as *mut Control;
        let count = candidates.len().min(MAX_CANDIDATES);
        // SAFETY: the page is a `Control` (`new`); its candidates and their count are plain
        // fields the agent does not read before the next experiment is set (see above), each
        // written in place, without a reference to the whole page.
        unsafe {
            core::ptr::addr_of_mut!((*control).candidate_count).write(count as u64);
            let slots = core::ptr::addr_of_mut!((*control).candidates) as *mut Slot;
            for (index, candidate) in candidates.iter().take(count).enumerate() {
                let slot = &mut *slots.add(index);
                let feature = candidate.feature.as_bytes();
                slot.feature_len = feature.len() as u64;
                slot.feature[..feature.len()].copy_from_slice(feature);
                slot.instance_len = ANY_INSTANCE;
                if let Some(instance) = &candidate.instance {
                    slot.instance_len = instance.len() as u64;
                    slot.instance[..instance.len()].copy_from_slice(instance.as_bytes());
                }
            }
        }
    }

    /// Sets the experiment: candidate `candidate` (an index into the candidates) `speedup`
    /// percent faster, or a baseline (`None`), under a new epoch.
    pub fn set(&mut self, candidate: Option<usize>, speedup: u32) {
        self.epoch = self.epoch.wrapping_add(1);
        let experiment = Experiment {
            epoch: self.epoch,
            candidate: candidate.map(|c| c as u16),
            speedup_ppm: if candidate.is_some() {
                speedup * 10_000
            } else {
                0
            },
        };
        self.control().current.store(experiment.word(), Release);
    }

    /// Slows the program's looks to every `period` ns of a thread's CPU time (a quiet baseline
    /// stretch), or back to the page's own period (`None`); each thread's timer takes it at its
    /// next look.
    pub fn slow_looks(&mut self, period: Option<u64>) {
        (self.control().looks_period_ns).store(period.unwrap_or(0), Release);
    }

    /// Has a look of the perf clock in the selected code credit `1 + cost` periods (`cost`: the
    /// looks' own, as a fraction of the program's time, taken between 0 and [`MOST_CREDIT`];
    /// see `Control::credit_ppm`).
    /// Returns what it wrote, parts per million.
    pub fn credit_looks(&mut self, cost: f64) -> u64 {
        let ppm = (cost.clamp(0.0, MOST_CREDIT) * 1e6) as u64;
        (self.control().credit_ppm).store(ppm, Release);
        ppm
    }

    /// Whether the agent started the experiments in the program.
    pub fn started(&self) -> bool {
        self.control().signal.load(Relaxed) != 0
    }

    /// Threads timed, and threads whose timer could not be armed.
    pub fn threads(&self) -> (u64, u64) {
        let control = self.control();
        (
            control.threads.load(Relaxed),
            control.failures.load(Relaxed),
        )
    }

    /// Whether the program's exit was seen by the agent, which then wrote the progress point's
    /// counts into the page (`exit`, or a return from `main`).
    pub fn exited(&self) -> bool {
        self.control().exited.load(Acquire) != 0
    }

    /// The counters now, the progress point's read from the regions of the live process `pid`
    /// (through `files`; `None` where they cannot be read), or without a process, or once it has
    /// exited, as the agent wrote them at its exit (zero if it did not).
    pub fn counters(&self, live: Option<(u32, &mut ScannedFiles)>) -> Option<Counters> {
        let control = self.control();
        let progress = match live {
            Some((pid, files)) if !self.exited() => progress_of(pid, files)?,
            _ => [
                control.progress_ends.load(Relaxed),
                control.progress_timed.load(Relaxed),
                control.progress_latency_ns.load(Relaxed),
            ],
        };
        Some(Counters {
            delay_ns: control.global_delay_ns.load(Acquire),
            paid_ns: control.paid_ns.load(Relaxed),
            forgiven_ns: control.forgiven_ns.load(Relaxed),
            samples: control.samples.load(Relaxed),
            selected_samples: control.selected_samples.load(Relaxed),
            progress_ends: progress[0],
            progress_timed: progress[1],
            progress_latency_ns: progress[2],
        })
    }
}

/// The progress point's counts of process `pid` (ends, timed, latency), added up over its
/// regions; `None` where its memory map or a region cannot be read (the process is gone, or
/// fsprof may not read it).
fn progress_of(pid: u32, files: &mut ScannedFiles) -> Option<[u64; 3]> {
    let remote = Remote::new(pid);
    let mut total = [0u64; 3];
    for address in files.region_addresses(&[pid]).ok()? {
        let mut bytes = [0u8; abi::HEADER_VIEW_SIZE];
        remote.read(address, &mut bytes).ok()?;
        let header = abi::parse_header(&bytes)?;
        // A region another process made (inherited through a fork) or of another layout: not
        // this program's counts.
        if !header.is_compatible() || header.address != address || header.pid != pid {
            continue;
        }
        // `abi::Progress`: delay, ends, timed, latency.
        let word = |index: usize| {
            let at = PROGRESS_OFFSET + 8 * index;
            u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
        };
        for (sum, index) in total.iter_mut().zip(1..4) {
            *sum = sum.wrapping_add(word(index));
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_subtract_field_by_field() {
        let before = Counters {
            delay_ns: 10,
            progress_ends: 3,
            ..Counters::default()
        };
        let after = Counters {
            delay_ns: 25,
            progress_ends: 5,
            samples: 4,
            ..Counters::default()
        };
        let delta = after.since(&before);
        assert_eq!(
            (delta.delay_ns, delta.progress_ends, delta.samples),
            (15, 2, 4)
        );
        assert_eq!(before.since(&after).delay_ns, 0);
    }

    #[test]
    fn a_page_holds_its_candidates_and_experiment() {
        let candidates = [
            Candidate {
                feature: "parse".to_owned(),
                instance: None,
            },
            Candidate {
                feature: "render".to_owned(),
                instance: Some("a.rs:1:2".to_owned()),
            },
        ];
        let mut page = ControlPage::new(&candidates).unwrap();
        let control = page.control();
        assert_eq!(control.candidate_count, 2);
        assert_eq!(&control.candidates[0].feature[..5], b"parse");
        assert_eq!(control.candidates[0].instance_len, ANY_INSTANCE);
        assert_eq!(control.candidates[1].instance_len, 8);
        assert_eq!(control.current.load(Relaxed), 0);
        page.set(Some(1), 50);
        let set = Experiment::from_word(page.control().current.load(Relaxed));
        assert_eq!(
            (set.epoch, set.candidate, set.speedup_ppm),
            (1, Some(1), 500_000)
        );
        page.set(None, 50);
        let set = Experiment::from_word(page.control().current.load(Relaxed));
        assert_eq!((set.epoch, set.candidate, set.speedup_ppm), (2, None, 0));
    }
}
