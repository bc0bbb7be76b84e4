//! Native stacks, end to end: targets with known call chains (built without frame pointers) are
//! profiled with the real binary, and the folded output must show each chain exactly, with the
//! mark right after the function that pushed it, in at least 90% of the mark's time; stacks must
//! reach the thread's root. The chains come from the targets' own truth files.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use support::native::*;
use support::*;

/// Folded stacks of a saved profile: (frames, µs).
fn folded(dir: &Path) -> Vec<(Vec<String>, u64)> {
    let output = Command::new(fsprof())
        .args(["report", "--format", "folded"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            (
                stack.split(';').map(str::to_owned).collect(),
                count.parse().unwrap(),
            )
        })
        .collect()
}

/// For each chain of the truth: the share of its mark's time whose stack holds the chain's
/// frames consecutively, immediately followed by the mark; and the share of all time whose stack
/// reaches a root (`_start` or the thread start routine), outermost first.
fn check_chains(dir: &Path, truth: &Value) {
    let stacks = folded(&dir.join("out"));
    let total: u64 = stacks.iter().map(|(_, us)| us).sum();
    let rooted: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            matches!(
                frames[0].as_str(),
                "_start" | "start_thread" | "clone3" | "__clone3" | "clone" | "__clone"
            )
        })
        .map(|(_, us)| us)
        .sum();
    let mut summary = format!(
        "stacks reaching their root: {:.1}% of {total} µs\n",
        rooted as f64 * 100.0 / total as f64
    );
    let mut failures = Vec::new();
    for chain in truth["chains"].as_array().unwrap() {
        let mark = format!(
            "[{}] {}",
            chain["feature"].as_str().unwrap(),
            chain["instance"].as_str().unwrap()
        );
        let mut expected: Vec<String> = chain["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect();
        expected.push(mark.clone());
        let with_mark: Vec<_> = stacks
            .iter()
            .filter(|(frames, _)| frames.contains(&mark))
            .collect();
        let in_mark: u64 = with_mark.iter().map(|(_, us)| us).sum();
        let exact: u64 = with_mark
            .iter()
            .filter(|(frames, _)| {
                frames
                    .windows(expected.len())
                    .any(|w| w == expected.as_slice())
            })
            .map(|(_, us)| us)
            .sum();
        let share = exact as f64 * 100.0 / in_mark.max(1) as f64;
        summary += &format!("{}: {share:.1}% of {in_mark} µs\n", expected.join(";"));
        if in_mark == 0 || share < 90.0 {
            failures.push(expected.join(";"));
        }
    }
    eprintln!("{summary}");
    if let Some((frames, _)) = stacks.iter().max_by_key(|(_, us)| *us) {
        eprintln!("heaviest stack: {}", frames.join(";"));
    }
    assert!(
        failures.is_empty(),
        "chains found in under 90% of their mark's time: {failures:?}\n{summary}"
    );
    assert!(
        rooted * 100 >= total * 95,
        "stacks reach their root in under 95% of the time:\n{summary}"
    );
}

#[test]
fn a_rust_release_build_without_frame_pointers_unwinds_to_the_exact_chain() {
    let _serial = serial();
    let dir = tempdir();
    let chain = fsprof().with_file_name("fsprof-chain");
    let status = Command::new(fsprof())
        .args(["run", "--no-agent", "-o"])
        .arg(dir.path().join("out"))
        .arg("--")
        .arg(&chain)
        .args(["3", "--truth"])
        .arg(dir.path().join("truth.json"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    check_chains(dir.path(), &truth(dir.path()));
}

#[test]
fn a_c_program_whose_leaf_is_in_a_shared_library_without_frame_pointers() {
    let _serial = serial();
    let dir = tempdir();
    let program = build_c_chain(dir.path());
    assert_separate_frames_without_frame_pointer(&program.exe, &["c_outer", "c_middle"]);
    let status = Command::new(fsprof())
        .args(["run", "--no-agent", "-o"])
        .arg(dir.path().join("out"))
        .arg("--")
        .arg(&program.exe)
        .args(["3", "--truth"])
        .arg(dir.path().join("truth.json"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    check_chains(dir.path(), &truth(dir.path()));
}

#[test]
fn a_binary_deleted_while_it_runs_is_still_symbolized() {
    let _serial = serial();
    let dir = tempdir();
    let copy = dir.path().join("doomed-chain");
    std::fs::copy(fsprof().with_file_name("fsprof-chain"), &copy).unwrap();
    let ready = dir.path().join("ready");
    let mut fsprof = Guarded(
        Command::new(fsprof())
            .args(["run", "--no-agent", "-o"])
            .arg(dir.path().join("out"))
            .arg("--")
            .arg(&copy)
            .args(["2", "--ready"])
            .arg(&ready)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_file(&ready, std::time::Duration::from_secs(10));
    std::fs::remove_file(&copy).unwrap();
    assert!(fsprof
        .wait_with_deadline(std::time::Duration::from_secs(30))
        .success());
    let stacks = folded(&dir.path().join("out"));
    let named: u64 = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| f == "fsprof_chain::alpha_inner"))
        .map(|(_, us)| us)
        .sum();
    let total: u64 = stacks.iter().map(|(_, us)| us).sum();
    assert!(
        named * 4 >= total,
        "alpha_inner named in {named} of {total} µs"
    );
}
