//! Native stacks, end to end: targets with known call chains (built without frame pointers) are
//! profiled with the real binary, and the folded output must show each chain exactly, with the
//! mark right after the function that pushed it, in at least 90% of the mark's time with a
//! stack; stacks must reach the thread's root. The chains come from the targets' own truth files.

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use support::native::*;
use support::*;

/// For each chain of the truth: the share of its mark's time with a stack whose stack holds the
/// chain's frames consecutively, immediately followed by the mark; and the share of all time whose stack
/// reaches a root (`_start` or the thread start routine), outermost first.
fn check_chains(dir: &Path, truth: &Value) {
    let stacks = folded(&dir.join("out"));
    let all: u64 = stacks.iter().map(|(_, us)| us).sum();
    // Samples without a stack are not unwinding failures: a blocked thread's read skipped (see
    // `blocked_thread_sampled_without_a_stop`), or, with ptrace, a thread that did not stop in
    // time, which a busy machine makes common (the Rust chain: 3 to 5% idle, 7 to 16% beside
    // one busy loop; all of the stacks taken reached their root either way).
    let without: u64 = (stacks.iter())
        .filter(|(frames, _)| frames[0] == "[no native stack]")
        .map(|(_, us)| us)
        .sum();
    let total = all - without;
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
        "stacks reaching their root: {:.1}% of {total} µs; {without} µs without a stack\n",
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
        // Among the stacks taken: a sample without one is counted against `without` below.
        let with_mark: Vec<_> = stacks
            .iter()
            .filter(|(frames, _)| frames[0] != "[no native stack]" && frames.contains(&mark))
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
        rooted * 100 >= total * 95 && without * 3 <= all,
        "stacks reach their root in under 95% of the time, or a third has none:\n{summary}"
    );
}

/// The backend a recording used, from its profile.
fn meta_of(dir: &Path) -> Value {
    let profile: Value =
        serde_json::from_slice(&std::fs::read(dir.join("profile.json")).unwrap()).unwrap();
    profile["meta"].clone()
}

fn rust_chain(backend: &str) {
    let _serial = serial();
    let dir = tempdir();
    profile_chain(
        dir.path(),
        &fsprof().with_file_name("fsprof-chain"),
        backend,
    );
}

