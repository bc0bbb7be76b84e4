//! fsprof's profiles in other tools' hands: `fsprof report --format pprof`, read by Go's own
//! `go tool pprof` (Debian's `golang-go`; `.ci/run` installs it), must show the report's total,
//! each feature's time through its `feature` label and each instance's through its `instance`
//! label.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::*;

/// `go`, if installed; in CI its absence is a failure.
fn go() -> Option<&'static str> {
    let found = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "go is not installed: apt-get install golang-go"
        );
        eprintln!("go is not installed (apt-get install golang-go): pprof output not checked");
        return None;
    }
    Some("go")
}

/// What `go tool pprof -top` says of `file` with `filter` (`-tagfocus` arguments, if any): the
/// time of the samples kept and of all samples, in ms.
fn pprof_ms(file: &Path, filter: Option<String>) -> (f64, f64) {
    let output = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodefraction=0", "-unit=ms"])
        .args(filter.map(|f| format!("-tagfocus={f}")))
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // "Showing nodes accounting for 2353.59ms, 94.07% of 2502.09ms total"
    let line = text
        .lines()
        .find(|l| l.starts_with("Showing nodes accounting for"))
        .unwrap_or_else(|| panic!("no totals in: {text}"));
    let numbers: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|word| word.parse().ok())
        .collect();
    match numbers[..] {
        [kept, _, all] => (kept, all),
        _ => panic!("cannot read: {line}"),
    }
}

/// `text` as a Go regular expression matching exactly it.
fn exactly(text: &str) -> String {
    let mut out = String::from("^");
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

#[test]
fn a_pprof_profile_shows_in_go_tool_pprof_what_the_report_says_by_feature_and_instance() {
    let _serial = serial();
    if go().is_none() {
        return;
    }
    let dir = tempdir();
    run_target_with_agent(dir.path(), "mixed", 2.0);
    let file = dir.path().join("profile.pb.gz");
    let status = Command::new(fsprof())
        .arg("report")
        .arg(dir.path())
        .args(["--format", "pprof", "-o"])
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success());
    let report = report_json(dir.path());
    let close = |a: f64, b: f64| (a - b).abs() <= 0.02 + b * 1e-6;
    let (_, all) = pprof_ms(&file, None);
    let total = report["total_ms"].as_f64().unwrap();
    assert!(close(all, total), "pprof total {all} ms, report {total} ms");
    let features = report["features"].as_array().unwrap();
    assert!(features.len() >= 3, "{report:#}");
    let mut checked = String::new();
    for feature in features {
        let name = feature["name"].as_str().unwrap();
        let want = feature["ms"].as_f64().unwrap();
        let (got, _) = pprof_ms(&file, Some(format!("feature={}", exactly(name))));
        checked += &format!("{name}: pprof {got} ms, report {want} ms\n");
        assert!(close(got, want), "{checked}");
        for instance in feature["instances"].as_array().unwrap().iter().take(3) {
            let payload = instance["payload"].as_str().unwrap();
            let want = instance["ms"].as_f64().unwrap();
            let label = format!("[{name}] {payload}");
            let (got, _) = pprof_ms(&file, Some(format!("instance={}", exactly(&label))));
            checked += &format!("  {label}: pprof {got} ms, report {want} ms\n");
            assert!(close(got, want), "{checked}");
        }
    }
    eprintln!("{checked}");
    // Marks are frames too, as in the flamegraph: the heaviest instance shows as a node.
    let top = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodefraction=0"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    let first: &Value = &features[0];
    let mark = format!(
        "[{}] {}",
        first["name"].as_str().unwrap(),
        first["instances"][0]["payload"].as_str().unwrap()
    );
    assert!(text.contains(&mark), "no {mark} frame in:\n{text}");
}
