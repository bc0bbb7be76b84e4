//! labelled: a Rust program with no fsprof shim that labels its work with the `custom-labels`
//! crate (the custom-labels ABI v1, as parca-agent reads it): `request=GET /a` with
//! `tenant=acme`, `request=GET /b`, and unlabelled work, each timed by the program by its work
//! (CPU time and waits for a CPU).
//!
//!   labelled SECONDS --truth FILE
//!
//! The truth, as `tests/c/labels.c` writes it: total_ms, and per label key its time and per
//! value its time.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// The calling thread's CPU time plus its waits for a CPU (`/proc/thread-self/schedstat`'s
/// second number): its work as fsprof's shares count it, without time a hypervisor took from
/// its CPU (see `tests/c/clock.h`'s `cpu_and_wait_ms`).
fn work() -> Duration {
    let mut cpu = std::mem::MaybeUninit::<[i64; 2]>::zeroed();
    // SAFETY: clock_gettime fills a timespec (two longs on Linux x86-64 and aarch64).
    unsafe { clock_gettime(3 /* CLOCK_THREAD_CPUTIME_ID */, cpu.as_mut_ptr()) };
    // SAFETY: zeroed, then filled or left zero.
    let [secs, nanos] = unsafe { cpu.assume_init() };
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let waiting = (text.split_whitespace().nth(1)).and_then(|n| n.parse().ok());
    Duration::new(secs as u64, nanos as u32) + Duration::from_nanos(waiting.unwrap_or(0))
}

extern "C" {
    fn clock_gettime(clock: i32, time: *mut [i64; 2]) -> i32;
}

/// Busy for `time`; returns the work it took ([`work`]).
fn busy(time: Duration) -> Duration {
    let (start, before) = (Instant::now(), work());
    let mut x = 1u64;
    while start.elapsed() < time {
        for i in 0..1000 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
    }
    black_box(x);
    work().saturating_sub(before)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 || args[2] != "--truth" {
        eprintln!("usage: labelled SECONDS --truth FILE");
        std::process::exit(2);
    }
    let seconds: f64 = args[1].parse().expect("SECONDS");
    let (mut a, mut b, mut none) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (start, before) = (Instant::now(), work());
    while start.elapsed().as_secs_f64() < seconds {
        a += custom_labels::with_labels([("request", "GET /a"), ("tenant", "acme")], || {
            busy(Duration::from_millis(3))
        });
        b += custom_labels::with_label("request", "GET /b", || busy(Duration::from_millis(1)));
        none += busy(Duration::from_millis(1));
    }
    let total = work().saturating_sub(before);
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
