//! Ground truth for the end-to-end tests: target programs time their own marked regions with
//! [`Truth`] and write the result as JSON, which the tests compare with what fsprof reports.
//!
//! A target accounts time the way fsprof's default view does: a busy thread's whole working time
//! counts (`Truth::active`), a feature's time is the wall time inside its marks, minus the time
//! spent under one of its antimarks; a thread blocked outside marks counts nothing.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Accumulated true costs, shared by a target's threads.
pub struct Truth {
    inner: Mutex<Inner>,
}

impl Default for Truth {
    /// Also marks where the time the hypervisor takes from the CPUs is counted from
    /// ([`steal_share`]).
    fn default() -> Self {
        STEAL_FROM.get_or_init(cpu_times);
        Truth {
            inner: Mutex::default(),
        }
    }
}

#[derive(Default)]
struct Inner {
    total: Duration,
    features: BTreeMap<String, (Duration, BTreeMap<String, Duration>)>,
    extra: BTreeMap<String, f64>,
    /// Per feature, per path of nested instances (joined with " > "): self time.
    trees: BTreeMap<String, BTreeMap<String, Duration>>,
}

impl Truth {
    /// Adds `time` to the total counted time (a thread's busy or in-mark time).
    pub fn active(&self, time: Duration) {
        self.inner.lock().unwrap().total += time;
    }

    /// Adds `time` to `feature` and its `instance`.
    pub fn feature(&self, feature: &str, instance: &str, time: Duration) {
        let mut inner = self.inner.lock().unwrap();
        let entry = inner.features.entry(feature.to_owned()).or_default();
        entry.0 += time;
        *entry.1.entry(instance.to_owned()).or_default() += time;
    }

    /// Adds `time` to the self time of the path `path` (outermost instance first) of
    /// `feature`'s tree of nested instances, and to the innermost instance, which the feature
    /// analysis credits.
    pub fn tree(&self, feature: &str, path: &[&str], time: Duration) {
        self.feature(feature, path.last().unwrap(), time);
        let mut inner = self.inner.lock().unwrap();
        let tree = inner.trees.entry(feature.to_owned()).or_default();
        *tree.entry(path.join(" > ")).or_default() += time;
    }

    /// Records an extra figure (e.g. marks per second).
    pub fn extra(&self, key: &str, value: f64) {
        self.inner
            .lock()
            .unwrap()
            .extra
            .insert(key.to_owned(), value);
    }

    /// The truth as JSON: `{"total_ms", "stolen_ms", "features": {name: {"ms", "instances":
    /// {payload: ms}}}, "extra", "trees": {name: {"outer > inner": self ms}}}`. `stolen_ms` is
    /// the most the total may lack of the time stolen from its threads (the total times
    /// [`steal_share`]): the true total is between `total_ms` and `total_ms + stolen_ms`.
    pub fn to_json(&self) -> serde_json::Value {
        let inner = self.inner.lock().unwrap();
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        let features: serde_json::Map<String, serde_json::Value> = inner
            .features
            .iter()
            .map(|(name, (total, instances))| {
                let instances: serde_json::Map<String, serde_json::Value> = instances
                    .iter()
                    .map(|(k, v)| (k.clone(), ms(v).into()))
                    .collect();
                (
                    name.clone(),
                    serde_json::json!({"ms": ms(total), "instances": instances}),
                )
            })
            .collect();
        let trees: serde_json::Map<String, serde_json::Value> = inner
            .trees
            .iter()
            .map(|(name, paths)| {
                let paths: serde_json::Map<String, serde_json::Value> = paths
                    .iter()
                    .map(|(path, time)| (path.clone(), ms(time).into()))
                    .collect();
                (name.clone(), paths.into())
            })
            .collect();
        let stolen_ms = ms(&inner.total) * steal_share();
        serde_json::json!({"total_ms": ms(&inner.total), "stolen_ms": stolen_ms,
                           "features": features, "extra": inner.extra, "trees": trees})
    }
}

/// A file of a run's truth over time: the truth so far every [`Timeline::EVERY`], one JSON line
/// each (`{"unix_ns", "truth"}`), so that a test that records part of the run compares it with
/// that part's truth (a 2 s window of `fsprof-target mixed` differs from its 6 s run by the
/// program's own random choices: 0.87 points of `validation`, standard deviation, against a
/// bound of 2.5). Written by the program's own thread between its regions, so the time it takes
/// is outside marks in the truth and in the report alike (a thread of its own for it had 1.4%
/// of the program's time in fsprof's report, none in the truth).
pub struct Timeline {
    file: std::fs::File,
    written: Option<Instant>,
}

impl Timeline {
    /// How often [`Timeline::write`] writes.
    pub const EVERY: Duration = Duration::from_millis(20);

