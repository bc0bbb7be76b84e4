//! A copy of fsprof that holds privilege its user lacks (file capabilities, a setuid-root bit,
//! ambient capabilities) profiles only what that user could trace without it, passes nothing to
//! the programs it runs, and writes its files as that user.
//!
//! Each test makes the copies as root and runs them as a user made up for it (`setpriv`, a uid
//! that belongs to no one). They need root; run as another user they say so and do nothing.

use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::*;

/// The made-up user: no passwd entry is needed for `setpriv --reuid`.
const USER: u32 = 54_321;

/// How a copy of fsprof gets its privilege.
#[derive(Clone, Copy, Debug)]
enum Privilege {
    /// `setcap cap_perfmon,cap_bpf,cap_sys_ptrace+ep`: what the README once recommended.
    FileCaps,
    /// Owned by root, mode 4755.
    SetuidRoot,
    /// A plain copy, run by a user whose ambient set holds `CAP_SYS_PTRACE`.
    Ambient,
}

const ALL: [Privilege; 3] = [
    Privilege::FileCaps,
    Privilege::SetuidRoot,
    Privilege::Ambient,
];

/// A directory anyone may enter, holding the copies, the agent and the target program, and a
/// working directory that belongs to [`USER`].
struct House {
    dir: support::TestDir,
}

impl House {
    /// `None` (with a message) unless the tests run as root.
    fn new() -> Option<House> {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: these tests make privileged copies of fsprof, which needs root");
            return None;
        }
        let dir = tempdir();
        let open = |path: &Path| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap()
        };
        open(dir.path());
        let house = House { dir };
        for (from, name) in [
            (fsprof(), "fsprof-plain"),
            (native::agent_library(), "libfsprof_agent.so"),
            (PathBuf::from(target()), "fsprof-target"),
            (fsprof().with_file_name("deep"), "deep"),
        ] {
            std::fs::copy(from, house.path(name)).unwrap();
            open(&house.path(name));
        }
        std::fs::copy(fsprof(), house.path("fsprof-caps")).unwrap();
        let setcap = Command::new("setcap")
            .arg("cap_perfmon,cap_bpf,cap_sys_ptrace+ep")
            .arg(house.path("fsprof-caps"))
            .output()
            .expect("setcap (libcap2-bin) is needed for this test");
        assert!(setcap.status.success(), "setcap: {setcap:?}");
        std::fs::copy(fsprof(), house.path("fsprof-setuid")).unwrap();
        std::fs::set_permissions(
            house.path("fsprof-setuid"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        let work = house.path("work");
        std::fs::create_dir(&work).unwrap();
        std::os::unix::fs::chown(&work, Some(USER), Some(USER)).unwrap();
        Some(house)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A path in the user's working directory.
    fn work(&self, name: &str) -> PathBuf {
        self.path("work").join(name)
    }

    /// A set-user-id-root copy of the target program, `fsprof-target-setuid`.
    fn setuid_target(&self) -> PathBuf {
        let setuid = self.path("fsprof-target-setuid");
        std::fs::copy(self.path("fsprof-target"), &setuid).unwrap();
        std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755)).unwrap();
        setuid
    }

    /// The copy of fsprof that has `privilege`.
    fn copy(&self, privilege: Privilege) -> PathBuf {
        self.path(match privilege {
            Privilege::FileCaps => "fsprof-caps",
            Privilege::SetuidRoot => "fsprof-setuid",
            Privilege::Ambient => "fsprof-plain",
        })
    }

    /// A command that runs `program` as [`USER`], in the working directory; with
    /// [`Privilege::Ambient`], the user's ambient set holds `CAP_SYS_PTRACE`.
    fn as_user(&self, program: &Path, privilege: Option<Privilege>) -> Command {
        let mut command = Command::new("setpriv");
        command.args([
            format!("--reuid={USER}"),
            format!("--regid={USER}"),
            "--clear-groups".to_owned(),
        ]);
        if let Some(Privilege::Ambient) = privilege {
            command.args(["--inh-caps=+sys_ptrace", "--ambient-caps=+sys_ptrace"]);
        }
        // Through a shell without capabilities, as a user would start it: a program that gains
        // capabilities at exec is then not dumpable from the start (setpriv itself keeps root's
        // permitted set, so a program it starts directly gains nothing).
        command
            .args(["sh", "-c", "exec \"$0\" \"$@\""])
            .arg(program)
            .current_dir(self.work(""))
            .env("FSPROF_AGENT", self.path("libfsprof_agent.so"));
        command
    }

    /// `fsprof ARGS...` as [`USER`], through the copy that has `privilege`.
    fn fsprof(&self, privilege: Privilege, args: &[&str]) -> Output {
        let mut fsprof = Guarded(
            self.as_user(&self.copy(privilege), Some(privilege))
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("setpriv (util-linux) is needed for this test"),
        );
        let (status, stderr) = fsprof.stderr_with_deadline(Duration::from_secs(30));
        let mut stdout = Vec::new();
        if let Some(mut pipe) = fsprof.0.stdout.take() {
            std::io::Read::read_to_end(&mut pipe, &mut stdout).unwrap();
        }
        Output {
            status,
            stdout,
            stderr: stderr.into_bytes(),
        }
    }

    /// The target program, `mixed` for `secs`, started by `start` (as root or as the user), once
    /// it marks.
    fn start_target(&self, mut start: Command, secs: f64) -> Guarded {
        let ready = self.work("ready");
        let _ = std::fs::remove_file(&ready);
        let child = start
            .args(["mixed", &secs.to_string(), "--truth"])
            .arg(self.work("truth.json"))
            .arg("--ready")
            .arg(&ready)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let target = Guarded(child);
        wait_for_file(&ready, Duration::from_secs(10));
        target
    }
}

