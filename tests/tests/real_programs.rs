//! Programs nobody here wrote, profiled as a user would with the defaults (nothing put into them:
//! the built-in features from their native stacks): `xz -T2`, `sort`, `python3` (directly and
//! through a shell wrapper that execs it) and ripgrep. Where
//! the program can say what it measured (a Python script timing its own writes) the report is
//! compared with it; elsewhere with what is known of the program (xz's coordinator waits on a
//! condition variable; ripgrep's reads are made by its own crates through Rust's standard library).

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::programs::*;
use support::*;

/// A program nobody here wrote: `xz -T2`, whose coordinator waits on a condition variable while
/// two workers compress. Its waits are `waiting`, kept apart, and nothing is reported as `locks`
/// (38% of the report was `locks` before).
#[test]
fn xz_with_two_threads_reports_its_coordinators_waits_apart_and_no_locks() {
    let _serial = serial();
    if Command::new("xz").arg("--version").output().is_err() {
        eprintln!("skipped: xz is not installed");
        return;
    }
    let dir = tempdir();
    // 12 MB of text, which xz -3 cuts into two blocks of 12 MiB at most: two workers.
    let words = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
    ];
    let mut text = String::with_capacity(12_000_000);
    let mut x: u64 = 1;
    while text.len() < 12_000_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(words[(x >> 33) as usize % words.len()]);
        text.push_str(if (x >> 20).is_multiple_of(12) {
            "\n"
        } else {
            " "
        });
    }
    let input = dir.path().join("input.txt");
    std::fs::write(&input, text).unwrap();
    let out = dir.path().join("out");
    let stderr = run(
        &out,
        &[],
        &[],
        &[
            "xz".as_ref(),
            "-T2".as_ref(),
            "-3".as_ref(),
            "-k".as_ref(),
            "-f".as_ref(),
            input.as_os_str(),
        ],
    );
    let report = report_json(&out);
    let waiting = feature(&report, "waiting").expect("the coordinator waits");
    assert!(waiting["blocked_ms"].as_f64().unwrap() > 50.0, "{stderr}");
    assert!(percent(&report, "locks") < 1.0, "{stderr}");
    let builtin: f64 = report["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["builtin"] == true)
        .map(|f| f["percent"].as_f64().unwrap())
        .sum();
    assert!(builtin < 5.0, "waits diluted the shares: {stderr}");
}

/// The interpreter itself, not a wrapper script such as pyenv's shim.
fn python_interpreter() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("python3")
}

/// Runs `program` (python3, or a wrapper that ends by exec'ing it) on `timed_writes.py` under
/// `fsprof run`, and compares the report's output and process shares with what the script
/// measured. Returns the output directory and fsprof's stderr.
fn python_against_truth(program: &[&std::ffi::OsStr]) -> (support::TestDir, String) {
    let dir = tempdir();
    let truth_path = dir.path().join("truth.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/timed_writes.py");
    let mut command = program.to_vec();
    command.extend([script.as_os_str(), "3".as_ref(), truth_path.as_os_str()]);
    let stderr = run(dir.path(), &[], &[], &command);
    // The program's process: the script's truth is its own, not that of the processes the
    // wrapper and the script start (a wrapper's subshell waiting for its `sleep`).
    let pid = report_json(dir.path())["meta"]["pid"].to_string();
    let report = report_json_with(dir.path(), &["--process", &pid]);
    let truth = truth(dir.path());
    let expected = truth["features"]["output"]["ms"].as_f64().unwrap() * 100.0
        / truth["total_ms"].as_f64().unwrap();
    let reported = percent(&report, "output");
    eprintln!("python3 output: report {reported:.2}%, script {expected:.2}%");
    assert!(expected > 5.0, "the script wrote too little: {truth}");
    assert!(
        (reported - expected).abs() <= 4.0,
        "output: report {reported:.2}%, the script measured {expected:.2}%\n{stderr}"
    );
    assert_eq!(feature(&report, "output").unwrap()["builtin"], true);
    // Its subprocess runs (vfork, then exec in the child) are process for as long as they took,
    // and no longer (a mark the child left in the parent's memory once made it 98%).
    let expected = truth["features"]["process"]["ms"].as_f64().unwrap() * 100.0
        / truth["total_ms"].as_f64().unwrap();
    let reported = percent(&report, "process");
    eprintln!("python3 process: report {reported:.2}%, script {expected:.2}%");
    assert!(
        (reported - expected).abs() <= TOLERANCE,
        "process: report {reported:.2}%, the script measured {expected:.2}%\n{stderr}"
    );
    (dir, stderr)
}

