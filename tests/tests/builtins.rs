//! The built-in features end to end: programs written for these tests run by the real `fsprof
//! run`, which with the defaults finds them in the native stacks by the built-in rules and puts
//! nothing into the program; with `--agent`, it preloads `libfsprof_agent.so`, which marks them
//! at each libc call. Programs that time their own libc calls (C and Rust, no marks of their own,
//! or marks of their own beside threads waiting in libc) must get the shares they measured, with
//! instances at the lines that made the calls, either way. Also: statically linked programs, and
//! an `LD_PRELOAD` the user set. Programs nobody here wrote are in `real_programs.rs`.

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::native::*;
use support::programs::*;
use support::*;

/// Builds `tests/c/NAME.c` and runs it for `secs` under `fsprof run [args]` with its truth in
/// the output directory, as `run` does. Returns that directory and fsprof's stderr.
fn run_c_program(
    name: &str,
    secs: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (support::TestDir, String) {
    let build = tempdir();
    let program = build_c_program(build.path(), name);
    run_built(&program, secs, args, env)
}

/// Runs `program` for `secs` as [`run_c_program`] does.
fn run_built(
    program: &Path,
    secs: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (support::TestDir, String) {
    let dir = tempdir();
    let truth_path = dir.path().join("truth.json");
    let stderr = run(
        dir.path(),
        args,
        env,
        &[
            program.as_os_str(),
            secs.as_ref(),
            "--truth".as_ref(),
            truth_path.as_os_str(),
        ],
    );
    (dir, stderr)
}

/// Compares the features the truth names with the report, each within its bound
/// ([`share_bound`], `tolerance` the floor); every other feature must be built in and below
/// the floor. Returns the worst error.
fn assert_feature_shares(report: &Value, truth: &Value, tolerance: f64) -> f64 {
    let total = truth["total_ms"].as_f64().unwrap();
    let samples = timed_samples_of(report);
    let mut table = samples_line(report, samples, total);
    let (mut worst, mut over): (f64, Vec<String>) = (0.0, Vec::new());
    for (name, measured) in truth["features"].as_object().unwrap() {
        let expected = measured["ms"].as_f64().unwrap() * 100.0 / total;
        let reported = percent(report, name);
        let bound = share_bound(expected, samples, tolerance);
        worst = worst.max((reported - expected).abs());
        table += &format!(
            "  {name:<12} report {reported:6.2}%  truth {expected:6.2}%  bound {bound:.2}\n"
        );
        if (reported - expected).abs() > bound {
            over.push(name.clone());
        }
    }
    for feature in report["features"].as_array().unwrap() {
        let name = feature["name"].as_str().unwrap();
        if truth["features"].get(name).is_none() {
            let reported = timed_share(report, feature);
            let bound = share_bound(0.0, samples, tolerance);
            table += &format!("  {name:<12} report {reported:6.2}%  (not measured)\n");
            assert_eq!(feature["builtin"], true, "{name} is not built in:\n{table}");
            worst = worst.max(reported);
            if reported > bound {
                over.push(name.to_owned());
            }
        }
    }
    eprintln!("{table}");
    assert!(
        over.is_empty(),
        "shares off by more than their bounds ({}):\n{table}",
        over.join(", ")
    );
    worst
}

#[test]
fn c_program_gets_the_output_allocation_and_lock_shares_it_measured() {
    let _serial = serial();
    let (dir, stderr) = run_c_program("builtins", "3", &[], &[]);
    assert!(stderr.contains("built in: "), "{stderr}");
    let report = report_json(dir.path());
    assert_feature_shares(&report, &truth(dir.path()), TOLERANCE);
    // Instances are the program's call sites, named with their lines.
    let output = payloads(&report, "output");
    for function in ["write_chunk (", "print_line ("] {
        assert!(
            output
                .iter()
                .any(|p| p.starts_with(function) && p.contains("builtins.c:")),
            "{output:?}"
        );
    }
    // stdio counts once: fprintf's own write is not a second instance inside libc.
    assert!(output.iter().all(|p| !p.contains("libc")), "{output:?}");
    assert!(payloads(&report, "waiting")[0].starts_with("wait_for_nothing ("));
    assert!(payloads(&report, "allocation")[0].starts_with("allocate ("));
}

/// The same program linked statically: glibc is inside the executable, nothing can be preloaded
/// into it, and its built-in features come from its stacks alone: the same shares within their
/// bounds, at the same call sites, its own copy of the C library answering to the catalog's
/// `libc.so` patterns (it defines `__libc_start_main`).
#[test]
fn a_static_program_gets_its_built_in_features_from_its_stacks() {
    let _serial = serial();
    let build = tempdir();
    builtins_from_stacks(&build_static_c_program(build.path(), "builtins"));
}

/// Runs `tests/c/builtins.c` built as `program` for 3 s: its shares within their bounds, at its
/// call sites. Returns fsprof's stderr.
fn builtins_from_stacks(program: &Path) -> String {
    let (dir, stderr) = run_built(program, "3", &[], &[]);
    let report = report_json(dir.path());
    assert_feature_shares(&report, &truth(dir.path()), TOLERANCE);
    let output = payloads(&report, "output");
    for function in ["write_chunk (", "print_line ("] {
        assert!(
            output.iter().any(|p| p.starts_with(function)),
            "{output:?}\n{stderr}"
        );
    }
    assert!(payloads(&report, "waiting")[0].starts_with("wait_for_nothing ("));
    assert!(payloads(&report, "allocation")[0].starts_with("allocate ("));
    stderr
}

/// The same program built with musl (dynamically linked: the agent, made for glibc's loader,
/// could not be preloaded into it): musl's `libc.so` has unwind tables for 4 functions and no
/// symbol table, so its frames are walked by scanning the stack for return addresses
/// (`native/scan.rs`), its functions named by its exports, and the program's calls into it by
/// its PLT. The same shares within their bounds, at the same call sites, every stack unwound
/// to `_start`. With `--agent` it runs as alone, and the notes say why nothing was preloaded.
#[test]
fn a_musl_program_gets_its_built_in_features_from_its_stacks() {
    let _serial = serial();
    let build = tempdir();
    let program = build_musl_c_program(build.path(), "builtins");
    let stderr = builtins_from_stacks(&program);
    assert!(
        !stderr.contains("[stack truncated]"),
        "every stack reaches _start:\n{stderr}"
    );
    // With --agent: not preloaded (musl's loader would fail on it, exit 127), and said so.
    let (_, stderr) = run_built(&program, "1", &["--agent"], &[]);
    assert!(
        stderr.contains("not glibc's loader, so the agent"),
        "{stderr}"
    );
}

/// A producer whose writes block on a full pipe (its reader, another process, is slow): the
/// blocked writes are the reader's pace, not the producer's work, and are kept apart as
/// `output`'s waits, as long as the producer measured them; its own `produce` reads its truth
/// (about 45% when the waits counted).
#[test]
fn writes_blocked_on_a_full_pipe_are_waits_not_work() {
    let _serial = serial();
    let (report, truth, _dir) = own_feature_against_truth("full_pipe", "produce");
    let output = feature(&report, "output").expect("the writes are seen");
    let blocked = output["blocked_ms"].as_f64().unwrap();
    let measured = truth["extra"]["blocked_ms"].as_f64().unwrap();
    let woken_wait = truth["extra"]["woken_wait_ms"].as_f64().unwrap();
    assert!(measured > 500.0, "the pipe was never full: {truth}");
    // Blocked as measured, less at most the waits for a CPU after the writes' wake-ups.
    assert!(
        blocked > (measured - woken_wait) * 0.9 && blocked < measured * 1.1,
        "{output:#}\n{truth}"
    );
}

/// Lock contention has a known cost, and the report shows it: a waiter blocked in
/// `pthread_mutex_lock` while another thread holds the mutex and works. Its waits are built-in
/// `locks` outside the program's marks, so they are shown as `blocked_ms`, not in the shares:
/// as long as the waiter measured them, at the waiter's call site.
#[test]
fn a_contended_mutex_shows_the_waits_it_causes() {
    let _serial = serial();
    let (dir, _) = run_c_program("contended", "3", &[], &[]);
    let report = report_json(dir.path());
    let truth = truth(dir.path());
    let waited = truth["extra"]["waited_ms"].as_f64().unwrap();
    let locks = feature(&report, "locks").expect("the waits are seen");
    let blocked = locks["blocked_ms"].as_f64().unwrap() + locks["ms"].as_f64().unwrap();
    eprintln!("locks: {blocked:.0} ms in the report, {waited:.0} ms measured");
    // The program runs on until its waiter has waited 400 ms (some 200 waits, enough to
    // compare) unless the machine is so busy that its two threads hardly ever run at once.
    assert!(waited >= 400.0, "the waiter hardly waited: {truth}");
    assert!((blocked - waited).abs() < waited * 0.1, "{locks:#}");
    assert!(
        payloads(&report, "locks")[0].starts_with("main ("),
        "{locks:#}"
    );
    // The text report says so, for the feature and its instance.
    let text = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    let line = text.lines().find(|l| l.starts_with("Locks accounts for"));
    assert!(
        line.is_some_and(|l| l.contains("; threads also waited in it for ")
            && l.ends_with(" ms, idle time not counted")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(" : main (") && l.ends_with(" ms waiting)")),
        "{text}"
    );
}

/// A program that forks a large address space over and over: the kernel holds its memory map's
/// lock for writing through each `fork`, and a sampler that waited for that lock (reading the
/// program's memory or its maps) took its samples after the `fork` and gave the time to the
/// `waitpid` that follows (errors of 6.4 and 7.8 points in two runs before the fix; within 1.7
/// in four runs after).
/// Issue 14's first program: a main thread that spins (a third of it hashing) beside a thread
/// pool at rest, a `Condvar` waiter and a sleeping helper. Their waits, each inside a libc call
/// the agent marks (futex waits under `locks`, `nanosleep` under `sleep`), are idle time, not
/// cost: `hashing` must read what the program measured, with the agent as without it, and the
/// waits must stay visible as `blocked_ms`. 6 s each: `hashing` is 300 us of each 900 us, and
/// at 1000 Hz each sample stood for about a period, so over 3 s its share spread by 0.85
/// points (standard deviation, 20 runs, quiet and beside a busy process alike) and went past
/// the bound about once in a hundred runs (-2.95 in a fresh clone's run beside `yes`).
#[test]
fn threads_waiting_in_builtin_calls_do_not_dilute_the_programs_own_feature() {
    let _serial = serial();
    for agent in [true, false] {
        let dir = tempdir();
        if agent {
            run_target_with_agent(dir.path(), "pool", 6.0);
        } else {
            run_target(dir.path(), "pool", 6.0, &[]);
        }
        let report = report_json(dir.path());
        let truth = truth(dir.path());
        let expected = truth["features"]["hashing"]["ms"].as_f64().unwrap() * 100.0
            / truth["total_ms"].as_f64().unwrap();
        let hashing = feature(&report, "hashing").unwrap()["percent"]
            .as_f64()
            .unwrap();
        let waited =
            |name: &str| feature(&report, name).map_or(0.0, |f| f["blocked_ms"].as_f64().unwrap());
        let running =
            |name: &str| feature(&report, name).map_or(0.0, |f| f["percent"].as_f64().unwrap());
        eprintln!(
            "agent {agent}: hashing {hashing:.2}% against {expected:.2}% measured; locks waited {:.0} ms, waiting {:.0} ms, sleep {:.0} ms, total {:.0} ms; running in them {:.2}%, {:.2}%, {:.2}%, the helpers {:.2} ms",
            waited("locks"),
            waited("waiting"),
            waited("sleep"),
            report["total_ms"],
            running("locks"),
            running("waiting"),
            running("sleep"),
            truth["extra"]["helpers_ms"].as_f64().unwrap(),
        );
        assert!(
            (hashing - expected).abs() <= TOLERANCE,
            "agent {agent}: hashing {hashing:.2}%, measured {expected:.2}%: {report:#}"
        );
        // Six threads waited for 6 s: the waits are there, apart from the shares, whether the
        // agent marked them or the rules found them in the stacks (which tell a condition
        // variable's waits, `waiting`, from a lock's).
        let built_in_waits: f64 = (report["features"].as_array().unwrap().iter())
            .filter(|f| f["builtin"] == true)
            .map(|f| f["blocked_ms"].as_f64().unwrap())
            .sum();
        assert!(built_in_waits > 6_000.0, "agent {agent}: {report:#}");
        // What the waits count is their threads' running and waiting for a CPU as they wake
        // up, at most the helpers' whole time (on an Intel host the sleeper's 300 wake-ups
        // waited 0.8 ms each for a CPU once: `sleep` 3.9%, against a bound of 2.5 with no
        // helpers' share).
        let helpers = truth["extra"]["helpers_ms"].as_f64().unwrap() * 100.0
            / truth["total_ms"].as_f64().unwrap();
        for f in report["features"].as_array().unwrap() {
            if f["builtin"] == true {
                let percent = f["percent"].as_f64().unwrap();
                assert!(
                    percent < helpers + TOLERANCE,
                    "the helpers' share {helpers:.2}%: {f:#}"
                );
            }
        }
    }
}

/// Builds `tests/c/NAME.c` (marking through `fsprof.h`), runs it for 3 s under `fsprof run`
/// with the agent, and checks that its own `feature`'s share is the one it measured. Returns the
/// report and the truth, and the profile's directory (kept, with what the recording's
/// conditions were, should the caller's own checks fail).
fn own_feature_against_truth(name: &str, feature_name: &str) -> (Value, Value, TestDir) {
    let build = tempdir();
    let program = build_c_with_agent(build.path(), name);
    let (dir, _) = run_built(&program.exe, "3", &[], &[]);
    let (report, truth) = own_feature_in(dir.path(), feature_name);
    (report, truth, dir)
}

/// The report of the profile in `dir` and its program's truth, checked as
/// [`own_feature_against_truth`] says.
fn own_feature_in(dir: &Path, feature_name: &str) -> (Value, Value) {
    // The program's process alone: its truth is its own (`full_pipe`'s reader is a child).
    let pid = report_json(dir)["meta"]["pid"].to_string();
    let report = report_json_with(dir, &["--process", &pid]);
    let truth = truth(dir);
    let ms = truth["features"][feature_name]["ms"].as_f64().unwrap();
    let total = truth["total_ms"].as_f64().unwrap();
    // Waits for a CPU after wake-ups the program could only bound (see `full_pipe.c`): the
    // share lies between the two totals.
    let unsure = truth["extra"]["woken_wait_ms"].as_f64().unwrap_or(0.0);
    let (lo, hi) = (ms * 100.0 / (total + unsure), ms * 100.0 / total);
    let reported = feature(&report, feature_name).unwrap()["percent"]
        .as_f64()
        .unwrap();
    eprintln!("{feature_name} {reported:.2}% against {lo:.2}-{hi:.2}% measured");
    assert!(
        reported >= lo - TOLERANCE && reported <= hi + TOLERANCE,
        "{report:#}\n{truth}"
    );
    (report, truth)
}

/// A profiler starved of its CPU (fsprof stopped for 2.6 s in every 2.8 s here, as a loaded
/// host's steal starves it; a CPU's ring holds some 500 ms of a busy CPU's samples at any rate,
/// 30 ms at this test's 2 kHz before the rings grew with the rate, when 80 ms in every 280
/// starved it, and a 1 s stop no longer filled them once a sample copied 8 KiB of stack, not 16;
/// 2 s stops left one suite run with none lost once the rate drawn was the rate asked, not 1.1
/// times it)
/// loses samples from the full rings of the threads it follows; what
/// a thread ran in them is shared among the samples that follow (and said), not given to the
/// first sample kept after fsprof read the ring again: on a starved machine fsprof reads it as
/// the program blocks, so that sample is the program's wake-up, and the event loop's
/// `handling` read 3 to 7 points low, its `epoll_wait` high (a CI run read 84.6% against
/// 88.4-90.6%, its `epoll_wait`, `read` and `write` three times their CPU).
#[test]
fn samples_lost_while_fsprof_is_starved_are_shared_among_those_that_follow() {
    if !perf_backend_available() {
        return; // only the perf backend's rings lose samples
    }
    let _serial = serial();
    let build = tempdir();
    let program = build_c_with_agent(build.path(), "epoll_server");
    let dir = tempdir();
    let mut fsprof_run = Guarded(
        Command::new(fsprof())
            .args(["run", "--rate", ACCURACY_RATE, "-o"])
            .arg(dir.path())
            .arg("--")
            .arg(&program.exe)
            .args(["3", "--truth"])
            .arg(dir.path().join("truth.json"))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = fsprof_run.pid() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while fsprof_run.0.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "fsprof did not end");
        std::thread::sleep(std::time::Duration::from_millis(200));
        // SAFETY: kill(2) with fsprof's pid, a child not yet reaped (try_wait saw it running).
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(std::time::Duration::from_millis(2600));
        // SAFETY: as above; a Guarded kills it if the test fails while it is stopped.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
    let (status, stderr) = fsprof_run.stderr_with_deadline(std::time::Duration::from_secs(1));
    assert!(
        status.success() && stderr.contains("exited with code 0"),
        "{stderr}"
    );
    // The running time of the samples lost (a ring's records dropped, or a gap where a ring
    // was read nearly full), shared among the samples that followed.
    let lost_us = report_json(dir.path())["meta"]["perf_lost_cpu_us"]
        .as_u64()
        .unwrap();
    assert!(
        lost_us > 0,
        "no running time was lost: the test did not starve fsprof"
    );
    let text = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(
        text.contains("shared among the samples that followed"),
        "the report does not say that running time was lost: {text}"
    );
    own_feature_in(dir.path(), "handling");
}

/// A coordinator that waits on a condition variable while two workers do the work (as `xz -T2`
/// does): its wait, inside `pthread_cond_wait` (built-in `waiting`, not `locks`: no thread holds
/// anything it needs), is not cost, and the workers' own feature reads what they measured (38%
/// instead of 59% when the wait counted).
#[test]
fn a_coordinator_waiting_on_a_condition_variable_does_not_dilute_its_workers() {
    let _serial = serial();
    again_if_stolen(|| {
        let (report, _, _dir) = own_feature_against_truth("coordinator", "work");
        let waiting = feature(&report, "waiting").expect("the coordinator's wait is seen");
        // The waits are kept apart; what `waiting` counts is its threads waking up (runnable),
        // which is running time like any other.
        assert!(
            waiting["blocked_ms"].as_f64().unwrap() > 1_500.0,
            "{waiting:#}"
        );
        // The coordinator's waits are not `locks`. Some waits for the mutex are real where a thread
        // holding it loses its CPU (in a CPU-limited cgroup, throttled 20 ms at a time: 10 to 175 ms
        // of `locks` against 2250 to 2700 of `waiting`), so a tenth of the waits, at least 100 ms.
        let waited = waiting["blocked_ms"].as_f64().unwrap();
        let locks = feature(&report, "locks").map_or(0.0, |l| l["blocked_ms"].as_f64().unwrap());
        assert!(
            locks < (waited / 10.0).max(100.0),
            "locks {locks} ms, waiting {waited} ms"
        );
    });
}

/// An event loop idle in `epoll_wait` between requests that come over loopback: the wait
/// (built-in `poll`) is not cost, and the server's own `handling` reads what it measured (about
/// 66% when the wait counted).
#[test]
fn an_event_loop_idle_between_requests_does_not_dilute_its_handling() {
    let _serial = serial();
    let (report, truth, dir) = own_feature_against_truth("epoll_server", "handling");
    let poll = feature(&report, "poll").expect("the loop's waits are seen");
    let measured = truth["extra"]["blocked_ms"].as_f64().unwrap();
    let woken_wait = truth["extra"]["woken_wait_ms"].as_f64().unwrap();
    // Its waits are kept apart, and as long as the loop measured them, less its waits for a CPU
    // once woken, which count as running.
    let blocked = poll["blocked_ms"].as_f64().unwrap();
    // Where the rest of its blocked time went, should the test fail (once in CI: 737 of 1008 ms).
    let elsewhere: Vec<String> = (report["features"].as_array().unwrap().iter())
        .filter(|f| f["name"] != "poll" && f["blocked_ms"].as_f64().unwrap_or(0.0) >= 1.0)
        .map(|f| format!("{} {:.0} ms", f["name"], f["blocked_ms"].as_f64().unwrap()))
        .collect();
    let profile: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("profile.json")).unwrap()).unwrap();
    let unplaced = profile["meta"]["native_blocked_unplaced_us"]
        .as_u64()
        .unwrap_or(0)
        / 1_000;
    eprintln!("poll blocked {blocked:.0} ms; the loop measured {measured:.0} ms, {woken_wait:.0} ms of it at most waiting for a CPU; blocked elsewhere: [{}]; blocked without a native stack in the whole tree (the client's too): {unplaced} ms", elsewhere.join(", "));
    assert!(
        blocked > (measured - woken_wait) * 0.9 && blocked < measured * 1.1,
        "{poll:#}"
    );
}