/// The `status` of every thread of `pid`.
fn task_statuses(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .collect()
}

/// A hexadecimal field of a `status` text (a capability set).
fn hex(status: &str, key: &str) -> u64 {
    let field = status.lines().find_map(|l| l.strip_prefix(key)).unwrap();
    u64::from_str_radix(field.trim(), 16).unwrap()
}

/// Whether `pid` holds a perf event open.
fn has_perf_event(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .any(|link| link.to_string_lossy().contains("perf_event"))
    })
}

/// Calls `probe` every 10 ms until it gives something, for at most `limit`.
fn poll_until<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn owner(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().uid()
}

/// Asserts that every privileged copy, run by the user, refuses to attach to `pid`, saying why
/// (`why`, each), and writes no profile.
fn assert_every_copy_refuses(house: &House, pid: u32, why: &[&str]) {
    let pid = pid.to_string();
    for privilege in ALL {
        let out = house.work(&format!("{privilege:?}"));
        let output = house.fsprof(
            privilege,
            &[
                "attach",
                &pid,
                "--duration",
                "1",
                "-o",
                out.to_str().unwrap(),
            ],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "{privilege:?}: attached: {stderr}"
        );
        let refused = format!("refusing to profile process {pid}");
        assert!(
            stderr.contains(&refused) && why.iter().all(|w| stderr.contains(w)),
            "{privilege:?}: {stderr}"
        );
        assert!(
            !out.join("profile.json").exists(),
            "{privilege:?}: a profile was written"
        );
    }
}

#[test]
fn capable_copies_run_by_a_user_refuse_a_root_process() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    // The target runs as root: a child of this test.
    let target = house.start_target(Command::new(house.path("fsprof-target")), 10.0);
    assert_every_copy_refuses(
        &house,
        target.pid(),
        &["another user", "real 0, effective 0, saved 0"],
    );
}

#[test]
fn capable_copies_refuse_their_users_own_process_that_is_not_dumpable() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    let program = native::build_c_program(house.dir.path(), "undumpable");
    let ready = house.work("ready");
    let target = Guarded(
        house
            .as_user(&program, None)
            .args(["10"])
            .arg(&ready)
            .spawn()
            .unwrap(),
    );
    wait_for_file(&ready, Duration::from_secs(10));
    assert_every_copy_refuses(&house, target.pid(), &["not dumpable"]);
}

