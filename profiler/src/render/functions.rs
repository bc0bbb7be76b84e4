//! The function view (`analysis::functions`) as text, after the feature tables, and as the JSON
//! report's `functions` array. Text lists the functions with the most self time, then the
//! callers and callees of the first of them (seed 003's graph, in text: where the hot code is
//! called from, and what of its time is spent further in); more of
//! both when the program has no marks, since the view is then the whole report; long template
//! arguments elided in text (`short_names.rs`), whole in JSON. It does not analyse.

use super::short_names::elide_arguments;
use crate::analysis::{FunctionCost, FunctionReport};
use serde_json::{json, Value};
use std::fmt::Write;

/// Least self share, in percent, of a function listed in text (nothing is printed as 0%).
const LEAST_PERCENT: f64 = 0.1;

/// Appends the function view to `out`; `whole`: the program has no marks, so the view is the
/// report (more functions, more of the graph).
pub fn text(out: &mut String, report: &FunctionReport, whole: bool) {
    if report.functions.is_empty() {
        return;
    }
    let (listed, graphed) = if whole { (40, 10) } else { (15, 5) };
    let pct = |ns: u64| report.percent(ns);
    let _ = write!(out, "Functions by self time (from the native stacks");
    if report.without_stack_ns > 0 && pct(report.without_stack_ns) >= LEAST_PERCENT {
        let _ = write!(
            out,
            "; {:.1}% of the time counted had none",
            pct(report.without_stack_ns)
        );
    }
    let _ = writeln!(out, "):");
    let _ = writeln!(out, "   self   total  function");
    let shown: Vec<&FunctionCost> = report
        .functions
        .iter()
        .filter(|f| pct(f.self_ns) >= LEAST_PERCENT)
        .take(listed)
        .collect();
    for function in &shown {
        let _ = writeln!(
            out,
            "  {:5.1}%  {:5.1}%  {}",
            pct(function.self_ns),
            pct(function.total_ns),
            elide_arguments(&function.name)
        );
    }
    let rest = report.functions.len() - shown.len();
    if rest > 0 {
        let _ = writeln!(
            out,
            "  ({rest} more function{} with less self time)",
            if rest == 1 { "" } else { "s" },
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Callers and callees of the {} functions with the most self time:",
        graphed.min(shown.len())
    );
    for function in shown.iter().take(graphed) {
        let _ = writeln!(
            out,
            "  {}: self {:.1}%, total {:.1}%",
            elide_arguments(&function.name),
            pct(function.self_ns),
            pct(function.total_ns)
        );
        for (label, list) in [
            ("called by", &function.callers),
            ("calls    ", &function.callees),
        ] {
            for (name, ns) in list
                .iter()
                .filter(|(_, ns)| pct(*ns) >= LEAST_PERCENT)
                .take(5)
            {
                let name = elide_arguments(name);
                let _ = writeln!(out, "      {label} {:5.1}%  {name}", pct(*ns));
            }
        }
    }
    let _ = writeln!(out);
}

/// The JSON report's `functions`: every function with time, by self time, each with its callers
/// and callees.
pub fn json(report: &FunctionReport) -> Value {
    let ms = |ns: u64| ns as f64 / 1e6;
    let edges = |list: &[(String, u64)]| -> Vec<Value> {
        list.iter()
            .map(|(name, ns)| json!({"name": name, "ms": ms(*ns)}))
            .collect()
    };
    report
        .functions
        .iter()
        .map(|f| {
            json!({"name": f.name, "self_ms": ms(f.self_ns), "total_ms": ms(f.total_ns),
                   "self_percent": report.percent(f.self_ns),
                   "total_percent": report.percent(f.total_ns),
                   "callers": edges(&f.callers), "callees": edges(&f.callees)})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 functions of 2% self time each, called by `main`.
    fn report() -> FunctionReport {
        FunctionReport {
            total_ns: 100_000,
            without_stack_ns: 0,
            functions: (0..50)
                .map(|i| FunctionCost {
                    name: format!("f{i}"),
                    self_ns: 2_000,
                    total_ns: 2_000,
                    callers: vec![("main".to_owned(), 2_000)],
                    callees: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_program_without_marks_gets_more_of_the_view() {
        let count = |whole| {
            let mut out = String::new();
            text(&mut out, &report(), whole);
            let listed = out
                .lines()
                .filter(|l| l.ends_with(char::is_numeric) && l.contains("%  "))
                .count();
            let graphed = out.lines().filter(|l| l.contains(": self ")).count();
            (listed, graphed, out)
        };
        let (listed, graphed, out) = count(false);
        assert_eq!((listed, graphed), (15, 5), "{out}");
        assert!(
            out.contains("(35 more functions with less self time)"),
            "{out}"
        );
        let (listed, graphed, out) = count(true);
        assert_eq!((listed, graphed), (40, 10), "{out}");
        assert!(
            out.contains("(10 more functions with less self time)"),
            "{out}"
        );
    }
}
