//! A library boundary with checks on every call, marked with `mark_boundary`, for the boundary
//! view: a `client` builds matrices through a `matrix` library, which checks each element it is
//! given (`positive?`, on the client -> matrix edge) and reads them back through a `vector`
//! library, which checks each index (`index?`, on the matrix -> vector edge); once per matrix the
//! client also checks the result's shape (`square?`). With `--check-once`, the matrix library
//! checks the client's whole input once at the boundary instead of each element on its own (the
//! fix the boundary view suggests): the same guarantee, fewer checks.
//!
//!   contracts SECONDS --truth FILE [--check-once] [--equal-steps]
//!
//! With `--equal-steps`, every piece of work takes its mean exactly: a loop of equal steps of a
//! few µs, which kept in step with the perf backend's sampling grid before that grid moved.
//!
//! The truth: the `contracts` feature's instances (`VALUE (FROM -> TO)`), the time of each check
//! as the checks measured it, and `extra.matrices_per_s`, for the case study's speedup.

use fsprof_shim::Feature;
use fsprof_tests::{spin, Rng, Truth};
use std::cell::RefCell;
use std::time::{Duration, Instant};

static CONTRACTS: Feature = Feature::new("contracts");

/// Elements per matrix.
const ELEMENTS: usize = 64;

thread_local! {
    /// Varies each piece of work around its mean (half to one and a half times it), unless
    /// `--equal-steps` (then `None`).
    static RNG: RefCell<Option<Rng>> = const { RefCell::new(None) };
}

/// Spins for about `mean` (see [`RNG`]).
fn work(mean: Duration) {
    let micros = mean.as_micros() as u64;
    let varied = RNG
        .with(|rng| (rng.borrow_mut().as_mut()).map(|rng| rng.micros(micros / 2, micros * 3 / 2)));
    spin(varied.unwrap_or(mean));
}

/// Runs one check: about `mean` of checking, on the edge `from -> to`, credited to `value`
/// (the truth's name of the instance, `value (from -> to)`, put together when compiling: made
/// at every check, its formatting was about 2% of the program's time, a feature the truth does
/// not time).
macro_rules! check {
    ($truth:expr, $value:literal, $from:literal, $to:literal, $mean:expr $(,)?) => {
        check(
            $truth,
            [$value, $from, $to],
            concat!($value, " (", $from, " -> ", $to, ")"),
            $mean,
        )
    };
}

fn check(truth: &Truth, [value, from, to]: [&'static str; 3], name: &str, mean: Duration) {
    let took = {
        let _m = CONTRACTS.mark_boundary(value, from, to);
        let start = Instant::now();
        work(mean);
        start.elapsed()
    };
    truth.feature("contracts", name, took);
}

/// The matrix library: takes the client's elements (checked), stores them through the vector
/// library (each index checked), and does its own work.
fn build_matrix(truth: &Truth, elements: &[u64], check_once: bool) -> u64 {
    if check_once {
        check!(
            truth,
            "positive?",
            "client",
            "matrix",
            Duration::from_micros(12),
        );
    }
    let mut sum = 0;
    for (index, element) in elements.iter().enumerate() {
        if !check_once {
            check!(
                truth,
                "positive?",
                "client",
                "matrix",
                Duration::from_micros(8),
            );
        }
        check!(
            truth,
            "index?",
            "matrix",
            "vector",
            Duration::from_micros(3),
        );
        work(Duration::from_micros(6)); // the library's own work per element
        sum += element * index as u64;
    }
    sum
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args[2] != "--truth" {
        eprintln!("usage: contracts SECONDS --truth FILE [--check-once] [--equal-steps]");
        std::process::exit(2);
    }
    let run_for = Duration::from_secs_f64(args[1].parse().expect("SECONDS"));
    let check_once = args[4..].iter().any(|a| a == "--check-once");
    if !args[4..].iter().any(|a| a == "--equal-steps") {
        RNG.with(|rng| *rng.borrow_mut() = Some(Rng::new(13)));
    }
    let truth = Truth::default();
    let elements: Vec<u64> = (1..=ELEMENTS as u64).collect();
    let start = Instant::now();
    let mut matrices = 0u64;
    let mut total = 0u64;
    while start.elapsed() < run_for {
        total = total.wrapping_add(build_matrix(&truth, &elements, check_once));
        check!(
            &truth,
            "square?",
            "client",
            "matrix",
            Duration::from_micros(20),
        );
        work(Duration::from_micros(100)); // the client's own work per matrix
        matrices += 1;
    }
    let elapsed = start.elapsed();
    truth.active(elapsed);
    truth.extra("matrices_per_s", matrices as f64 / elapsed.as_secs_f64());
    truth.extra("checksum", (total % 1000) as f64);
    std::fs::write(&args[3], truth.to_json().to_string()).unwrap();
}