#[test]
fn forking_a_large_program_counts_the_fork_for_the_fork() {
    let _serial = serial();
    again_if_stolen(|| {
        let (dir, _) = run_c_program("forks", "5", &[], &[]);
        // The program's process alone: its truth is its own, and its children's time (each spins
        // 300 µs and exits, tearing down a copy of 64 MiB: 0.6 to 1.6 ms each where sampled) runs
        // while it waits for them, which its truth counts once, in `do_wait`.
        let pid = report_json(dir.path())["meta"]["pid"].to_string();
        let mut report = report_json_with(dir.path(), &["--process", &pid]);
        // Call sites are named `do_fork (/…/forks.c:LINE)`; the truth names them by function.
        for feature in report["features"].as_array_mut().unwrap() {
            for instance in feature["instances"].as_array_mut().unwrap() {
                let payload = instance["payload"].as_str().unwrap().to_owned();
                if let Some((function, _)) = payload.split_once(" (") {
                    instance["payload"] = Value::from(function);
                }
            }
        }
        assert_timed_shares_match(&report, &truth(dir.path()));
    });
}

/// Threads cancelled while blocked in `read`: the cancellation unwinds through the agent's
/// wrapper, whose landing pad pops the `input` mark, so the 20 ms that each thread's cleanup
/// handler spins afterwards are not input (were the mark left behind, input would be about 65%
/// against a truth of 32%). Both return forms of the system-call wrappers (the agent's
/// `builtin/syscall_wrappers.rs`), whichever this host would choose.
#[test]
fn a_thread_cancelled_inside_read_is_out_of_input_while_it_unwinds() {
    let _serial = serial();
    let runs: [(&[&str], Option<&str>); 3] = [
        (&[], None),
        (&["--agent"], Some("jump")),
        (&["--agent"], Some("ret")),
    ];
    for (args, form) in runs {
        if let Some(form) = form {
            eprintln!("--agent, FSPROF_AGENT_RETURN={form}");
        }
        let env: Vec<_> = form
            .map(|form| ("FSPROF_AGENT_RETURN", form))
            .into_iter()
            .collect();
        again_if_stolen(|| {
            let (dir, _) = run_c_program("cancel", "3", args, &env);
            assert_feature_shares(&report_json(dir.path()), &truth(dir.path()), TOLERANCE);
        });
    }
}

