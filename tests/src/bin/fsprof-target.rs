//! A target program with known behaviour: each scenario marks features and times its own marked
//! regions, then writes that ground truth as JSON for the end-to-end tests to compare with fsprof.
//!
//! `fsprof-target SCENARIO SECONDS [--truth FILE] [--ready FILE] [--timeline FILE]`
//!
//! `--ready FILE` is written (with the pid) once the scenario has started marking, so a test can
//! attach without sleeping; `--truth FILE` is written when the scenario ends (and, by
//! `thousand`, `FILE.series`: its truth over time). `--timeline FILE` gets `mixed`'s truth so
//! far over time (see [`Timeline`]).

use fsprof_shim::{intern, Feature};
use fsprof_tests::{spin, thread_runnable_time, Rng, Timeline, Truth};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[path = "target-scenarios/crowds.rs"]
mod crowds;
use crowds::{births, churn, queue, requests, thousand, threads};

static VALIDATION: Feature = Feature::new("validation");
static OUTPUT: Feature = Feature::new("output");
static PARSING: Feature = Feature::new("parsing");
static LEXING: Feature = Feature::new("lexing");
static WAITING: Feature = Feature::new("waiting");
static REQUEST: Feature = Feature::new("request");
static RECURSION: Feature = Feature::new("recursion");
static SERVER: Feature = Feature::new("server");
static STRESS_X: Feature = Feature::new("stress-x");
static STRESS_Y: Feature = Feature::new("stress-y");

struct Args {
    scenario: String,
    secs: f64,
    truth: Option<String>,
    ready: Option<String>,
    timeline: Option<String>,
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let scenario = args
        .next()
        .expect("usage: fsprof-target SCENARIO SECONDS [--truth F] [--ready F] [--timeline F]");
    let secs = args.next().and_then(|s| s.parse().ok()).expect("SECONDS");
    let (mut truth, mut ready, mut timeline) = (None, None, None);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--truth" => truth = args.next(),
            "--ready" => ready = args.next(),
            "--timeline" => timeline = args.next(),
            other => panic!("unknown flag {other}"),
        }
    }
    Args {
        scenario,
        secs,
        truth,
        ready,
        timeline,
    }
}

/// The `--timeline` file (see [`Timeline`]), written by `mixed`.
static TIMELINE: Mutex<Option<Timeline>> = Mutex::new(None);

