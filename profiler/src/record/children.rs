//! Following a program's children (`fsprof run`, unless `--no-follow`; `fsprof attach
//! --children`): the program's descendants are looked for in `/proc` (each thread's `children`
//! file) at each fork of a process followed where the per-CPU design's fork program wakes the
//! recording (`native/cpu_wide/forks.rs`; every few milliseconds for a while after one), else
//! every few milliseconds; each one found is recorded by a sampler of its own, on a
//! thread of its own, until it exits or recording stops; then, once the recording as a whole
//! has ended, the profiles are finished (their native frames named, which costs more CPU than
//! recording a short process: done earlier, it took that CPU from the program's other
//! processes) and merged into the program's (`profile/merge.rs`).
//!
//! A thread per process keeps each sampler as it is for one process (a thread kept from a
//! process followed earlier where one is idle: `os/threads.rs`): its ptrace stops are its
//! thread's own (ptrace ties a tracee to the thread that attached, and the tracers wait with
//! `__WNOTHREAD`), its clock and its priority too. Where the program is sampled with per-CPU
//! perf events, every follower samples through them (`Sampling::options.shared_perf`,
//! `native/perf/shared.rs`) rather than opening events of its own. Children that live only between two looks
//! (a few milliseconds) are missed, as is the part of a child's life before it is found (a look
//! is skipped while no process has been created on the machine since the last); a
//! child whose parent exited before it was found is not found (it is no longer a descendant).
//! Not here: what a sampler records (`sampler.rs`), or the report per process (`analysis`).

use crate::native::perf::Perf;
use crate::profile::{self, Meta, Process, Profile};
use crate::program::process;
use crate::record::sampler::{Recorded, Sampler, SamplerOptions};
use crate::record::schedule::{self, End, Schedule};
use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the tree is looked at for new processes, at most.
const SCAN_INTERVAL: Duration = Duration::from_millis(5);
/// Most processes followed in one recording (each costs a thread and its sampler).
pub const MAX_FOLLOWED: usize = 256;

/// The processes followed besides the program.
pub struct Tree {
    root: u32,
    /// Every process followed or found (the program's id included): never followed twice.
    known: HashSet<u32>,
    /// Children found not dumpable though they run as the user, and since when (see
    /// `privilege::Refusal::Unsettled`): looked at again until `privilege::MOST_UNSETTLED` has passed.
    unsettled: HashMap<u32, Instant>,
    /// Processes whose children are looked for (those found, while they live).
    parents: Vec<process::ChildList>,
    followers: Vec<Follower>,
    stop: Arc<AtomicBool>,
    next_scan: Instant,
    sampling: Sampling,
    /// Processes found but not followed (over [`MAX_FOLLOWED`]).
    not_followed: usize,
    /// Processes found that this fsprof's user may not trace.
    refused: usize,
    /// The kernel has no `children` files: nothing can be followed.
    unsupported: bool,
    /// The newest process id at the latest scan: while it stays the same, no process was
    /// created, and a scan would find nothing new.
    newest_pid: Option<u32>,
    /// A child was found in the middle of an exec: the next scan looks again.
    again: bool,
}

/// What each follower samples with.
#[derive(Clone)]
pub struct Sampling {
    /// The sampler's options.
    pub options: SamplerOptions,
    /// Mean samples per second.
    pub rate_hz: f64,
    /// File descriptors each follower's sampler may keep open.
    pub descriptors: usize,
    /// The metadata every follower's profile starts from (mode, rate, view).
    pub meta: Meta,
}

struct Follower {
    pid: u32,
    parent: u32,
    handle: crate::os::threads::Handle<Followed>,
}

/// What a follower recorded of its process.
struct Followed {
    /// Its latest command line that its recording covers.
    command: Vec<String>,
    recorded: Recorded,
    /// Recording stopped when it ran a program this fsprof's user may not trace.
    refused: bool,
}

impl Tree {
    /// Follows the descendants of process `root` from now on (those it has already included).
    pub fn new(root: u32, sampling: Sampling) -> Tree {
        Tree {
            root,
            known: HashSet::from([root]),
            unsettled: HashMap::new(),
            parents: vec![process::ChildList::new(root)],
            followers: Vec::new(),
            stop: Arc::default(),
            next_scan: Instant::now(),
            sampling,
            not_followed: 0,
            refused: 0,
            unsupported: false,
            newest_pid: None,
            again: false,
        }
    }

