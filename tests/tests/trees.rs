//! Whole process trees: `fsprof run` of a shell script that starts marked programs (two at
//! once, then a third) must record each of them, report each against the truth it measured
//! itself (`fsprof report --process PID`) and all of them together against the sum of their
//! truths; `--no-follow` must record the script alone. A program that runs short children one
//! after the other, as a build does, must have each found and its CPU time counted, and so must
//! grandchildren that shells fork right after their `exec`.

use crate::support;

use serde_json::{json, Map, Value};
use std::path::Path;
use std::process::Command;
use support::*;

/// A script that runs `fsprof-target` three times: `mixed` and `requests` at once, then
/// `pair`; each writes its truth beside the script (`mixed.json`, ...).
fn script(dir: &Path) -> std::path::PathBuf {
    let target = target();
    let truth = |name: &str| dir.join(format!("{name}.json")).display().to_string();
    let text = format!(
        "#!/bin/sh\n\
         {target} mixed 3 --truth {mixed} &\n\
         {target} requests 3 --truth {requests}\n\
         wait\n\
         {target} pair 1.5 --truth {pair}\n",
        mixed = truth("mixed"),
        requests = truth("requests"),
        pair = truth("pair"),
    );
    let path = dir.join("tree.sh");
    std::fs::write(&path, text).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

/// `fsprof run --rate ACCURACY_RATE -o DIR/out [extra] -- SCRIPT`.
fn record(dir: &Path, script: &Path, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(format!("out{}", extra.len()));
    succeeded(
        Command::new(fsprof())
            .args(["run", "--rate", ACCURACY_RATE, "-o"])
            .arg(&out)
            .args(extra)
            .arg("--")
            .arg(script),
    );
    out
}

/// The sum of several truths: each feature's and instance's time, the total, and what the total
/// may lack of the time stolen from its threads.
fn sum_of(truths: &[Value]) -> Value {
    let (mut total, mut stolen) = (0.0, 0.0);
    let mut features = Map::new();
    for truth in truths {
        total += truth["total_ms"].as_f64().unwrap();
        stolen += truth["stolen_ms"].as_f64().unwrap_or(0.0);
        for (name, feature) in truth["features"].as_object().unwrap() {
            let entry = features
                .entry(name.clone())
                .or_insert_with(|| json!({"ms": 0.0, "instances": {}}));
            entry["ms"] = json!(entry["ms"].as_f64().unwrap() + feature["ms"].as_f64().unwrap());
            for (payload, ms) in feature["instances"].as_object().unwrap() {
                let before = entry["instances"][payload].as_f64().unwrap_or(0.0);
                entry["instances"][payload] = json!(before + ms.as_f64().unwrap());
            }
        }
    }
    json!({"total_ms": total, "stolen_ms": stolen, "features": features})
}

#[test]
fn a_scripts_children_are_each_reported_against_their_truth_and_together() {
    let _serial = serial();
    again_if_stolen(|| {
        let dir = tempdir();
        let out = record(dir.path(), &script(dir.path()), &[]);
        let report = report_json(&out);
        let processes = report["processes"].as_array().unwrap();
        let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
        assert_eq!(
            processes.len(),
            4,
            "the script and its three programs:\n{text}"
        );
        let script_pid = report["meta"]["pid"].as_u64().unwrap();
        let mut truths = Vec::new();
        for scenario in ["mixed", "requests", "pair"] {
            let process = processes
                .iter()
                .find(|p| {
                    p["command"]
                        .as_str()
                        .unwrap()
                        .contains(&format!(" {scenario} "))
                })
                .unwrap_or_else(|| panic!("no process ran {scenario}:\n{text}"));
            assert_eq!(process["parent"].as_u64(), Some(script_pid), "{process}");
            let pid = process["pid"].as_u64().unwrap().to_string();
            let truth: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.path().join(format!("{scenario}.json"))).unwrap(),
            )
            .unwrap();
            eprintln!("{scenario} (pid {pid}):");
            assert_shares_match(&report_json_with(&out, &["--process", &pid]), &truth);
            truths.push(truth);
        }
        eprintln!("all together:");
        assert_shares_match(&report, &sum_of(&truths));
        assert!(text.contains("Processes: 4"), "{text}");
        // Flamegraphs and folded stacks start each stack with its process.
        for (frames, _) in folded(&out) {
            assert!(frames[0].starts_with("[pid "), "{frames:?}");
        }
    });
}

