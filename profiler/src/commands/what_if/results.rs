//! What the experiments of `fsprof what-if` predict, and how it is shown: per candidate and
//! speedup, the program's predicted gain (how much sooner it ends, in percent of the
//! baseline's time) from each run, their median and range; as a table, as JSON and as an SVG plot
//! of one curve per candidate. Not here: running the experiments (`what_if.rs`).
//!
//! A run's prediction: its time less the global delay inserted (what the program would take
//! with the selected code that much faster), against its round's baseline run; with a
//! progress point, a stretch's mean latency against its round's baseline stretch (seconds
//! apart). A round is every experiment once, within seconds. The prediction is the median of
//! the runs' (on a shared machine one run in a few is slowed by its neighbours, by 5-20%: a
//! mean moved 5-7 points with it, 2026-12-03).
//!
//! The looks' own cost: quiet baselines (the looks slowed tenfold) measure it, as how much
//! longer the baseline took than they did ([`looks_cost`]); the runners have each look in the
//! selected code credit that much more than its period (`ControlPage::credit_looks`), so the
//! delays hold it, as the selected code made faster would shed its share. Uncredited, it pulled
//! the loopback server's `handle` at 50% 2.6 points low on average (a 26-29% gain, a baseline
//! 6-10% longer than the program alone, 2026-12-03); and dividing the gains by the baseline
//! less it instead (the fifty-first session's correction) overshot where a speedup moves the
//! critical path onto code not selected, whose share of the cost stays (two threads at a
//! barrier: 41-45% predicted against 38-40%).

use super::{Candidate, Outcome};
use anyhow::Result;
use std::ffi::OsString;
use std::fmt::Write;

/// The predictions of one candidate at one speedup.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    /// The speedup of the selected code, percent.
    pub speedup: u32,
    /// The predicted gain of each run, percent of the baseline's time.
    pub gains: Vec<f64>,
    /// Their median: the prediction (one run slowed by the machine moves it least).
    pub median: f64,
    /// Their mean.
    pub mean: f64,
    /// Their smallest and largest.
    pub min: f64,
    pub max: f64,
    /// The share of the looks at the program's threads that found them in the selected code,
    /// percent (mean over the runs): how much of the threads' CPU time it takes.
    pub selected_share: f64,
    /// With a progress point: how much more often its marks would end (their rate in virtual
    /// time, against the baselines' median), percent, median of the runs.
    pub rate_gain: Option<f64>,
}

/// One candidate's curve.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Curve {
    pub candidate: Candidate,
    pub points: Vec<Point>,
}

/// Everything the table, JSON and plot show.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    /// What the gains are of: the program's run time, or the progress feature's (`--progress`)
    /// mean latency.
    pub measure: Measure,
    /// The baseline runs' measures, seconds (runs with nothing to measure left out).
    pub baseline_s: Vec<f64>,
    /// Their median: the time the gains are of.
    pub baseline_median_s: f64,
    /// With quiet baselines: how much longer the baseline took than they did, as a fraction
    /// (the looks' cost, 0.05 for 5%), which the looks credited (see the module's
    /// documentation).
    pub looks_cost: Option<f64>,
    pub curves: Vec<Curve>,
}

/// What a run is measured by.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The program's time less the delay inserted.
    RunTime,
    /// The mean latency of the named feature's marks, in the run's virtual time.
    Latency(String),
}

impl Measure {
    /// What one measure comes from: a whole run, or a stretch of the one run (experiments in
    /// turn, with a progress point).
    fn unit(&self) -> &'static str {
        match self {
            Measure::RunTime => "runs",
            Measure::Latency(_) => "stretches",
        }
    }

    /// A run's measure in seconds; `None` where it has none (no progress mark timed).
    fn of(&self, run: &Outcome) -> Option<f64> {
        match self {
            Measure::RunTime => Some(run.wall_ns.saturating_sub(run.delay_ns) as f64 / 1e9),
            // A sum of latencies some of which may be negative (`abi::Progress`); a sum not
            // above 0 (no such run seen) is no measure.
            Measure::Latency(_) => (run.progress_timed > 0 && (run.progress_latency_ns as i64) > 0)
                .then(|| run.progress_latency_ns as f64 / run.progress_timed as f64 / 1e9),
        }
    }
}