#[test]
fn capable_copies_profile_their_users_own_process_with_perf() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    for privilege in [Privilege::FileCaps, Privilege::SetuidRoot] {
        let start = house.as_user(&house.path("fsprof-target"), None);
        let mut target = house.start_target(start, 4.0);
        let out = house.work(&format!("{privilege:?}"));
        let output = house.fsprof(
            privilege,
            &[
                "attach",
                &target.pid().to_string(),
                "--rate",
                "1000",
                "--duration",
                "2.5",
                "-o",
                out.to_str().unwrap(),
            ],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{privilege:?}: {stderr}");
        assert!(target.wait_with_deadline(Duration::from_secs(20)).success());
        let report = report_json(&out);
        assert_eq!(
            report["meta"]["native_backend"], "perf",
            "{privilege:?}: {stderr}"
        );
        // The mix is stationary: the window's shares match the whole run's truth.
        assert_shares_match(&report, &truth(&house.work("")));
        for file in std::fs::read_dir(&out).unwrap() {
            let file = file.unwrap().path();
            assert_eq!(
                owner(&file),
                USER,
                "{privilege:?}: {} is not the user's",
                file.display()
            );
        }
    }
}

/// The BPF walk of deep stacks (`native/walk.rs`) is loaded with the privilege it needs, on
/// its own thread: `deep paths` (another way down at each descent, beyond perf's copy of the
/// stack's top) reaches `main` through it, or not at all (0% before that thread raised it).
#[test]
fn capable_copies_walk_deep_stacks() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    for privilege in [Privilege::FileCaps, Privilege::SetuidRoot] {
        let out = house.work(&format!("deep-{privilege:?}"));
        let truth = house.work("deep-truth.json");
        let deep = house.path("deep");
        let output = house.fsprof(
            privilege,
            &["run", "--rate", "1000", "-o", out.to_str().unwrap(), "--"]
                .into_iter()
                .chain([deep.to_str().unwrap(), "paths", "2", "--truth"])
                .chain([truth.to_str().unwrap()])
                .collect::<Vec<_>>(),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{privilege:?}: {stderr}");
        let meta = &report_json(&out)["meta"];
        assert_eq!(meta["native_backend"], "perf", "{privilege:?}: {stderr}");
        let walked = meta["native_walked"].as_u64().unwrap_or(0);
        let captured = meta["native_captured"].as_u64().unwrap_or(0).max(1);
        let share = walked as f64 * 100.0 / captured as f64;
        eprintln!("{privilege:?}: {share:.1}% of the native stacks reached main through the walk");
        assert!(
            share >= 80.0,
            "{privilege:?}: {share:.1}% through the walk: {stderr}"
        );
    }
}

#[test]
fn capable_copies_keep_only_what_perf_needs_and_none_of_it_effective() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    let start = house.as_user(&house.path("fsprof-target"), None);
    // Four attaches of 1.5 s each, one after another: the target outlives them on a loaded
    // machine (it is killed when the test is done).
    let target = house.start_target(start, 30.0);
    for (privilege, backend, permitted) in [
        // CAP_PERFMON and CAP_BPF: bits 38 and 39.
        (Privilege::FileCaps, "auto", 0xc0_0000_0000u64),
        (Privilege::SetuidRoot, "auto", 0xc0_0000_0000),
        (Privilege::FileCaps, "ptrace", 0),
        (Privilege::Ambient, "auto", 0),
    ] {
        let out = house.work(&format!("{privilege:?}-{backend}"));
        let mut fsprof = Guarded(
            house
                .as_user(&house.copy(privilege), Some(privilege))
                .args(["attach", &target.pid().to_string(), "--duration", "1.5"])
                .args(["--backend", backend, "-o"])
                .arg(&out)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        // Recording: every thread of fsprof, as the kernel sees it, once none holds a capability
        // effective (they are raised only around the perf backend's system calls) and, with
        // perf, once the target's event is open.
        let snapshot = poll_until(Duration::from_secs(10), || {
            let statuses = task_statuses(fsprof.pid());
            let quiet = statuses.len() >= 2 && statuses.iter().all(|s| hex(s, "CapEff:") == 0);
            let perf_open = permitted == 0 || has_perf_event(fsprof.pid());
            (quiet && perf_open).then_some(statuses)
        })
        .unwrap_or_else(|| {
            panic!(
                "{privilege:?} {backend}: fsprof kept a capability effective: {:?}",
                task_statuses(fsprof.pid())
            )
        });
        for status in snapshot {
            let what = format!("{privilege:?} {backend}: {status}");
            // Its user may not look into any of its threads (they share what the main one
            // holds): the process is not dumpable.
            let tid = status
                .lines()
                .find_map(|l| l.strip_prefix("Pid:"))
                .unwrap()
                .trim();
            let peek = house
                .as_user(Path::new("cat"), None)
                .arg(format!("/proc/{}/task/{tid}/maps", fsprof.pid()))
                .output()
                .unwrap();
            assert!(!peek.status.success(), "{what}: its user reads its maps");
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"));
            assert_eq!(
                uid.map(str::trim),
                Some(&*format!("{USER}\t{USER}\t{USER}\t{USER}")),
                "{what}"
            );
            assert_eq!(hex(&status, "CapInh:"), 0, "{what}");
            assert_eq!(hex(&status, "CapAmb:"), 0, "{what}");
            // Only the sampling (main) thread keeps them, and the thread that loads the BPF
            // walk (`fsprof-walk`, `native/rules.rs`: it raises them for the load, then ends);
            // the others drop them at their start. (Beside two busy loops, a snapshot once
            // caught the walk's thread before its load: it holds them from its birth. And one
            // caught a thread not yet started, still named as the process, with its creator's:
            // a thread that has never left its CPU is not checked.)
            let main = status.contains(&format!("\nPid:\t{}\n", fsprof.pid()));
            let walk = status.lines().next() == Some("Name:\tfsprof-walk");
            let switches = ["voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"]
                .map(|field| status.lines().find_map(|l| l.strip_prefix(field)));
            let unstarted = switches.iter().all(|n| n.is_some_and(|n| n.trim() == "0"));
            let expected = if main || walk { permitted } else { 0 };
            if !unstarted {
                assert_eq!(hex(&status, "CapPrm:"), expected, "{what}");
            }
        }
        assert!(fsprof.wait_with_deadline(Duration::from_secs(20)).success());
    }
}

