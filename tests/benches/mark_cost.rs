//! Cost of a mark push + pop, side by side with a `tracing` span under the `tracing_subscriber`
//! Registry (the way Rust programs mark regions today).
//!
//! Run: `cargo bench -p fsprof-tests --bench mark_cost`
//!
//! A small timing harness, on purpose (no criterion: the build stays light). Every case runs on this
//! one thread, in this one process. After a warm-up, the cases run in interleaved rounds
//! (A, B, C, ..., A, B, C, ...) so that noise on a shared machine hits them all alike; each round
//! times one batch of N iterations per case. The table gives, per iteration, the median and the
//! minimum over the rounds, and the median with the empty loop's median subtracted. The ratio to
//! tracing is also taken round by round (each round's tracing batch over the same round's mark
//! batch), and the median of those per-round ratios reported.
//!
//! Without `--bench` (as under `cargo test --benches`) it runs one short round, as a smoke test.

use fsprof_shim::Feature;
use std::hint::black_box;
use std::time::Instant;

static OUTPUT: Feature = Feature::new("output");
static PARSE: Feature = Feature::new("parse");

/// One benchmark case: a function running `n` iterations of the thing measured.
struct Case {
    name: &'static str,
    /// Iterations per batch (in full mode).
    iters: u64,
    /// Push + pop pairs per iteration, to also report a per-pair figure.
    pairs: u64,
    run: fn(u64),
    /// Seconds per iteration, one per round.
    samples: Vec<f64>,
}

#[inline(never)]
fn empty_loop(n: u64) {
    for i in 0..n {
        black_box(i);
    }
}

#[inline(never)]
fn mark_location(n: u64) {
    for i in 0..n {
        black_box(i);
        let _m = OUTPUT.mark();
    }
}

#[inline(never)]
fn mark_with_name(n: u64) {
    for i in 0..n {
        black_box(i);
        let _m = OUTPUT.mark_with("emit_line");
    }
}

/// A first branch: only the mark.
#[inline(never)]
fn mark_first_alternative(n: u64) {
    for i in 0..n {
        black_box(i);
        let _m = PARSE.mark_alternative("item", 0, i);
    }
}

/// A later branch: the mark, and an entry in the thread's history of later branches.
#[inline(never)]
fn mark_alternative(n: u64) {
    for i in 0..n {
        black_box(i);
        let _m = PARSE.mark_alternative("item", 1, i);
    }
}

#[inline(never)]
fn mark_boundary(n: u64) {
    for i in 0..n {
        black_box(i);
        let _m = PARSE.mark_boundary("positive?", "client", "matrix");
    }
}

#[inline(never)]
fn nested_two_marks_one_antimark(n: u64) {
    for i in 0..n {
        black_box(i);
        let _outer = OUTPUT.mark();
        let _inner = PARSE.mark_with("header");
        let _anti = PARSE.antimark();
    }
}

#[inline(never)]
fn tracing_span_entered(n: u64) {
    for i in 0..n {
        black_box(i);
        let _s = tracing::info_span!("x").entered();
    }
}

fn case(name: &'static str, iters: u64, pairs: u64, run: fn(u64)) -> Case {
    Case {
        name,
        iters,
        pairs,
        run,
        samples: Vec::new(),
    }
}

