//! Running a program under `fsprof run` with the agent, and reading features out of its JSON
//! report: shared by the tests of the built-in features and of programs nobody here wrote.

use super::*;
use std::ffi::OsStr;

/// `fsprof run --rate ACCURACY_RATE -o DIR [args] -- PROGRAM...` with `env` added to the
/// environment; fails the test unless fsprof and the program succeed. Returns fsprof's stderr
/// (the report).
pub fn run(dir: &Path, args: &[&str], env: &[(&str, &str)], program: &[&OsStr]) -> String {
    let output = Command::new(fsprof())
        .envs(env.iter().copied())
        .arg("run")
        .args(["--rate", ACCURACY_RATE])
        .arg("-o")
        .arg(dir)
        .args(args)
        .arg("--")
        .args(program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "fsprof run failed: {stderr}");
    assert!(stderr.contains("exited with code 0"), "{stderr}");
    stderr
}

pub fn feature<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
}

/// A feature's share as the truths count it (see [`timed_share`]).
pub fn percent(report: &Value, name: &str) -> f64 {
    feature(report, name).map_or(0.0, |f| timed_share(report, f))
}

pub fn payloads(report: &Value, name: &str) -> Vec<String> {
    feature(report, name).map_or(Vec::new(), |f| {
        f["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["payload"].as_str().unwrap().to_owned())
            .collect()
    })
}
