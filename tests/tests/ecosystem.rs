//! fsprof's profiles in other tools' hands: `fsprof report --format pprof`, read by Go's own
//! `go tool pprof` (Debian's `golang-go`; `.ci/run` installs it), must show the report's total,
//! each feature's time through its `feature` label and each instance's through its `instance`
//! label; `fsprof diff` of one program at two sizes must show how each instance grew.

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::interrupts::ptrace_stops_late;
use support::*;

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

/// `fsprof report DIR --format FORMAT -o DIR/NAME`; returns the file's path.
fn report_file(dir: &Path, format: &str, name: &str) -> std::path::PathBuf {
    let file = dir.join(name);
    let status = Command::new(fsprof())
        .arg("report")
        .arg(dir)
        .args(["--format", format, "-o"])
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success(), "fsprof report --format {format} failed");
    file
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
    let file = report_file(dir.path(), "pprof", "profile.pb.gz");
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
    // The program's mapping carries its build id, as `readelf -n` reads it from the file.
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(target())
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&notes.stdout);
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {}: {notes}", target()));
    let raw = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&file)
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout);
    let mapping = format!("{} {build_id}", target());
    assert!(raw.contains(&mapping), "no mapping {mapping} in:\n{raw}");
}

/// `fsprof diff` of one program at size x and 2x (the Chez seed's use): the instance whose work
/// grows with the square of its input shows at about 4x, the linear one at about 2x, each
/// within 15% of the ratio the program measured; the JSON has the fields, and the
/// differential flamegraph is drawn.
#[test]
fn a_diff_of_one_program_at_two_sizes_shows_which_instance_grows_faster() {
    let _serial = serial();
    again_if_stolen(|| {
        let dir = tempdir();
        let growth = fsprof().with_file_name("growth");
        for n in ["60", "120"] {
            let status = Command::new(fsprof())
                .args(["run", "--rate", "1000", "-o"])
                .arg(dir.path().join(n))
                .arg("--")
                .arg(&growth)
                .args([n, "--truth"])
                .arg(dir.path().join(format!("{n}.json")))
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let svg = dir.path().join("diff.svg");
        let output = Command::new(fsprof())
            .arg("diff")
            .args([dir.path().join("60"), dir.path().join("120")])
            .args(["--format", "json", "--flamegraph"])
            .arg(&svg)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let diff: Value = serde_json::from_slice(&output.stdout).unwrap();
        let truths: Vec<Value> = ["60", "120"]
            .iter()
            .map(|n| {
                serde_json::from_str(
                    &std::fs::read_to_string(dir.path().join(format!("{n}.json"))).unwrap(),
                )
                .unwrap()
            })
            .collect();
        let work = diff["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "work")
            .unwrap_or_else(|| panic!("no work feature: {diff:#}"));
        for field in ["a_ms", "b_ms", "a_percent", "b_percent"] {
            assert!(work[field].is_f64(), "{field}: {work:#}");
        }
        let mut checked = String::new();
        for (instance, expected) in [("linear", 2.0), ("quadratic", 4.0)] {
            let found = work["instances"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["payload"] == instance)
                .unwrap_or_else(|| panic!("no {instance}: {work:#}"));
            let ratio = found["ratio"].as_f64().unwrap();
            let measured = |t: &Value| {
                t["features"]["work"]["instances"][instance]
                    .as_f64()
                    .unwrap()
            };
            let truth = measured(&truths[1]) / measured(&truths[0]);
            checked +=
                &format!("{instance}: x{ratio:.2} (measured x{truth:.2}, expected x{expected})\n");
            assert!((ratio / truth - 1.0).abs() < 0.15, "{checked}");
            // The program did grow as designed (it spins on the clock, step by step: on a loaded
            // machine, steps overrun when it loses its CPU; the check above is fsprof's).
            assert!((truth / expected - 1.0).abs() < 0.25, "{checked}");
            let (a, b) = (
                found["a_ms"].as_f64().unwrap(),
                found["b_ms"].as_f64().unwrap(),
            );
            assert!((b / a / ratio - 1.0).abs() < 1e-9, "{found:#}");
        }
        eprintln!("{checked}");
        let svg = std::fs::read_to_string(svg).unwrap();
        assert!(svg.contains("fsprof diff") && svg.contains("[work] quadratic"));
    });
}

/// A program instrumented with `tracing` spans alone, subscribed with `fsprof_tracing::layer()`:
/// each span name is a feature, each span's call site (or its `page` field) an instance, with
/// the time the program measured around its spans, within the usual bound.
#[test]
fn tracing_spans_are_features_with_the_time_the_program_measured() {
    let _serial = serial();
    let dir = tempdir();
    let status = Command::new(fsprof())
        .args(["run", "--rate", ACCURACY_RATE, "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(fsprof().with_file_name("spans"))
        .args(["3", "--truth"])
        .arg(dir.path().join("truth.json"))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let report = report_json(dir.path());
    assert_shares_match(&report, &truth(dir.path()));
}

/// A real crate's spans: the `h2` crate from crates.io opens `tracing` spans in its connection
/// code, and `tests/examples/h2_spans.rs` (an HTTP/2 server and client on loopback, no marks of
/// their own, only the layer) gets them as features, named after the spans, their instances the
/// call sites in h2's source.
#[test]
fn a_crates_own_tracing_spans_become_features() {
    let _serial = serial();
    let dir = tempdir();
    let example = fsprof().parent().unwrap().join("examples/h2_spans");
    let output = Command::new(fsprof())
        .args(["run", "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(&example)
        .arg("2")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (`cargo test --workspace` builds it)",
                example.display()
            )
        });
    assert!(output.status.success(), "{output:?}");
    let report = report_json(dir.path());
    let feature = |name: &str| {
        report["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name} feature: {report:#}"))
            .clone()
    };
    let connection = feature("Connection");
    let site = connection["instances"][0]["payload"].as_str().unwrap();
    assert!(
        site.starts_with("h2-0.4.") && site.contains("/src/proto/connection.rs:"),
        "{connection:#}"
    );
    assert!(
        connection["percent"].as_f64().unwrap() > 5.0,
        "{connection:#}"
    );
    feature("FramedWrite::flush");
}

/// `fsprof report --format speedscope` is valid against the schema the `speedscope` npm package
/// ships (`tests/data/`, checked with Python's `jsonschema`, Debian's `python3-jsonschema`),
/// has one profile per thread with time, and its weights add up to the report's total.
#[test]
fn a_speedscope_file_follows_speedscopes_schema_and_adds_up_to_the_report() {
    let _serial = serial();
    let validator = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .status()
        .is_ok_and(|s| s.success());
    if !validator {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3's jsonschema is not installed: apt-get install python3-jsonschema"
        );
        eprintln!("python3-jsonschema is not installed: the speedscope schema is not checked");
        return;
    }
    let dir = tempdir();
    run_target_with_agent(dir.path(), "pair", 2.0);
    let file = report_file(dir.path(), "speedscope", "profile.speedscope.json");
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/speedscope-file-format-schema.json");
    // Valid, and the validator is not blind: the same file without its frames is refused.
    let validate = |drop_shared: bool| {
        let script = "import json, sys, jsonschema\n\
                      doc = json.load(open(sys.argv[2]))\n\
                      if sys.argv[3] == '1': del doc['shared']\n\
                      jsonschema.validate(doc, json.load(open(sys.argv[1])))";
        Command::new("python3")
            .args(["-c", script])
            .arg(&schema)
            .arg(&file)
            .arg(if drop_shared { "1" } else { "0" })
            .output()
            .unwrap()
    };
    let valid = validate(false);
    assert!(
        valid.status.success(),
        "{}",
        String::from_utf8_lossy(&valid.stderr)
    );
    assert!(!validate(true).status.success());
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let report = report_json(dir.path());
    let profiles = doc["profiles"].as_array().unwrap();
    assert!(
        profiles.len() >= 2,
        "one profile per thread with time: {profiles:#?}"
    );
    let weights: f64 = (profiles.iter())
        .flat_map(|p| p["weights"].as_array().unwrap())
        .map(|w| w.as_f64().unwrap())
        .sum();
    let total_ms = report["total_ms"].as_f64().unwrap();
    assert!(
        (weights / 1e6 - total_ms).abs() < 0.01,
        "{weights} ns, report {total_ms} ms"
    );
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let mark = format!("[{}]", report["features"][0]["name"].as_str().unwrap());
    assert!(
        frames
            .iter()
            .any(|f| f["name"].as_str().unwrap().starts_with(&mark)),
        "no {mark} frame"
    );
}

/// While recording on a terminal (a pseudo-terminal from util-linux's `script`), fsprof draws a
/// status line on stderr once a second (elapsed time, samples, threads, the top features so
/// far) and clears it before the report, when the program's output does not go to that
/// terminal; when it does, or with stderr not a terminal, there is none.
#[test]
fn a_status_line_shows_progress_on_a_terminal_and_nowhere_else() {
    let _serial = serial();
    let dir = tempdir();
    let in_terminal = |redirect: &str| {
        let command = format!(
            "{} run -o {} -- {} mixed 2.5 --truth {} {redirect}",
            fsprof().display(),
            dir.path().join(format!("tty{}", redirect.len())).display(),
            target(),
            dir.path().join("truth.json").display()
        );
        let output = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .output()
            .unwrap_or_else(|e| panic!("script (util-linux's bsdutils): {e}"));
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    // The program writes to the terminal: no line over its output.
    assert!(!in_terminal("").contains("\x1b[2K"));
    let text = in_terminal("> /dev/null");
    let clear = "\r\x1b[2K";
    let first = text
        .find(&format!("{clear}fsprof: 1 s · "))
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let line = &text[first + clear.len()..];
    let line = &line[..line.find('\r').unwrap_or(line.len())];
    assert!(
        line.contains(" samples · 1 thread · validation "),
        "{line:?}"
    );
    // Cleared before the report.
    let last_status = text.rfind(" · ").unwrap();
    let last_clear = text.rfind(clear).unwrap();
    let summary = text.find(" samples of 1 thread").expect("the report");
    assert!(last_status < last_clear && last_clear < summary, "{text:?}");
    let piped = run_target(dir.path(), "mixed", 1.5, &[]);
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("\x1b["));
}

/// Whether the shell wrote its exit line to `file` (it creates the file before it writes).
fn exited(file: &Path) -> bool {
    std::fs::read_to_string(file).is_ok_and(|text| text.ends_with('\n'))
}

/// A tmux server of its own, killed when dropped.
struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.0])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tmux: {e} (apt-get install tmux)"));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The pane's text, polled until `done` holds for it or `limit` passes.
    fn wait_for(&self, limit: std::time::Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let pane = self.run(&["capture-pane", "-p", "-t", "top"]);
            if done(&pane) || std::time::Instant::now() > deadline {
                return pane;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// `fsprof top -- PROGRAM` in a real terminal (tmux): a live table of the features and their
/// instances, with the shares of the last second and of all time, a header with the program
/// and its pid; `q` gives the terminal back, and fsprof exits with the program's code once it
/// ends.
#[test]
fn fsprof_top_shows_the_features_live_and_q_gives_the_terminal_back() {
    let _serial = serial();
    let dir = tempdir();
    let exit = dir.path().join("exit");
    let tmux = Tmux(format!("fsprof-test-{}", std::process::id()));
    let command = format!(
        "{} top -- {} mixed 10 --truth {}; echo EXIT=$? > {}; sleep 60",
        fsprof().display(),
        target(),
        dir.path().join("truth.json").display(),
        exit.display()
    );
    let size = ["-x", "120", "-y", "30"];
    tmux.run(&[&["new-session", "-d", "-s", "top"][..], &size, &[&command]].concat());
    let wanted = [
        "fsprof top: fsprof-target (pid ",
        "now %",
        "validation",
        "  rule-a",
        "output",
    ];
    let pane = tmux.wait_for(std::time::Duration::from_secs(15), |pane| {
        wanted.iter().all(|w| pane.contains(w))
    });
    assert!(wanted.iter().all(|w| pane.contains(w)), "{pane}");
    // Rows: "  41.0     44.5       0.90  validation": shares between 0 and 100.
    let validation = pane.lines().find(|l| l.ends_with("validation")).unwrap();
    let numbers: Vec<f64> = validation
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        numbers.len() == 3 && numbers[..2].iter().all(|p| (1.0..=100.0).contains(p)),
        "{validation}"
    );
    // Pressed while the program runs (10 s: found on screen within 15 s), which fsprof then
    // waits for.
    tmux.run(&["send-keys", "-t", "top", "q"]);
    let pane = tmux.wait_for(std::time::Duration::from_secs(30), |_| exited(&exit));
    let code = std::fs::read_to_string(&exit).unwrap_or_default();
    assert_eq!(code.trim(), "EXIT=0", "{pane}");
    assert!(!pane.contains("now %"), "the table is still shown: {pane}");
    assert!(pane.contains("fsprof: waiting for the program"), "{pane}");
}

/// `fsprof top --agent` on a C program whose allocations the agent marks: the instance, a call
/// site the profile keeps as an address until recording ends, is shown by the name the report
/// gives it (`main (…/strdups.c:23)`), found while the program runs, not as an address.
#[test]
fn fsprof_top_names_call_sites_while_recording() {
    let _serial = serial();
    let dir = tempdir();
    let exe = support::native::build_c_program(dir.path(), "strdups");
    let exit = dir.path().join("exit");
    let tmux = Tmux(format!("fsprof-test-names-{}", std::process::id()));
    let command = format!(
        "{} top --agent -- {} 8 --truth {}; echo EXIT=$? > {}; sleep 60",
        fsprof().display(),
        exe.display(),
        dir.path().join("truth.json").display(),
        exit.display()
    );
    let size = ["-x", "120", "-y", "30"];
    tmux.run(&[&["new-session", "-d", "-s", "top"][..], &size, &[&command]].concat());
    let named = |pane: &str| {
        (pane.lines()).any(|line| line.contains(" main (") && line.contains("strdups.c:"))
    };
    let pane = tmux.wait_for(std::time::Duration::from_secs(20), named);
    assert!(named(&pane), "{pane}");
    // No instance row (three numbers, then its name) is an address.
    let addresses: Vec<&str> = (pane.lines())
        .filter(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.len() >= 4
                && words[..3].iter().all(|w| w.parse::<f64>().is_ok())
                && words[3].starts_with("0x")
        })
        .collect();
    assert!(addresses.is_empty(), "{pane}");
    tmux.run(&["send-keys", "-t", "top", "q"]);
    let pane = tmux.wait_for(std::time::Duration::from_secs(30), |_| exited(&exit));
    let code = std::fs::read_to_string(&exit).unwrap_or_default();
    assert_eq!(code.trim(), "EXIT=0", "{pane}");
}

