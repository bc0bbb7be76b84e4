//! The target is sacred: whatever way recording ends (Ctrl-C, SIGTERM, a panic in fsprof, the end
//! of --duration), every thread of the target is left running and untraced, and while it records
//! a thread is traced only for its sample (its signals never wait for fsprof). Each test first
//! waits until fsprof really traces the target (the ptrace backend, caught in a sample) or, for
//! job control, records it, so that it can fail; then ends the recording.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// Every thread of `pid`: (tid, state letter, tracer pid).
fn threads(pid: u32) -> Vec<(u32, char, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some((state, tracer)) = task_state_and_tracer(pid, tid) else {
            continue; // exited meanwhile
        };
        out.push((tid, state, tracer));
    }
    out
}

/// Each thread's CPU time (user and system, in clock ticks) by thread id.
fn cpu_ticks(pid: u32) -> std::collections::HashMap<u32, u64> {
    let mut out = std::collections::HashMap::new();
    for (tid, _, _) in threads(pid) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) else {
            continue; // exited meanwhile
        };
        let Some((_, fields)) = stat.rsplit_once(')') else {
            continue;
        };
        // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the name.
        let fields: Vec<&str> = fields.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            out.insert(tid, user + system);
        }
    }
    out
}

/// Polls until fsprof (process `fsprof`) records `pid`: it traces a thread of it, or holds a
/// perf event; fails after 10 s.
fn wait_until_recording(fsprof: u32, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let perf = || {
        std::fs::read_dir(format!("/proc/{fsprof}/fd")).is_ok_and(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .any(|link| link.to_string_lossy().contains("perf_event"))
        })
    };
    while !perf() && !threads(pid).iter().any(|(_, _, tracer)| *tracer != 0) {
        assert!(
            Instant::now() < deadline,
            "fsprof never recorded the target"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls until some thread of `pid` is traced, failing after 10 s. A thread is traced only for
/// its sample (tens of microseconds, a few hundred times a second): looked at without a pause.
fn wait_until_traced(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !threads(pid).iter().any(|(_, _, tracer)| *tracer != 0) {
        assert!(Instant::now() < deadline, "fsprof never traced the target");
    }
}

/// Asserts every thread of `pid` is untraced and not stopped (checked a few times over 100 ms:
/// a thread left stopped stays stopped).
fn assert_released(pid: u32) {
    for _ in 0..5 {
        let threads = threads(pid);
        assert!(
            threads.len() > 1,
            "the target has {} threads",
            threads.len()
        );
        for (tid, state, tracer) in threads {
            assert_eq!(tracer, 0, "thread {tid} is still traced");
            assert!(
                !matches!(state, 'T' | 't'),
                "thread {tid} left stopped ({state})"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A multi-threaded target (two busy threads, one idle, one blocking inside a mark) for 30 s.
fn start_target(dir: &std::path::Path) -> Guarded {
    let ready = dir.join("ready");
    let child = Command::new(target())
        .args(["threads", "30", "--ready"])
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let target = Guarded(child);
    wait_for_file(&ready, Duration::from_secs(10));
    target
}

/// With the ptrace backend, so that fsprof traces the target (with perf, it stops a thread only
/// for a blocked stack that needs it) and releasing it is tested.
const PTRACE: [&str; 2] = ["--backend", "ptrace"];

fn attach(pid: u32, dir: &std::path::Path, env: &[(&str, &str)]) -> Guarded {
    Guarded(attach_command(pid, dir, env, &PTRACE).spawn().unwrap())
}

fn attach_command(pid: u32, dir: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = Command::new(fsprof());
    as_from_a_terminal(&mut command)
        .args(["attach", &pid.to_string(), "-o"])
        .arg(dir.join("out"))
        .args(args)
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Polls the states of `pid`'s threads until `reached` holds of them; fails with `what` and the
/// states after 10 s.
fn wait_for_threads(pid: u32, reached: impl Fn(&[(u32, char, u32)]) -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reached(&threads(pid)) {
        assert!(Instant::now() < deadline, "{what}: {:?}", threads(pid));
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
}

fn attach_then_signal_fsprof(sig: libc::c_int) {
    let _serial = serial();
    let dir = tempdir();
    let target = start_target(dir.path());
    let mut fsprof = attach(target.pid(), dir.path(), &[]);
    wait_until_traced(target.pid());
    // 400 ms of the program's CPU: 200 ms of recording at least (two busy threads), about 100
    // samples at the default rate whether perf takes them or, with ptrace, the ticks do; the
    // test asks for more than 50.
    wait_for_cpu_time(
        target.pid(),
        Duration::from_millis(400),
        Duration::from_secs(20),
    );
    signal(fsprof.pid(), sig);
    let (status, stderr) = fsprof.stderr_with_deadline(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    assert_released(target.pid());
    assert!(
        report_json(&dir.path().join("out"))["samples"]
            .as_u64()
            .unwrap()
            > 50
    );
}

/// A program interrupted by a timer signal every 100 us, sampled with ptrace: a signal sent to a
/// traced thread stops it until its tracer passes the signal on, so fsprof traces a thread only
/// for its sample. (Root's fsprof stayed attached between samples: `sigtimer`, which reads its
/// own TracerPid every 2 ms, saw itself traced at 438 of 440 checks, and issue 40's `sigreal`
/// ran 6 times slower.)
#[test]
fn a_program_taking_timer_signals_is_traced_only_for_its_samples() {
    let _serial = serial();
    let build = tempdir();
    let program = support::native::build_c_program(build.path(), "sigtimer");
    let dir = tempdir();
    let out = dir.path().join("out");
    let output = Command::new(fsprof())
        .arg("run")
        .args(PTRACE)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let counts: Vec<u64> = (stdout.split_whitespace())
        .filter_map(|word| word.parse().ok())
        .collect();
    let [checks, traced, signals] = counts[..] else {
        panic!("no counts in {stdout:?}");
    };
    eprintln!("checks {checks}, traced at {traced}, signals {signals}");
    assert!(checks >= 100 && signals >= 1000, "{stdout}");
    let samples = report_json(&out)["samples"].as_u64().unwrap();
    assert!(samples > 50, "{samples} samples\n{stderr}");
    assert!(
        traced * 20 <= checks,
        "traced at {traced} of {checks} checks\n{stderr}"
    );
}

#[test]
fn ctrl_c_during_attach_releases_every_thread() {
    attach_then_signal_fsprof(libc::SIGINT);
}

#[test]
fn sigterm_during_attach_releases_every_thread() {
    attach_then_signal_fsprof(libc::SIGTERM);
}

/// The terminal fsprof ran in was closed: it ends as for SIGTERM, the profile written.
#[test]
fn sighup_during_attach_releases_every_thread() {
    attach_then_signal_fsprof(libc::SIGHUP);
}

#[test]
fn sigterm_during_run_releases_the_program_it_leaves_running() {
    let _serial = serial();
    let dir = tempdir();
    let ready = dir.path().join("ready");
    let mut fsprof = Guarded(
        as_from_a_terminal(&mut Command::new(fsprof()))
            .args(["run", "--backend", "ptrace", "-o"])
            .arg(dir.path().join("out"))
            .args(["--", target(), "threads", "30", "--ready"])
            .arg(&ready)
            .stdout(Stdio::null())
            // Not piped: the program inherits it and keeps it open after fsprof exits.
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid: u32 = wait_for_file(&ready, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("the ready file holds the target's pid");
    let _kill = KillOnDrop(pid);
    wait_until_traced(pid);
    std::thread::sleep(Duration::from_millis(300));
    signal(fsprof.pid(), libc::SIGTERM);
    let status = fsprof.wait_with_deadline(Duration::from_secs(20));
    assert_eq!(status.code(), Some(143));
    assert_released(pid);
}

#[test]
fn a_panic_in_fsprof_releases_every_thread() {
    let _serial = serial();
    let dir = tempdir();
    let target = start_target(dir.path());
    let mut fsprof = attach(
        target.pid(),
        dir.path(),
        &[("FSPROF_TEST_PANIC_AFTER_TICKS", "500")],
    );
    wait_until_traced(target.pid());
    let (status, stderr) = fsprof.stderr_with_deadline(Duration::from_secs(20));
    assert!(stderr.contains("panicking on purpose"), "{stderr}");
    assert!(!status.success());
    assert_released(target.pid());
}

/// Once ignored: in about 1 run in 10 one thread was seen running 200 ms after SIGSTOP, when
/// every sample stopped threads with ptrace. With the default backend, a thread stopped by
/// SIGSTOP is still seized once to read its stack, and the kernel wakes it for that to stop
/// again as a tracee: a snapshot of the states can catch it 'R' (see below), so the test asks
/// whether the threads ran.
#[test]
fn a_program_stopped_and_continued_during_recording_runs_on() {
    let _serial = serial();
    let dir = tempdir();
    let target = start_target(dir.path());
    let pid = target.pid();
    let mut fsprof = Guarded(attach_command(pid, dir.path(), &[], &[]).spawn().unwrap());
    wait_until_recording(fsprof.pid(), pid);
    // Job control passes through: SIGSTOP stops every thread (and fsprof keeps them stopped)...
    signal(pid, libc::SIGSTOP);
    wait_for_threads(
        pid,
        |states| {
            states
                .iter()
                .all(|(_, state, _)| matches!(state, 'T' | 't'))
        },
        "SIGSTOP did not stop the target",
    );
    // Resumed, a thread runs the program's code: its CPU time grows (the target's threads are
    // busy). A stopped thread that fsprof seizes to read its stack (its registers are not in
    // `/proc` while it is stopped) is woken by the kernel to stop again as a tracee: 'R' with
    // fsprof as its tracer for that moment, without running the program. A snapshot of the
    // states caught one in that moment in 2 of about 5 suites (2026-12-03); the CPU times tell.
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(200));
    let after = cpu_ticks(pid);
    let ran: Vec<(u32, u64)> = (after.iter())
        .filter_map(|(tid, ticks)| {
            let grew = ticks.saturating_sub(*before.get(tid)?);
            (grew > 1).then_some((*tid, grew))
        })
        .collect();
    // And its state, in two looks 50 ms apart: a thread resumed that only sleeps gains little
    // CPU, but is not stopped in either.
    let not_stopped = |states: Vec<(u32, char, u32)>| -> Vec<u32> {
        (states.into_iter())
            .filter(|(_, state, _)| !matches!(state, 'T' | 't'))
            .map(|(tid, _, _)| tid)
            .collect()
    };
    let first = not_stopped(threads(pid));
    std::thread::sleep(Duration::from_millis(50));
    let again = not_stopped(threads(pid));
    let resumed: Vec<u32> = first.into_iter().filter(|t| again.contains(t)).collect();
    assert!(
        ran.is_empty() && resumed.is_empty(),
        "a stopped target was resumed by fsprof: threads that ran (ticks of CPU) {ran:?}, not stopped in two looks {resumed:?}; states {:?}",
        threads(pid)
    );
    // ... and SIGCONT resumes them, while fsprof still records.
    signal(pid, libc::SIGCONT);
    wait_for_threads(
        pid,
        |states| !states.iter().any(|(_, state, _)| *state == 'T'),
        "SIGCONT did not resume the target",
    );
    std::thread::sleep(Duration::from_millis(300));
    signal(fsprof.pid(), libc::SIGINT);
    let (status, stderr) = fsprof.stderr_with_deadline(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    assert_released(pid);
}

/// Ctrl-Z in the terminal: fsprof and the program both get SIGTSTP and stop; `fg` sends both
/// SIGCONT. The program must run on, and fsprof must record on and release it at the end. The
/// program gets SIGSTOP here: the kernel discards SIGTSTP sent to a process of an orphaned
/// process group (a test run without a terminal), and both go through fsprof the same way.
#[test]
fn ctrl_z_and_fg_leave_the_program_running() {
    let _serial = serial();
    let dir = tempdir();
    let target = start_target(dir.path());
    let pid = target.pid();
    // In a process group of its own, as a shell runs a job (a job can be stopped and resumed).
    let mut fsprof = Guarded(
        std::os::unix::process::CommandExt::process_group(
            &mut attach_command(pid, dir.path(), &[], &[]),
            0,
        )
        .spawn()
        .unwrap(),
    );
    wait_until_recording(fsprof.pid(), pid);
    std::thread::sleep(Duration::from_millis(200));
    signal(pid, libc::SIGSTOP);
    signal(fsprof.pid(), libc::SIGTSTP);
    wait_for_threads(
        pid,
        |states| {
            states
                .iter()
                .all(|(_, state, _)| matches!(state, 'T' | 't'))
        },
        "SIGSTOP did not stop the target",
    );
    // fsprof suspends itself too, as a job should on Ctrl-Z.
    wait_for_threads(
        fsprof.pid(),
        |states| states.iter().all(|(_, state, _)| *state == 'T'),
        "fsprof did not suspend itself",
    );
    std::thread::sleep(Duration::from_millis(300));
    signal(pid, libc::SIGCONT);
    signal(fsprof.pid(), libc::SIGCONT);
    wait_for_threads(
        pid,
        |states| {
            !states
                .iter()
                .any(|(_, state, _)| matches!(state, 'T' | 't'))
        },
        "after fg the target is still stopped",
    );
    std::thread::sleep(Duration::from_millis(300));
    signal(fsprof.pid(), libc::SIGINT);
    let (status, stderr) = fsprof.stderr_with_deadline(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    assert_released(pid);
}

/// Kills a process that is not our child when dropped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGKILL) };
    }
}

#[test]
fn after_duration_the_program_fsprof_waits_for_is_released() {
    let _serial = serial();
    let dir = tempdir();
    let ready = dir.path().join("ready");
    let mut fsprof = Guarded(
        as_from_a_terminal(&mut Command::new(fsprof()))
            .args(["run", "--backend", "ptrace", "--duration", "1", "-o"])
            .arg(dir.path().join("out"))
            .args(["--", target(), "threads", "30", "--ready"])
            .arg(&ready)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid: u32 = wait_for_file(&ready, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("the ready file holds the target's pid");
    let _kill = KillOnDrop(pid);
    wait_until_traced(pid);
    // fsprof stays alive, waiting for the program, once the profile is written: the program
    // must by then be detached by fsprof itself (not by the kernel at fsprof's exit).
    let profile = dir.path().join("out").join("report.txt");
    wait_for_file(&profile, Duration::from_secs(20));
    assert!(
        fsprof.0.try_wait().unwrap().is_none(),
        "fsprof did not wait"
    );
    assert_released(pid);
}