pub fn summarize(
    candidates: &[Candidate],
    speedups: &[u32],
    progress: Option<&str>,
    outcomes: &[Outcome],
) -> Summary {
    let measure = match progress {
        Some(feature) => Measure::Latency(feature.to_owned()),
        None => Measure::RunTime,
    };
    let baseline = |o: &&Outcome| is_baseline(o);
    let baseline_s: Vec<f64> = (outcomes.iter().filter(baseline))
        .filter_map(|o| measure.of(o))
        .collect();
    let baseline_median_s = median(&baseline_s);
    let looks_cost = looks_cost(progress, outcomes);
    let rate = |run: &Outcome| {
        let virtual_s = run.wall_ns.saturating_sub(run.delay_ns).max(1) as f64 / 1e9;
        (run.progress_ends > 0).then(|| run.progress_ends as f64 / virtual_s)
    };
    let baseline_rate = median(
        &(outcomes.iter())
            .filter(baseline)
            .filter_map(rate)
            .collect::<Vec<_>>(),
    );
    // What a run is compared with: its round's baseline stretch (seconds from it, so a machine
    // slowed for a while slows both), else the baselines' median.
    let baseline_of = |run: &Outcome, value: &dyn Fn(&Outcome) -> Option<f64>, all: f64| {
        (outcomes.iter())
            .find(|o| baseline(o) && o.round.is_some() && o.round == run.round)
            .and_then(value)
            .filter(|&b| b > 0.0)
            .unwrap_or(all)
    };
    let curves = candidates
        .iter()
        .enumerate()
        .map(|(index, candidate)| Curve {
            candidate: candidate.clone(),
            points: speedups
                .iter()
                .map(|&speedup| {
                    let runs: Vec<&Outcome> = outcomes
                        .iter()
                        .filter(|o| o.candidate == Some(index) && o.speedup == speedup)
                        .collect();
                    let gains: Vec<f64> = runs
                        .iter()
                        .filter_map(|o| {
                            let base = baseline_of(o, &|b| measure.of(b), baseline_median_s);
                            Some((base - measure.of(o)?) * 100.0 / base)
                        })
                        .collect();
                    let shares: Vec<f64> = runs
                        .iter()
                        .map(|o| o.selected_samples as f64 * 100.0 / o.samples.max(1) as f64)
                        .collect();
                    Point {
                        speedup,
                        median: median(&gains),
                        mean: mean(&gains),
                        min: gains.iter().copied().fold(f64::INFINITY, f64::min),
                        max: gains.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                        gains,
                        selected_share: mean(&shares),
                        rate_gain: match (&measure, baseline_rate > 0.0) {
                            (Measure::Latency(_), true) => Some(median(
                                &(runs.iter())
                                    .filter_map(|o| {
                                        let base = baseline_of(o, &rate, baseline_rate);
                                        Some((rate(o)? / base - 1.0) * 100.0)
                                    })
                                    .collect::<Vec<_>>(),
                            )),
                            _ => None,
                        },
                    }
                })
                .collect(),
        })
        .collect();
    Summary {
        measure,
        baseline_s,
        baseline_median_s,
        looks_cost,
        curves,
    }
}

/// A baseline run or stretch (not a quiet one).
pub fn is_baseline(outcome: &Outcome) -> bool {
    outcome.candidate.is_none() && !outcome.quiet
}