/// A thread that leaves blocked `read` calls by `siglongjmp` from a signal handler: the `input`
/// mark its `read` never pops is dropped at the thread's next interposed call, so the 10 ms it
/// spins after each jump are not input (once, the stale mark kept every later call unmarked and
/// made the whole run 100% input against a truth of 50%).
#[test]
fn a_mark_left_by_siglongjmp_stops_at_the_next_call() {
    let _serial = serial();
    for args in [&[][..], &["--agent"]] {
        let (dir, _) = run_c_program("longjmp", "3", args, &[]);
        assert_feature_shares(&report_json(dir.path()), &truth(dir.path()), TOLERANCE);
    }
}

/// Runs the Rust `builtins` program (`fsprof run [args]`) and checks its shares, and that each
/// feature's instances are the lines of `builtins.rs` that called through the standard library
/// (at least 95% of each feature's time).
fn rust_program_against_truth(args: &[&str]) {
    let _serial = serial();
    again_if_stolen(|| rust_program_against_truth_once(args));
}

fn rust_program_against_truth_once(args: &[&str]) {
    let dir = tempdir();
    let truth_path = dir.path().join("truth.json");
    run(
        dir.path(),
        args,
        &[],
        &[
            env!("CARGO_BIN_EXE_builtins").as_ref(),
            "3".as_ref(),
            "--truth".as_ref(),
            truth_path.as_os_str(),
        ],
    );
    let report = report_json(dir.path());
    let truth = truth(dir.path());
    assert_feature_shares(&report, &truth, TOLERANCE);
    for (name, lines) in truth["sites"].as_object().unwrap() {
        let feature = feature(&report, name).unwrap_or_else(|| panic!("no {name}: {report:#}"));
        let places: Vec<String> = lines
            .as_array()
            .unwrap()
            .iter()
            .map(|line| format!("builtins.rs:{line})"))
            .collect();
        let time = |instance: &Value| {
            instance["ms"].as_f64().unwrap() + instance["blocked_ms"].as_f64().unwrap_or(0.0)
        };
        let instances = feature["instances"].as_array().unwrap();
        let total: f64 = instances.iter().map(time).sum();
        let named: f64 = instances
            .iter()
            .filter(|i| {
                let payload = i["payload"].as_str().unwrap();
                payload.starts_with("builtins::main (")
                    && places.iter().any(|p| payload.ends_with(p))
            })
            .map(time)
            .sum();
        assert!(
            named >= 0.95 * total,
            "{name}: {named:.1} of {total:.1} ms at {places:?}: {instances:#?}"
        );
    }
}

