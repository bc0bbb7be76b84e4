//! What `fsprof_tracing::layer()` adds to a `tracing` span, side by side with the same span under
//! the bare `tracing_subscriber` registry: a span made, entered and exited (each loop), and an
//! existing span entered and exited (what an instrumented future's poll does). Interleaved
//! rounds, ns per iteration, median (minimum) over the rounds.
//!
//!   cargo bench -p fsprof-tests --bench tracing_layer

use std::hint::black_box;
use std::time::Instant;
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

fn made_entered_exited(n: u64) {
    for i in 0..n {
        black_box(i);
        let _s = tracing::info_span!("x").entered();
    }
}

fn entered_exited(n: u64) {
    let span = tracing::info_span!("poll");
    for i in 0..n {
        black_box(i);
        let _e = span.enter();
    }
}

fn time(dispatch: &Dispatch, run: fn(u64), n: u64) -> f64 {
    tracing::dispatcher::with_default(dispatch, || {
        let start = Instant::now();
        run(black_box(n));
        start.elapsed().as_secs_f64() * 1e9 / n as f64
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// A measured case: its name and the loop it times.
type Case = (&'static str, fn(u64));

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, n) = if full { (15, 2_000_000) } else { (1, 2_000) };
    let bare = Dispatch::new(tracing_subscriber::registry());
    let layered = Dispatch::new(tracing_subscriber::registry().with(fsprof_tracing::layer()));
    let cases: [Case; 2] = [
        ("span made, entered, exited", made_entered_exited),
        ("existing span entered, exited", entered_exited),
    ];
    let mut samples = vec![[Vec::new(), Vec::new()]; cases.len()];
    for _ in 0..rounds {
        for (case, (_, run)) in cases.iter().enumerate() {
            samples[case][0].push(time(&bare, *run, n));
            samples[case][1].push(time(&layered, *run, n));
        }
    }
    assert_eq!(fsprof_shim::depth(), 0, "a mark leaked");
    println!("tracing_layer: {rounds} interleaved round(s) of {n} iterations; ns per iteration, median (min)");
    println!(
        "{:32} {:>16} {:>16} {:>10}",
        "case", "registry", "+ fsprof layer", "added"
    );
    for ((name, _), [bare, layered]) in cases.iter().zip(samples) {
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let (b, l) = (median(bare.clone()), median(layered.clone()));
        println!(
            "{name:32} {b:>8.1} ({:>5.1}) {l:>8.1} ({:>5.1}) {:>+10.1}",
            min(&bare),
            min(&layered),
            l - b
        );
    }
}
