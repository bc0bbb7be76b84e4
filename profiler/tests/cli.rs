//! The `fsprof` binary's command line: help, version, and usage errors. (Profiling real programs
//! is tested end to end in the workspace's `tests/` package.)

use std::process::Command;

fn fsprof(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fsprof"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_the_commands_and_options() {
    let output = fsprof(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for word in ["run", "attach", "report", "Examples"] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    let help = String::from_utf8(fsprof(&["run", "--help"]).stdout).unwrap();
    for option in ["--output", "--rate", "--duration", "--idle"] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
}

#[test]
fn run_without_a_program_is_a_usage_error() {
    let output = fsprof(&["run"]);
    assert_eq!(output.status.code(), Some(2));
}

/// A temporary directory, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("fsprof-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A hand-written profile: `main > run` pushed `[output] src/main.rs:57:27`, inside which
/// `write_row` ran (3 ms on each of two threads), and 1 ms of `main > idle` without marks.
const PROFILE: &str = r#"{"format": "fsprof-profile", "version": 2,
 "meta": {"fsprof_version": "0.1.0", "mode": "run", "command": ["./app"], "pid": 42,
          "rate_hz": 1000.0, "duration_ns": 7000000, "count_idle": false, "regions": 1,
          "torn_retries": 0, "torn_dropped": 0, "threads_without_slot": 0, "mark_capacity": 64,
          "end": "the program exited with code 0"},
 "features": ["output"],
 "payloads": [{"kind": "location", "text": "src/main.rs:57:27"}],
 "stacks": [{"frames": [{"feature": 0, "payload": 0}]}, {"frames": []}],
 "threads": [{"tid": 1, "name": "main"}, {"tid": 2, "name": "worker"}],
 "native_frames": [{"function": "main", "module": "app"}, {"function": "run", "module": "app"},
                   {"function": "write_row<[u8; 8]>", "module": "app"},
                   {"function": "idle", "module": "app"}],
 "native_stacks": [{"frames": [0, 1, 2], "marks_at": [2]}, {"frames": [0, 3], "marks_at": []}],
 "samples": [
   {"thread": 0, "stack": 0, "native": 0, "count": 3, "wall_ns": 3000000, "active_ns": 3000000},
   {"thread": 1, "stack": 0, "native": 0, "count": 3, "wall_ns": 3000000, "active_ns": 3000000},
   {"thread": 0, "stack": 1, "native": 1, "count": 1, "wall_ns": 1000000, "active_ns": 1000000}]}"#;

fn profile_dir(name: &str) -> TempDir {
    let dir = TempDir::new(name);
    std::fs::write(dir.0.join("profile.json"), PROFILE).unwrap();
    dir
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn report_prints_folded_stacks() {
    let dir = profile_dir("folded");
    let path = dir.0.to_str().unwrap();
    assert_eq!(
        stdout(&fsprof(&["report", path, "--format", "folded"])),
        "main;idle 1000\nmain;run;[output] src/main.rs:57:27;write_row<[u8: 8]> 6000\n"
    );
    assert_eq!(
        stdout(&fsprof(&[
            "report",
            path,
            "--format",
            "folded",
            "--features-only"
        ])),
        "[no feature] 1000\n[output] src/main.rs:57:27 6000\n"
    );
}

#[test]
fn report_text_and_json_show_the_call_paths_of_instances() {
    let dir = profile_dir("paths");
    let path = dir.0.to_str().unwrap();
    let text = stdout(&fsprof(&["report", path]));
    assert!(
        text.contains("6.0 ms : src/main.rs:57:27\n             100% main > run\n"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&fsprof(&["report", path, "--format", "json"]))).unwrap();
    let path0 = &json["features"][0]["instances"][0]["paths"][0];
    assert_eq!(path0["functions"], serde_json::json!(["main", "run"]));
    assert_eq!(path0["cut"], false);
    assert_eq!(path0["share"], 100.0);
}

#[test]
fn report_draws_flamegraphs() {
    let dir = profile_dir("flamegraph");
    let path = dir.0.to_str().unwrap();
    for (args, file, title) in [
        (
            &[][..],
            "full.svg",
            "fsprof: native stacks with feature marks",
        ),
        (
            &["--features-only"][..],
            "marks.svg",
            "fsprof: feature marks (core samples)",
        ),
    ] {
        let svg_path = dir.0.join(file);
        let mut all = vec!["report", path, "--flamegraph", svg_path.to_str().unwrap()];
        all.extend_from_slice(args);
        let output = fsprof(&all);
        assert_eq!(stdout(&output), "");
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        assert!(svg.contains(title), "{svg}");
        assert!(svg.contains("[output] src/main.rs:57:27"));
        assert!(svg.contains("fill=\"rgb(90,140,235)\""));
    }
}

#[test]
fn report_refuses_bad_combinations() {
    let dir = profile_dir("bad");
    let path = dir.0.to_str().unwrap();
    for args in [
        &["report", path, "--features-only"][..],
        &["report", path, "--format", "json", "--features-only"][..],
        &[
            "report",
            path,
            "--format",
            "folded",
            "--flamegraph",
            "x.svg",
        ][..],
    ] {
        let output = fsprof(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("error:"), "{stderr}");
    }
    let help = String::from_utf8(fsprof(&["report", "--help"]).stdout).unwrap();
    for option in [
        "--format",
        "--features-only",
        "--flamegraph",
        "folded",
        "microseconds",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
    // A flamegraph that cannot be written is an error, not a panic.
    let output = fsprof(&["report", path, "--flamegraph", "/nonexistent/dir/x.svg"]);
    assert_eq!(output.status.code(), Some(1));
}