    /// Looks for new processes if it is time (called after each of the program's ticks, and
    /// every few milliseconds between them: `schedule::Schedule::asks_between_ticks`).
    pub fn poll(&mut self) {
        let now = Instant::now();
        if now < self.next_scan || self.unsupported {
            return;
        }
        self.next_scan = now + SCAN_INTERVAL;
        // A program that makes no processes is not listed 200 times a second for nothing (a
        // scan read every thread's `children` file: a fifth of fsprof's CPU at 1 kHz beside a
        // two-thread program that never forks).
        let newest = crate::os::machine::newest_pid();
        if newest.is_some() && newest == self.newest_pid && !self.again {
            return;
        }
        (self.newest_pid, self.again) = (newest, false);
        let mut index = 0;
        while index < self.parents.len() {
            let parent = self.parents[index].pid();
            let Some(children) = self.parents[index].read() else {
                self.unsupported = true;
                return;
            };
            if children.is_empty() && parent != self.root && !process::proc_dir(parent).exists() {
                self.parents.swap_remove(index);
                continue;
            }
            for child in children {
                if self.known.insert(child) {
                    self.follow(child, parent);
                }
            }
            index += 1;
        }
    }

    fn follow(&mut self, pid: u32, parent: u32) {
        if self.followers.len() >= MAX_FOLLOWED {
            self.not_followed += 1;
            return;
        }
        // A capable fsprof records only what its user may trace (a set-user-id child, say, it
        // may not): see `os/privilege.rs`. Its command line is read first, so that it is one of
        // a program that passed (one run since is checked by the follower's sampler).
        let command = process::command_line(pid);
        match crate::os::privilege::may_trace(pid) {
            Ok(()) => {}
            Err(crate::os::privilege::Refusal::Unsettled(_))
                if *self.unsettled.entry(pid).or_insert_with(Instant::now)
                    + crate::os::privilege::MOST_UNSETTLED
                    > Instant::now() =>
            {
                // In the middle of an exec: found again at the next scan.
                self.known.remove(&pid);
                self.again = true;
                return;
            }
            Err(_) => {
                self.refused += 1;
                return;
            }
        }
        self.parents.push(process::ChildList::new(pid));
        let sampling = self.sampling.clone();
        let stop = Arc::clone(&self.stop);
        // The program's per-CPU sampler is joined here, before the thread starts: until its
        // sampler watches the process, the program's recording knows of one not watched, and
        // keeps looking for new processes (`schedule::BUSY_AFTER_FORK`). A sampler of its own
        // (per thread: its events opened, its programs loaded) is made by its thread.
        let joined = (sampling.options.shared_perf)
            .is_some()
            .then(|| sampling.options.perf_sampler());
        let spawned = crate::os::threads::spawn(&format!("fsprof {pid}"), move || {
            let perf = joined.unwrap_or_else(|| sampling.options.perf_sampler());
            record(pid, command, sampling, perf, &stop)
        });
        match spawned {
            Ok(handle) => self.followers.push(Follower {
                pid,
                parent,
                handle,
            }),
            Err(_) => self.not_followed += 1,
        }
    }