fn main() {
    let args = parse_args();
    // Allow `fsprof attach` from a sibling process where Yama restricts ptrace to ancestors.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    let truth = Arc::new(Truth::default());
    let run_for = Duration::from_secs_f64(args.secs);
    if let Some(path) = &args.timeline {
        *TIMELINE.lock().unwrap() = Some(Timeline::create(path));
    }
    let ready = || {
        if let Some(path) = &args.ready {
            let tmp = format!("{path}.tmp");
            std::fs::write(&tmp, std::process::id().to_string()).unwrap();
            std::fs::rename(tmp, path).unwrap();
        }
    };
    match args.scenario.as_str() {
        "mixed" => {
            ready();
            mixed(&truth, run_for, 1);
        }
        "threads" => threads(&truth, run_for, ready),
        "pair" => {
            // Two threads of `mixed`, nothing else: every thread's time is in the truth.
            let handles: Vec<_> = [21, 22]
                .map(|seed| {
                    let truth = Arc::clone(&truth);
                    thread::spawn(move || mixed(&truth, run_for, seed))
                })
                .into_iter()
                .collect();
            ready();
            for handle in handles {
                handle.join().unwrap();
            }
        }
        "pool" => pool(&truth, run_for, ready),
        "requests" => requests(&truth, run_for, ready),
        "crowd" => {
            // 300 threads asleep outside marks, and the main thread busy.
            for _ in 0..300 {
                thread::spawn(|| loop {
                    thread::sleep(Duration::from_secs(3600));
                });
            }
            thread::sleep(Duration::from_millis(200)); // let them all fall asleep
            ready();
            mixed(&truth, run_for, 9);
        }
        "thousand" => thousand(&truth, run_for, ready, args.truth.as_deref()),
        "queue" => queue(&truth, run_for, ready),
        "births" => births(&truth, run_for, ready),
        "late" => {
            // Busy without marking for 300 ms, so that the program's own region appears only
            // then (the agent's, when preloaded, exists from the start); then `mixed`.
            ready();
            let start = std::time::Instant::now();
            spin(Duration::from_millis(300));
            truth.active(start.elapsed());
            mixed(&truth, run_for.saturating_sub(start.elapsed()), 1);
        }
        "early" => {
            // Asleep for its first 30 ms (after any first look at its map), then 80 ms in one
            // mark: a region found 100 ms after that look misses all of it. Then `mixed`.
            ready();
            thread::sleep(Duration::from_millis(30));
            let start = std::time::Instant::now();
            timed(&truth, &VALIDATION, "early", || {
                spin(Duration::from_millis(80))
            });
            truth.active(start.elapsed());
            mixed(&truth, run_for.saturating_sub(start.elapsed()), 1);
        }
        "sleepy" => {
            ready();
            sleepy(&truth, run_for);
        }
        "blocking" => {
            ready();
            blocking(&truth, run_for);
        }
        "nested" => {
            ready();
            nested(&truth, run_for);
        }
        "tree" => {
            ready();
            tree(&truth, run_for);
        }
        "antimark" => {
            ready();
            antimark(&truth, run_for);
        }
        "churn" => churn(&truth, run_for, ready),
        "deep" => {
            ready();
            deep(&truth, run_for);
        }
        "stress" => stress(&truth, run_for, ready),
        "exec" => {
            // Marks for half a second, then replaces itself (with the mark still held) by a
            // `mixed` run for the rest of the time: the old mark must not outlive the exec.
            ready();
            let _held = OUTPUT.mark_with("before-exec");
            spin(Duration::from_millis(500));
            let rest = (args.secs - 0.5).max(0.1).to_string();
            let mut command = std::process::Command::new(std::env::current_exe().unwrap());
            command.args(["mixed", &rest]);
            if let Some(truth) = &args.truth {
                command.args(["--truth", truth]);
            }
            let error = std::os::unix::process::CommandExt::exec(&mut command);
            panic!("exec failed: {error}");
        }
        "leader-exit" => {
            // The main thread exits first; a worker goes on marking and writes the truth.
            let truth = Arc::clone(&truth);
            let path = args.truth.clone();
            thread::spawn(move || {
                mixed(&truth, run_for, 7);
                if let Some(path) = path {
                    std::fs::write(&path, truth.to_json().to_string()).unwrap();
                }
                std::process::exit(0);
            });
            ready();
            thread::sleep(Duration::from_millis(100));
            unsafe { libc::syscall(libc::SYS_exit, 0) };
        }
        "exit-now" => {
            let _m = OUTPUT.mark_with("exit-now");
        }
        other => panic!("unknown scenario {other}"),
    }
    if let Some(path) = &args.truth {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, truth.to_json().to_string()).unwrap();
        std::fs::rename(tmp, path).unwrap();
    }
}

/// Runs `work` under a mark of `feature`/`instance` and records its wall time as truth.
fn timed(truth: &Truth, feature: &'static Feature, instance: &'static str, work: impl FnOnce()) {
    let _m = feature.mark_with(instance);
    let start = Instant::now();
    work();
    truth.feature(feature.name(), instance, start.elapsed());
}

/// `timed`, with the caller's location as the instance (as `Feature::mark` records it).
#[track_caller]
fn timed_here(truth: &Truth, feature: &'static Feature, work: impl FnOnce()) {
    let location = Location::caller();
    let _m = feature.mark(); // #[track_caller] passes our caller's location through
    let start = Instant::now();
    work();
    let instance = format!(
        "{}:{}:{}",
        location.file(),
        location.line(),
        location.column()
    );
    truth.feature(feature.name(), &instance, start.elapsed());
}

