//! Finding the target's regions, on a thread of its own, so that the sampling thread never waits
//! for the target.
//!
//! Finding a region means reading the target's memory map (`/proc/PID/maps`) and the region's
//! header (`process_vm_readv`). Both wait for the target's memory-map lock, which the kernel holds
//! for writing through a whole `fork` (the copy of the address space: a millisecond or more for
//! a large program), an `mmap` or a `munmap`. When the sampling thread scanned, that wait delayed
//! its tick: the marks were read after the `fork` had returned, and the time of the `fork` went
//! to whatever the program did next (a 36.9% `fork` was reported as 28.8%, its `waitpid` 47.9% as
//! 56.7%). Here the sampler takes what the scanner found, without waiting.
//!
//! The schedule: every fiftieth of the time since the start (so a region that appears is found
//! before its marks are 2% of the recording old), but no more often than every 2 ms, at most
//! every 200 ms while none was found and every second afterwards; and at once when the sampler asks
//! (a region it read has gone, after an exec say). Finding one is no reason to look less: a
//! program creates its region on its first mark, often after the preloaded agent has made its
//! own. A process whose program announces its regions (`announce.rs`: its environment names
//! this recording's socket, as `fsprof run` sets it) is looked at when it announces one, and
//! otherwise, in case a datagram was lost, every twentieth of its age (between
//! `ANNOUNCED_INTERVAL` and `ANNOUNCED_LONGEST`), reading its whole map only when its
//! address space changed size or every `ANNOUNCED_FULL_SCAN`; and
//! its thread starts only when the process announces a region (or has lived
//! `UNANNOUNCED_LIFE`, or runs a program that may not announce), since most processes of a
//! build never mark.
//!
//! Not here: reading the regions' marks (`region.rs`), what the marks mean (`sampler.rs`).

use crate::program::process;
use crate::program::region::{RegionError, RegionReader};
use crate::record::announce::{Registry, Wake};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The background scanner of one target.
pub struct Scanner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Not started yet: the process announces its regions (see [`Scanner::start`]).
    waiting: Option<Waiting>,
}

/// A scanner that starts its thread only when it has something to look for.
struct Waiting {
    pid: u32,
    /// The environment entry that names the recording's socket.
    entry: String,
    since: Instant,
}

/// What the scanner found since the sampler last took it.
#[derive(Default)]
pub struct Found {
    /// Regions opened, for the sampler to read from now on.
    pub regions: Vec<RegionReader>,
    /// The addresses mapped at the latest scan, if one completed since: regions elsewhere are
    /// gone.
    pub mapped: Option<Vec<u64>>,
    /// Notes for the report (regions this fsprof cannot read).
    pub notes: Vec<String>,
    /// A live thread of the target through which its memory can be read, as of the latest scan.
    pub via: Option<u32>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    found: Found,
    /// Addresses of the regions the sampler reads: not to be opened again.
    held: Vec<u64>,
    /// Scans completed.
    scans: u64,
    /// The sampler asked for a scan as soon as possible.
    asked: bool,
    stop: bool,
}

impl Scanner {
    /// Starts scanning process `pid`; woken by its announcements to `registry`, if any.
    ///
    /// A process whose environment names the recording's socket announces the regions its
    /// program creates (the registry keeps those sent before this registers), so its thread
    /// starts only when it announces one, when its program changes to one that may not
    /// (an `exec` with another environment), or once it has lived `UNANNOUNCED_LIFE` (a
    /// datagram lost to a full socket): most of a build's processes never mark and live less,
    /// and a thread, its first look at the map and its looks every `ANNOUNCED_INTERVAL`
    /// cost about 0.4 ms of CPU a process (79 of them over 3 builds of 12 files). Otherwise
    /// it looks at once.
    pub fn start(pid: u32, registry: Option<&Registry>) -> Scanner {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        // Registered before the first scan: a region created before is found by it (or, for a
        // scanner that waits, was announced and kept by the registry), one after is announced.
        let announced = registry.map(|registry| {
            let waker: Arc<dyn Wake> = shared.clone();
            let (name, value) = registry.variable();
            let entry = format!("{name}={value}");
            registry.register(pid, Arc::downgrade(&waker));
            entry
        });
        let mut scanner = Scanner {
            shared,
            thread: None,
            waiting: None,
        };
        match announced {
            Some(entry) if crate::program::scanned::environment_holds(pid, &entry) => {
                scanner.waiting = Some(Waiting {
                    pid,
                    entry,
                    since: Instant::now(),
                });
            }
            entry => scanner.thread = spawn(pid, &scanner.shared, entry),
        }
        scanner
    }

