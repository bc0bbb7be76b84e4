//! What a sampled thread's native stacks were, for the next sample to reuse where the thread
//! cannot have moved: the stack read last, the latest perf sample, whether the thread ran at its
//! previous sample and how many times it had been scheduled when its stack was read. It owns
//! the rule of when a stack must be read again ([`StackHistory::must_read`]); reading stacks,
//! and what a sample weighs, are elsewhere (`native_stacks.rs`, `sampler.rs`).

use super::super::Native;
use crate::native::unwind::Captured;
use crate::program::custom_labels::Label;

/// One thread's native stacks so far.
pub struct StackHistory {
    /// The stack read last, reused while the thread does not run.
    last: Option<Captured>,
    /// Whether the thread was running at its previous sample.
    was_running: bool,
    /// Times the thread was scheduled, as read with its stack (or at a sample that reused it).
    scheduled: Option<u64>,
    /// Its stack was not read at its previous sample because it had last run on fsprof's CPU.
    skipped: bool,
    /// Its latest perf sample (always a `Native::Perf`), which stands for the ticks at which the
    /// thread has not run a whole period since.
    last_perf: Option<Native>,
    /// The custom labels of its latest perf sample (none where the process publishes none).
    last_labels: Vec<Label>,
}

impl Default for StackHistory {
    /// A new thread's: its first sample reads its stack, running or not.
    fn default() -> StackHistory {
        StackHistory {
            last: None,
            was_running: true,
            scheduled: None,
            skipped: false,
            last_perf: None,
            last_labels: Vec::new(),
        }
    }
}

impl StackHistory {
    /// Whether this sample must read the thread's stack, found `running` (on a CPU or waiting
    /// for one) or not, where its stack `matters` (inside a mark, or with `--idle`) while it
    /// does not run: running, or blocked since it was last seen running, or its previous read
    /// was skipped, or never read where it matters; not running now nor at the previous sample,
    /// only if it was scheduled in between (`scheduled`: its count now, read only then).
    pub fn must_read(
        &mut self,
        running: bool,
        matters: bool,
        scheduled: impl FnOnce() -> Option<u64>,
    ) -> bool {
        let read = if running || self.was_running || self.skipped {
            true
        } else if !matters {
            false
        } else if self.last.is_none() {
            true
        } else {
            let now = scheduled();
            let ran = now.is_none() || now != self.scheduled;
            self.scheduled = now;
            ran
        };
        self.was_running = running;
        read
    }

    /// The stack read last, standing for this sample (the thread has not run since).
    pub fn standing(&self) -> Native {
        self.last.clone().map_or(Native::None, Native::Captured)
    }

    /// Its latest perf sample, standing for this instant (it has run less than a period since),
    /// or `BeforePerf` if perf has not sampled it yet.
    pub fn perf_standing(&self) -> Native {
        match &self.last_perf {
            Some(Native::Perf(captured, records, truncated)) => {
                Native::Perf(captured.clone(), records.clone(), *truncated)
            }
            _ => Native::BeforePerf,
        }
    }

    /// The latest perf sample's stack, its marks and their logical depth, if perf sampled it.
    pub fn latest_perf(&self) -> Option<(&Captured, &[fsprof_shim::abi::RecordView], Option<u32>)> {
        match &self.last_perf {
            Some(Native::Perf(captured, records, truncated)) => {
                Some((captured, records.as_slice(), *truncated))
            }
            _ => None,
        }
    }

    /// The custom labels its latest perf sample copied.
    pub fn latest_labels(&self) -> &[Label] {
        &self.last_labels
    }

    /// Keeps `labels` as those of its latest perf sample.
    pub fn set_latest_labels(&mut self, labels: Vec<Label>) {
        self.last_labels = labels;
    }

    /// Keeps `latest` (a `Native::Perf`, or `None`) as its latest perf sample.
    pub fn set_latest_perf(&mut self, latest: Option<Native>) {
        self.last_perf = latest;
    }

    /// Keeps the stack just read; `scheduled` the thread's count of times scheduled then, where
    /// it was read while the thread did not run.
    pub fn read(&mut self, captured: Captured, scheduled: Option<Option<u64>>) {
        if let Some(scheduled) = scheduled {
            self.scheduled = scheduled;
        }
        self.last = Some(captured);
    }

    /// Whether the thread has not been scheduled since its count was last read (`now` reads its
    /// count now, only if one was read before); false where unknown.
    pub fn not_run_since(&self, now: impl FnOnce() -> Option<u64>) -> bool {
        self.scheduled.is_some() && now() == self.scheduled
    }

    /// Whether its previous read was skipped (then this one reads it even on fsprof's CPU);
    /// cleared.
    pub fn take_skipped(&mut self) -> bool {
        std::mem::take(&mut self.skipped)
    }

    /// Its read skipped: the previous stack may be from before it last ran (another image,
    /// even, after an exec), never reused; the next sample reads it.
    pub fn skip(&mut self) {
        self.last = None;
        self.skipped = true;
    }

    /// After an exec: nothing of the old program's stacks stands, and the new program's stack is
    /// read at the next sample even if the thread is blocked then, as a new thread's is.
    pub fn new_program(&mut self) {
        self.last = None;
        self.last_perf = None;
        self.was_running = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured() -> Captured {
        Captured {
            frames: Vec::new(),
            complete: true,
        }
    }

    #[test]
    fn a_blocked_thread_is_read_again_only_if_it_ran_since() {
        let mut history = StackHistory::default();
        assert!(
            history.must_read(false, true, || Some(5)),
            "a new thread's first sample reads"
        );
        history.read(captured(), Some(Some(5)));
        let mut asked = 0;
        assert!(!history.must_read(false, true, || {
            asked += 1;
            Some(5)
        }));
        assert_eq!(asked, 1);
        assert!(
            history.must_read(false, true, || Some(6)),
            "scheduled since"
        );
        assert!(
            !history.must_read(false, false, || unreachable!()),
            "where it does not matter"
        );
        assert!(history.must_read(true, false, || unreachable!()), "running");
        assert!(
            history.must_read(false, false, || unreachable!()),
            "blocked since it ran"
        );
        assert!(matches!(history.standing(), Native::Captured(_)));
    }

    #[test]
    fn a_skipped_read_is_never_reused_and_reads_next_time() {
        let mut history = StackHistory::default();
        history.read(captured(), Some(Some(1)));
        history.must_read(false, true, || Some(1));
        history.skip();
        assert!(matches!(history.standing(), Native::None));
        assert!(history.must_read(false, true, || Some(1)));
        assert!(history.take_skipped() && !history.take_skipped());
    }
}