/// One busy thread: a random mix of marked and unmarked regions of 0.2–3 ms.
fn mixed(truth: &Truth, run_for: Duration, seed: u64) {
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let mut counted = start;
    while start.elapsed() < run_for {
        // Its time so far, for `--timeline`.
        let now = Instant::now();
        truth.active(now - counted);
        counted = now;
        if let Some(timeline) = TIMELINE.lock().unwrap().as_mut() {
            timeline.write(truth);
        }
        match rng.below(5) {
            0 => timed(truth, &VALIDATION, "rule-a", || spin(rng.micros(200, 3000))),
            1 => timed(truth, &VALIDATION, "rule-b", || spin(rng.micros(200, 1500))),
            2 => timed_here(truth, &OUTPUT, || spin(rng.micros(200, 2000))),
            3 => spin(rng.micros(200, 3000)),
            _ => timed(truth, &PARSING, "expr", || spin(rng.micros(200, 1000))),
        }
    }
    truth.active(counted.elapsed());
}

/// One thread alternating 700 µs of work in `hashing`, a 500 µs sleep in `io` and 300 µs of
/// unmarked work: a thread that blocks inside marks, so the sampler and the target share CPUs
/// in a regular rhythm.
fn sleepy(truth: &Truth, run_for: Duration) {
    static HASHING: Feature = Feature::new("hashing");
    static IO: Feature = Feature::new("io");
    let start = Instant::now();
    while start.elapsed() < run_for {
        timed(truth, &HASHING, "digest", || {
            spin(Duration::from_micros(700))
        });
        timed(truth, &IO, "read", || {
            thread::sleep(Duration::from_micros(500))
        });
        spin(Duration::from_micros(300));
    }
    truth.active(start.elapsed());
}

/// A thread that blocks in known places inside its marks: sleeps of 1 and 3 ms (`wait`), and
/// a channel that a helper feeds every 8 ms (`queue`), between stretches of work (`work`) and
/// of work outside marks. Only this thread's time is the truth's total (the helper sleeps, with
/// a raw system call that the agent does not see: its built-in `sleep` is the main thread's).
fn blocking(truth: &Truth, run_for: Duration) {
    static WAIT: Feature = Feature::new("wait");
    static QUEUE: Feature = Feature::new("queue");
    static WORK: Feature = Feature::new("work");
    let (sender, receiver) = std::sync::mpsc::channel::<()>();
    let helper = thread::spawn(move || {
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 8_000_000,
        };
        while sender.send(()).is_ok() {
            // SAFETY: a valid timespec; the remaining time is not asked for.
            unsafe { libc::syscall(libc::SYS_nanosleep, &pause, std::ptr::null_mut::<u8>()) };
        }
    });
    let start = Instant::now();
    while start.elapsed() < run_for {
        timed(truth, &WAIT, "short", || {
            thread::sleep(Duration::from_millis(1))
        });
        spin(Duration::from_micros(200));
        timed(truth, &WAIT, "long", || {
            thread::sleep(Duration::from_millis(2))
        });
        timed(truth, &QUEUE, "recv", || receiver.recv().unwrap());
        timed(truth, &WORK, "spin", || spin(Duration::from_micros(400)));
    }
    truth.active(start.elapsed());
    drop(receiver);
    helper.join().unwrap();
}