    /// Starts the thread of a scanner that waited, when its process announced a region, asked
    /// for a look or has lived long enough (see [`Scanner::start`]); whether it did.
    fn start_if_due(&mut self) -> bool {
        let Some(waiting) = &self.waiting else {
            return false;
        };
        if self.shared.lock().asked || waiting.since.elapsed() >= UNANNOUNCED_LIFE {
            let waiting = self.waiting.take().expect("checked above");
            self.thread = spawn(waiting.pid, &self.shared, Some(waiting.entry));
            return true;
        }
        false
    }

    /// Takes what was found since the previous call, and records which regions the sampler now
    /// reads (`held`: their addresses). A scanner whose thread starts now (its process
    /// announced its first region, or lived `UNANNOUNCED_LIFE`) is waited for, up to
    /// `FIRST_ANNOUNCED_WAIT`: found only at
    /// the next tick, the region's marks were unknown for one more (two slow ticks after the
    /// program's first mark, 20 to 50 ms, which `growth`'s first instance lost).
    pub fn take(&mut self, held: impl Iterator<Item = u64>) -> Found {
        if self.start_if_due() {
            self.wait_for_first_scan(FIRST_ANNOUNCED_WAIT);
        }
        let mut state = self.shared.lock();
        state.held.clear();
        state.held.extend(held);
        std::mem::take(&mut state.found)
    }

    /// Asks for a scan as soon as possible, telling which regions the sampler still reads (a
    /// region it dropped, after an exec say, may be mapped again at the same address). A
    /// scanner that waits for announcements goes on waiting while the process's environment
    /// (its program's, after an exec) still names the socket: it found nothing so far, and
    /// the program announces what it makes.
    pub fn ask(&mut self, held: impl Iterator<Item = u64>) {
        if (self.waiting.as_ref())
            .is_some_and(|w| crate::program::scanned::environment_holds(w.pid, &w.entry))
        {
            return;
        }
        self.shared.lock().asked = true;
        self.start_if_due();
        let mut state = self.shared.lock();
        state.held.clear();
        state.held.extend(held);
        state.asked = true;
        drop(state);
        self.shared.wake.notify_all();
    }