#[test]
fn rust_program_gets_the_shares_it_measured_at_its_own_lines() {
    rust_program_against_truth(&[]);
}

/// Without native stacks the agent is the only source of built-in features.
#[test]
fn rust_program_gets_its_own_lines_from_the_agent_without_native_stacks() {
    rust_program_against_truth(&["--no-native", "--agent"]);
}

/// With the defaults nothing of fsprof is put into the program or its children (no
/// `LD_PRELOAD`, nothing of fsprof's in their memory maps), and the built-in features come from
/// the native stacks by the built-in rules; without those rules too, only the program's own
/// marks are reported (here, none).
#[test]
fn by_default_the_built_in_features_come_from_the_stacks_and_nothing_is_injected() {
    let _serial = serial();
    let dir = tempdir();
    let output = Command::new(fsprof())
        .env_remove("LD_PRELOAD")
        .args(["run", "-o"])
        .arg(dir.path())
        .args([
            "--",
            "sh",
            "-c",
            "echo \"[$LD_PRELOAD]\"; cat /proc/self/maps",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("[]\n"), "{stdout}");
    assert!(stdout.contains("/cat"), "the child's maps: {stdout}");
    assert!(!stdout.contains("fsprof"), "{stdout}");

    let (dir, stderr) = run_c_program("builtins", "0.3", &[], &[]);
    assert!(
        stderr.contains("features found in the native stacks by rules"),
        "{stderr}"
    );
    let plain = Command::new(fsprof())
        .arg("report")
        .arg(dir.path())
        .arg("--no-builtin-rules")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains("No feature marks were seen"), "{text}");
    assert!(!text.contains("built in"), "{text}");
}