/// The looks' cost so far: how much longer the baselines took than the quiet ones (medians), as
/// a fraction; `None` before one of each measured something.
pub fn looks_cost(progress: Option<&str>, outcomes: &[Outcome]) -> Option<f64> {
    let measure = match progress {
        Some(feature) => Measure::Latency(feature.to_owned()),
        None => Measure::RunTime,
    };
    let of = |quiet: bool| {
        median(
            &(outcomes.iter())
                .filter(|o| o.candidate.is_none() && o.quiet == quiet)
                .filter_map(|o| measure.of(o))
                .collect::<Vec<_>>(),
        )
    };
    let (baseline, quiet) = (of(false), of(true));
    (baseline > 0.0 && quiet > 0.0).then(|| baseline / quiet - 1.0)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// The table printed at the end.
pub fn table(summary: &Summary) -> String {
    let mut out = String::new();
    let (low, high) = summary
        .baseline_s
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &s| (l.min(s), h.max(s)));
    let (what, gain) = match &summary.measure {
        Measure::RunTime => (
            "The program's baseline".to_owned(),
            "how much sooner the program would end".to_owned(),
        ),
        Measure::Latency(feature) => (
            format!("The mean latency of a {feature} mark, baseline"),
            format!("how much shorter a {feature} mark would take on average"),
        ),
    };
    let (scale, unit) = match summary.baseline_median_s < 0.1 {
        true => (1e3, "ms"),
        false => (1.0, "s"),
    };
    let _ = writeln!(
        out,
        "What if a feature were faster? {what}: {:.3} {unit} (median of {} {}, {:.3}-{:.3} {unit}).",
        summary.baseline_median_s * scale,
        summary.baseline_s.len(),
        summary.measure.unit(),
        low * scale,
        high * scale
    );
    let _ = writeln!(
        out,
        "Predicted gain: {gain}, in percent of the baseline (median of the {}).",
        summary.measure.unit()
    );
    if let Some(cost) = summary.looks_cost {
        let credit = match cost > 0.0 {
            true => format!(
                "a look of the perf clock in the selected code credited that share of its period too (as measured before each of the {}, at most {:.0}%)",
                summary.measure.unit(),
                super::control::MOST_CREDIT * 100.0
            ),
            false => "nothing to credit".to_owned(),
        };
        let _ = writeln!(
            out,
            "The looks at the marks made the baseline {:+.1}% longer than the quiet {} (looks slowed tenfold): {credit}.",
            cost * 100.0,
            summary.measure.unit()
        );
    }
    let width = summary
        .curves
        .iter()
        .map(|c| c.candidate.label().chars().count())
        .max()
        .unwrap_or(0)
        .max(7);
    let _ = write!(
        out,
        "\n{:<width$}  {:>7}  {:>14}  {:>17}  {:>9}  {:>6}",
        "feature",
        "speedup",
        "predicted gain",
        "range",
        summary.measure.unit(),
        "in it"
    );
    let rated = matches!(summary.measure, Measure::Latency(_));
    let _ = writeln!(out, "{}", if rated { "  ends/s" } else { "" });
    for curve in &summary.curves {
        for point in &curve.points {
            if point.gains.is_empty() {
                let label = curve.candidate.label();
                let _ = writeln!(
                    out,
                    "{label:<width$}  {:>6}%  {:>14}",
                    point.speedup, "none measured"
                );
                continue;
            }
            let _ = write!(
                out,
                "{:<width$}  {:>6}%  {:>13.1}%  {:>17}  {:>9}  {:>5.1}%",
                curve.candidate.label(),
                point.speedup,
                point.median,
                format!("{:+.1} .. {:+.1}", point.min, point.max),
                point.gains.len(),
                point.selected_share,
            );
            let rate = match point.rate_gain {
                Some(gain) if rated => format!("  {gain:>+6.1}%"),
                _ => String::new(),
            };
            let _ = writeln!(out, "{rate}");
        }
    }
    let _ = writeln!(
        out,
        "\n\"in it\": the share of the threads' CPU time the selected code took. A gain near 0 at every speedup: the feature is not on the program's critical path."
    );
    if rated {
        let _ = writeln!(
            out,
            "\"ends/s\": how much more often the progress point's marks would end (their rate in virtual time)."
        );
    }
    out
}