/// python3 with four threads handing work around switches some hundred thousand times a second:
/// past the machine's bound (25,000 a second per busy CPU), fsprof follows none of its switches,
/// and the report says so. Its threads' time counted (running, or waiting for a CPU: it has no
/// marks) is their own run and wait totals, as the script read them, within 20%: their waits
/// for a CPU come from those totals at the ticks (estimated from the threads' states at the
/// ticks, they read half again too long: the counted time 1.7 to 1.9 times the CPU time, where
/// the totals were 1.34 to 1.42 times).
#[test]
fn python_threads_that_switch_often_count_their_waits_without_their_switches() {
    let _serial = serial();
    let dir = tempdir();
    let truth_path = dir.path().join("truth.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/thread_switches.py");
    let output = Command::new(fsprof())
        .args(["run", "-o"])
        .arg(dir.path())
        .args(["--", python_interpreter()])
        .arg(&script)
        .arg("20000")
        .arg(&truth_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = report_json(dir.path());
    let truth = truth(dir.path());
    let notes = report["meta"]["notes"].to_string();
    assert!(
        notes.contains("stopped following switches"),
        "the switches were followed: {stderr}"
    );
    let counted = report["total_ms"].as_f64().unwrap();
    let own = truth["run_ms"].as_f64().unwrap() + truth["wait_ms"].as_f64().unwrap();
    eprintln!("counted {counted:.0} ms, the threads' own run and wait totals {own:.0} ms");
    assert!(
        (counted / own - 1.0).abs() <= 0.2,
        "counted {counted:.0} ms, the threads' own totals {own:.0} ms ({truth})\n{stderr}"
    );
}

#[test]
fn python_output_share_is_what_the_script_measured() {
    let _serial = serial();
    // Without a wrapper's start-up, which would count too, but not in the script's measure.
    python_against_truth(&[python_interpreter().as_ref()]);
}

/// `python3` started as pyenv starts it: a bash script that runs command substitutions (bash
/// blocked reading their pipes) and then execs the interpreter through `env`. The shares are the
/// interpreter's, as the script measured them; the wrapper is reported apart, and no feature is
/// unreadable (env's mark around its exec was read after the exec once).
#[test]
fn python_started_through_a_shell_wrapper_gets_the_shares_the_script_measured() {
    let _serial = serial();
    let bin = tempdir();
    let wrapper = bin.path().join("python3");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/bash\n\
             version=$(sleep 0.5; echo 3)\n\
             prefix=$(dirname \"$(command -v sh)\")\n\
             for i in $(seq 1 2000); do n=$((n + i)); done\n\
             exec env PYTHON_WRAPPED=\"$version$prefix$n\" {} \"$@\"\n",
            python_interpreter()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (dir, stderr) = python_against_truth(&[wrapper.as_os_str()]);
    let report = report_json(dir.path());
    // The script (named as its file, `python3`), perhaps `env` if a tick fell in its short life,
    // then the interpreter: only the last counts.
    let images = report["images"].as_array().unwrap();
    assert!(images.len() >= 2, "{stderr}");
    let (last, earlier) = images.split_last().unwrap();
    assert_eq!(last["counted"], true, "{stderr}");
    assert!(earlier.iter().all(|i| i["counted"] == false), "{stderr}");
    let before: f64 = earlier.iter().map(|i| i["wall_ms"].as_f64().unwrap()).sum();
    assert!(before >= 400.0, "the wrapper's 0.5 s: {stderr}");
    assert!(
        stderr.contains("the process replaced itself by exec"),
        "{stderr}"
    );
    assert!(!stderr.contains("unreadable"), "{stderr}");
    assert!(!report.to_string().contains("unreadable"), "{stderr}");
}

#[test]
fn sort_gets_plausible_input_output_and_allocation_with_call_sites_in_sort() {
    let _serial = serial();
    let dir = tempdir();
    // About 30 MB of random lines.
    let input = dir.path().join("input.txt");
    let mut rng = fsprof_tests::Rng::new(3);
    let mut text = String::with_capacity(32 << 20);
    while text.len() < 30 << 20 {
        let n = rng.next_u64();
        text += &format!("{n:x} {} line {}\n", n % 977, n % 13);
    }
    std::fs::write(&input, text).unwrap();
    // Sort reads it from a pipe fed by `gzip -dc`, slower than sort reads: the time sort waits
    // in `fread` is input (blocked inside a built-in mark). A 256 KiB buffer makes it sort in
    // runs and merge them through temporary files, which allocates per run: with its default
    // buffer sort allocates once, and allocation is 0-0.05% (a sample or none).
    let status = Command::new("gzip").arg("-k").arg(&input).status().unwrap();
    assert!(status.success());
    let mut gunzip = Guarded(
        Command::new("gzip")
            .arg("-dc")
            .arg(dir.path().join("input.txt.gz"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let sorted = dir.path().join("sorted.txt");
    let out = dir.path().join("profile");
    let output = Command::new(fsprof())
        .args(["run", "--rate", ACCURACY_RATE, "-o"])
        .arg(&out)
        .args(["--", "sort", "-S", "256K", "--parallel=1", "-o"])
        .arg(&sorted)
        .stdin(gunzip.0.stdout.take().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(gunzip
        .wait_with_deadline(std::time::Duration::from_secs(60))
        .success());
    assert_eq!(
        std::fs::metadata(&sorted).unwrap().len(),
        std::fs::metadata(&input).unwrap().len()
    );
    let report = report_json(&out);
    let shares: Vec<(&str, f64)> = ["input", "output", "allocation"]
        .iter()
        .map(|name| (*name, percent(&report, name)))
        .collect();
    eprintln!("sort: {shares:?}");
    for (name, share) in &shares {
        assert!(
            (0.05..60.0).contains(share),
            "{name}: {share:.2}% ({shares:?})"
        );
        // Call sites lie in sort itself (stripped: named from its dynamic symbols, else
        // `sort+0x…`, after its nearest named caller where it has one), not in libc.
        let sites = payloads(&report, name);
        let site = |p: &String| p.rsplit(" > ").next().unwrap_or(p).to_owned();
        assert!(
            (sites.iter().map(site)).any(|p| p.starts_with("sort+0x") || !p.contains('+')),
            "{name}: {sites:?}"
        );
        assert!(
            sites.iter().all(|p| !p.starts_with("libc.so")),
            "{name}: {sites:?}"
        );
    }
    let sum: f64 = shares.iter().map(|(_, s)| s).sum();
    assert!(sum < 100.0, "{shares:?}");
}

/// `rg`, or `None` (the test is skipped) where it is not installed, except under CI, whose
/// `.ci/run` installs it (`cargo install ripgrep`): there its absence fails the test.
fn ripgrep() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("rg"))
            .find(|rg| rg.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "rg is not installed: `cargo install ripgrep`"
        );
        eprintln!("skipped: rg is not installed (cargo install ripgrep)");
    }
    found
}

/// Whether an instance is named after Rust's standard library or libc rather than the program's
/// own code: `std::…`, `<core::…>::…`, `alloc::…`, `__rust_alloc`, a bare libc symbol.
fn names_the_runtime(payload: &str) -> bool {
    let name = payload.trim_start_matches(['<', '&']);
    ["std::", "core::", "alloc::", "__rust", "__rdl"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || payload.starts_with("libc.so")
        || (!name.contains("::") && !name.contains('+'))
}

/// ripgrep, a Rust program nobody here wrote, on a directory tree with its default threads: its
/// reads, opens and allocations go through Rust's standard library, and every built-in instance
/// must name ripgrep's own code (its crates and the ones it chose: `grep_searcher`, `ignore`,
/// `encoding_rs_io`, …), never `FileDesc::read` or `alloc::alloc`, and the call paths under them
/// end in that code, not in the standard library below it. A call whose site was not found is
/// labelled so, and is rare.
#[test]
fn ripgrep_on_a_tree_names_its_own_code_at_every_instance() {
    let _serial = serial();
    let Some(rg) = ripgrep() else { return };
    let tree = tempdir();
    // 20000 files of 2 KiB in 100 directories: opens, reads and small allocations.
    let mut x: u64 = 7;
    for d in 0..100 {
        let dir = tree.path().join(format!("d{d}")).join("sub");
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..200 {
            let mut text = String::with_capacity(2 << 10);
            while text.len() < 2 << 10 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text += &format!("fn item_{}(x: u32) -> u32 {{ x + {} }}\n", x >> 40, x >> 50);
            }
            std::fs::write(dir.join(format!("f{f}.rs")), text).unwrap();
        }
    }
    let out = tempdir();
    let mut stderr = String::new();
    // Several passes, each a new rg: enough samples of its short run.
    let pattern = r"fn item_[0-9]+5\(x: u32\)";
    let tree_arg = tree.path().as_os_str();
    let (mut all_builtin_ms, mut all_not_found_ms) = (0.0, 0.0);
    for pass in 0..3 {
        let dir = out.path().join(format!("pass{pass}"));
        stderr = run(
            &dir,
            &[],
            &[],
            &[rg.as_os_str(), "-c".as_ref(), pattern.as_ref(), tree_arg],
        );
        let report = report_json(&dir);
        let mut table = String::new();
        let (mut builtin_ms, mut not_found_ms) = (0.0, 0.0);
        for feature in report["features"].as_array().unwrap() {
            if feature["builtin"] != true {
                continue;
            }
            for instance in feature["instances"].as_array().unwrap() {
                let payload = instance["payload"].as_str().unwrap();
                let ms = instance["ms"].as_f64().unwrap()
                    + instance["blocked_ms"].as_f64().unwrap_or(0.0);
                builtin_ms += ms;
                table += &format!("  {} {ms:8.2} ms  {payload}\n", feature["name"]);
                if payload.starts_with("[call site not found]") {
                    not_found_ms += ms;
                    continue;
                }
                assert!(!names_the_runtime(payload), "{payload}:\n{stderr}");
                for path in instance["paths"].as_array().into_iter().flatten() {
                    let functions = path["functions"].as_array().unwrap();
                    if let Some(last) = functions.last().and_then(Value::as_str) {
                        assert!(!names_the_runtime(last), "{payload} by {path}:\n{stderr}");
                    }
                }
            }
        }
        eprintln!("pass {pass}:\n{table}");
        assert!(
            feature(&report, "input").is_some() && feature(&report, "files").is_some(),
            "{stderr}"
        );
        // Most passes leave 0-2.5% (a call read at a tick whose stack moved on before it was
        // read, with no perf sample of the same call). Some leave one instance of 14-32 ms so:
        // a worker born and gone between two ticks whose call was over before its stack could
        // be read (it stands for the whole interval, which is right for its time), or a wait on
        // a contended futex whose blocked stack did not reach the program's frame while two
        // sites reach that wait (seen in 3 passes of about 60 since the late-tick fix; 1 in 4
        // before it, at 10-12%). So each pass is held to 15%, and the three together to 8%
        // (the worst three seen: 4.5%).
        assert!(
            not_found_ms <= 0.15 * builtin_ms,
            "{not_found_ms:.1} of {builtin_ms:.1} ms without a call site:\n{table}"
        );
        all_not_found_ms += not_found_ms;
        all_builtin_ms += builtin_ms;
    }
    assert!(
        all_not_found_ms <= 0.08 * all_builtin_ms,
        "{all_not_found_ms:.1} of {all_builtin_ms:.1} ms without a call site in three passes"
    );
    assert!(stderr.contains("input"), "{stderr}");
}

/// node running CPU-bound JavaScript with `--perf-basic-prof` (node writes `/tmp/perf-PID.map`
/// for its JIT-compiled code): its functions get their names from that map, in the function view
/// and the flamegraph, with stacks unwound through the JIT's frames (they keep frame pointers);
/// and the two functions' self time splits as the script measured (TurboFan's inlining off, so
/// that each function's time stays in its own frame).
#[test]
fn nodes_javascript_functions_are_named_from_its_perf_map() {
    node_names_its_javascript(&["node", "--perf-basic-prof"]);
}

/// The same with `--perf-prof`: node writes a jitdump (`jit-PID.dump`, in its working directory)
/// and no perf map, and runs as a shell's child, whose jitdump is read as well.
#[test]
fn nodes_javascript_functions_are_named_from_its_jitdump_in_a_child() {
    node_names_its_javascript(&["sh", "-c", "node --perf-prof \"$@\"; true", "node"]);
}

/// Runs `node`, as `command` starts it (the script and its arguments follow), under fsprof and
/// checks its two functions' names and split.
fn node_names_its_javascript(command: &[&str]) {
    let _serial = serial();
    again_if_stolen(|| node_names_its_javascript_once(command));
}

fn node_names_its_javascript_once(command: &[&str]) {
    let dir = tempdir();
    let out = dir.path().join("out");
    let truth_path = dir.path().join("truth.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/jit.js");
    let output = Command::new(fsprof())
        .args(["run", "--rate", ACCURACY_RATE, "-o"])
        .arg(&out)
        .arg("--")
        .args(command)
        .args(["--interpreted-frames-native-stack", "--no-turbo-inlining"])
        .arg(&script)
        .arg("4")
        .arg(&truth_path)
        .current_dir(dir.path()) // node leaves its isolate logs and jitdump there
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = report_json(&out);
    let pid = report["meta"]["pid"].as_u64().unwrap();
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
    let total = truth["total_ms"].as_f64().unwrap();
    let names = ["fsprofHashA", "fsprofHashB"];
    // Each function's self share, summed over its JIT tiers' entries (`JS:^`, `JS:*`...).
    let share = |name: &str| -> f64 {
        (report["functions"].as_array().unwrap().iter())
            .filter(|f| f["name"].as_str().unwrap().contains(name))
            .map(|f| f["self_percent"].as_f64().unwrap())
            .sum()
    };
    let (a, b) = (share(names[0]), share(names[1]));
    let measured: Vec<f64> = (names.iter())
        .map(|name| truth["self_ms"][name].as_f64().unwrap())
        .collect();
    let summary = format!(
        "reported {a:.1}% and {b:.1}%, measured {:.1}% and {:.1}% of {total:.0} ms\n{stderr}",
        measured[0] * 100.0 / total,
        measured[1] * 100.0 / total
    );
    // Named: nearly all of the time the two functions took (node's start-up, its compiler
    // threads and the loop around them take the rest).
    let both = (measured[0] + measured[1]) * 100.0 / total;
    assert!(a + b >= both - 10.0, "{summary}");
    // Split between them as measured.
    let split = a * 100.0 / (a + b);
    let truth_split = measured[0] * 100.0 / (measured[0] + measured[1]);
    let bound = share_bound(truth_split, samples_of(&report), TOLERANCE);
    assert!(
        (split - truth_split).abs() <= bound,
        "split {split:.1}% against {truth_split:.1}% (bound {bound:.1}): {summary}"
    );
    let flamegraph = std::fs::read_to_string(out.join("flamegraph.svg")).unwrap();
    assert!(
        names.iter().all(|name| flamegraph.contains(name)),
        "the flamegraph does not name both functions"
    );
}

/// node in a container of its own (new PID and mount namespaces, its own `/tmp`: `unshare`, as
/// root) writes its perf map as `/tmp/perf-1.map` there; `fsprof attach` to it from outside
/// names its JavaScript functions from that map, read through the process's root.
#[test]
fn nodes_perf_map_in_a_container_names_its_functions() {
    let _serial = serial();
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root: the container test needs unshare"
        );
        eprintln!("not root: no container made, the perf map in a container not checked");
        return;
    }
    let dir = tempdir();
    let inside = dir.path().join("container-tmp");
    std::fs::create_dir_all(&inside).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/jit.js");
    std::fs::copy(&script, inside.join("jit.js")).unwrap();
    // Its /tmp is `inside`; the script and its truth are there.
    let shell = format!(
        "mount --bind {} /tmp && cd /tmp && exec node --perf-basic-prof --interpreted-frames-native-stack --no-turbo-inlining jit.js 8 /tmp/truth.json",
        inside.display()
    );
    let mut container = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &shell,
        ])
        .spawn()
        .unwrap();
    // node: the child unshare forked (pid 1 in its namespace).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let node = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", container.id()))
                .unwrap_or_default();
        let child = children
            .split_whitespace()
            .next()
            .and_then(|c| c.parse::<u32>().ok());
        let exe = child.and_then(|c| std::fs::read_link(format!("/proc/{c}/exe")).ok());
        if exe.is_some_and(|exe| exe.to_string_lossy().contains("node")) {
            break child.unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "node did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = dir.path().join("out");
    let output = Command::new(fsprof())
        .args(["attach", "--duration", "3", "-o"])
        .arg(&out)
        .arg(node.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let status = container.wait().unwrap();
    assert!(output.status.success() && status.success(), "{stderr}");
    assert!(
        !Path::new(&format!("/tmp/perf-{node}.map")).exists(),
        "node wrote its map outside its container"
    );
    let report = report_json(&out);
    let share = |name: &str| -> f64 {
        (report["functions"].as_array().unwrap().iter())
            .filter(|f| f["name"].as_str().unwrap().contains(name))
            .map(|f| f["self_percent"].as_f64().unwrap())
            .sum()
    };
    let (a, b) = (share("fsprofHashA"), share("fsprofHashB"));
    // The script spends nearly all its time in the two: named, they hold most of the window.
    assert!(
        a > 10.0 && b > 10.0 && a + b > 60.0,
        "{a:.1}% and {b:.1}%\n{stderr}"
    );
}