/// `fsprof top` at the defaults on a program nobody marked (`unmarked`: formatting, regex,
/// serialization, sorting, each timed by the program): the live table lists the features the
/// report's rules find in the native stacks, with the report's instance names (the program's
/// lines), and each feature's share of all time so far within its bound of what the program
/// measured over its whole run (its rounds repeat every few milliseconds: a share at any moment
/// is the whole run's).
#[test]
fn fsprof_top_lists_the_features_the_rules_find_as_the_report_does() {
    let _serial = serial();
    let dir = tempdir();
    let exit = dir.path().join("exit");
    let truth_path = dir.path().join("truth.json");
    let program = Path::new(target()).with_file_name("unmarked");
    let tmux = Tmux(format!("fsprof-test-rules-{}", std::process::id()));
    let command = format!(
        "{} top -- {} 8 --truth {}; echo EXIT=$? > {}; sleep 60",
        fsprof().display(),
        program.display(),
        truth_path.display(),
        exit.display()
    );
    let size = ["-x", "160", "-y", "50"];
    tmux.run(&[&["new-session", "-d", "-s", "top"][..], &size, &[&command]].concat());
    // The last table shown before the program ended.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    let mut table = String::new();
    while !exited(&exit) && std::time::Instant::now() < deadline {
        let pane = tmux.run(&["capture-pane", "-p", "-t", "top"]);
        if pane.contains("now %") && pane.contains("unmarked.rs:") {
            table = pane;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let code = std::fs::read_to_string(&exit).unwrap_or_default();
    assert_eq!(code.trim(), "EXIT=0", "{table}");
    // "fsprof top: unmarked (pid N) · 8 s · 2031 samples · 1 thread · q to quit"
    let samples: u64 = (table.split(" · "))
        .find_map(|part| part.strip_suffix(" samples")?.parse().ok())
        .unwrap_or_else(|| panic!("no sample count: {table}"));
    // Rows: "  41.0     44.5       0.90  sorting": now %, total %, total s, name.
    let rows: Vec<(f64, String)> = (table.lines())
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let numbers: Vec<f64> = (words.iter().take(3))
                .filter_map(|w| w.parse().ok())
                .collect();
            (numbers.len() == 3 && words.len() > 3).then(|| (numbers[1], words[3..].join(" ")))
        })
        .collect();
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).unwrap()).unwrap();
    let total = truth["total_ms"].as_f64().unwrap();
    let mut summary = format!("{samples} samples\n");
    let mut off = Vec::new();
    for name in [
        "formatting",
        "regex-compile",
        "regex-match",
        "serialization",
        "sorting",
    ] {
        let measured = truth["features"][name]["ms"].as_f64().unwrap() * 100.0 / total;
        let shown = rows.iter().position(|(_, row)| row == name);
        let share = shown.map_or(0.0, |at| rows[at].0);
        let bound = share_bound(measured, samples, TOLERANCE);
        summary +=
            &format!("  {name:<14} top {share:6.2}%  truth {measured:6.2}%  bound {bound:.2}\n");
        if shown.is_none() || (share - measured).abs() > bound {
            off.push(name);
        }
        // Its first instance, the row below it, is named as the report names it.
        let instance = shown
            .and_then(|at| rows.get(at + 1))
            .map(|(_, row)| row.as_str());
        assert!(
            instance.is_some_and(|row| row.contains("unmarked.rs:")),
            "{name}'s first instance is not the program's line: {instance:?}\n{table}"
        );
    }
    eprintln!("{summary}");
    assert!(off.is_empty(), "off: {off:?}\n{summary}\n{table}");
}

