//! A program nobody marked (no fsprof-shim, no agent needed), spending its time in the Rust
//! ecosystem's own features: `format!`, compiling regexes with `Regex::new`, matching them,
//! `serde_json::to_string`, and a `sort_by` whose comparator is costly. It times each of them
//! itself, the comparator apart from the sort that calls it, for the built-in rules' tests.
//!
//!   unmarked SECONDS --truth FILE
//!
//! The truth: per feature (`formatting`, `regex-compile`, `regex-match`, `serialization`,
//! `sorting`: the sorts' time less their comparator's), the time measured around its calls,
//! with one instance, this file's line of the call; `comparator` apart; and the whole time.

use fsprof_tests::{spin, thread_wait_time, Rng, Truth};
use regex::Regex;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args[2] != "--truth" {
        eprintln!("usage: unmarked SECONDS --truth FILE");
        std::process::exit(2);
    }
    let run_for = Duration::from_secs_f64(args[1].parse().expect("SECONDS"));
    let truth = Truth::default();
    let text = haystack();
    let document = document();
    let mut rng = Rng::new(7);
    let (mut formatting, mut compile, mut matching) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut serializing, mut sorting, mut comparing) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    let mut round = 0u64;
    while start.elapsed() < run_for {
        round += 1;
        // Formatting: numbers and a debug print into a new string (dropped after the timing:
        // freeing is not formatting).
        let mut made = Vec::with_capacity(1600);
        let t = Instant::now();
        for i in 0..1600 {
            let x = i as f64 * 1.618 + round as f64;
            made.push(format!(
                "{x:>14.5} {:?} {:#x} {}",
                [i, i + 1, i + 2],
                i * 7919,
                round
            ));
        }
        formatting += t.elapsed();
        black_box(&made);
        drop(made);
        // Compiling a regex (a new pattern each time: no cache).
        let pattern = format!(
            r"(\w+)@(\w+)\.(com|org|net{})\s+[0-9]{{2,{}}}",
            round % 5,
            3 + round % 4
        );
        let t = Instant::now();
        let re = Regex::new(&pattern);
        compile += t.elapsed();
        let re = re.expect("pattern");
        // Matching it against a long text.
        let t = Instant::now();
        let found = re.find_iter(&text).count();
        matching += t.elapsed();
        black_box(found);
        // Serializing a document (the strings dropped after the timing).
        let t = Instant::now();
        let json: Vec<String> = (0..5)
            .map(|_| serde_json::to_string(&document).expect("json"))
            .collect();
        serializing += t.elapsed();
        black_box(&json);
        drop(json);
        // Sorting with a costly comparator: its cost per call measured apart, then the sort's
        // time less that of the calls it made.
        // The same closure is timed alone and given to the sort.
        // A call's cost is the median of ten batches' (a batch the thread was preempted in reads
        // long); the sort's waits for a CPU (the kernel's count) are shared between the calls and
        // the sort's own work by their time, as a preemption falls anywhere in it (a profiler
        // draws each wait where the thread was preempted). Without that, all of them went to
        // `sorting`: beside two busy processes it read 16% against the report's 5%.
        let items: Vec<u64> = (0..5000).map(|_| rng.next_u64() % 100_000).collect();
        let calls = std::cell::Cell::new(0u32);
        let mut compare = |a: &u64, b: &u64| {
            calls.set(calls.get() + 1);
            costly_compare(a, b)
        };
        let mut batches: Vec<Duration> = (0..10)
            .map(|batch| {
                let t = Instant::now();
                for i in 100 * batch..100 * (batch + 1) {
                    black_box(compare(&items[i], &items[4999 - i]));
                }
                t.elapsed() / 100
            })
            .collect();
        batches.sort_unstable();
        let per_call = batches[batches.len() / 2];
        calls.set(0);
        let mut sorted = items.clone();
        let waited = thread_wait_time();
        let t = Instant::now();
        sorted.sort_by(&mut compare);
        let whole = t.elapsed();
        let waited = thread_wait_time().saturating_sub(waited).min(whole);
        let ran = whole - waited;
        let inside = (per_call * calls.get()).min(ran);
        let inside_share = inside.as_secs_f64() / ran.as_secs_f64().max(1e-9);
        let inside = inside + waited.mul_f64(inside_share);
        sorting += whole.saturating_sub(inside);
        comparing += inside;
        black_box(&sorted);
        // The program's own work, no feature.
        spin(Duration::from_micros(300));
    }
    let line = |what: &str| format!("{what} (tests/src/bin/unmarked.rs)");
    truth.feature("formatting", &line("format!"), formatting);
    truth.feature("regex-compile", &line("Regex::new"), compile);
    truth.feature("regex-match", &line("find_iter"), matching);
    truth.feature("serialization", &line("serde_json::to_string"), serializing);
    truth.feature("sorting", &line("sort_by"), sorting);
    truth.extra("comparator_ms", comparing.as_secs_f64() * 1000.0);
    truth.extra("rounds", round as f64);
    truth.active(start.elapsed());
    std::fs::write(&args[3], truth.to_json().to_string()).expect("truth");
}

/// A comparison that costs about as much as a real one with a computed key: the program's own
/// code, called back by the sort.
#[inline(never)]
fn costly_compare(a: &u64, b: &u64) -> std::cmp::Ordering {
    let key = |x: u64| {
        let mut h = x;
        for _ in 0..12 {
            h = h
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                ^ (h >> 29);
        }
        h
    };
    key(*a).cmp(&key(*b))
}

/// Text with addresses and numbers to find.
fn haystack() -> String {
    let mut text = String::new();
    for i in 0..4000 {
        text.push_str(&format!(
            "user{i}@host{}.com {} lorem ipsum dolor sit amet ",
            i % 13,
            i * 37
        ));
    }
    text
}

/// A JSON document of a few thousand values.
fn document() -> serde_json::Value {
    let items: Vec<serde_json::Value> = (0..400)
        .map(|i| {
            serde_json::json!({
                "id": i,
                "name": format!("item number {i}"),
                "price": i as f64 * 0.37,
                "tags": ["a", "b", "c"],
                "nested": {"x": i * 2, "y": "text with \"quotes\" and \\ escapes"},
            })
        })
        .collect();
    serde_json::json!({ "items": items })
}