/// What a user must know about the runs to trust the table: a candidate no look ever found
/// (its name mistyped, an instance named otherwise than the report does: its curve is flat
/// for that reason alone), and threads whose timer could not be armed (their time was never
/// looked at).
pub fn warnings(summary: &Summary, outcomes: &[Outcome]) -> Vec<String> {
    let mut warnings: Vec<String> = summary
        .curves
        .iter()
        .filter(|curve| curve.points.iter().all(|point| point.selected_share == 0.0))
        .map(|curve| {
            format!(
                "no thread was ever found in {}: its gains say nothing (check the name as the report shows it; an instance: a name, or file:line:column)",
                curve.candidate.label()
            )
        })
        .collect();
    if let Measure::Latency(feature) = &summary.measure {
        let untimed = outcomes.iter().filter(|o| o.progress_timed == 0).count();
        if untimed > 0 {
            warnings.push(format!(
                "{untimed} of {} stretches timed no {feature} mark (its name mistyped, marks that last longer than a stretch, or threads that are not x86-64 Rust or C marks): those stretches are left out",
                outcomes.len()
            ));
        }
    }
    // Each run's count; with the experiments in turn, the one run's so far at each stretch.
    let failures: u64 = match summary.measure {
        Measure::RunTime => outcomes.iter().map(|o| o.failures).sum(),
        Measure::Latency(_) => outcomes.iter().map(|o| o.failures).max().unwrap_or(0),
    };
    if failures > 0 {
        warnings.push(format!(
            "{failures} threads got no timer of their CPU time: their time was never looked at, so they neither added nor paid delays"
        ));
    }
    warnings
}

/// `what-if.json`: the summary and every run.
pub fn json(program: &[OsString], summary: &Summary, outcomes: &[Outcome]) -> Result<String> {
    let program: Vec<String> = program
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "program": program,
        "summary": summary,
        "runs": outcomes,
    }))?)
}

/// `what-if.svg`: predicted gain against speedup, one curve per candidate, each point with the
/// range of its runs.
pub fn svg(summary: &Summary) -> String {
    const W: f64 = 760.0;
    const H: f64 = 460.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 220.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 60.0;
    const COLOURS: [&str; 8] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    ];
    let points = summary.curves.iter().flat_map(|c| c.points.iter());
    let (mut y_low, mut y_high) = (0.0f64, 10.0f64);
    for point in points {
        if point.min.is_finite() {
            y_low = y_low.min(point.min);
            y_high = y_high.max(point.max);
        }
    }
    let step = nice_step((y_high - y_low) / 5.0);
    y_low = (y_low / step).floor() * step;
    y_high = (y_high / step).ceil() * step;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let x = |speedup: f64| LEFT + speedup / 100.0 * plot_w;
    let y = |gain: f64| TOP + (y_high - gain) / (y_high - y_low) * plot_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let (what, gained) = match &summary.measure {
        Measure::RunTime => ("baseline".to_owned(), "program's predicted gain".to_owned()),
        Measure::Latency(feature) => (
            format!("a {}'s mean latency", escape(feature)),
            format!("predicted gain of a {}'s latency", escape(feature)),
        ),
    };
    let (scale, unit) = match summary.baseline_median_s < 0.1 {
        true => (1e3, "ms"),
        false => (1.0, "s"),
    };
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">What if a feature were faster? ({what} {:.3} {unit})</text>"#,
        W / 2.0,
        summary.baseline_median_s * scale
    );
    let mut tick = y_low;
    while tick <= y_high + step / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="{}" /><text x="{}" y="{:.1}" text-anchor="end">{tick:+.0}%</text>"##,
            LEFT + plot_w,
            if tick == 0.0 { "#444" } else { "#ddd" },
            LEFT - 6.0,
            y(tick) + 4.0,
            y = y(tick),
        );
        tick += step;
    }
    for speedup in (0..=100).step_by(20) {
        let sx = x(f64::from(speedup));
        let _ = writeln!(
            out,
            r##"<line x1="{sx:.1}" x2="{sx:.1}" y1="{TOP}" y2="{}" stroke="#eee" /><text x="{sx:.1}" y="{}" text-anchor="middle">{speedup}%</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">speedup of the feature (its time cut by)</text>"#,
        LEFT + plot_w / 2.0,
        H - 16.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{gained}</text>"#,
        TOP + plot_h / 2.0
    );
    for (index, curve) in summary.curves.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let mut path = format!("M {:.1} {:.1}", x(0.0), y(0.0));
        for point in curve.points.iter().filter(|p| p.median.is_finite()) {
            let _ = write!(
                path,
                " L {:.1} {:.1}",
                x(f64::from(point.speedup)),
                y(point.median)
            );
        }
        let _ = writeln!(
            out,
            r#"<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>"#
        );
        for point in curve.points.iter().filter(|p| p.median.is_finite()) {
            let px = x(f64::from(point.speedup));
            let _ = writeln!(
                out,
                r#"<line x1="{px:.1}" x2="{px:.1}" y1="{:.1}" y2="{:.1}" stroke="{colour}"/><circle cx="{px:.1}" cy="{:.1}" r="4" fill="{colour}"><title>{}: {}% faster, {:+.1}% ({:+.1} .. {:+.1}, {} {})</title></circle>"#,
                y(point.min),
                y(point.max),
                y(point.median),
                escape(&curve.candidate.label()),
                point.speedup,
                point.median,
                point.min,
                point.max,
                point.gains.len(),
                summary.measure.unit()
            );
        }
        let ly = TOP + 10.0 + index as f64 * 20.0;
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{:.1}" width="14" height="4" fill="{colour}"/><text x="{}" y="{:.1}">{}</text>"#,
            LEFT + plot_w + 16.0,
            ly - 2.0,
            LEFT + plot_w + 36.0,
            ly + 4.0,
            escape(&shorten(&curve.candidate.label(), 26))
        );
    }
    out.push_str("</svg>\n");
    out
}

fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn shorten(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(most - 1).collect();
    short.push('…');
    short
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(candidate: Option<usize>, speedup: u32, wall_ms: u64, delay_ms: u64) -> Outcome {
        Outcome {
            candidate,
            speedup,
            wall_ns: wall_ms * 1_000_000,
            delay_ns: delay_ms * 1_000_000,
            samples: 100,
            selected_samples: 40,
            ..Outcome::default()
        }
    }

    #[test]
    fn with_a_progress_point_the_gain_is_of_its_marks_mean_latency() {
        let candidates = [Candidate {
            feature: "handle".into(),
            instance: None,
        }];
        let timed = |o: Outcome, ends: u64, latency_us: u64| Outcome {
            progress_ends: ends,
            progress_timed: ends,
            progress_latency_ns: ends * latency_us * 1000,
            ..o
        };
        let outcomes = [
            timed(outcome(None, 0, 1000, 0), 1000, 800),
            // 200 ms of delay: 1000 ends in 0.8 virtual seconds, each 600 us.
            timed(outcome(Some(0), 50, 1000, 200), 1000, 600),
            // A run that timed nothing is left out, and said.
            timed(outcome(Some(0), 50, 1000, 200), 0, 0),
        ];
        let summary = summarize(&candidates, &[50], Some("request"), &outcomes);
        assert!((summary.baseline_median_s - 800e-6).abs() < 1e-12);
        let point = &summary.curves[0].points[0];
        assert_eq!(point.gains.len(), 1);
        assert!((point.median - 25.0).abs() < 1e-9, "{point:?}");
        assert!((point.rate_gain.unwrap() - 25.0).abs() < 1e-9, "{point:?}");
        let text = table(&summary);
        assert!(text.contains("mean latency of a request mark"), "{text}");
        assert!(text.contains("0.800 ms"), "{text}");
        let plot = svg(&summary);
        assert!(
            plot.contains("(a request's mean latency 0.800 ms)"),
            "{plot}"
        );
        assert!(
            plot.contains("predicted gain of a request's latency"),
            "{plot}"
        );
        let warned = warnings(&summary, &outcomes);
        assert!(
            warned[0].starts_with("1 of 3 stretches timed no request mark"),
            "{warned:?}"
        );
    }

    #[test]
    fn a_stretch_is_compared_with_its_rounds_baseline() {
        let candidates = [Candidate {
            feature: "handle".into(),
            instance: None,
        }];
        let stretch = |candidate, round, latency_us: u64| Outcome {
            round: Some(round),
            progress_ends: 100,
            progress_timed: 100,
            progress_latency_ns: 100 * latency_us * 1000,
            ..outcome(candidate, if candidate.is_some() { 50 } else { 0 }, 300, 0)
        };
        // The machine ran 50% slower in round 1: both of its stretches took longer.
        let outcomes = [
            stretch(None, 0, 800),
            stretch(Some(0), 0, 600),
            stretch(None, 1, 1200),
            stretch(Some(0), 1, 900),
        ];
        let summary = summarize(&candidates, &[50], Some("request"), &outcomes);
        let point = &summary.curves[0].points[0];
        assert_eq!(point.gains.len(), 2, "{point:?}");
        assert!(
            point.gains.iter().all(|g| (g - 25.0).abs() < 1e-9),
            "{point:?}"
        );
        assert!(table(&summary).contains("median of 2 stretches"));
        assert!(svg(&summary).contains("+25.0 .. +25.0, 2 stretches)"));
        assert_eq!(summary.looks_cost, None);

        // Quiet stretches 800 and 1000 us against baselines of 800 and 1200 (medians 900 and
        // 1000): the looks cost 1000/900 - 1 = 11.1%, which the looks credited (the delays hold
        // it), so the gains are as they are. A quiet stretch is never a round's baseline.
        let quiet = |round, latency_us| Outcome {
            quiet: true,
            ..stretch(None, round, latency_us)
        };
        let with_quiet = [
            quiet(0, 800),
            stretch(None, 0, 800),
            stretch(Some(0), 0, 600),
            quiet(1, 1000),
            stretch(None, 1, 1200),
            stretch(Some(0), 1, 900),
        ];
        assert_eq!(looks_cost(Some("request"), &with_quiet[..1]), None);
        let summary = summarize(&candidates, &[50], Some("request"), &with_quiet);
        let cost = summary.looks_cost.unwrap();
        assert!((cost - (1000.0 / 900.0 - 1.0)).abs() < 1e-9, "{cost}");
        assert_eq!(summary.baseline_s.len(), 2);
        let point = &summary.curves[0].points[0];
        assert!(
            (point.gains.iter()).all(|g| (g - 25.0).abs() < 1e-9),
            "{point:?}"
        );
        assert!(table(&summary).contains("baseline +11.1% longer than the quiet stretches"));
    }

    #[test]
    fn a_runs_time_less_its_delay_against_the_baseline_is_its_gain() {
        let candidates = [Candidate {
            feature: "parsing".into(),
            instance: None,
        }];
        let outcomes = [
            outcome(None, 0, 1000, 0),
            outcome(None, 0, 1100, 0),
            outcome(Some(0), 50, 1050, 315),
            outcome(Some(0), 50, 1100, 260),
        ];
        let summary = summarize(&candidates, &[50], None, &outcomes);
        assert!((summary.baseline_median_s - 1.05).abs() < 1e-9);
        let point = &summary.curves[0].points[0];
        assert_eq!(point.gains.len(), 2);
        assert!((point.min - 20.0).abs() < 1e-9, "{point:?}");
        assert!((point.max - 30.0).abs() < 1e-9, "{point:?}");
        assert!((point.mean - 25.0).abs() < 1e-9);
        assert!((point.median - 25.0).abs() < 1e-9);
        assert!((point.selected_share - 40.0).abs() < 1e-9);
        let text = table(&summary);
        assert!(text.contains("parsing"), "{text}");
        assert!(text.contains("25.0%"), "{text}");
        let svg = svg(&summary);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("+20.0 .. +30.0, 2 runs)"), "{svg}");
        assert!(warnings(&summary, &outcomes).is_empty());
        let missed = [
            outcome(None, 0, 1000, 0),
            Outcome {
                selected_samples: 0,
                failures: 2,
                ..outcome(Some(0), 50, 1000, 0)
            },
        ];
        let warned = warnings(&summarize(&candidates, &[50], None, &missed), &missed);
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(warned[0].contains("no thread was ever found in parsing"));
        assert!(warned[1].starts_with("2 threads"));
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(0.15), 0.2);
        assert_eq!(nice_step(12.0), 20.0);
    }
}