/// A program with no fsprof shim that publishes custom labels by the custom-labels ABI v1 (as
/// parca-agent reads them; `tests/c/labels.c`: `request=GET /a` with `tenant=acme`, `request=GET
/// /b`, none) gets its labels as features, copied at each sample: each label's key a feature,
/// its value the instance, each within its bound of the time the program measured under it.
#[test]
fn labels_published_by_the_custom_labels_abi_are_features() {
    let _serial = serial();
    let dir = tempdir();
    let exe = support::native::build_exporting_c_program(dir.path(), "labels");
    labels_are_features(&exe, CUSTOM_LABELS, &[]);
}

/// A program with no fsprof shim that publishes an OpenTelemetry thread context by its
/// specification (OTEP 4947, as the OpenTelemetry eBPF profiler reads it;
/// `tests/c/otel_context.c`: a thread-local pointer to a record of attributes by key index,
/// the keys named in the process context, OTEP 4719) gets its attributes as features, each
/// key a feature, its value the instance, within their bounds of the time the program
/// measured under them; a record whose `valid` is 0 counts for nothing.
#[test]
fn an_opentelemetry_thread_context_is_read_as_features() {
    let _serial = serial();
    let dir = tempdir();
    let exe = support::native::build_exporting_c_program(dir.path(), "otel_context");
    labels_are_features(&exe, OTEL_CONTEXT, &[]);
}

