//! The report's form: the time outside every feature, the line that says which time counts, the
//! flamegraphs written and redrawn; and its thread view: how the counted time divides between
//! threads, and `fsprof report --thread NAME|TID` limiting a report to one of them.

use crate::support;

use serde_json::Value;
use std::process::Command;
use support::{fsprof, report_json, run_target, serial, tempdir, truth, TOLERANCE};

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

#[test]
fn the_report_says_what_was_outside_every_feature_and_draws_both_flamegraphs() {
    let _serial = serial();
    let dir = tempdir();
    run_target(dir.path(), "mixed", 3.0, &[]);
    let report = report_json(dir.path());
    // The time outside every feature (the program's features do not nest): what the program
    // measured outside its marks, in JSON and on the text report's "No feature" line.
    let truth = truth(dir.path());
    let marked: f64 = truth["features"]
        .as_object()
        .unwrap()
        .values()
        .map(|f| f["ms"].as_f64().unwrap())
        .sum();
    let measured = 100.0 - marked * 100.0 / truth["total_ms"].as_f64().unwrap();
    let (no_feature, no_feature_ms, total) = (
        report["no_feature_percent"].as_f64().unwrap(),
        report["no_feature_ms"].as_f64().unwrap(),
        report["total_ms"].as_f64().unwrap(),
    );
    assert!(
        (no_feature - measured).abs() <= TOLERANCE,
        "no feature {no_feature:.2}% against {measured:.2}% measured"
    );
    assert!((no_feature_ms * 100.0 / total - no_feature).abs() < 0.01);
    let text = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    let line = format!("No feature: {no_feature:.2}% ({no_feature_ms:.0} / {total:.0} ms)");
    assert!(text.contains(&line), "no {line:?} in:\n{text}");
    // The second line says which time counts.
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("time counted: threads running")),
        "{text}"
    );
    // Recording wrote both flamegraphs; `report --flamegraph --features-only` redraws one.
    for svg in ["flamegraph.svg", "features.svg"] {
        let content = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        assert!(content.trim_end().ends_with("</svg>"), "{svg}");
        assert!(content.contains("rule-a"), "{svg} has no instance frame");
    }
    let redrawn = dir.path().join("redrawn.svg");
    let status = Command::new(fsprof())
        .arg("report")
        .arg(dir.path())
        .arg("--features-only")
        .arg("--flamegraph")
        .arg(&redrawn)
        .status()
        .unwrap();
    assert!(status.success());
    let content = std::fs::read_to_string(&redrawn).unwrap();
    assert!(content.contains("[no feature]") && content.contains("rule-a"));
    assert!(
        !content.contains("spin"),
        "native frames in a features-only flamegraph"
    );
}

/// A profile is a file anyone may have written: whatever its texts hold, no report prints a
/// control character (an escape sequence would reach the terminal) other than the line breaks
/// and tabs of its own layout.
#[test]
fn escape_sequences_in_a_profile_never_reach_the_terminal() {
    let _shared = support::shared();
    let dir = tempdir();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/esc-profile.json");
    std::fs::copy(&data, dir.path().join("profile.json")).unwrap();
    for format in ["text", "json", "folded", "speedscope"] {
        let output = Command::new(fsprof())
            .arg("report")
            .arg(dir.path())
            .args(["--format", format])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        let bad: Vec<(usize, &str)> = (text.lines().enumerate())
            .filter(|(_, line)| line.chars().any(|c| c.is_control() && c != '\t'))
            .take(5)
            .collect();
        assert!(bad.is_empty(), "{format}: control characters on {bad:?}");
    }
}

/// `fsprof report` refuses what is not a profile file at once, with the reason: a device that
/// never ends (`/dev/zero`) and a FIFO no one writes (which would block the read).
#[test]
fn report_refuses_devices_and_fifos_at_once() {
    let _shared = support::shared();
    let dir = tempdir();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for path in [std::path::Path::new("/dev/zero"), fifo.as_path()] {
        let child = Command::new(fsprof())
            .arg("report")
            .arg(path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (status, stderr) =
            support::Guarded(child).stderr_with_deadline(std::time::Duration::from_secs(10));
        assert!(!status.success());
        assert!(
            stderr.contains("not a regular file"),
            "{}: {stderr}",
            path.display()
        );
    }
}

/// Links planted in an existing output directory under the names fsprof writes are replaced,
/// never written through: the files they point to are left as they were, or not created.
#[test]
fn links_planted_in_the_output_directory_are_not_followed() {
    let _shared = support::shared();
    let dir = tempdir();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let absent = dir.path().join("absent");
    for (name, to) in [
        ("profile.json", &victim),
        ("report.txt", &victim),
        (".fsprof-write-test", &absent),
        ("flamegraph.svg", &absent),
    ] {
        std::os::unix::fs::symlink(to, out.join(name)).unwrap();
    }
    let status = Command::new(fsprof())
        .args(["run", "-o"])
        .arg(&out)
        .args(["--", "/bin/true"])
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!absent.exists());
    let profile = std::fs::symlink_metadata(out.join("profile.json")).unwrap();
    assert!(profile.file_type().is_file());
}

/// A disk that takes no more (here a file-size limit, which fails writes as a full disk does, for
/// fsprof and the program alike): the report is printed whole (on stderr, a pipe), the files not written are named,
/// none is left partial (before: the report lost, a 0- or 4096-byte profile.json left), and fsprof
/// exits with the program's code (before: 1).
#[test]
fn a_full_disk_loses_only_the_files_and_says_which() {
    use std::os::unix::process::CommandExt;
    let _shared = support::shared();
    let dir = tempdir();
    let out = dir.path().join("out");
    const LIMIT: u64 = 2048;
    let mut command = Command::new(fsprof());
    command.args(["run", "-o"]).arg(&out).args([
        "--",
        "sh",
        "-c",
        "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exit 3",
    ]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            match libc::setrlimit(libc::RLIMIT_FSIZE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("No feature: "),
        "no report printed: {stderr}"
    );
    assert!(stderr.contains("not written: "), "{stderr}");
    assert!(stderr.contains("profile.json"), "{stderr}");
    let left: Vec<(String, u64)> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, entry.metadata().unwrap().len())
        })
        .collect();
    assert!(
        left.iter()
            .all(|(name, len)| name != "profile.json" && !name.ends_with(".tmp") && *len < LIMIT),
        "partial files left: {left:?}"
    );
}

/// A stderr that takes nothing (`fsprof run ... 2>&1 | head -1`, the reader gone): the program's
/// exit code and the files all the same (before: a panic on the first message that failed, exit
/// 101).
#[test]
fn a_closed_stderr_costs_nothing_but_the_messages() {
    let _shared = support::shared();
    let dir = tempdir();
    let out = dir.path().join("out");
    let mut child = Command::new(fsprof())
        .args(["run", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "exit 3"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert!(out.join("profile.json").is_file());
}
