//! A program nobody marked (no fsprof-shim, no agent needed), spending its time in the Rust
//! ecosystem's own features: `format!`, compiling regexes with `Regex::new`, matching them,
//! `serde_json::to_string`, a `sort_by` whose comparator is costly, and, in functions of their
//! own, a map growing (`grow`), panics caught (`panic_some`), UTF-8 validation (`validate`) and
//! tokio's scheduler running many small tasks (`run_tasks`).
//! It times each of them itself, the comparator apart from the sort that calls it, for the
//! built-in rules' tests.
//!
//!   unmarked SECONDS --truth FILE
//!
//! The truth: per feature (`formatting`, `regex-compile`, `regex-match`, `serialization`,
//! `sorting`: the sorts' time less their comparator's; `collection-growth`, `panics`,
//! `utf8-validation`; `async-runtime`: `block_on`'s time less the tasks' own), the time
//! measured around its calls, with one instance, this file's line of the call (the last four:
//! the function that makes them, as other features grow collections inside themselves);
//! `comparator` apart; and the whole time.

use fsprof_tests::{spin, thread_wait_time, Rng, Truth};
use regex::Regex;
use std::collections::HashMap;
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
    let (mut growing, mut panicking, mut validating) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    // A caught panic prints nothing.
    std::panic::set_hook(Box::new(|_| {}));
    let bytes = utf8_text();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut scheduling = Duration::ZERO;
    let start = Instant::now();
    let mut round = 0u64;
    // The records to sort, and a copy sorted in place each round (allocated once: a new one
    // each round would be mapped and faulted in).
    let mut items = vec![[0u64; RECORD_WORDS]; RECORDS];
    let mut sorted = items.clone();
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
        // Sorting records with a costly comparator, and the same records again with a cheap
        // one that makes the same decisions (each record carries its costly key, computed
        // before): the same comparisons and moves, so the cheap sort's running time is the
        // sort's own work, and the costly sort's running time less it is its comparator's.
        // (A comparator's cost timed apart, in a loop of calls, read 5 to 10% cheaper than in
        // the sort on one machine; on an Intel host a standalone copy of this sort read it 21
        // to 32% dearer in the loop, where the sort overlaps calls with its own work, and
        // `sorting` read 2 to 4.6 points above the report.) Both sorts call their comparator
        // through the same `dyn FnMut`: the cheap one's few nanoseconds a call are the
        // program's code to a profiler and the sort's to this truth (sorting read 1.0 to 1.2
        // points above the report in 4 runs after the change). Each sort's waits
        // for a CPU (the kernel's count) are shared between the calls and the sort's own work
        // by their time, as a preemption falls anywhere in it (a profiler draws each wait where
        // the thread was preempted); without that, all of them went to `sorting`: beside two
        // busy processes it read 16% against the report's 5%.
        for record in items.iter_mut() {
            record[0] = rng.next_u64() % 100_000;
            record[1] = costly_key(record[0]);
        }
        let mut sort = |compare: &mut dyn FnMut(&Record, &Record) -> std::cmp::Ordering| {
            sorted.copy_from_slice(&items);
            let waited = thread_wait_time();
            let t = Instant::now();
            sorted.sort_by(compare);
            let whole = t.elapsed();
            black_box(&sorted);
            let waited = thread_wait_time().saturating_sub(waited).min(whole);
            (whole, waited)
        };
        let (costly_whole, costly_waited) = sort(&mut costly_compare);
        let (cheap_whole, cheap_waited) = sort(&mut |a: &Record, b: &Record| a[1].cmp(&b[1]));
        let ran = costly_whole - costly_waited;
        let inside = ran.saturating_sub(cheap_whole - cheap_waited);
        let inside_share = inside.as_secs_f64() / ran.as_secs_f64().max(1e-9);
        let inside = inside + costly_waited.mul_f64(inside_share);
        sorting += costly_whole.saturating_sub(inside) + cheap_whole;
        comparing += inside;
        growing += grow();
        panicking += panic_some(60);
        validating += validate(&bytes);
        scheduling += run_tasks(&runtime, 1000);
        // The program's own work, no feature.
        spin(Duration::from_micros(300));
    }
    let line = |what: &str| format!("{what} (tests/src/bin/unmarked.rs)");
    truth.feature("formatting", &line("format!"), formatting);
    truth.feature("regex-compile", &line("Regex::new"), compile);
    truth.feature("regex-match", &line("find_iter"), matching);
    truth.feature("serialization", &line("serde_json::to_string"), serializing);
    truth.feature("sorting", &line("sort_by"), sorting);
    truth.feature("collection-growth", "unmarked::grow", growing);
    truth.feature("panics", "unmarked::fail", panicking);
    truth.feature("utf8-validation", "unmarked::validate", validating);
    truth.feature("async-runtime", "unmarked::run_tasks", scheduling);
    truth.extra("comparator_ms", comparing.as_secs_f64() * 1000.0);
    truth.extra("rounds", round as f64);
    truth.active(start.elapsed());
    std::fs::write(&args[3], truth.to_json().to_string()).expect("truth");
}

