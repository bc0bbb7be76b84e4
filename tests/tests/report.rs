//! The report's thread view: how the counted time divides between threads, and
//! `fsprof report --thread NAME|TID` limiting a report to one of them.

mod support;

use serde_json::Value;
use std::process::Command;
use support::{fsprof, report_json, run_target, serial, tempdir};

#[test]
fn the_time_divides_between_threads_and_one_thread_can_be_shown_alone() {
    let _serial = serial();
    let dir = tempdir();
    run_target(dir.path(), "threads", 2.0, &[]);
    let report = report_json(dir.path());
    let threads = report["threads"].as_array().unwrap();
    // Two busy threads and one blocked inside a mark count; the idle one does not.
    assert!(threads.len() >= 3, "{threads:#?}");
    let sum: f64 = threads.iter().map(|t| t["percent"].as_f64().unwrap()).sum();
    assert!((sum - 100.0).abs() < 0.01, "{threads:#?}");
    let top = &threads[0];
    let tid = top["tid"].as_u64().unwrap().to_string();

    let output = Command::new(fsprof())
        .arg("report")
        .arg(dir.path())
        .args(["--format", "json", "--thread", &tid])
        .output()
        .unwrap();
    assert!(output.status.success());
    let alone: Value = serde_json::from_slice(&output.stdout).unwrap();
    let only = alone["threads"].as_array().unwrap();
    assert_eq!(only.len(), 1, "{only:#?}");
    assert_eq!(only[0]["tid"], top["tid"]);
    let (total, expected) = (
        alone["total_ms"].as_f64().unwrap(),
        top["ms"].as_f64().unwrap(),
    );
    assert!(
        (total - expected).abs() < 0.01,
        "{total} ms against {expected}"
    );

    // The text report lists the threads; a thread that is not there is an error that says
    // which there are.
    let text = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(text.contains(&format!("(tid {tid})")), "{text}");
    let output = Command::new(fsprof())
        .arg("report")
        .arg(dir.path())
        .args(["--thread", "no-such-thread"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("no thread is named or numbered") && stderr.contains(&tid),
        "{stderr}"
    );
}