/// With `--span-ids`, each record's span id is an instance of the feature `span_id`: the
/// program's two records (`GET /a` and `GET /b`, spans 030405060708090a and 060708090a0b0c0d)
/// each within its bound of the time the program spent under it; the record not valid counts
/// nowhere.
#[test]
fn opentelemetry_span_ids_are_instances_when_asked() {
    let _serial = serial();
    let dir = tempdir();
    let exe = support::native::build_exporting_c_program(dir.path(), "otel_context");
    labels_are_features_with(&exe, OTEL_CONTEXT, &["--span-ids"], |truth| {
        let route = truth["features"]["http.route"].clone();
        let ms = |value: &str| route["instances"][value].clone();
        truth["features"]["span_id"] = serde_json::json!({
            "ms": route["ms"],
            "instances": {"030405060708090a": ms("GET /a"), "060708090a0b0c0d": ms("GET /b")},
        });
    });
}

/// Both kinds of labels without perf (`--backend ptrace`, as fsprof without root samples): read
/// in each sample's ptrace stop from the thread's `fs` base, each within its bound.
#[test]
fn labels_are_read_in_ptrace_stops_without_perf() {
    let _serial = serial();
    if ptrace_stops_late("labels in ptrace stops").is_some() {
        return;
    }
    let dir = tempdir();
    for (name, published) in [("labels", CUSTOM_LABELS), ("otel_context", OTEL_CONTEXT)] {
        let exe = support::native::build_exporting_c_program(dir.path(), name);
        again_if_stolen(|| labels_are_features(&exe, published, &["--backend", "ptrace"]));
    }
}

