//! A perf sampler as one process's native sampler holds it: its own, or the per-CPU events of
//! the tree's first process, shared with the processes `run` follows. Per CPU, the events,
//! programs and rings serve every watched thread whatever its process (each thread's slot
//! addresses are in its map value, read in its own address space), so a child's threads need
//! only a map value each: no events of its own that tick on every CPU (about 2% of each CPU's
//! time per process in a virtual machine), no maps or rings made and no program verified per
//! process. Not shared: the deep stacks' walk, whose rules are of the first process's code
//! (another process's threads are not walked: `Owner`), and the counts of what was lost,
//! which each holder counts from what it took.
//!
//! A holder whose process turned out not to be one fsprof's user may trace is dropped alone
//! (`WatchError::Foreign` drops a per-thread sampler whole): per CPU, the `exec` program stops
//! watching a thread before the new program's credentials are set, and a thread found foreign
//! before it is watched has had nothing copied, so the shared ring holds none of its slots.
//!
//! Not here: the sampler itself (`perf.rs`); which processes are followed (`record/children.rs`).

use super::{Owner, PerfSampler, WatchError, FIRST_OWNER};
use crate::native::cpu_wide::Held;
use crate::native::layout::{SLOTS, VALUE_ADDRESSES};
use std::sync::{Arc, Mutex, MutexGuard};

/// One process's hold on a perf sampler.
pub struct Perf {
    sampler: Arc<Mutex<PerfSampler>>,
    owner: Owner,
    /// Samples lost, and samples without their marks, in what this holder took.
    pub lost: u64,
    pub unmatched: u64,
}

/// A per-CPU perf sampler other processes' holders can join (see [`Perf::share`]).
#[derive(Clone)]
pub struct SharedPerf(Arc<Mutex<PerfSampler>>);

impl std::fmt::Debug for SharedPerf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedPerf")
    }
}

impl Perf {
    /// The holder of a sampler made for its process.
    pub fn own(mut sampler: PerfSampler) -> Perf {
        sampler.holders += 1;
        Perf {
            sampler: Arc::new(Mutex::new(sampler)),
            owner: FIRST_OWNER,
            lost: 0,
            unmatched: 0,
        }
    }

    /// A holder for another process of `shared`'s.
    pub fn join(shared: &SharedPerf) -> Perf {
        let owner = {
            let mut sampler = lock(&shared.0);
            sampler.holders += 1;
            sampler.new_owner()
        };
        Perf {
            sampler: Arc::clone(&shared.0),
            owner,
            lost: 0,
            unmatched: 0,
        }
    }

    /// The sampler to share with other processes, where it samples per CPU (per thread, each
    /// process's threads have events of their own, and sharing them saves nothing).
    pub fn share(&self) -> Option<SharedPerf> {
        self.lock()
            .per_cpu()
            .then(|| SharedPerf(Arc::clone(&self.sampler)))
    }

    /// The sampler, for as long as the guard lives.
    pub fn lock(&self) -> MutexGuard<'_, PerfSampler> {
        lock(&self.sampler)
    }

    /// Who this holder watches threads as.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Whether the walk's rules are of this holder's process.
    pub fn owns_rules(&self) -> bool {
        self.owner == FIRST_OWNER
    }
}

impl Drop for Perf {
    /// Its threads are no longer watched (their map values go back to the sampler).
    fn drop(&mut self) {
        let owner = self.owner;
        let mut sampler = self.lock();
        sampler.forget_all_of(owner);
        sampler.holders -= 1;
    }
}

/// Which holder watches which thread.
impl PerfSampler {
    /// [`PerfSampler::watch`] for `owner`'s process; `running`: the thread runs now, as far as
    /// the caller knows (per CPU, a thread found on a CPU with no switch since counts its time
    /// there from its watch, see `cpu_wide/programs.rs`; one known blocked, only from its
    /// return). A thread another owner watched (its process ended, and its id was reused) is
    /// watched afresh.
    pub fn watch_by(
        &mut self,
        owner: Owner,
        tid: u32,
        addresses: [u64; SLOTS],
        running: bool,
    ) -> Result<(), WatchError> {
        if self.threads.get(&tid).is_some_and(|t| t.owner != owner) {
            self.forget(tid);
        }
        if !self.threads.contains_key(&tid) {
            let thread = self.open(owner, tid, addresses, running)?;
            self.threads.insert(tid, thread);
        }
        let thread = self.threads.get_mut(&tid).expect("inserted");
        thread.running = running;
        if thread.addresses != addresses {
            self.values.write(thread.index, VALUE_ADDRESSES, &addresses);
            thread.addresses = addresses;
        }
        Ok(())
    }