#[test]
fn a_static_program_runs_without_the_agent_and_the_report_says_why() {
    let _serial = serial();
    let build = tempdir();
    let Some(program) = build_c_static(build.path()) else {
        eprintln!("skipped: this system cannot link statically (no libc.a)");
        return;
    };
    let dir = tempdir();
    // It exits at once, perhaps before the first sample: only success is asked of it. With the
    // defaults nothing is preloaded anyway; asked to, fsprof says why it cannot.
    let output = Command::new(fsprof())
        .args(["run", "--agent", "-o"])
        .arg(dir.path())
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "static\n");
    assert!(
        stderr.contains("the program is statically linked"),
        "{stderr}"
    );
    let report = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(report.contains("statically linked"), "{report}");
}

#[test]
fn the_users_ld_preload_is_kept_and_children_run() {
    let _serial = serial();
    let dir = tempdir();
    let output = Command::new(fsprof())
        .env("LD_PRELOAD", "libm.so.6")
        .args(["run", "--agent", "-o"])
        .arg(dir.path())
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD\"; ls / > /dev/null && echo child-ok",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines();
    let preload = lines.next().unwrap();
    assert!(
        preload.starts_with("libm.so.6:") && preload.ends_with("/libfsprof_agent.so"),
        "{preload}"
    );
    assert_eq!(lines.next(), Some("child-ok"));
    // Without --agent, the user's own alone.
    let dir = tempdir();
    let output = Command::new(fsprof())
        .env("LD_PRELOAD", "libm.so.6")
        .args(["run", "-o"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "echo \"$LD_PRELOAD\""])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "libm.so.6\n");
}