/// Profiles `program` (a chain target: `program 3 --truth FILE`) into `dir/out` with `backend`
/// and checks its chains against its truth.
fn profile_chain(dir: &Path, program: &Path, backend: &str) {
    let status = Command::new(fsprof())
        .args(["run", "--backend", backend, "-o"])
        .arg(dir.join("out"))
        .arg("--")
        .arg(program)
        .args(["3", "--truth"])
        .arg(dir.join("truth.json"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let meta = meta_of(&dir.join("out"));
    assert_eq!(meta["native_backend"], backend);
    // The report names the backend on the header's third line, and perf's events as the
    // profile has them.
    let text = std::fs::read_to_string(dir.join("out").join("report.txt")).unwrap();
    let events = match (
        meta["perf_per_cpu"].as_bool(),
        meta["perf_at_tick"].as_bool(),
    ) {
        _ if backend != "perf" => "",
        (Some(true), Some(true)) => ", one event per CPU, at the kernel's own tick",
        (Some(true), _) => ", one event per CPU",
        _ => ", one event per thread",
    };
    assert!(
        text.lines()
            .nth(2)
            .is_some_and(|l| l.starts_with(&format!("native stacks: {backend}{events} ("))),
        "{text}"
    );
    if backend == "perf" {
        // Busy threads, none blocked inside a mark: perf's samples carry their time, so fsprof
        // wakes at most every 40 ms rather than at the rate (each wake-up would preempt the
        // program), and reads every sample in time. Some ticks come at the rate whatever the
        // program does (the first, 50 ms after each thread's birth, 50 ms after deep stacks'
        // anchors are set): some 15 to 20 of the 85 to 95 a run here, so the bound is on the
        // wake-ups, a fifth of the rate's at most, not on the slow ones' share (which read
        // 79.6 to 84.5% on one build, against a bound of 80%).
        let ticks = meta["ticks"].as_f64().unwrap();
        let at_rate =
            meta["rate_hz"].as_f64().unwrap() * meta["duration_ns"].as_f64().unwrap() / 1e9;
        assert!(
            ticks * 5.0 <= at_rate,
            "{ticks} ticks, a fifth of the {at_rate:.0} the rate asks at most: {meta}"
        );
        assert_eq!(meta["perf_lost"], 0, "{meta}");
    }
    check_chains(dir, &truth(dir));
}

#[test]
fn a_rust_release_build_without_frame_pointers_unwinds_to_the_exact_chain_with_perf() {
    if perf_backend_available() {
        rust_chain("perf");
    }
}

#[test]
fn a_rust_release_build_without_frame_pointers_unwinds_to_the_exact_chain_with_ptrace() {
    rust_chain("ptrace");
}

fn c_chain(backend: &str) {
    let _serial = serial();
    let dir = tempdir();
    let program = build_c_chain(dir.path());
    assert_separate_frames_without_frame_pointer(&program.exe, &["c_outer", "c_middle"]);
    profile_chain(dir.path(), &program.exe, backend);
}

#[test]
fn a_c_program_whose_leaf_is_in_a_shared_library_without_frame_pointers_with_perf() {
    if perf_backend_available() {
        c_chain("perf");
    }
}

#[test]
fn a_c_program_whose_leaf_is_in_a_shared_library_without_frame_pointers_with_ptrace() {
    c_chain("ptrace");
}

/// FizzBuzz changes marks every microsecond: [formatting] around `writeln!` into a String,
/// [output] around each write(2). A stack drawn under the wrong marks would show formatting code
/// under [output] (or write(2) under [formatting]) in proportion to the other's share. So under
/// each mark the stacks must be that mark's own code, and the flamegraph's shares must be the
/// tables'. With perf, most samples must also have a stack (ptrace loses most of them here: a
/// thread stops at its next system call, with other marks by then).
fn marks_and_stack_of_the_same_instant(backend: &str) {
    let _serial = serial();
    let dir = tempdir();
    let out = dir.path().join("out");
    let status = Command::new(fsprof())
        .args(["run", "--backend", backend, "-o"])
        .arg(&out)
        .arg("--")
        .arg(fsprof().with_file_name("fizzbuzz"))
        .arg("10000000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(meta_of(&out)["native_backend"], backend);
    let stacks = folded(&out);
    let under = |mark: &str| -> Vec<&(Vec<String>, u64)> {
        stacks
            .iter()
            .filter(|(frames, _)| {
                frames[0] != "[no native stack]"
                    && frames
                        .iter()
                        .rev()
                        .find(|f| f.starts_with('['))
                        .is_some_and(|f| f.starts_with(mark))
            })
            .collect()
    };
    let weight = |stacks: &[&(Vec<String>, u64)], with: &dyn Fn(&str) -> bool| -> (u64, u64) {
        let all = stacks.iter().map(|(_, us)| us).sum();
        let matching = stacks
            .iter()
            .filter(|(frames, _)| frames.iter().any(|f| with(f)))
            .map(|(_, us)| us)
            .sum();
        (matching, all)
    };
    let formatting_code = |f: &str| f.contains("core::fmt") || f.contains("write_fmt");
    let output_code = |f: &str| f.contains("write_all") || f.contains("FileDesc");
    let (fmt_in_fmt, fmt_all) = weight(&under("[formatting]"), &formatting_code);
    let (out_in_fmt, _) = weight(&under("[formatting]"), &output_code);
    let (fmt_in_output, output_all) = weight(&under("[output]"), &formatting_code);
    let summary = format!(
        "under [formatting]: {fmt_in_fmt} of {fmt_all} µs in formatting code, {out_in_fmt} µs in output code; under [output]: {fmt_in_output} of {output_all} µs in formatting code"
    );
    assert!(
        output_all > 0 && (fmt_all > 0 || backend == "ptrace"),
        "{summary}"
    );
    assert!(fmt_in_output * 100 <= output_all, "{summary}");
    if backend == "perf" {
        assert!(fmt_in_fmt * 100 >= fmt_all * 90, "{summary}");
        assert!(out_in_fmt * 10 <= fmt_all, "{summary}");
    } else {
        // With ptrace a thread stops at its next system call, inside [output]: stacks under
        // [formatting] are a few samples, often none, so shares of them mean little (one
        // sample outside formatting code failed a 90% bound once in about ten runs). Drawn
        // with the tick's marks instead of the stop's, the write(2) stacks would put output
        // code under [formatting] in proportion to formatting's share (8%): tens of ms per
        // second of output. Two samples of it (2 ms) were seen once in about twenty runs,
        // not explained; the bound is 0.5% of output's time.
        assert!(out_in_fmt * 200 <= output_all, "{summary}");
    }
    if backend == "perf" {
        let without: u64 = stacks
            .iter()
            .filter(|(frames, _)| frames[0] == "[no native stack]")
            .map(|(_, us)| us)
            .sum();
        let total: u64 = stacks.iter().map(|(_, us)| us).sum();
        // Waits for a CPU after the marks changed have none (beside a busy loop, a third of
        // the time): the rest is bounded.
        let (unexplained, _) = unexplained_without_stack(&out);
        assert!(
            unexplained * 100 <= total * 10,
            "{unexplained} of {total} µs without a native stack, not waiting for a CPU ({without} in all)"
        );
        // The flamegraph's [formatting] share (stacks with their own marks) is the table's, within
        // the noise of two estimates from about 2000 samples each (3.5 standard errors).
        let report: Value = serde_json::from_slice(
            &Command::new(fsprof())
                .args(["report", "--format", "json"])
                .arg(&out)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let table = report["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "formatting")
            .unwrap()["percent"]
            .as_f64()
            .unwrap();
        let graph = fmt_all as f64 * 100.0 / (total - without) as f64;
        assert!(
            (graph - table).abs() < 3.0,
            "[formatting] is {graph:.2}% of the flamegraph's stacks, {table:.2}% in the table"
        );
    }
}

#[test]
fn marks_and_stack_of_a_sample_are_of_the_same_instant_with_perf() {
    if perf_backend_available() {
        marks_and_stack_of_the_same_instant("perf");
    }
}

#[test]
fn marks_and_stack_of_a_sample_are_of_the_same_instant_with_ptrace() {
    marks_and_stack_of_the_same_instant("ptrace");
}

/// A program's first mark counts from the program's start: `growth 60` marks its first
/// instance (`linear`, 300 ms) from its first instructions, before fsprof has found its region,
/// and perf samples it from fsprof's first tick on. Its time in the report is within 5% of what
/// the program measured (0.986 to 0.996 of it in 8 runs here, 0.963 at worst beside two busy
/// loops; before the samples copied without a slot were told apart, 0.81 to 0.96, 5 runs of 6
/// below the bound), at 1 kHz, where a slow tick is 20 ms. The perf samples between fsprof's
/// first tick and the thread's watch (at its second) read as failed copies, their time lost:
/// 0.947 in CI and 1 run in 40 here (11 such samples); handed out no more, 0.978 to 1.005 in 60
/// runs (AMD host, 2026-12-05). What ran before fsprof's first tick is not counted: 1 to 6 ms
/// calm, up to 27 ms beside two busy loops (0.942 to 1.001 in 20 runs there).
#[test]
fn a_programs_first_mark_counts_from_its_start_with_perf() {
    if !perf_backend_available() {
        return;
    }
    let _serial = serial();
    again_if_stolen(|| {
        let dir = tempdir();
        let status = Command::new(fsprof())
            .args(["run", "--backend", "perf", "--rate", "1000", "-o"])
            .arg(dir.path().join("out"))
            .arg("--")
            .arg(fsprof().with_file_name("growth"))
            .args(["60", "--truth"])
            .arg(dir.path().join("truth.json"))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let truth = truth(dir.path());
        let report = report_json(&dir.path().join("out"));
        let reported = (report["features"].as_array().unwrap().iter())
            .find(|f| f["name"] == "work")
            .and_then(|work| {
                (work["instances"].as_array()?.iter())
                    .find(|i| i["payload"] == "linear")
                    .and_then(|i| i["ms"].as_f64())
            })
            .unwrap_or_else(|| panic!("no work: linear in {report:#}"));
        let measured = truth["features"]["work"]["instances"]["linear"]
            .as_f64()
            .unwrap();
        assert!(
            (reported / measured - 1.0).abs() < 0.05,
            "linear: {reported:.1} ms reported, {measured:.1} ms measured"
        );
    });
}

/// A thread that sleeps inside a mark (`fsprof-target sleepy`: 500 µs of `thread::sleep` in
/// [io], 1 ms of work around it) has its stack read while it is blocked, without a stop (a stop
/// would lengthen the sleep it interrupts), or, with perf, copied by the kernel as it blocks:
/// under [io] must be the sleep, down to `clock_nanosleep`. With perf, nothing is stopped at
/// all.
fn blocked_thread_sampled_without_a_stop(backend: &str) {
    let _serial = serial();
    let dir = tempdir();
    let out = dir.path().join("out");
    let status = Command::new(fsprof())
        .args(["run", "--rate", ACCURACY_RATE, "--backend", backend, "-o"])
        .arg(&out)
        .arg("--")
        .arg(target())
        .args(["sleepy", "2", "--truth"])
        .arg(dir.path().join("truth.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let profile: Value =
        serde_json::from_slice(&std::fs::read(out.join("profile.json")).unwrap()).unwrap();
    let meta = &profile["meta"];
    let blocked = meta["native_blocked"].as_u64().unwrap();
    // About 1 tick in 3 finds the thread asleep; some reads are skipped (see
    // NativeSampler::blocked_stack): the thread last ran on fsprof's CPU (one in two on two
    // CPUs), or it ran meanwhile. With perf, a blocked stack is read once per sleep found at a
    // tick (every 10 ms, 200 here; twice as many in some runs, whose ticks stayed fast). Quiet,
    // perf reads 32 to 110 and skips 15 to 44, ptrace more than 600 and skips one in 20; beside
    // busy loops many more are skipped (the thread, woken, waits for a CPU: "it ran meanwhile"):
    // perf read 18 to 30 and skipped 13 to 25 beside two, 20 and 71 once beside one; ptrace
    // 290 to 468 and skipped 42 to 298. What is checked is that blocked stacks are read at all,
    // and without stopping the thread (below); how many are skipped is a figure of
    // BENCHMARKS.md, not a bound. With perf, a sleep mostly comes with the stack the kernel
    // copied as the thread left its CPU, and the ticks read no other (0 to 10 reads).
    if backend == "ptrace" {
        assert!(blocked > 150, "{meta}");
    } else {
        // Stopped only to learn the sizes of the standard library's frame-pointer frames on its
        // way to the sleep (see unwind.rs), the first time it is found there.
        assert!(meta["native_stops"].as_u64().unwrap() <= 3, "{meta}");
    }
    // Of the samples under the mark with a stack (the skipped ones have none), most are in the
    // sleep, and those in the sleep have whole stacks: from the program's main down to
    // clock_nanosleep, the mark between. The rest is the program's own bookkeeping inside the
    // mark (its truth), sampled on the CPU: under 5% idle, 8 to 10% with two busy loops beside.
    let stacks = folded(&out);
    let under_io = |(frames, _): &&(Vec<String>, u64)| {
        frames.iter().any(|f| f == "[io] read") && frames[0] != "[no native stack]"
    };
    let whole = |frames: &[String]| {
        let at = frames.iter().position(|f| f == "[io] read").unwrap();
        let main = frames.iter().position(|f| f == "fsprof_target::main");
        main.is_some_and(|main| main < at)
            && frames[at..].iter().any(|f| f.contains("clock_nanosleep"))
    };
    let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks
            .iter()
            .filter(under_io)
            .filter(|(frames, _)| keep(frames))
            .map(|(_, us)| us)
            .sum()
    };
    let io = sum(&|_| true);
    let in_sleep = sum(&|frames| {
        frames
            .iter()
            .any(|f| f.starts_with("std::thread::") && f.ends_with("::sleep"))
    });
    let asleep = sum(&whole);
    assert!(
        io > 0 && asleep * 4 >= io * 3 && asleep * 10 >= in_sleep * 9,
        "{asleep} of {io} µs under [io] with a stack ({in_sleep} in thread::sleep) are in \
         clock_nanosleep under main: {stacks:?}"
    );
}

#[test]
fn a_thread_blocked_inside_a_mark_is_sampled_without_a_stop_with_perf() {
    if perf_backend_available() {
        blocked_thread_sampled_without_a_stop("perf");
    }
}

#[test]
fn a_thread_blocked_inside_a_mark_is_sampled_without_a_stop_with_ptrace() {
    blocked_thread_sampled_without_a_stop("ptrace");
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
            .args(["run", "-o"])
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

/// The build id of `file` in hex, as `readelf -n` prints it.
fn build_id(file: &Path) -> String {
    let output = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    (text.lines())
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {}: {text}", file.display()))
        .trim()
        .to_owned()
}

/// A debuginfod server (Debian's `debuginfod`) on 127.0.0.1 serving the `.debug` files under
/// `served`; returns it once it serves each of `ids`, with its URL.
fn start_debuginfod(dir: &Path, served: &Path, ids: &[String]) -> (Guarded, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Guarded(
        Command::new("debuginfod")
            .arg("-F")
            .arg(served)
            .args(["-p", &port.to_string(), "-d"])
            .arg(dir.join("debuginfod.sqlite"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("debuginfod is needed (Debian: apt-get install debuginfod)"),
    );
    // Whether the server answers 200 for `id`'s debug file (HTTP/1.0: the answer ends with
    // the connection).
    let serves = |id: &String| -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        let request = format!("GET /buildid/{id}/debuginfo HTTP/1.0\r\n\r\n");
        let mut answer = Vec::new();
        let _ = stream.write_all(request.as_bytes());
        let _ = stream.read_to_end(&mut answer);
        answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200")
    };
    let url = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if ids.iter().all(serves) {
            return (server, url);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "debuginfod did not serve {ids:?} within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The chain program and its library, both stripped (`strip -s`), their debug files served by a
/// local debuginfod: with `DEBUGINFOD_URLS` naming it, the stacks show every chain by name
/// (the executable's functions have no other name) and the library's function with its source
/// file (DWARF only the fetched file has); both files land in the user's cache. With
/// `--offline` and an empty cache, the executable's functions have no names.
#[test]
fn a_stripped_program_and_library_get_their_names_from_debuginfod() {
    let _serial = serial();
    let dir = tempdir();
    let program = build_c_chain(dir.path());
    let library = program.lib_dir.join("libleaf.so");
    let served = dir.path().join("served");
    std::fs::create_dir(&served).unwrap();
    let mut ids = Vec::new();
    for file in [&program.exe, &library] {
        let name = file.file_name().unwrap().to_string_lossy();
        let debug = served.join(format!("{name}.debug"));
        let kept = Command::new("objcopy")
            .arg("--only-keep-debug")
            .args([file.as_os_str(), debug.as_os_str()])
            .status();
        assert!(kept.unwrap().success());
        assert!(Command::new("strip")
            .arg("-s")
            .arg(file)
            .status()
            .unwrap()
            .success());
        ids.push(build_id(file));
    }
    let (_server, url) = start_debuginfod(dir.path(), &served, &ids);
    let record = |out: &str, cache: &Path, offline: bool| {
        let status = Command::new(fsprof())
            .args(["run", "-o"])
            .arg(dir.path().join(out))
            .args(offline.then_some("--offline"))
            .arg("--")
            .arg(&program.exe)
            .args(["2", "--truth"])
            .arg(dir.path().join("truth.json"))
            .env("DEBUGINFOD_URLS", &url)
            .env("XDG_CACHE_HOME", cache)
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("ALL_PROXY")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    };
    let cache = dir.path().join("cache");
    record("out", &cache, false);
    check_chains(dir.path(), &truth(dir.path()));
    for id in &ids {
        let file = cache.join("fsprof/debuginfod").join(id).join("debuginfo");
        assert!(file.is_file(), "{} was not fetched", file.display());
    }
    let report = std::fs::read_to_string(dir.path().join("out/report.txt")).unwrap();
    assert!(
        report.contains("leaf_work (") && report.contains("libleaf.c"),
        "{report}"
    );
    assert!(!report.contains("no symbols for chain"), "{report}");

    let empty = dir.path().join("empty-cache");
    record("offline", &empty, true);
    let report = std::fs::read_to_string(dir.path().join("offline/report.txt")).unwrap();
    assert!(report.contains("no symbols for chain"), "{report}");
    assert!(!empty.join("fsprof/debuginfod").exists());
}

/// Threads born and gone between two of fsprof's ticks, in a program nobody marked
/// (`tests/c/short_threads.c`: the main thread runs 30 ms of `main_work`, then a thread runs
/// 30 ms of `short_work` and ends, again and again). At the defaults the ticks are rare while
/// perf samples the running threads, and a third of those threads lived and ended between two:
/// they were missing from the profile with their time (8 ms threads: 110 of 122 found). Per
/// CPU, perf's bare samples of a thread no tick saw are added once it is gone: every thread the
/// program made is in the profile, and the short threads' share of the time is the one the
/// program measured (their CPU time against the main thread's), within 2.5 points or four
/// standard deviations of its samples' spread. (The threads a tick found read 3 to 5% low until a thread watched while it ran
/// counted its CPU time from then, not from its first sample.)
#[test]
fn threads_born_and_gone_between_two_ticks_are_in_the_profile_with_perf() {
    let _serial = serial();
    if !perf_backend_available() {
        eprintln!("perf backend not available: threads no tick saw are not checked");
        return;
    }
    let build = tempdir();
    let program = build_c_program(build.path(), "short_threads");
    let dir = tempdir();
    let output = Command::new(fsprof())
        .arg("run")
        .arg("-o")
        .arg(dir.path())
        .arg("--")
        .arg(&program)
        .args(["12", "30"])
        .env("SHORT_THREADS_EACH", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    // "threads N short_ms X main_ms Y main_cpu_ms Z", and "thread TID MS" per thread on stderr.
    let words: Vec<&str> = stdout.split_whitespace().collect();
    let number = |at: usize| -> f64 {
        (words.get(at).and_then(|w| w.parse().ok()))
            .unwrap_or_else(|| panic!("no figures in {stdout:?}"))
    };
    let (short_ms, main_ms) = (number(3), number(7));
    let made: Vec<u64> = (stderr.lines())
        .filter_map(|line| line.strip_prefix("thread "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    let profile: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("profile.json")).unwrap()).unwrap();
    let meta = &profile["meta"];
    let tids: Vec<u64> = (profile["threads"].as_array().unwrap().iter())
        .map(|thread| thread["tid"].as_u64().unwrap())
        .collect();
    let missing: Vec<u64> = (made.iter().copied())
        .filter(|tid| !tids.contains(tid))
        .collect();
    // Each thread's active time in the profile, ms, and of it the time without a native stack.
    let (mut active, mut stackless) = (vec![0.0f64; tids.len()], vec![0.0f64; tids.len()]);
    for sample in profile["samples"].as_array().unwrap() {
        let thread = sample["thread"].as_u64().unwrap() as usize;
        let ms = sample["active_ns"].as_u64().unwrap_or(0) as f64 / 1e6;
        active[thread] += ms;
        if sample.get("native").is_none() {
            stackless[thread] += ms;
        }
    }
    let of = |times: &[f64], wanted: &dyn Fn(u64) -> bool| -> f64 {
        (tids.iter().zip(times))
            .filter(|(tid, _)| wanted(**tid))
            .map(|(_, ms)| ms)
            .sum()
    };
    let pid = meta["pid"].as_u64().unwrap();
    let short_thread = |tid| made.contains(&tid);
    let (short, main) = (of(&active, &short_thread), of(&active, &|tid| tid == pid));
    let short_stackless = of(&stackless, &short_thread);
    let share = 100.0 * short / (short + main);
    let truth = 100.0 * short_ms / (short_ms + main_ms);
    // One sample per period of the two's time at the rate: the shares' spread.
    let rate = meta["rate_hz"].as_f64().unwrap_or(250.0);
    let bound = share_bound(truth, ((short + main) * rate / 1e3) as u64, 2.5);
    let summary = format!(
        "{} threads made, {} missing {missing:?}; the short threads {short:.1} ms ({short_stackless:.1} without a native stack), the main thread {main:.1} ms: {share:.2}% against {truth:.2}% measured ({short_ms:.1} and {main_ms:.1} ms of CPU); unseen threads added {}, their samples {}, perf samples lost {}",
        made.len(),
        missing.len(),
        meta["native_unseen_threads"],
        meta["native_unseen_samples"],
        meta["perf_lost"],
    );
    eprintln!("{summary}");
    assert!(made.len() >= 20, "{summary}\n{stderr}");
    assert!(missing.is_empty(), "{summary}");
    assert!(
        (share - truth).abs() <= bound,
        "{summary} (bound {bound:.2})"
    );
}

/// Threads that run 2 ms every 400 ms, each a CPU half a percent of the time, which a tick
/// seldom finds running (`rare_threads`: three of them, their bursts spread, beside a main
/// thread busy throughout): per CPU, perf's samples of such a thread have it watched, and its
/// time (on a CPU and waiting for one after its wake-ups, as the kernel's `schedstat` of it
/// says) is counted within 20% of what it was: until it was (96e6e04), 4 runs of 5 left one
/// or two of the three out altogether (no tick found them running, and perf's samples of them
/// were dropped), and those a tick found read 1.3 to 3 times their time (31 to 74 ms for 23;
/// the test failed 3 runs of 3 with that build); then 88 to 93% of it (the bursts before
/// perf's first sample of the thread were dropped, until `Sampler::add_bare`); now 95 to 104%.
#[test]
fn threads_a_tick_seldom_finds_running_are_counted_with_perf() {
    let _serial = serial();
    if !perf_backend_available() {
        eprintln!("perf backend not available: threads a tick seldom finds are not checked");
        return;
    }
    let build = tempdir();
    let program = build_c_program(build.path(), "rare_threads");
    let dir = tempdir();
    let output = Command::new(fsprof())
        .args(["run", "--rate", "1000", "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(&program)
        .args(["5", "3", "2", "400"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    // "thread TID CPU_MS WAIT_MS" per rare thread, then "main PID CPU_MS WAIT_MS".
    let truths: Vec<(String, u64, f64)> = (stdout.lines())
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [kind, tid, cpu, wait] = words[..] else {
                return None;
            };
            let ms = cpu.parse::<f64>().ok()? + wait.parse::<f64>().ok()?;
            Some((kind.to_owned(), tid.parse().ok()?, ms))
        })
        .collect();
    assert_eq!(truths.len(), 4, "no figures in {stdout:?}");
    let profile: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("profile.json")).unwrap()).unwrap();
    let tids: Vec<u64> = (profile["threads"].as_array().unwrap().iter())
        .map(|thread| thread["tid"].as_u64().unwrap())
        .collect();
    let mut active = vec![0.0f64; tids.len()];
    for sample in profile["samples"].as_array().unwrap() {
        let thread = sample["thread"].as_u64().unwrap() as usize;
        active[thread] += sample["active_ns"].as_u64().unwrap_or(0) as f64 / 1e6;
    }
    let counted = |tid: u64| {
        tids.iter()
            .position(|&t| t == tid)
            .map_or(0.0, |i| active[i])
    };
    let rows: Vec<String> = (truths.iter())
        .map(|(kind, tid, ms)| format!("{kind} {tid}: {:.1} ms of {ms:.1}", counted(*tid)))
        .collect();
    let summary = format!(
        "{} (ticks {}, perf samples lost {})",
        rows.join(", "),
        profile["meta"]["ticks"],
        profile["meta"]["perf_lost"]
    );
    eprintln!("{summary}");
    for (kind, tid, ms) in &truths {
        let ratio = counted(*tid) / ms;
        match kind.as_str() {
            "thread" => assert!((0.8..=1.2).contains(&ratio), "{summary}"),
            _ => assert!((0.95..=1.05).contains(&ratio), "{summary}"),
        }
    }
}
