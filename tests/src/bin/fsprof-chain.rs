//! A native-stack target: two threads, each running a known chain of `#[inline(never)]` functions
//! whose innermost one marks a feature and then spins inline (no call while marked), so that a
//! sample inside a mark has a known native stack with the mark right below its innermost frame.
//! Built like every release binary of the workspace: without frame pointers, so unwinding needs
//! DWARF CFI.
//!
//! `fsprof-chain SECONDS [--truth FILE] [--ready FILE]`
//!
//! * thread "alpha" (the main thread): `main` → `alpha_outer` → `alpha_middle` → `alpha_inner`,
//!   marking feature `alpha`, instance `alpha_inner`;
//! * thread "beta" (spawned): the thread's closure → `beta_outer` → `beta_inner`, marking feature
//!   `beta`, instance `beta_inner`.
//!
//! `--ready FILE` is written (with the pid) as both threads start marking; `--truth FILE` when both end:
//! the usual truth (`fsprof_tests::Truth`: time inside each mark, each thread's busy time) plus
//! `"chains"`, one per thread: its name and tid, its feature and instance, and `frames`, the
//! chain's functions as a symbolizer names them (demangled, no hash), outermost first, the last
//! one holding the mark. The chains do not list the frames above them (`std`'s thread start,
//! libc), which a test should not pin. No other function is called while a mark is held; the
//! functions outside the marks read the clock between calls.

use fsprof_shim::Feature;
use fsprof_tests::Truth;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

static ALPHA: Feature = Feature::new("alpha");
static BETA: Feature = Feature::new("beta");

/// CPU work inline in the caller: a multiply-add chain the optimizer cannot remove or shorten.
macro_rules! spin_inline {
    ($iterations:expr) => {{
        let mut x = 1u64;
        for _ in 0..$iterations {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        x
    }};
}

/// Iterations of `spin_inline!` per inner call: about 10 ms each, so samples rarely fall outside.
const INNER_MS: f64 = 10.0;

#[inline(never)]
fn alpha_inner(iterations: u64) -> u64 {
    let _m = ALPHA.mark_with("alpha_inner");
    spin_inline!(iterations)
}

#[inline(never)]
fn alpha_middle(iterations: u64, truth: &Truth) -> u64 {
    let start = Instant::now();
    let x = alpha_inner(iterations);
    truth.feature("alpha", "alpha_inner", start.elapsed());
    x
}

#[inline(never)]
fn alpha_outer(run_for: Duration, iterations: u64, truth: &Truth) -> u64 {
    let start = Instant::now();
    let mut sink = 0u64;
    while start.elapsed() < run_for {
        sink = sink.wrapping_add(alpha_middle(iterations, truth));
    }
    truth.active(start.elapsed());
    sink
}

#[inline(never)]
fn beta_inner(iterations: u64) -> u64 {
    let _m = BETA.mark_with("beta_inner");
    spin_inline!(iterations)
}

#[inline(never)]
fn beta_outer(run_for: Duration, iterations: u64, truth: &Truth) -> u64 {
    let start = Instant::now();
    let mut sink = 0u64;
    while start.elapsed() < run_for {
        let t = Instant::now();
        sink = sink.wrapping_add(beta_inner(iterations));
        truth.feature("beta", "beta_inner", t.elapsed());
    }
    truth.active(start.elapsed());
    sink
}

fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

fn write_atomically(path: &str, text: &str) {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

#[inline(never)]
fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .expect("usage: fsprof-chain SECONDS [--truth F] [--ready F]");
    let (mut truth_path, mut ready_path) = (None, None);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--truth" => truth_path = args.next(),
            "--ready" => ready_path = args.next(),
            other => panic!("unknown flag {other}"),
        }
    }
    // Allow `fsprof attach` from a sibling process where Yama restricts ptrace to ancestors.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };

    // Calibrate the inline loop, unmarked, before the run.
    let calibrate = Instant::now();
    std::hint::black_box(spin_inline!(1_000_000u64));
    let per_million_ms = calibrate.elapsed().as_secs_f64() * 1e3;
    let iterations = (1e6 * INNER_MS / per_million_ms.max(0.01)) as u64;

    let run_for = Duration::from_secs_f64(secs);
    let truth = Arc::new(Truth::default());
    let started = Arc::new(Barrier::new(2));
    let beta = {
        let (truth, started) = (Arc::clone(&truth), Arc::clone(&started));
        std::thread::Builder::new()
            .name("beta".into())
            .spawn(move || {
                let tid = tid();
                started.wait();
                beta_outer(run_for, iterations, &truth);
                tid
            })
            .unwrap()
    };
    started.wait();
    if let Some(path) = &ready_path {
        write_atomically(path, &std::process::id().to_string());
    }
    std::hint::black_box(alpha_outer(run_for, iterations, &truth));
    let beta_tid = beta.join().unwrap();

    if let Some(path) = &truth_path {
        let mut json = truth.to_json();
        json["chains"] = serde_json::json!([
            {
                "thread": "alpha",
                "tid": tid(),
                "feature": "alpha",
                "instance": "alpha_inner",
                "frames": [
                    "fsprof_chain::main",
                    "fsprof_chain::alpha_outer",
                    "fsprof_chain::alpha_middle",
                    "fsprof_chain::alpha_inner",
                ],
            },
            {
                "thread": "beta",
                "tid": beta_tid,
                "feature": "beta",
                "instance": "beta_inner",
                "frames": ["fsprof_chain::beta_outer", "fsprof_chain::beta_inner"],
            },
        ]);
        write_atomically(path, &json.to_string());
    }
}