/// A main thread that spins, a third of the time inside its own `hashing` mark, beside threads
/// that wait as every real program's do: the Rust Book's thread pool at rest (four workers
/// waiting on a `Mutex<mpsc::Receiver>`), a thread waiting on a `Condvar`, and a helper that
/// sleeps. Only the main thread works; its time is the truth's total.
fn pool(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    static HASHING: Feature = Feature::new("hashing");
    type Job = Box<dyn FnOnce() + Send>;
    let (jobs, receiver) = std::sync::mpsc::channel::<Job>();
    let receiver = Arc::new(Mutex::new(receiver));
    // Each helper adds its own running time and waits for a CPU as it ends: the sleeper's
    // wake-ups, 50 a second, wait for a CPU on a busy machine, which counts (without them the
    // report read `hashing` about a point low beside one busy process, 3 points once).
    // The helpers' time is also given apart (`helpers_ms`): what the built-in features of their
    // waits may count at most, the wake-ups' CPU and waits for one.
    let counted = |truth: &Arc<Truth>| {
        let truth = Arc::clone(truth);
        move || {
            let time = thread_runnable_time();
            truth.active(time);
            time
        }
    };
    let mut handles: Vec<_> = (0..4)
        .map(|_| {
            let receiver = Arc::clone(&receiver);
            let count = counted(truth);
            thread::spawn(move || {
                loop {
                    let job = receiver.lock().unwrap().recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => break,
                    }
                }
                count()
            })
        })
        .collect();
    let signal = Arc::new((Mutex::new(false), Condvar::new()));
    handles.push({
        let signal = Arc::clone(&signal);
        let count = counted(truth);
        thread::spawn(move || {
            let (done, changed) = &*signal;
            let mut done = done.lock().unwrap();
            while !*done {
                done = changed.wait(done).unwrap();
            }
            drop(done);
            count()
        })
    });
    let stop = Arc::new(AtomicBool::new(false));
    handles.push({
        let stop = Arc::clone(&stop);
        let count = counted(truth);
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(20));
            }
            count()
        })
    });
    thread::sleep(Duration::from_millis(50)); // let them all fall asleep
    ready();
    let start = Instant::now();
    while start.elapsed() < run_for {
        timed(truth, &HASHING, "digest", || {
            spin(Duration::from_micros(300))
        });
        spin(Duration::from_micros(600));
    }
    truth.active(start.elapsed());
    drop(jobs);
    *signal.0.lock().unwrap() = true;
    signal.1.notify_all();
    stop.store(true, Ordering::Relaxed);
    let helpers: Duration = handles.into_iter().map(|h| h.join().unwrap()).sum();
    truth.extra("helpers_ms", helpers.as_secs_f64() * 1e3);
}

/// Nested features (parsing around lexing) and a feature nested in itself.
fn nested(truth: &Truth, run_for: Duration) {
    let mut rng = Rng::new(3);
    let start = Instant::now();
    while start.elapsed() < run_for {
        match rng.below(3) {
            0 => {
                // parsing/stmt contains lexing/ident: both count the inner time.
                let (a, b, c) = (
                    rng.micros(100, 1000),
                    rng.micros(100, 1000),
                    rng.micros(100, 1000),
                );
                let _p = PARSING.mark_with("stmt");
                let t = Instant::now();
                spin(a);
                timed(truth, &LEXING, "ident", || spin(b));
                spin(c);
                truth.feature("parsing", "stmt", t.elapsed());
            }
            1 => {
                // parsing/expr contains parsing/atom: the innermost instance gets the inner time.
                let (a, b) = (rng.micros(100, 1500), rng.micros(100, 1500));
                let _p = PARSING.mark_with("expr");
                let t = Instant::now();
                spin(a);
                let outer = t.elapsed();
                timed(truth, &PARSING, "atom", || spin(b));
                truth.feature("parsing", "expr", outer);
            }
            _ => spin(rng.micros(200, 2000)),
        }
    }
    truth.active(start.elapsed());
}