#[test]
fn no_follow_records_the_script_alone() {
    let _serial = serial();
    let dir = tempdir();
    let out = record(dir.path(), &script(dir.path()), &["--no-follow"]);
    let report = report_json(&out);
    assert_eq!(report["processes"].as_array().map(Vec::len), Some(0));
    // Built-in features aside (its `wait` for the children, from its stacks).
    assert!(
        (report["features"].as_array().unwrap().iter()).all(|f| f["builtin"] == true),
        "the script marks nothing: {}",
        report["features"]
    );
    // Each program ran and measured itself all the same.
    for scenario in ["mixed", "requests", "pair"] {
        assert!(dir.path().join(format!("{scenario}.json")).exists());
    }
}

/// `fsprof attach --children` of a running script records the program it started: its window's
/// shares match the program's truth in that window, and the script and the program are left
/// running, untraced.
#[test]
fn attach_children_records_a_running_scripts_program() {
    let _serial = serial();
    let dir = tempdir();
    let ready = dir.path().join("ready");
    let truth_path = dir.path().join("mixed.json");
    let timeline = dir.path().join("timeline");
    let text = format!(
        "#!/bin/sh\n{} mixed 6 --truth {} --ready {} --timeline {} &\nwait\n",
        target(),
        truth_path.display(),
        ready.display(),
        timeline.display()
    );
    let path = dir.path().join("waiting.sh");
    std::fs::write(&path, text).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    let mut script = Guarded(Command::new(&path).spawn().unwrap());
    let program: u32 = wait_for_file(&ready, std::time::Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    let out = dir.path().join("out");
    let status = Command::new(fsprof())
        .args([
            "attach",
            "--children",
            "--rate",
            ACCURACY_RATE,
            "--duration",
            "3",
            "-o",
        ])
        .arg(&out)
        .arg(script.pid().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    for pid in [script.pid(), program] {
        let (state, tracer) = state_and_tracer(pid);
        assert!(matches!(state, 'R' | 'S'), "{pid} left in state {state}");
        assert_eq!(tracer, 0, "{pid} left traced");
    }
    let report = report_json(&out);
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{processes:?}");
    assert_eq!(processes[0]["pid"].as_u64(), Some(program as u64));
    assert!(
        script
            .wait_with_deadline(std::time::Duration::from_secs(20))
            .success(),
        "the script did not finish normally"
    );
    let own = report_json_with(&out, &["--process", &program.to_string()]);
    // The window's truth: the program's random mix over 3 s differs from its 6 s run's by
    // about a point (validation +2.59 against the whole run once, bound 2.5).
    let truth = truth_in_window(&timeline, &report);
    assert!(truth_path.exists());
    assert_shares_match(&own, &truth);
    assert_shares_match(&report, &truth); // the script itself only waits
}

/// Programs that sleep 30 ms and then spend 80 ms in one mark, one after the other, are each
/// read from their first marks: their regions are announced (`FSPROF_ANNOUNCE`), and their maps
/// are otherwise looked at only every 100 ms, so that without the announcement those 80 ms
/// would be read without marks. One started without the variable (`env -u`), whose region is not announced,
/// is looked for as often as before (every few ms), and read as well.
#[test]
fn young_childrens_first_marks_are_read_announced_or_not() {
    let _serial = serial();
    again_if_stolen(|| {
        let dir = tempdir();
        let target = target();
        let truth = |name: &str| {
            dir.path()
                .join(format!("{name}.json"))
                .display()
                .to_string()
        };
        let runs = ["first", "second", "third", "bare"];
        let mut text = String::from("#!/bin/sh\n");
        for name in runs {
            let unset = if name == "bare" {
                "env -u FSPROF_ANNOUNCE "
            } else {
                ""
            };
            text += &format!("{unset}{target} early 0.6 --truth {}\n", truth(name));
        }
        let path = dir.path().join("early.sh");
        std::fs::write(&path, text).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        let out = record(dir.path(), &path, &[]);
        let report = report_json(&out);
        let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
        let processes = report["processes"].as_array().unwrap();
        let mut truths = Vec::new();
        for name in runs {
            let process = processes
                .iter()
                .find(|p| p["command"].as_str().unwrap().contains(&truth(name)))
                .unwrap_or_else(|| panic!("no process wrote {name}.json:\n{text}"));
            let pid = process["pid"].as_u64().unwrap();
            let truth: Value =
                serde_json::from_str(&std::fs::read_to_string(truth(name)).unwrap()).unwrap();
            // Each process's own share of its first mark (too few samples for all its features).
            let early = |report: &Value| {
                let validation = (report["features"].as_array().unwrap().iter())
                    .find(|f| f["name"] == "validation");
                (validation
                    .and_then(|f| f["instances"].as_array())
                    .into_iter()
                    .flatten())
                .find(|i| i["payload"] == "early")
                .map_or(0.0, |i| i["percent"].as_f64().unwrap())
            };
            let own = report_json_with(&out, &["--process", &pid.to_string()]);
            let expected = truth_share(
                truth["features"]["validation"]["instances"]["early"]
                    .as_f64()
                    .unwrap(),
                &truth,
            )
            .1;
            eprintln!(
                "{name} (pid {pid}): early {:.2}% of its time, truth {expected:.2}%",
                early(&own)
            );
            assert!(
                early(&own) > expected / 2.0,
                "{name}: its first 80 ms read without their mark ({:.2}% against {expected:.2}%):\n{text}",
                early(&own)
            );
            truths.push(truth);
        }
        eprintln!("all together:");
        assert_shares_match(&report, &sum_of(&truths));
    });
}

/// Twenty children of 30 ms of CPU each, one after the other, under a parent that only waits
/// (`tests/c/short_children.c`, which adds up their time on a CPU and waiting for one, from the
/// kernel's counts), at the defaults: every child in the report, and their time from 75 to 110%
/// of the truth (0.86-0.93 in 18 quiet runs, 0.83-0.94 beside two busy loops; the rest is each
/// child's first milliseconds, before it is found). The parent's
/// ticks slow to one every 40 ms while it waits (perf's samples carry the threads' time), and
/// new processes were looked for only at its ticks, and a child's samples since its own
/// previous tick were left in the rings when it exited: 6 of 20 children were not found and
/// 75 of their 600 ms counted (2026-12-03).
#[test]
fn short_children_one_after_the_other_are_all_found_and_counted() {
    let _serial = serial();
    again_if_stolen(short_children_found_and_counted);
}

fn short_children_found_and_counted() {
    let dir = tempdir();
    let program = support::native::build_c_program(dir.path(), "short_children");
    let truth_path = dir.path().join("truth.json");
    let out = dir.path().join("out");
    succeeded(
        Command::new(fsprof())
            .args(["run", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&program)
            .args(["20", "30", "--truth"])
            .arg(&truth_path),
    );
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).unwrap()).unwrap();
    let report = report_json(&out);
    let children: Vec<&Value> = (report["processes"].as_array().unwrap().iter())
        .filter(|p| p["command"].as_str().unwrap().contains("burn"))
        .collect();
    let counted: f64 = children.iter().map(|p| p["ms"].as_f64().unwrap()).sum();
    let truth_ms = truth["children_ms"].as_f64().unwrap();
    let found = format!(
        "{} of 20 children found, {counted:.1} of their {truth_ms:.1} ms counted",
        children.len()
    );
    assert_eq!(children.len(), 20, "{found}");
    assert!((0.75..=1.10).contains(&(counted / truth_ms)), "{found}");
}

/// Grandchildren forked right after their parent's `exec`: a shell's loop runs `sh -c "burn;
/// true"` ten times, and each such shell forks its `burn` (30 ms of CPU, timed by itself) at
/// once, while the kernel does not watch it yet (its `exec` unwatched it, so its fork wakes
/// nothing): the recording must go on looking for new processes until it does. All ten must be
/// found, with at least three quarters of their CPU time counted.
#[test]
fn grandchildren_forked_at_once_after_an_exec_are_all_found() {
    let _serial = serial();
    again_if_stolen(grandchildren_found);
}

fn grandchildren_found() {
    let dir = tempdir();
    let program = support::native::build_c_program(dir.path(), "short_children");
    let out = dir.path().join("out");
    let inner = format!("{} burn 30; true", program.display());
    let script = format!("for i in 1 2 3 4 5 6 7 8 9 10; do sh -c '{inner}'; done");
    succeeded(
        Command::new(fsprof())
            .args(["run", "-o"])
            .arg(&out)
            .args(["--", "sh", "-c", &script]),
    );
    let report = report_json(&out);
    let burns: Vec<&Value> = (report["processes"].as_array().unwrap().iter())
        .filter(|p| p["command"].as_str().unwrap().contains(" burn 30"))
        .filter(|p| !p["command"].as_str().unwrap().starts_with("sh"))
        .collect();
    let counted: f64 = burns.iter().map(|p| p["ms"].as_f64().unwrap()).sum();
    let found = format!(
        "{} of 10 grandchildren found, {counted:.1} of their 300 ms counted",
        burns.len()
    );
    assert_eq!(burns.len(), 10, "{found}");
    assert!(counted >= 0.75 * 300.0, "{found}");
}