/// A HashMap grown to 16 Ki entries, its table doubled each time it is full (filled first,
/// untimed): the time of its `reserve` calls, each a rehash of every entry.
#[inline(never)]
fn grow() -> Duration {
    let mut map: HashMap<u64, u64> = HashMap::with_capacity(1024);
    let mut taken = Duration::ZERO;
    let mut key = 0u64;
    while map.capacity() < 16 * 1024 {
        while map.len() < map.capacity() {
            key += 1;
            map.insert(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), key);
        }
        let t = Instant::now();
        map.reserve(map.len());
        taken += t.elapsed();
    }
    black_box(&map);
    taken
}

/// `n` panics (in `fail`, their instance), each caught: the time of the `catch_unwind` calls
/// (the payloads dropped after).
#[inline(never)]
fn panic_some(n: u32) -> Duration {
    let mut taken = Duration::ZERO;
    let mut caught = Vec::with_capacity(n as usize);
    for i in 0..n {
        let t = Instant::now();
        let result = std::panic::catch_unwind(|| fail(black_box(i)));
        taken += t.elapsed();
        caught.push(result);
    }
    black_box(&caught);
    taken
}

/// Panics unless `i` is huge.
#[inline(never)]
fn fail(i: u32) -> u32 {
    if i < u32::MAX - 1 {
        panic!("failed at {i}");
    }
    i
}

/// Checks that `bytes` are UTF-8: the time of the `from_utf8` call.
#[inline(never)]
fn validate(bytes: &[u8]) -> Duration {
    let t = Instant::now();
    let valid = std::str::from_utf8(black_box(bytes)).map_or(0, str::len);
    let taken = t.elapsed();
    black_box(valid);
    taken
}

/// `n` small tasks spawned on a current-thread runtime and awaited: `block_on`'s time less
/// the tasks' own (each times itself): the runtime's spawning, scheduling, polling and joining.
#[inline(never)]
fn run_tasks(runtime: &tokio::runtime::Runtime, n: u64) -> Duration {
    let t = Instant::now();
    let inside = runtime.block_on(async move {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                tokio::spawn(async move {
                    let t = Instant::now();
                    spin(Duration::from_micros(1));
                    black_box(i);
                    t.elapsed()
                })
            })
            .collect();
        let mut inside = Duration::ZERO;
        for handle in handles {
            inside += handle.await.expect("task");
        }
        inside
    });
    t.elapsed().saturating_sub(inside)
}

/// 256 KiB of text, mostly multi-byte characters (validated byte by byte, not by the ASCII
/// fast path).
fn utf8_text() -> Vec<u8> {
    let mut text = String::new();
    while text.len() < 256 * 1024 {
        text.push_str("héllo wörld ñandú ümlaut — ελληνικά 日本語 ");
    }
    text.into_bytes()
}

/// A record to sort: its key and a payload that makes moving it cost about as much as the
/// sort's other work per comparison.
type Record = [u64; RECORD_WORDS];
const RECORD_WORDS: usize = 128;
const RECORDS: usize = 600;

/// A comparison that costs about as much as a real one with a computed key: the program's own
/// code, called back by the sort.
#[inline(never)]
fn costly_compare(a: &Record, b: &Record) -> std::cmp::Ordering {
    costly_key(a[0]).cmp(&costly_key(b[0]))
}

/// The key [`costly_compare`] computes, about 50 ns of dependent arithmetic.
#[inline(always)]
fn costly_key(x: u64) -> u64 {
    let mut h = x;
    for _ in 0..48 {
        h = h
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407)
            ^ (h >> 29);
    }
    h
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
