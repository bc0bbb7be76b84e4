//! The JSON report: the analysis as a stable document for programs.
//!
//! ```json
//! {"samples": 1234, "total_ms": 3012.5, "time_view": "active",
//!  "features": [{"name": "output", "ms": 1650.2, "percent": 54.78, "samples": 700,
//!                "instances": [{"payload": "src/main.rs:57:27", "ms": 1000.1, "percent": 33.2, "samples": 420}]}],
//!  "truncated_samples": 0, "meta": {...}}
//! ```
//! `percent` is of `total_ms`, 0–100. `builtin` is true for the agent's built-in features
//! (output, input, allocation, ... marked around libc calls; a program's own feature of the same
//! name is counted with them). Fields may be added; none are removed within a major version.
//!
//! `images` (since 2026-11-25) lists the programs the process ran one after the other when it
//! ran several (each `exec` starts one: a wrapper script, then the program): `{"name": "sh",
//! "wall_ms": 520.1, "active_ms": 500.3, "counted": false}`. In the default view only the last
//! one is counted in the features and `total_ms`; with `--idle` all are. Empty for one program.
//!
//! `blocked_ms` (top level, per feature, per instance; since 2026-11-25) is time threads
//! spent blocked inside built-in features outside the program's own marks: idle time (a worker
//! parked in `pthread_cond_wait`, a `poll` loop between requests), not counted in `ms`, `percent`
//! or `total_ms` in the default `active` view. With `time_view` `all` (`--idle`) every wait counts
//! and `blocked_ms` is 0.
//!
//! `agent_percent` (since 2026-11-25): the share, 0–100, of the time sampled with a native stack
//! whose innermost frame was the agent's own code (its cost of interposing libc, partly outside
//! the built-in marks); `null` without native stacks.
//!
//! When the profile has native stacks, the most expensive instances of each feature also have
//! `"paths"`: the native call paths that reached their mark, most expensive first,
//! `{"functions": ["app::main", "app::report"], "cut": true, "ms": 700.5, "share": 70.04,
//! "samples": 300}`; `functions` are the innermost native frames before the mark, outer to inner
//! (empty: no native stack, or with `cut` the mark was pushed outside the unwound frames), `cut`
//! says frames are left out at the outer end, `share` is of the instance's `ms`, 0–100.

//!
//! `tree` (since 2026-11-26; nodes by parent index since 2026-11-27, when they held their
//! whole `path`), on a feature whose marks nest on a thread (a task running sub-tasks, a server
//! running connections): a node per path of its instances, in depth-first order with each
//! node's children heaviest first, `{"instance": "conn-A", "parent": 0, "depth": 2,
//! "total_ms": 900.0, "self_ms": 100.0, "total_percent": 30.0, "self_percent": 3.3,
//! "local_percent": 75.0}`: `parent` is the index of its parent's node (before it; `null` for a
//! root), `total` counts the samples whose path begins with it, `self` those whose path it is,
//! `local_percent` is its total's share of its parent's (of all roots' for a root). Absent when
//! the feature's marks never nest. `tree_cut_ms`, only when not 0: the time of paths cut short
//! at the tree's 50,000 nodes (their deeper instances counted at the deepest node kept).
//!
//! `backtracking` (since 2026-11-26), on a feature that marks a parser's alternatives
//! (`mark_alternative`): per branch of each choice point, most wasted first, `{"choice": "item",
//! "branch": 0, "wasted_ms": 412.0, "wasted_percent": 34.1, "ms": 600.0, "percent": 49.7}`:
//! `wasted` is its time at the offsets where a later branch of the same choice was tried (so
//! this one failed there), `ms` all its time.
//!
//! `boundaries` (since 2026-11-26), on a feature that marks checks between components
//! (`mark_boundary`): per edge, most expensive first, `{"from": "client", "to": "matrix",
//! "ms": 700.0, "percent": 23.3, "values": [{"value": "positive?", "ms": 500.0, "percent":
//! 16.6}]}`: a sample's time goes to its innermost check. Drawn in `boundaries.svg`.