/// A server's nested instances (process accounting): `server` runs connection A about four
/// times as often as connection B, A's requests sometimes parse (a third level), and the server
/// works on its own between them. Each path's self time is the truth of the feature's tree.
fn tree(truth: &Truth, run_for: Duration) {
    let mut rng = Rng::new(5);
    let start = Instant::now();
    let _server = SERVER.mark_with("server");
    while start.elapsed() < run_for {
        let (a, b, c) = (
            rng.micros(100, 900),
            rng.micros(100, 900),
            rng.micros(100, 900),
        );
        match rng.below(10) {
            0..=3 => {
                let _a = SERVER.mark_with("conn-A");
                timed_self(truth, &["server", "conn-A"], a);
                {
                    let _p = SERVER.mark_with("parse");
                    timed_self(truth, &["server", "conn-A", "parse"], b);
                }
                timed_self(truth, &["server", "conn-A"], c);
            }
            4..=7 => {
                let _a = SERVER.mark_with("conn-A");
                timed_self(truth, &["server", "conn-A"], a);
            }
            8 => {
                let _b = SERVER.mark_with("conn-B");
                timed_self(truth, &["server", "conn-B"], a);
            }
            _ => timed_self(truth, &["server"], a),
        }
    }
    truth.active(start.elapsed());
}

/// Spins for `time` and credits the time it took to `path` of the server's tree.
fn timed_self(truth: &Truth, path: &[&str], time: Duration) {
    let t = Instant::now();
    spin(time);
    truth.tree("server", path, t.elapsed());
}

/// Output with a user callback under an antimark; the callback validates.
fn antimark(truth: &Truth, run_for: Duration) {
    let mut rng = Rng::new(4);
    let start = Instant::now();
    while start.elapsed() < run_for {
        if rng.below(3) == 0 {
            spin(rng.micros(200, 2000));
            continue;
        }
        let (a, b, c, d) = (
            rng.micros(100, 1000),
            rng.micros(100, 800),
            rng.micros(100, 800),
            rng.micros(100, 1000),
        );
        let _m = OUTPUT.mark_with("print");
        let t = Instant::now();
        spin(a);
        let before = t.elapsed();
        {
            let _user = OUTPUT.antimark();
            spin(b);
            timed(truth, &VALIDATION, "callback", || spin(c));
        }
        let t = Instant::now();
        spin(d);
        truth.feature("output", "print", before + t.elapsed());
    }
    truth.active(start.elapsed());
}

/// Marks nested 80 deep, past the shim's capacity of 64.
fn deep(truth: &Truth, run_for: Duration) {
    fn descend(levels: usize, work: Duration) {
        if levels == 0 {
            spin(work);
            return;
        }
        let _m = RECURSION.mark_with("descent");
        descend(levels - 1, work);
    }
    let mut rng = Rng::new(6);
    let start = Instant::now();
    while start.elapsed() < run_for {
        if rng.below(2) == 0 {
            spin(rng.micros(200, 2000));
            continue;
        }
        let work = rng.micros(200, 2000);
        timed(truth, &REQUEST, "r1", || {
            let t = Instant::now();
            descend(80, work);
            truth.feature("recursion", "descent", t.elapsed());
        });
    }
    truth.active(start.elapsed());
}

/// Marks changing millions of times a second. Every stack the thread ever has is either empty,
/// `[x:A]`, `[x:A, y:A]` or the same with B: a stack that mixes A and B is impossible, and can only
/// be reported if a read was torn.
fn stress(truth: &Arc<Truth>, run_for: Duration, ready: impl FnOnce()) {
    let worker = |truth: Arc<Truth>, a: &'static str, b: &'static str| {
        move || {
            let a = intern(a);
            let b = intern(b);
            let start = Instant::now();
            let mut pushes = 0u64;
            while start.elapsed() < run_for {
                for _ in 0..1000 {
                    for payload in [a, b] {
                        let _x = STRESS_X.mark_with(payload);
                        let _y = STRESS_Y.mark_with(payload);
                        std::hint::black_box(&_y);
                    }
                }
                pushes += 4000;
            }
            truth.extra(
                "pushes_per_second",
                pushes as f64 / start.elapsed().as_secs_f64(),
            );
            truth.active(start.elapsed());
        }
    };
    let handle = thread::spawn(worker(Arc::clone(truth), "A", "B"));
    ready();
    worker(Arc::clone(truth), "C", "D")();
    handle.join().unwrap();
}