    /// Tells every follower to stop recording (they detach and finish their profiles).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// The program's profile `root` merged with the followers' (unchanged when no child was
    /// recorded); `command` is the program's command line.
    pub fn finish(self, root: Profile, command: Vec<String>) -> Profile {
        self.stop();
        let mut recorded = Vec::new();
        let (mut lost, mut refused_at_exec) = (0, 0);
        for follower in self.followers {
            match follower.handle.join() {
                Ok(followed) => {
                    refused_at_exec += usize::from(followed.refused);
                    let process = Process {
                        pid: follower.pid,
                        parent: Some(follower.parent),
                        command: followed.command,
                    };
                    recorded.push((process, followed.recorded));
                }
                Err(_) => lost += 1,
            }
        }
        let (children, failed) = finish_all(recorded);
        lost += failed;
        let mut notes = Vec::new();
        if self.unsupported {
            notes.push("the program's children were not followed: this kernel has no /proc/PID/task/TID/children files (CONFIG_PROC_CHILDREN)".to_owned());
        }
        if self.not_followed > 0 {
            notes.push(format!(
                "{} child processes were not recorded (at most {MAX_FOLLOWED} are followed)",
                self.not_followed
            ));
        }
        if self.refused > 0 {
            notes.push(format!(
                "{} child processes were not recorded: this fsprof's user may not trace them (set-user-id programs, say)",
                self.refused
            ));
        }
        if refused_at_exec > 0 {
            notes.push(format!(
                "{refused_at_exec} child processes were recorded only until this fsprof's user may not trace them any more (they ran a set-user-id program, say); what they did before that stays"
            ));
        }
        if lost > 0 {
            notes.push(format!(
                "the recordings of {lost} child processes failed and are left out"
            ));
        }
        let mut merged = if children.is_empty() {
            root
        } else {
            let program = Process {
                pid: self.root,
                parent: None,
                command,
            };
            profile::merge(root, program, children)
        };
        merged.meta.notes.extend(notes);
        merged
    }
}

/// A follower's thread: records process `pid` (whose command line was `command`) with `perf`
/// (see `Tree::follow`) until it exits, `stop` is set or it runs a program this fsprof's user
/// may not trace.
fn record(
    pid: u32,
    mut command: Vec<String>,
    sampling: Sampling,
    perf: Option<Result<Perf, String>>,
    stop: &AtomicBool,
) -> Followed {
    let mut sampler = Sampler::new(pid, sampling.descriptors, sampling.options, perf);
    let schedule = Schedule {
        rate_hz: sampling.rate_hz,
        duration: None,
        suspend: Arc::default(),
        // New processes are looked for by the program's recording (`Tree::poll`).
        asks_between_ticks: false,
    };
    // The command line is read again at each new program image the sampler meets (an exec),
    // once this fsprof's user may trace it; whether the process lives, every 50 ms (a zombie
    // lists its threads). Reading both every 50 ms was 4% of the followers' CPU over a build.
    let mut next_check = Instant::now() + Duration::from_millis(50);
    let liveness = process::Liveness::new(pid);
    let mut image_read = None;
    let end = schedule::record(&mut sampler, schedule, &mut (), |sampler| {
        if stop.load(Ordering::Relaxed) {
            return Some(End::Interrupted);
        }
        let image = sampler.image();
        if image.is_some() && image != image_read {
            image_read = image;
            let now = process::command_line(pid);
            if !now.is_empty() && crate::os::privilege::may_trace(pid).is_ok() {
                command = now;
            }
        }
        if Instant::now() >= next_check {
            next_check = Instant::now() + Duration::from_millis(50);
            if !liveness.alive() {
                return Some(End::TargetExited("the process exited".to_owned()));
            }
        }
        None
    });
    let meta = Meta {
        command: command.clone(),
        pid,
        end: end.describe(),
        ..sampling.meta
    };
    Followed {
        command,
        recorded: sampler.end(meta),
        refused: matches!(end, End::Refused(_)),
    }
}

/// Finishes the followers' recordings on as many threads as there are CPUs (the program has
/// ended), in the order given; also returns how many failed (a panic: that process is left out).
fn finish_all(recorded: Vec<(Process, Recorded)>) -> (Vec<(Process, Profile)>, usize) {
    let workers = crate::os::machine::cpus().min(recorded.len());
    let total = recorded.len();
    let queue = Mutex::new(recorded.into_iter().enumerate());
    let done: Mutex<Vec<Option<(Process, Profile)>>> =
        Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((index, (process, recorded))) = next else {
                    return;
                };
                let finished = std::panic::catch_unwind(AssertUnwindSafe(|| recorded.finish()));
                if let Ok(profile) = finished {
                    done.lock().unwrap_or_else(|e| e.into_inner())[index] =
                        Some((process, profile));
                }
            });
        }
    });
    let children: Vec<_> = done
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect();
    let failed = total - children.len();
    (children, failed)
}