    /// Waits until a scan has completed since the start, for at most `limit`: the first tick
    /// should see the regions that exist already (when attaching, or a region announced before
    /// the scanner registered). A scanner that waits for announcements has nothing to wait for.
    pub fn wait_for_first_scan(&mut self, limit: Duration) {
        self.start_if_due();
        let deadline = Instant::now() + limit;
        let mut state = self.shared.lock();
        while state.scans == 0 && self.thread.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = self
                .shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The scanner's thread for `pid` (`entry`: the environment entry of an announcing process).
fn spawn(pid: u32, shared: &Arc<Shared>, entry: Option<String>) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("fsprof-scanner".to_owned())
        .spawn({
            let shared = Arc::clone(shared);
            move || {
                // At the sampler's priority: on a machine the target loads, a normally
                // scheduled scanner found the program's region late, and the marks of the
                // threads' waits until then were unknown (`queue`, 40 busy threads on two
                // CPUs: each thread's first 2 to 40 waits for a CPU, most of its first
                // second, read outside the mark it was in). Its scans are rare and short.
                // Raised before the privileges that allow it go.
                let _ = crate::os::priority::raise();
                crate::os::privilege::drop_all(); // this thread reads /proc only
                scan_until_stopped(pid, &shared, entry.as_deref())
            }
        })
        .ok()
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for Shared {
    fn wake(&self) {
        self.lock().asked = true;
        self.wake.notify_all();
    }
}

/// Scans `pid` until stopped. `entry` is the environment entry (`NAME=value`) of a process
/// whose regions are announced to this recording.
fn scan_until_stopped(pid: u32, shared: &Shared, entry: Option<&str>) {
    let started = Instant::now();
    let mut next = started;
    let mut tasks = process::TaskList::new(pid);
    let mut files = crate::program::scanned::ScannedFiles::new(pid);
    // Whether the program the process runs announces its regions, read from its environment
    // when its map was opened the `environment_read`th time (once per program it runs).
    let (mut announces, mut environment_read) = (false, 0);
    // The address space's size at the latest full scan, and when that was.
    let mut scanned: Option<(u64, Instant)> = None;
    let size = process::AddressSpaceSize::new(pid);
    let mut again = false;
    loop {
        let held = {
            let mut state = shared.lock();
            loop {
                if state.stop {
                    return;
                }
                let now = Instant::now();
                if state.asked || now >= next {
                    break;
                }
                state = shared
                    .wake
                    .wait_timeout(state, next - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            let asked = std::mem::take(&mut state.asked);
            let full_scan = match announces {
                true => ANNOUNCED_FULL_SCAN,
                false => FULL_SCAN,
            };
            if !asked && !again && unchanged(&size, &mut scanned, full_scan) {
                let now = Instant::now();
                next = now + interval(now.duration_since(started), announces, FULL_SCAN);
                continue;
            }
            let mut held = state.held.clone();
            held.extend(state.found.regions.iter().map(RegionReader::address));
            held
        };
        let found;
        (found, again) = scan(pid, &mut tasks, &mut files, &held);
        if let Some(entry) = entry.filter(|_| files.maps_opened() != environment_read) {
            environment_read = files.maps_opened();
            announces = files.environment_holds(entry);
        }
        let now = Instant::now();
        let mut state = shared.lock();
        let any = !held.is_empty() || !found.regions.is_empty();
        if let Some(mapped) = found.mapped {
            state.found.mapped = Some(mapped);
            state.found.via = found.via;
        }
        state.found.regions.extend(found.regions);
        for note in found.notes {
            if !state.found.notes.contains(&note) {
                state.found.notes.push(note);
            }
        }
        state.scans += 1;
        drop(state);
        shared.wake.notify_all();
        let longest = if any {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(200)
        };
        // A region mapped but not yet written (its first mark is under way): look again soon.
        next = now
            + if again {
                Duration::from_millis(1)
            } else {
                interval(now.duration_since(started), announces, longest)
            };
    }
}

/// The time to the next look at a process scanned for `age`: a fiftieth of its age, between
/// [`MIN_INTERVAL`] and `longest`; if it `announces` its regions, a twentieth, between
/// [`ANNOUNCED_INTERVAL`] and [`ANNOUNCED_LONGEST`].
fn interval(age: Duration, announces: bool, longest: Duration) -> Duration {
    match announces {
        true => (age / 20).clamp(ANNOUNCED_INTERVAL, ANNOUNCED_LONGEST),
        false => (age / 50).clamp(MIN_INTERVAL, longest.max(MIN_INTERVAL)),
    }
}

/// Whether `pid`'s address space has kept the size it had at the latest full scan (`scanned`),
/// which was less than `full_scan` ago: no region can have been mapped since, unless another
/// mapping of the same size went at the same time (the next full scan finds it). Otherwise
/// records the size for the full scan about to be made. A scan of a young process comes every
/// millisecond, and reading its whole map each time cost a `make -j2` of short compiles, each
/// process recorded, an eighth of the machine's time.
fn unchanged(
    size: &process::AddressSpaceSize,
    scanned: &mut Option<(u64, Instant)>,
    full_scan: Duration,
) -> bool {
    let Some(size) = size.read() else {
        return false;
    };
    let now = Instant::now();
    if let Some((was, at)) = *scanned {
        if was == size && now.duration_since(at) < full_scan {
            return true;
        }
    }
    *scanned = Some((size, now));
    false
}

/// The shortest time between two scans (but for a region mapped and not yet written). Every
/// millisecond, the scanners of a build's young processes (compilers whose address space grows
/// at every look, so that each look reads the whole map) took 6% of the machine under `make
/// -j2` (BENCHMARKS.md, issue 39, twenty-seventh session).
const MIN_INTERVAL: Duration = Duration::from_millis(2);
/// The shortest time between two looks at a process that announces its regions (unless it
/// announces one): a lost datagram delays a region's marks by this much at most, early on.
/// Every 2 ms, such looks at a build's young processes were most of what `fsprof run` cost a
/// `make -j2` (BENCHMARKS.md, issue 39, twenty-ninth session).
const ANNOUNCED_INTERVAL: Duration = Duration::from_millis(100);
/// The longest time between two looks at a process that announces its regions. Its looks are
/// for a region whose datagram was lost (the socket's queue full): one is found when the
/// process is at most a twentieth older. A look every 100 ms at the processes of a build
/// that sleep while their children work (make, sh, the gcc driver: a full scan each, their
/// maps' size kept) was a fifth of fsprof's CPU while it followed twenty sleeping processes.
const ANNOUNCED_LONGEST: Duration = Duration::from_secs(1);
/// The longest time between two full scans of a process that announces its regions and whose
/// address space kept its size (a region mapped changes it).
const ANNOUNCED_FULL_SCAN: Duration = Duration::from_secs(2);
/// How long a process that announces its regions and has announced none is left without a
/// scanner's thread (see [`Scanner::start`]): a region whose datagram was lost is found by then.
const UNANNOUNCED_LIFE: Duration = Duration::from_millis(250);
/// How long the sampler waits for the first scan of a scanner whose thread it started: a scan
/// takes about a millisecond (the map and a region's header read).
const FIRST_ANNOUNCED_WAIT: Duration = Duration::from_millis(10);
/// The longest time between two full scans of a process whose address space kept its size.
const FULL_SCAN: Duration = Duration::from_millis(100);

/// One scan: the regions mapped in `pid` that are not in `held`, opened. Also says whether to
/// look again soon.
fn scan(
    pid: u32,
    tasks: &mut process::TaskList,
    files: &mut crate::program::scanned::ScannedFiles,
    held: &[u64],
) -> (Found, bool) {
    let mut found = Found::default();
    if tasks.read().is_err() {
        return (found, false);
    }
    let tids = tasks.tids();
    let via = files.memory_thread(tids);
    let Ok(addresses) = files.region_addresses(tids) else {
        return (found, false);
    };
    let mut again = false;
    for &address in &addresses {
        if held.contains(&address) {
            continue;
        }
        match RegionReader::open(pid, via, address) {
            Ok(reader) => found.regions.push(reader),
            Err(RegionError::Incompatible(header)) if header.magic == 0 => again = true,
            Err(RegionError::Incompatible(header)) => found.notes.push(incompatible(&header)),
            Err(RegionError::Read(_)) => {}
        }
    }
    found.mapped = Some(addresses);
    found.via = Some(via);
    (found, again)
}

/// The note for a region this fsprof cannot read.
fn incompatible(header: &fsprof_shim::abi::HeaderView) -> String {
    let ours = fsprof_shim::abi::VERSION;
    let what = if header.magic != fsprof_shim::abi::MAGIC {
        "a mapping named like an fsprof region that is not one".to_owned()
    } else if header.version != ours {
        format!(
            "an fsprof region of ABI version {} (this fsprof reads version {ours})",
            header.version
        )
    } else {
        format!("an fsprof region of ABI version {ours} with another layout (a different fsprof revision)")
    };
    format!(
        "the program has {what}, which this fsprof cannot read: build the program and fsprof from the same fsprof release"
    )
}