/// FizzBuzz marks its own `output` around each write(2), which the agent (`--agent`) marks again: one
/// feature, two regions, marks changing every few tens of nanoseconds. The two regions are
/// copied a moment apart, so the write's built-in mark can be seen without the program's mark
/// around it, as a stray call-site instance of `output` (7% of it when nothing corrects that).
/// With perf, such a thread's marks come from its perf sample (both regions copied at one
/// instant): strays must stay under 2% of `output` (0.1-0.9% measured), and `output` and
/// `formatting`, which never nest, must not add up to more than the whole.
#[test]
fn a_programs_own_mark_around_a_builtin_one_is_seen_at_one_instant() {
    if !perf_backend_available() {
        return;
    }
    let _serial = serial();
    let dir = tempdir();
    let fizzbuzz = fsprof().with_file_name("fizzbuzz");
    let output = Command::new(fsprof())
        .args([
            "run",
            "--agent",
            "--rate",
            ACCURACY_RATE,
            "--backend",
            "perf",
            "-o",
        ])
        .arg(dir.path())
        .arg("--")
        .arg(&fizzbuzz)
        .arg("5000000")
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    let report = report_json(dir.path());
    let output_feature = feature(&report, "output").unwrap();
    let total_ms = output_feature["ms"].as_f64().unwrap();
    let stray_ms: f64 = output_feature["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| !i["payload"].as_str().unwrap().contains("fizzbuzz.rs"))
        .map(|i| i["ms"].as_f64().unwrap())
        .sum();
    let (output, formatting) = (percent(&report, "output"), percent(&report, "formatting"));
    eprintln!("output {output:.2}%, formatting {formatting:.2}%, strays {stray_ms:.1} of {total_ms:.1} ms");
    assert!(formatting > 1.0, "formatting {formatting:.2}%");
    let profile: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("profile.json")).unwrap()).unwrap();
    assert!(
        stray_ms < total_ms * 0.02,
        "strays {stray_ms:.1} of {total_ms:.1} ms; instances {:#}; meta {:#}",
        output_feature["instances"],
        profile["meta"]
    );
    assert!(
        output + formatting <= 100.5,
        "{output:.2} + {formatting:.2}"
    );
}