use crate::analysis::{FeatureReport, Structure, TimeView};
use crate::profile::Meta;
use serde_json::{json, Value};

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Adds a feature's structure-rich views to its object: `tree`, `backtracking`, `boundaries`,
/// each only when the feature's marks carry that structure.
fn add_structure(object: &mut Value, structure: &Structure, report: &FeatureReport) {
    let percent = |ns| report.percent(ns);
    if !structure.tree.nodes.is_empty() {
        let tree: Vec<Value> = (structure.tree.nodes.iter())
            .map(|node| {
                json!({"instance": node.instance, "parent": node.parent, "depth": node.depth,
                       "total_ms": ms(node.total_ns),
                       "self_ms": ms(node.self_ns),
                       "total_percent": percent(node.total_ns),
                       "self_percent": percent(node.self_ns),
                       "local_percent": share(node.total_ns, node.parent_ns)})
            })
            .collect();
        object["tree"] = Value::Array(tree);
        if structure.tree.cut_ns > 0 {
            object["tree_cut_ms"] = json!(ms(structure.tree.cut_ns));
        }
    }
    if !structure.backtracking.is_empty() {
        let branches: Vec<Value> = structure
            .backtracking
            .iter()
            .map(|b| {
                json!({"choice": b.choice, "branch": b.branch,
                       "wasted_ms": ms(b.wasted_ns), "wasted_percent": percent(b.wasted_ns),
                       "ms": ms(b.ns), "percent": percent(b.ns)})
            })
            .collect();
        object["backtracking"] = Value::Array(branches);
    }
    if !structure.boundaries.is_empty() {
        let edges: Vec<Value> = structure
            .boundaries
            .iter()
            .map(|edge| {
                let values: Vec<Value> = edge
                    .values
                    .iter()
                    .map(|(value, ns)| json!({"value": value, "ms": ms(*ns), "percent": percent(*ns)}))
                    .collect();
                json!({"from": edge.from, "to": edge.to, "ms": ms(edge.ns),
                       "percent": percent(edge.ns), "values": values})
            })
            .collect();
        object["boundaries"] = Value::Array(edges);
    }
}

/// `part` as a percentage of `whole`, 0–100 (0 of nothing).
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Renders the report as a JSON value.
pub fn render(report: &FeatureReport, meta: &Meta) -> Value {
    let features: Vec<Value> = report
        .features
        .iter()
        .map(|feature| {
            let instances: Vec<Value> = feature
                .instances
                .iter()
                .map(|i| {
                    let mut instance = json!({"payload": i.payload, "ms": ms(i.ns),
                        "percent": report.percent(i.ns), "samples": i.samples,
                        "blocked_ms": ms(i.blocked_ns)});
                    if !i.paths.is_empty() {
                        let paths: Vec<Value> = i
                            .paths
                            .iter()
                            .map(|p| {
                                json!({"functions": p.functions, "cut": p.cut, "ms": ms(p.ns),
                                       "share": i.share(p.ns), "samples": p.samples})
                            })
                            .collect();
                        instance["paths"] = Value::Array(paths);
                    }
                    instance
                })
                .collect();
            let mut object = json!({"name": feature.name, "ms": ms(feature.ns),
                   "percent": report.percent(feature.ns),
                   "samples": feature.samples, "builtin": feature.builtin,
                   "blocked_ms": ms(feature.blocked_ns), "instances": instances});
            add_structure(&mut object, &feature.structure, report);
            object
        })
        .collect();
    json!({
        "samples": report.samples,
        "total_ms": ms(report.total_ns),
        "blocked_ms": ms(report.blocked_ns),
        "no_feature_ms": ms(report.no_feature_ns),
        "no_feature_percent": report.percent(report.no_feature_ns),
        "time_view": match report.view { TimeView::Active => "active", TimeView::All => "all" },
        "features": features,
        "truncated_samples": report.truncated_samples,
        "agent_percent": report.agent_share(),
        "images": report.images.iter().map(|image| json!({"name": image.name,
            "wall_ms": ms(image.wall_ns), "active_ms": ms(image.active_ns),
            "counted": image.counted})).collect::<Vec<Value>>(),
        "meta": meta,
    })
}