/// What the report says of a program that publishes custom labels, and of one that publishes
/// an OpenTelemetry thread context.
const CUSTOM_LABELS: &str = "The program publishes labels (the custom-labels ABI";
const OTEL_CONTEXT: &str = "The program publishes labels (an OpenTelemetry thread context";

/// The same beside a busy loop on every CPU: the program waits for a CPU about half its time,
/// and that time is its labels' (it cannot change them off its CPU), whether the kernel
/// recorded the wait whole or folded it with others (`layout::FOLD_MOST_NS`). Before the
/// labels of a thread's latest sample were kept on its time off the CPU, `request` read 46 to
/// 53% against 83 to 84% measured beside two busy loops.
#[test]
fn labels_keep_the_time_their_thread_waits_for_a_cpu() {
    let _serial = serial();
    let dir = tempdir();
    let exe = support::native::build_exporting_c_program(dir.path(), "labels");
    let _busy = support::BusyLoops::start();
    labels_are_features(&exe, CUSTOM_LABELS, &[]);
}

/// The same with a Rust program that labels its work with the `custom-labels` crate
/// (`tests/rust/labelled`, built here apart from the workspace: the crate needs libclang),
/// whose label set changes in place: only a copy made at the sample's instant tells which
/// value was current.
#[test]
fn labels_set_by_the_custom_labels_crate_are_features() {
    let _serial = serial();
    let exe = build_apart(
        "labelled",
        "the custom-labels crate needs libclang: apt-get install libclang-dev",
    );
    labels_are_features(&exe, CUSTOM_LABELS, &[]);
}

