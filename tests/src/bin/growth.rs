//! A program whose two instances grow differently with its input size N, for `fsprof diff` (the
//! Chez seed's use: the same program at size x and 2x): `work` instance `linear` takes N steps
//! of `--step-us` (default 5000 µs / 60), `quadratic` N² steps of a 60th of that, so at N = 60
//! both take about as long, and at 2N the first takes twice as long, the second four times.
//!
//!   growth N --truth FILE
//!
//! The truth: each instance's time as measured around its steps, and the total.

use fsprof_shim::Feature;
use fsprof_tests::{spin, Truth};
use std::time::{Duration, Instant};

static WORK: Feature = Feature::new("work");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args[2] != "--truth" {
        eprintln!("usage: growth N --truth FILE");
        std::process::exit(2);
    }
    let n: u32 = args[1].parse().expect("N");
    let step = Duration::from_micros(5000 / 60);
    let truth = Truth::default();
    let start = Instant::now();
    let timed = |instance: &'static str, steps: u32, each: Duration| {
        let begun = Instant::now();
        for _ in 0..steps {
            let _m = WORK.mark_with(instance);
            spin(each);
        }
        truth.feature("work", instance, begun.elapsed());
    };
    timed("linear", n, step * 60);
    timed("quadratic", n * n, step);
    truth.active(start.elapsed());
    std::fs::write(&args[3], truth.to_json().to_string()).unwrap();
}