fn time_batch(run: fn(u64), n: u64) -> f64 {
    let start = Instant::now();
    run(black_box(n));
    let elapsed = start.elapsed();
    assert_eq!(fsprof_shim::depth(), 0, "a mark leaked out of a batch");
    elapsed.as_secs_f64() / n as f64
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn min(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds: usize = if full { 15 } else { 1 };
    let scale: u64 = if full { 1 } else { 1000 };

    tracing::subscriber::set_global_default(tracing_subscriber::registry())
        .expect("no global subscriber set yet");

    // The marks must really be recorded, not skipped because no slot or region could be had.
    {
        let _m = OUTPUT.mark();
        assert_eq!(fsprof_shim::depth(), 1, "the mark was not recorded");
        assert!(fsprof_shim::region_address().is_some());
        let _n = PARSE.mark_with("check");
        assert_eq!(fsprof_shim::depth(), 2, "the nested mark was not recorded");
    }
    assert_eq!(fsprof_shim::depth(), 0);
    // And the span must really reach the Registry.
    {
        let span = tracing::info_span!("x");
        assert!(!span.is_disabled(), "the span is disabled: no subscriber");
        let _e = span.entered();
        assert!(tracing::Span::current().id().is_some());
    }

    let mut cases = vec![
        case("empty loop (baseline)", 20_000_000, 0, empty_loop),
        case("mark() push+pop", 10_000_000, 1, mark_location),
        case("mark_with(\"..\") push+pop", 10_000_000, 1, mark_with_name),
        case(
            "mark_alternative, branch 0, push+pop",
            10_000_000,
            1,
            mark_first_alternative,
        ),
        case(
            "mark_alternative, branch 1 (history), push+pop",
            10_000_000,
            1,
            mark_alternative,
        ),
        case("mark_boundary push+pop", 10_000_000, 1, mark_boundary),
        case(
            "nested: 2 marks + 1 antimark",
            4_000_000,
            3,
            nested_two_marks_one_antimark,
        ),
        case(
            "tracing info_span!().entered()",
            300_000,
            1,
            tracing_span_entered,
        ),
    ];

    // Warm-up: caches, branch predictors, the thread's slot, tracing's callsite registration and
    // slab pages, CPU frequency.
    for case in &cases {
        for _ in 0..3 {
            time_batch(case.run, (case.iters / scale / 4).max(1));
        }
    }

    for _ in 0..rounds {
        for case in &mut cases {
            let s = time_batch(case.run, (case.iters / scale).max(1));
            case.samples.push(s);
        }
    }
    assert_eq!(fsprof_shim::depth(), 0, "marks leaked");

    let ns = 1e9;
    let baseline = median(&cases[0].samples) * ns;
    println!();
    println!(
        "mark_cost: {rounds} interleaved round(s); ns per iteration over rounds (one batch per case per round)"
    );
    println!(
        "{:<32} {:>11} {:>9} {:>9} {:>13} {:>13}",
        "case", "iters/batch", "median", "min", "median-empty", "per pair"
    );
    for case in &cases {
        let med = median(&case.samples) * ns;
        let mn = min(&case.samples) * ns;
        let net = med - baseline;
        let per_pair = if case.pairs > 0 {
            format!("{:.2}", net / case.pairs as f64)
        } else {
            "-".to_string()
        };
        println!(
            "{:<32} {:>11} {:>9.2} {:>9.2} {:>13.2} {:>13}",
            case.name,
            (case.iters / scale).max(1),
            med,
            mn,
            net,
            per_pair
        );
    }

    let mark = &cases[1].samples;
    let mark_with = &cases[2].samples;
    let tracing = &cases.last().expect("the tracing case is last").samples;
    let per_round = |num: &[f64], den: &[f64]| -> f64 {
        let ratios: Vec<f64> = num.iter().zip(den).map(|(t, m)| t / m).collect();
        median(&ratios)
    };
    let ratio_mark = median(tracing) / median(mark);
    let ratio_mark_rounds = per_round(tracing, mark);
    let ratio_with = median(tracing) / median(mark_with);
    println!();
    println!(
        "tracing / mark():      {ratio_mark:.1}x (ratio of medians), {ratio_mark_rounds:.1}x (median of per-round ratios)"
    );
    println!(
        "tracing / mark_with(): {ratio_with:.1}x (ratio of medians), {:.1}x (median of per-round ratios)",
        per_round(tracing, mark_with)
    );
    println!(
        "depth after all loops: {} (asserted 0)",
        fsprof_shim::depth()
    );
    let mark_med = median(mark) * ns;
    if !full {
        println!("smoke run (no --bench): figures are not meaningful, goals not judged");
        return;
    }
    println!(
        "goal push+pop <= 3 ns: {} (mark() median {mark_med:.2} ns, loop included); goal >= 10x cheaper than tracing: {}",
        if mark_med <= 3.0 { "holds" } else { "FAILS" },
        if ratio_mark >= 10.0 && ratio_mark_rounds >= 10.0 { "holds" } else { "FAILS" },
    );
}