#[test]
fn fsprof_run_passes_no_privilege_and_the_users_environment_to_its_program() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    // What the program's credentials are, and two variables the C library removes from the
    // environment of a privileged program.
    let show = "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapAmb):' /proc/self/status; \
                echo \"TMPDIR=$TMPDIR\"; echo \"LD_LIBRARY_PATH=$LD_LIBRARY_PATH\"";
    for privilege in ALL {
        let out = house.work(&format!("{privilege:?}"));
        let output = house
            .as_user(&house.copy(privilege), Some(privilege))
            .args(["run", "-o", out.to_str().unwrap(), "--", "sh", "-c", show])
            .env("TMPDIR", "/tmp/fsprof-user-tmp")
            .env("LD_LIBRARY_PATH", "/fsprof-user-libs")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{privilege:?}: {stderr}");
        let field = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("{privilege:?}: no {key} in {stdout}"))
                .split_ascii_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            field("Uid:"),
            vec![USER.to_string(); 4],
            "{privilege:?}: {stdout}"
        );
        assert_eq!(
            field("Gid:"),
            vec![USER.to_string(); 4],
            "{privilege:?}: {stdout}"
        );
        for set in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
            assert_eq!(field(set), ["0000000000000000"], "{privilege:?}: {stdout}");
        }
        assert!(
            stdout.contains("TMPDIR=/tmp/fsprof-user-tmp\n"),
            "{privilege:?}: {stdout}"
        );
        assert!(
            stdout.contains("LD_LIBRARY_PATH=/fsprof-user-libs\n"),
            "{privilege:?}: {stdout}"
        );
    }
}

#[test]
fn capable_copies_write_their_files_as_their_user() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    for privilege in ALL {
        // A directory fsprof makes, and its files.
        let out = house.work(&format!("{privilege:?}/new"));
        let output = house.fsprof(
            privilege,
            &["run", "-o", out.to_str().unwrap(), "--", "true"],
        );
        assert!(
            output.status.success(),
            "{privilege:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut files = vec![out.parent().unwrap().to_owned(), out.clone()];
        files.extend(std::fs::read_dir(&out).unwrap().map(|f| f.unwrap().path()));
        assert!(files.len() >= 6, "{privilege:?}: {files:?}");
        for file in files {
            assert_eq!(
                owner(&file),
                USER,
                "{privilege:?}: {} is not the user's",
                file.display()
            );
        }
    }
}

