//! labelled: a Rust program with no fsprof shim that labels its work with the `custom-labels`
//! crate (the custom-labels ABI v1, as parca-agent reads it): `request=GET /a` with
//! `tenant=acme`, `request=GET /b`, and unlabelled work, each timed by the program.
//!
//!   labelled SECONDS --truth FILE
//!
//! The truth, as `tests/c/labels.c` writes it: total_ms, and per label key its time and per
//! value its time.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Busy for `time`; returns how long it took.
fn busy(time: Duration) -> Duration {
    let start = Instant::now();
    let mut x = 1u64;
    while start.elapsed() < time {
        for i in 0..1000 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
    }
    black_box(x);
    start.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 || args[2] != "--truth" {
        eprintln!("usage: labelled SECONDS --truth FILE");
        std::process::exit(2);
    }
    let seconds: f64 = args[1].parse().expect("SECONDS");
    let (mut a, mut b, mut none) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        a += custom_labels::with_labels([("request", "GET /a"), ("tenant", "acme")], || {
            busy(Duration::from_millis(3))
        });
        b += custom_labels::with_label("request", "GET /b", || busy(Duration::from_millis(1)));
        none += busy(Duration::from_millis(1));
    }
    let total = start.elapsed();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let truth = serde_json::json!({
        "total_ms": ms(total),
        "features": {
            "request": {"ms": ms(a + b), "instances": {"GET /a": ms(a), "GET /b": ms(b)}},
            "tenant": {"ms": ms(a), "instances": {"acme": ms(a)}},
        },
        "extra": {"unlabelled_ms": ms(none)},
    });
    std::fs::write(&args[3], truth.to_string()).expect("truth");
}
