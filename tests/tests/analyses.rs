//! Structure-rich analyses, end to end against the truth the target measured: the tree of a
//! feature whose marks nest (process accounting).

mod support;

use serde_json::Value;
use support::*;

/// Seconds each target runs.
const SECS: f64 = 5.0;

/// A server's nested instances (process accounting): the report's tree of `server` gives each
/// path of instances its total and self share, within the usual bound of what the program
/// measured (the truth's self time per path; totals add the paths below).
#[test]
fn a_feature_whose_marks_nest_gets_its_tree() {
    let _serial = serial();
    let dir = tempdir();
    run_target(dir.path(), "tree", SECS, &[]);
    let report = report_json(dir.path());
    assert_shares_match(&report, &truth(dir.path()));
    let truth = truth(dir.path());
    let truth_total = truth["total_ms"].as_f64().unwrap();
    let self_ms: Vec<(Vec<String>, f64)> = truth["trees"]["server"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, ms)| {
            let path = path.split(" > ").map(str::to_owned).collect();
            (path, ms.as_f64().unwrap())
        })
        .collect();
    let server = report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "server")
        .unwrap_or_else(|| panic!("no server feature: {report:#}"));
    let nodes = server["tree"]
        .as_array()
        .unwrap_or_else(|| panic!("no tree: {server:#}"));
    assert_eq!(nodes.len(), self_ms.len(), "{nodes:#?}");
    let mut worst = 0.0f64;
    let mut table = String::new();
    for node in nodes {
        let path: Vec<String> = node["path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect();
        let own = self_ms
            .iter()
            .find(|(p, _)| *p == path)
            .map_or(0.0, |(_, ms)| *ms);
        let total: f64 = self_ms
            .iter()
            .filter(|(p, _)| p.starts_with(&path))
            .map(|(_, ms)| ms)
            .sum();
        let (want_total, want_self) = (total * 100.0 / truth_total, own * 100.0 / truth_total);
        let (got_total, got_self) = (
            node["total_percent"].as_f64().unwrap(),
            node["self_percent"].as_f64().unwrap(),
        );
        worst = worst
            .max((got_total - want_total).abs())
            .max((got_self - want_self).abs());
        table += &format!(
            "{path:?}: total {got_total:.2}% (truth {want_total:.2}), self {got_self:.2}% (truth {want_self:.2})\n"
        );
    }
    assert!(
        worst <= TOLERANCE,
        "a tree share is off by {worst:.2} points:\n{table}"
    );
    // Heaviest first under each parent: conn-A (about 4 times conn-B) before conn-B.
    let order: Vec<String> = nodes.iter().map(|n| n["path"].to_string()).collect();
    let position = |path: &str| order.iter().position(|p| p == path).unwrap();
    assert!(
        position(r#"["server","conn-A"]"#) < position(r#"["server","conn-B"]"#),
        "{order:?}"
    );
    let text = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(
        text.contains("Nested instances (") && text.contains("parse"),
        "{text}"
    );
}