/// `fsprof run -o OUT -- SCRIPT` as the user, through the copy that has `privilege`:
/// asserts that it recorded the user's `fsprof-target` and no set-user-id copy of it (by their
/// command lines); returns fsprof's stderr.
fn run_script_recording_the_users_program_only(
    house: &House,
    privilege: Privilege,
    script: &Path,
    out: &Path,
) -> String {
    let output = house.fsprof(
        privilege,
        &[
            "run",
            "-o",
            out.to_str().unwrap(),
            "--",
            script.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{privilege:?}: {stderr}");
    let report = report_json(out);
    let commands: Vec<&str> = (report["processes"].as_array().unwrap().iter())
        .map(|p| p["command"].as_str().unwrap())
        .collect();
    assert!(
        commands.iter().any(|c| c.contains("/fsprof-target mixed")),
        "{privilege:?}: the user's program was not recorded: {commands:?}"
    );
    assert!(
        !commands.iter().any(|c| c.contains("fsprof-target-setuid")),
        "{privilege:?}: the set-user-id program was recorded: {commands:?}"
    );
    stderr
}

/// `fsprof run` of the user's script that starts the user's program and a set-user-id-root
/// one: every copy records the user's program, not the set-user-id one, and says so.
#[test]
fn capable_copies_follow_only_the_children_their_user_may_trace() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    let setuid = house.setuid_target();
    let script = house.path("children.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{} mixed 1.5 &\n{} mixed 1.5\nwait\n",
            setuid.display(),
            house.path("fsprof-target").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for privilege in ALL {
        let out = house.work(&format!("{privilege:?}-children"));
        let stderr = run_script_recording_the_users_program_only(&house, privilege, &script, &out);
        assert!(stderr.contains("may not trace"), "{privilege:?}: {stderr}");
    }
}

/// The exec raced on purpose: the user's script runs a set-user-id-root program thirty times in
/// a row, each time from a child that execs it after its fork, at once the first time and a
/// little later each time (so that followers find the child as the script, before, during or
/// after its exec), beside the user's own program. Every copy records the user's program and
/// never the set-user-id one, whether it kept its privilege or a ptrace sample's seize took it
/// away (see the end).
#[test]
fn capable_copies_stop_recording_a_child_at_its_set_user_id_exec() {
    let _serial = serial();
    let Some(house) = House::new() else { return };
    let setuid = house.setuid_target();
    const RUNS: usize = 30;
    for privilege in ALL {
        let runs = house.work(&format!("{privilege:?}-runs"));
        std::fs::create_dir(&runs).unwrap();
        std::os::unix::fs::chown(&runs, Some(USER), Some(USER)).unwrap();
        let script = house.path(&format!("race-{privilege:?}.sh"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n\
                 i=0\n\
                 while [ $i -lt {RUNS} ]; do\n\
                 (j=0; while [ $j -lt $((i * 40)) ]; do j=$((j+1)); done; exec {setuid} mixed 0.03 --truth {runs}/$i.json)\n\
                 i=$((i+1)); done &\n\
                 {plain} mixed 1.5\n\
                 wait\n",
                setuid = setuid.display(),
                runs = runs.display(),
                plain = house.path("fsprof-target").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = house.work(&format!("{privilege:?}-race"));
        let stderr = run_script_recording_the_users_program_only(&house, privilege, &script, &out);
        let notes: Vec<&str> = (stderr.lines())
            .filter(|l| l.contains("child processes were"))
            .collect();
        eprintln!("{privilege:?}: {notes:?}");
        // Each run ran: its truth file is there, written by root when the set-user-id program
        // kept its privilege. A run whose thread a ptrace sample held in the first part of its
        // exec (on a CPU, where fsprof cannot tell an exec) ran as the user: counted, not
        // failed (README, "Permissions"), and not recorded either (asserted above).
        let mut unprivileged = 0;
        for run in 0..RUNS {
            let truth = runs.join(format!("{run}.json"));
            assert!(
                truth.exists(),
                "{privilege:?}: run {run} left no truth: {stderr}"
            );
            unprivileged += usize::from(owner(&truth) != 0);
        }
        eprintln!("{privilege:?}: {unprivileged} of {RUNS} runs ran without their privilege");
    }
}
