//! `fsprof diff` output: two profiles' features and instances side by side, as text for people
//! and JSON for programs. Formats the numbers of [`analysis::diff`](crate::analysis::diff) and
//! nothing else; the differential flamegraph is `flamegraph.rs`'s.

use crate::analysis::{ratio, Diff};
use serde_json::{json, Value};
use std::fmt::Write;

/// Instances listed per feature in the text (JSON has them all).
const TEXT_INSTANCES: usize = 10;

/// What the text and JSON say of each side: its path, its command and its total.
pub struct Side<'a> {
    /// The profile's path as given.
    pub path: &'a str,
    /// The recorded program's command line.
    pub command: &'a [String],
}

/// The diff as text.
pub fn text(diff: &Diff, sides: [Side<'_>; 2], view: &str) -> String {
    let mut out = String::new();
    for (side, (letter, about)) in ["A", "B"].iter().zip(&sides).enumerate() {
        let _ = writeln!(
            out,
            "{letter}: {} ({}): {:.0} ms counted",
            about.path,
            crate::profile::clean(&about.command.join(" ")),
            diff.total_ns[side] as f64 / 1e6
        );
    }
    let _ = writeln!(out, "{view}\n");
    let _ = writeln!(
        out,
        "{:>10} {:>7} {:>10} {:>7} {:>10} {:>8}  feature / instance",
        "A ms", "A %", "B ms", "B %", "B - A", "B/A"
    );
    let row = |out: &mut String, ns: [u64; 2], name: &str, indent: &str| {
        let ms = |ns: u64| ns as f64 / 1e6;
        let change = ms(ns[1]) - ms(ns[0]);
        let times = ratio(ns).map_or("new".to_owned(), |r| format!("{r:.2}x"));
        let _ = writeln!(
            out,
            "{:>10.1} {:>6.2}% {:>10.1} {:>6.2}% {:>+10.1} {:>8}  {indent}{}",
            ms(ns[0]),
            diff.percent(0, ns[0]),
            ms(ns[1]),
            diff.percent(1, ns[1]),
            change,
            times,
            crate::profile::clean(name)
        );
    };
    for feature in &diff.features {
        row(&mut out, feature.ns, &feature.name, "");
        for instance in feature.instances.iter().take(TEXT_INSTANCES) {
            row(&mut out, instance.ns, &instance.payload, "  ");
        }
        if feature.instances.len() > TEXT_INSTANCES {
            let _ = writeln!(
                out,
                "{:61}({} more instances: --format json lists them)",
                "",
                feature.instances.len() - TEXT_INSTANCES
            );
        }
    }
    if diff.features.is_empty() {
        out.push_str("no features in either profile\n");
    }
    out
}

/// The diff as JSON: `{"a": {...}, "b": {...}, "features": [{"name", "a_ms", "b_ms",
/// "a_percent", "b_percent", "ratio", "instances": [{"payload", ...the same}]}]}`; `ratio` is
/// B's time over A's, `null` when A has none.
pub fn json(diff: &Diff, sides: [Side<'_>; 2]) -> Value {
    let times = |ns: [u64; 2]| {
        json!({
            "a_ms": ns[0] as f64 / 1e6,
            "b_ms": ns[1] as f64 / 1e6,
            "a_percent": diff.percent(0, ns[0]),
            "b_percent": diff.percent(1, ns[1]),
            "ratio": ratio(ns),
        })
    };
    let features: Vec<Value> = (diff.features.iter())
        .map(|feature| {
            let mut value = times(feature.ns);
            value["name"] = json!(feature.name);
            value["instances"] = (feature.instances.iter())
                .map(|instance| {
                    let mut value = times(instance.ns);
                    value["payload"] = json!(instance.payload);
                    value
                })
                .collect();
            value
        })
        .collect();
    let side = |side: usize, about: &Side<'_>| {
        json!({"path": about.path, "command": about.command,
               "total_ms": diff.total_ns[side] as f64 / 1e6})
    };
    json!({"a": side(0, &sides[0]), "b": side(1, &sides[1]), "features": features})
}