/// The same with a Rust program that publishes an OpenTelemetry thread context with Datadog's
/// `libdd-otel-thread-ctx` crate (`tests/rust/traced`), which updates its thread's record in
/// place (`valid` 0 while it writes) and puts the local root span id first in every record.
#[test]
fn an_opentelemetry_context_set_by_libdatadogs_crate_is_read_as_features() {
    let _serial = serial();
    let exe = build_apart(
        "traced",
        "it needs libdd-otel-thread-ctx 1.0.0 from crates.io",
    );
    labels_are_features(&exe, OTEL_CONTEXT, &[]);
}

/// Runs `exe` (which writes its truth as `tests/c/labels.c` does) under fsprof (with `options`
/// besides) and checks that the report says `published` and its labels' shares.
fn labels_are_features(exe: &Path, published: &str, options: &[&str]) {
    labels_are_features_with(exe, published, options, |_| ());
}

/// [`labels_are_features`] against the program's truth as `expect` completes it.
fn labels_are_features_with(
    exe: &Path,
    published: &str,
    options: &[&str],
    expect: impl Fn(&mut Value),
) {
    let dir = tempdir();
    let truth_path = dir.path().join("truth.json");
    let out = dir.path().join("out");
    let output = Command::new(fsprof())
        .args(["run", "--rate", ACCURACY_RATE])
        .args(options)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(exe)
        .args(["4", "--truth"])
        .arg(&truth_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(published), "{stderr}");
    let report = report_json(&out);
    let mut truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
    expect(&mut truth);
    let total = truth["total_ms"].as_f64().unwrap();
    let samples = samples_of(&report);
    let feature = |name: &str| {
        (report["features"].as_array().unwrap().iter())
            .find(|f| f["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut table = format!("{samples} samples\n");
    let mut off = Vec::new();
    for (name, measured) in truth["features"].as_object().unwrap() {
        let reported = feature(name);
        let shares = std::iter::once((
            name.clone(),
            reported["percent"].as_f64().unwrap_or(0.0),
            measured["ms"].as_f64().unwrap(),
        ))
        .chain(
            (measured["instances"].as_object().unwrap().iter()).map(|(value, ms)| {
                let instance = (reported["instances"].as_array().into_iter().flatten())
                    .find(|i| i["payload"] == value.as_str());
                let percent = instance.map_or(0.0, |i| i["percent"].as_f64().unwrap());
                (format!("{name}={value}"), percent, ms.as_f64().unwrap())
            }),
        );
        for (what, percent, ms) in shares {
            let expected = ms * 100.0 / total;
            let bound = share_bound(expected, samples, TOLERANCE);
            table +=
                &format!("  {what:<20} {percent:6.2}%  truth {expected:6.2}%  bound {bound:.2}\n");
            if (percent - expected).abs() > bound {
                off.push(what);
            }
        }
    }
    eprintln!("{table}");
    assert!(off.is_empty(), "off: {off:?}\n{table}\n{stderr}");
}
