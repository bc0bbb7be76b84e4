//! The function view against a program that times its own functions: `tests/c/functions.c`, no
//! marks, run with `--no-agent`. Each function's self and total share in `report --format json`
//! (its top-level `functions`) must be what the program measured, within 2.5 points; callers and
//! callees as the program calls them; a recursive function's total counted once per sample.

mod support;

use serde_json::Value;
use std::process::Command;
use support::native::build_c_program;
use support::{fsprof, report_json, serial, tempdir, ACCURACY_RATE};

const TOLERANCE: f64 = 2.5;

/// The entry of the function named `name` (its name up to ` (file)`).
fn function<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"].as_str().unwrap().split(" (").next() == Some(name))
        .unwrap_or_else(|| panic!("no function {name}: {:#}", report["functions"]))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().split(" (").next().unwrap())
        .collect()
}

#[test]
fn functions_get_the_self_and_total_time_the_program_measured() {
    let _serial = serial();
    let build = tempdir();
    let exe = build_c_program(build.path(), "functions");
    let dir = tempdir();
    let truth_path = dir.path().join("truth.json");
    let output = Command::new(fsprof())
        .args(["run", "--no-agent", "--rate", ACCURACY_RATE, "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(&exe)
        .arg("3")
        .arg(&truth_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).unwrap()).unwrap();
    let report = report_json(dir.path());
    let total = truth["total_ms"].as_f64().unwrap();
    let measured = |name: &str| truth["self_ms"][name].as_f64().unwrap() * 100.0 / total;
    let share = |name: &str, key: &str| function(&report, name)[key].as_f64().unwrap();
    let mut rows = String::new();
    let mut worst: f64 = 0.0;
    for (name, self_pct, total_pct) in [
        ("inner", measured("inner"), measured("inner")),
        (
            "outer",
            measured("outer"),
            measured("outer") + measured("inner"),
        ),
        ("lone", measured("lone"), measured("lone")),
        ("rec", measured("rec"), measured("rec")),
    ] {
        let (got_self, got_total) = (share(name, "self_percent"), share(name, "total_percent"));
        rows += &format!(
            "{name}: self {got_self:.2} (measured {self_pct:.2}), total {got_total:.2} (measured {total_pct:.2})\n"
        );
        worst = worst
            .max((got_self - self_pct).abs())
            .max((got_total - total_pct).abs());
    }
    eprintln!("{rows}");
    assert!(worst <= TOLERANCE, "{rows}{stderr}");
    // main holds all the program's work; nothing is counted twice.
    assert!(share("main", "total_percent") > 95.0, "{rows}");
    assert!(share("rec", "total_percent") <= 100.0);
    assert!(names(&function(&report, "inner")["callers"]).contains(&"outer"));
    assert!(names(&function(&report, "outer")["callees"]).contains(&"inner"));
    assert!(names(&function(&report, "outer")["callers"]).contains(&"main"));
    // The recursion's callers: main, not itself.
    assert_eq!(names(&function(&report, "rec")["callers"]), vec!["main"]);
    // The text report has the view too.
    let text = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(text.contains("Functions by self time"), "{text}");
    assert!(!text.contains(" 0.0%"), "nothing is printed as 0%:\n{text}");
}