/// A shell that waits for a child (inside the built-in `process` mark) and then execs python3,
/// which sleeps (inside `sleep`): the same thread blocks in two program images. A stack copied
/// while the shell waited must never be shown under python's sleep, whatever path took the
/// samples (a blocked thread whose stack could not be read at a sample must not keep the old one).
#[test]
fn a_stack_from_before_an_exec_is_never_shown_after_it() {
    let _serial = serial();
    // Three recordings at the accuracy rate: the faulty path needs two samples in a row to
    // find the thread on fsprof's own CPU; with the fault, one recording in three showed it.
    // Two at the default rate (slow ticks, every 10 ms): a thread that blocked after its exec
    // before a tick found it running was never read (python's whole sleep without a stack in
    // 10 of 12 runs at 250 Hz, rarely at 2000).
    let accuracy = ["--rate", ACCURACY_RATE];
    for rate in [&accuracy[..], &accuracy, &accuracy, &[], &[]] {
        let dir = tempdir();
        let output = Command::new(fsprof())
            .args(["run", "--no-follow"])
            .args(rate)
            .arg("-o")
            .arg(dir.path())
            .args([
                "--",
                "/bin/sh",
                "-c",
                "/bin/sleep 0.5; exec /usr/bin/python3 -c 'import time; time.sleep(1)'",
            ])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Python's sleep is a wait outside its own marks: only --idle counts it.
        let stacks = folded_with(dir.path(), &["--idle"]);
        let python_sleep: Vec<&(Vec<String>, u64)> = stacks
            .iter()
            .filter(|(frames, _)| {
                frames[0] != "[no native stack]" && frames.iter().any(|f| f.starts_with("[sleep]"))
            })
            .collect();
        let total: u64 = python_sleep.iter().map(|(_, us)| us).sum();
        assert!(
            total > 500_000,
            "{total} µs of python's sleep with a stack: {stacks:?}"
        );
        let stale: Vec<_> = python_sleep
            .iter()
            .filter(|(frames, _)| {
                !frames
                    .iter()
                    .any(|f| f.starts_with("Py") || f.starts_with("_Py"))
            })
            .collect();
        assert!(
            stale.is_empty(),
            "stacks of the shell under python's sleep: {stale:#?}"
        );
    }
}