    /// Whether `tid` is being sampled for `owner`.
    pub fn watches_for(&self, owner: Owner, tid: u32) -> bool {
        self.threads.get(&tid).is_some_and(|t| t.owner == owner)
    }

    /// [`PerfSampler::forget`] where `owner` watches `tid`.
    pub fn forget_for(&mut self, owner: Owner, tid: u32) {
        if self.watches_for(owner, tid) {
            self.forget(tid);
        }
    }

    /// A new owner, for another process's holder (`perf/shared.rs`).
    pub(super) fn new_owner(&mut self) -> Owner {
        self.owners += 1;
        self.owners
    }

    /// Has the per-CPU programs write bare samples of the threads of `owner`'s process `pid`
    /// that are not watched (`cpu_wide.rs`'s strangers: a thread born and gone between two
    /// ticks is known by those alone). Nothing per thread; a call after an `exec` puts back
    /// the key the `exec` program removed.
    pub fn watch_process(&mut self, owner: Owner, pid: u32) {
        if let Some(wide) = &mut self.wide {
            if wide.watch_process(pid).is_ok() {
                self.processes.insert(owner, pid);
            }
        }
    }

    /// Whether the per-CPU programs watch every holder's process now, so that each fork of one
    /// wakes the recording (`cpu_wide/forks.rs`): false while a holder has not watched its
    /// process yet (a process just found), or one ran `exec` since (the kernel unwatched it
    /// until its holder's next [`PerfSampler::watch_process`]), and without per-CPU events.
    pub fn every_process_watched(&self) -> bool {
        let Some(wide) = &self.wide else {
            return false;
        };
        self.processes.len() == self.holders
            && (self.processes.values()).all(|&pid| wide.watches_process_now(pid))
    }

    /// The threads of `owner`'s process whose bare samples are held; with `read`, after the
    /// CPUs' rings are read (their last samples, at the recording's end).
    pub fn strangers_of(&mut self, owner: Owner, read: bool) -> Vec<u32> {
        let (Some(wide), Some(pid)) = (&mut self.wide, self.processes.get(&owner)) else {
            return Vec::new();
        };
        if read {
            super::read_cpus(wide, &mut self.births);
        }
        wide.strangers_of(*pid)
    }

    /// Drops thread `tid`'s bare samples, held and to come: the sampler's ticks saw it.
    pub fn ignore_stranger(&mut self, tid: u32) {
        if let Some(wide) = &mut self.wide {
            wide.ignore(tid);
        }
    }

    /// Thread `tid`'s bare samples held, oldest first; none are held after.
    pub(in crate::native) fn take_stranger(&mut self, tid: u32) -> Vec<Held> {
        self.wide
            .as_mut()
            .map_or_else(Vec::new, |wide| wide.take_stranger(tid))
    }

    /// Forgets every thread `owner` watches (its holder is gone), and its process.
    pub(super) fn forget_all_of(&mut self, owner: Owner) {
        if let (Some(wide), Some(pid)) = (&mut self.wide, self.processes.remove(&owner)) {
            wide.unwatch_process(pid);
        }
        let theirs: Vec<u32> = (self.threads.iter())
            .filter(|(_, thread)| thread.owner == owner)
            .map(|(tid, _)| *tid)
            .collect();
        for tid in theirs {
            self.forget(tid);
        }
    }
}

fn lock(sampler: &Mutex<PerfSampler>) -> MutexGuard<'_, PerfSampler> {
    // A holder that panicked left the sampler whole (each call finishes its writes).
    sampler.lock().unwrap_or_else(|e| e.into_inner())
}
