//! published: marks with fsprof's shim built with its `fleet` feature, one step at a time, for
//! a test that reads what it publishes from outside (tests/tests/fleet.rs).
//!
//! It prints `thread NAME TID THREAD_POINTER` for its main thread and a worker (marked
//! `worker`/`compact` throughout), then, for each step, `step FEATURE<TAB>INSTANCE` (or `step
//! -<TAB>-` where nothing counts) with what its main thread is marked with, as fsprof names it,
//! and waits for a line on its standard input before the next. It exits at the end of its
//! input.
//!
//! `published cycle SECONDS`: prints `thread main TID THREAD_POINTER`, then marks without
//! pause for SECONDS: six features `f0`..`f5` with instances `i0`..`i5` in turn, every other one
//! with the next nested in it (more marks than a thread keeps written), for a test that stops
//! it at random instants.
//!
//! `published spin SECONDS`: its main thread busy, three quarters of the time under
//! `parsing`/`GET /a`; at the end it prints `truth PARSING_MS TOTAL_MS`, its CPU time inside
//! the mark and in all.

use fsprof_shim::{intern, Feature};
use std::io::BufRead;
use std::panic::Location;

static PARSING: Feature = Feature::new("parsing");
static OUTPUT: Feature = Feature::new("output");
static RULE: Feature = Feature::new("rule");
static CHECKS: Feature = Feature::new("checks");
static WORKER: Feature = Feature::new("worker");
static CYCLED: [Feature; 6] = [
    Feature::new("f0"),
    Feature::new("f1"),
    Feature::new("f2"),
    Feature::new("f3"),
    Feature::new("f4"),
    Feature::new("f5"),
];
const INSTANCES: [&str; 6] = ["i0", "i1", "i2", "i3", "i4", "i5"];

fn cycle(seconds: f64) {
    println!("thread main {} {:#x}", gettid(), thread_pointer());
    let start = std::time::Instant::now();
    let mut x = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for k in 0..6 {
            let _m = CYCLED[k].mark_with(INSTANCES[k]);
            if k % 2 == 0 {
                let next = (k + 1) % 6;
                let _n = CYCLED[next].mark_with(INSTANCES[next]);
                x = std::hint::black_box(x.wrapping_add(k as u64));
            }
            x = std::hint::black_box(x.wrapping_mul(31));
        }
    }
}

/// The calling thread's thread pointer (its `fs` base on x86-64).
fn thread_pointer() -> u64 {
    let pointer: u64;
    // SAFETY: reads the thread control block's self pointer.
    unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) pointer) };
    pointer
}

fn gettid() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// Says what is marked now and waits for the test to read it.
fn step(feature: &str, instance: &str) {
    println!("step {feature}\t{instance}");
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).unwrap_or(0) == 0 {
        std::process::exit(0);
    }
}

/// An `output` mark at the caller's location, and that location as fsprof names it.
#[track_caller]
fn output_here() -> (fsprof_shim::Mark, String) {
    let at = Location::caller();
    (OUTPUT.mark(), format!("{}:{}:{}", at.file(), at.line(), at.column()))
}

extern "C" {
    fn clock_gettime(clock: i32, time: *mut [i64; 2]) -> i32;
}

/// The calling thread's CPU time, in milliseconds.
fn cpu_ms() -> f64 {
    let mut time = [0i64; 2];
    // SAFETY: fills a timespec (two longs on Linux x86-64).
    unsafe { clock_gettime(3 /* CLOCK_THREAD_CPUTIME_ID */, &mut time) };
    time[0] as f64 * 1e3 + time[1] as f64 / 1e6
}

fn busy(milliseconds: u64) {
    let start = std::time::Instant::now();
    let mut x = 1u64;
    while start.elapsed() < std::time::Duration::from_millis(milliseconds) {
        for i in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
}

fn spin(seconds: f64) {
    let start = std::time::Instant::now();
    let first = cpu_ms();
    let mut inside = 0.0;
    while start.elapsed().as_secs_f64() < seconds {
        let before = cpu_ms();
        PARSING.scope_with("GET /a", || busy(3));
        inside += cpu_ms() - before;
        busy(1);
    }
    println!("truth {inside:.1} {:.1}", cpu_ms() - first);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("spin") {
        return spin(args[2].parse().expect("spin SECONDS"));
    }
    if args.get(1).map(String::as_str) == Some("cycle") {
        return cycle(args[2].parse().expect("cycle SECONDS"));
    }
    let (sender, receiver) = std::sync::mpsc::channel();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let _m = WORKER.mark_with("compact");
        sender.send((gettid(), thread_pointer())).unwrap();
        let _ = stopped.recv();
    });
    let (tid, pointer) = receiver.recv().unwrap();
    println!("thread main {} {:#x}", gettid(), thread_pointer());
    println!("thread worker {tid} {pointer:#x}");

    step("-", "-");
    PARSING.scope_with("GET /a", || {
        step("parsing", "GET /a");
        {
            let _a = PARSING.antimark();
            step("-", "-");
            {
                let (_m, location) = output_here();
                step("output", &location);
            }
            step("-", "-");
        }
        step("parsing", "GET /a");
        {
            let _m = RULE.mark_alternative("item", 2, 7);
            step("rule", "item, branch 2");
        }
        let long = intern(&format!("{}é and more after it", "a".repeat(52)));
        {
            let _m = PARSING.mark_with(long);
            step("parsing", long);
        }
        {
            let _m = CHECKS.mark_boundary("positive?", "client", "matrix");
            step("checks", "positive? (client -> matrix)");
        }
    });
    step("-", "-");
    drop(stop);
    worker.join().unwrap();
}