    /// Creates the file at `path`.
    pub fn create(path: &str) -> Timeline {
        Timeline {
            file: std::fs::File::create(path).unwrap(),
            written: None,
        }
    }

    /// Appends `truth` as it stands, unless the previous line is less than [`Timeline::EVERY`]
    /// old.
    pub fn write(&mut self, truth: &Truth) {
        use std::io::Write;
        if self
            .written
            .is_some_and(|at| at.elapsed() < Timeline::EVERY)
        {
            return;
        }
        self.written = Some(Instant::now());
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let line = serde_json::json!({"unix_ns": unix_ns, "truth": truth.to_json()});
        writeln!(self.file, "{line}").unwrap();
    }
}

/// The calling thread's time running or waiting for a CPU since it started, which is what
/// fsprof counts of a thread outside marks: its CPU time (`CLOCK_THREAD_CPUTIME_ID`, up to
/// date, where `/proc/thread-self/schedstat`'s first number is brought up to date only at the
/// scheduler's tick) and its waits for a CPU (schedstat's second number, complete while the
/// thread runs); zero where unreadable.
///
/// Time the hypervisor took from the thread's CPU while it ran (steal) is on neither clock;
/// see [`steal_share`].
pub fn thread_runnable_time() -> Duration {
    thread_cpu_time() + thread_wait_time()
}

/// How much time the hypervisor took from the machine's CPUs (`/proc/stat`'s steal) per unit of
/// time they ran (user, nice, system, irq and softirq) since the program made its [`Truth`];
/// zero where unknown. Stolen while a thread ran, it is in the program's wall-clock times and
/// in fsprof's (the thread was on its CPU as far as the system knows) but on no thread clock:
/// a total made of threads' runnable times misses some of it, which one cannot tell per thread
/// (on a busy host `echo`'s workers' runnable times read 6 to 12% below fsprof's while their
/// marks' times agreed; adding the share to every thread's CPU time then overshot by about
/// half). The truth says how much it may be ([`Truth::to_json`]'s `stolen_ms`).
pub fn steal_share() -> f64 {
    let (Some(Some(from)), Some(now)) = (STEAL_FROM.get(), cpu_times()) else {
        return 0.0;
    };
    let (steal, ran) = (now.0.saturating_sub(from.0), now.1.saturating_sub(from.1));
    match ran {
        0 => 0.0,
        ran => steal as f64 / ran as f64,
    }
}

/// Where [`steal_share`] counts from.
static STEAL_FROM: OnceLock<Option<(u64, u64)>> = OnceLock::new();

/// The machine's stolen and running CPU time so far, in its ticks (`/proc/stat`'s first line:
/// steal; user, nice, system, irq and softirq).
pub fn cpu_times() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = (text.lines().next()?.split_whitespace().skip(1))
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some((at(7), at(0) + at(1) + at(2) + at(5) + at(6)))
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`); zero if unreadable.
pub fn thread_cpu_time() -> Duration {
    let mut cpu = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec the call fills.
    match unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut cpu) } {
        0 => Duration::new(cpu.tv_sec as u64, cpu.tv_nsec as u32),
        _ => Duration::ZERO,
    }
}

/// The calling thread's time waiting for a CPU since it started (`/proc/thread-self/schedstat`:
/// its second number); zero if unreadable.
pub fn thread_wait_time() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = (text.split_whitespace().nth(1)).and_then(|n| n.parse::<u64>().ok());
    Duration::from_nanos(ns.unwrap_or(0))
}

/// A tokio runtime with two workers and its sockets, each worker adding its runnable time to
/// `truth`'s total as it stops (when the runtime is dropped).
pub fn runtime_counted_in(truth: &std::sync::Arc<Truth>) -> tokio::runtime::Runtime {
    let on_stop = std::sync::Arc::clone(truth);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .on_thread_stop(move || {
            let time = thread_runnable_time();
            on_stop.active(time);
            // Each thread's part, for a failure to say which one a total's surprise came from
            // (once 15 s over 3 threads of a 5 s run, where fsprof saw the main thread idle).
            // SAFETY: gettid has no arguments and cannot fail.
            let tid = unsafe { libc::gettid() };
            on_stop.extra(&format!("thread_{tid}_ms"), time.as_secs_f64() * 1e3);
        })
        .build()
        .unwrap()
}

/// Keeps the CPU busy for `time`.
pub fn spin(time: Duration) {
    let end = Instant::now() + time;
    let mut x = 1u64;
    while Instant::now() < end {
        for _ in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// A small deterministic random number generator (xorshift), so targets need no dependency.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A duration uniformly between `lo` and `hi` microseconds.
    pub fn micros(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_micros(lo + self.next_u64() % (hi - lo + 1))
    }

    /// An index below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