/// The agent's own cost is never hidden: in a loop of `strdup` and `free` (malloc called from
/// inside libc, tens of millions of calls a second), the code the agent runs around each call
/// outside its mark shows in the notes and in JSON's `agent_percent`; without the agent, neither.
#[test]
fn the_time_spent_in_the_agents_own_code_is_reported() {
    let _serial = serial();
    let (dir, stderr) = run_c_program("strdups", "2", &["--agent"], &[]);
    let report = report_json(dir.path());
    let agent = report["agent_percent"].as_f64().unwrap();
    let allocation = percent(&report, "allocation");
    eprintln!("strdups: agent {agent:.2}%, allocation {allocation:.2}%");
    assert!(agent >= 5.0, "{stderr}");
    assert!(
        stderr.contains("the agent's own code (around each interposed libc call"),
        "{stderr}"
    );
    // Its frames appear nowhere: not as functions, not in the stacks (their time is their
    // caller's), however much time is spent in them.
    let functions = report["functions"].as_array().unwrap();
    assert!(functions.len() > 2, "{report:#}");
    for function in functions {
        let name = function["name"].as_str().unwrap();
        assert!(!name.contains("fsprof_agent"), "{name}");
    }
    let folded = Command::new(fsprof())
        .arg("report")
        .arg(dir.path())
        .args(["--format", "folded"])
        .output()
        .unwrap();
    let folded = String::from_utf8_lossy(&folded.stdout);
    assert!(folded.contains("strdup"), "{folded}");
    assert!(!folded.contains("fsprof_agent"), "{folded}");
    let (dir, stderr) = run_c_program("strdups", "1", &[], &[]);
    let report = report_json(dir.path());
    assert_eq!(report["agent_percent"].as_f64().unwrap_or(0.0), 0.0);
    assert!(!stderr.contains("the agent's own code"), "{stderr}");
}
