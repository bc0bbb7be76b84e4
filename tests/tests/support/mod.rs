//! Helpers for the end-to-end tests: the built binaries, a fresh directory per test, targets that
//! are killed if a test fails, waiting with deadlines, and comparing reports with ground truth.

pub mod interrupts;
pub mod native;
pub mod programs;
mod steal;

pub use steal::again_if_stolen;

use serde_json::Value;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// Share tolerance: percentage points between report and truth, the floor of every share's
/// bound (systematic error allowed whatever the samples; see [`share_bound`]).
pub const TOLERANCE: f64 = 2.5;
/// A share's bound is at least [`TOLERANCE`], and at least this many standard deviations of the
/// binomial spread of the run's samples. The confidence is the suite's, not one share's: the
/// suite compares about 300 shares a run, so a per-share 99.9% (3.29) allowed a correct
/// profiler up to one failure in four runs; 4.0 is 99.994% per share, one false failure in
/// about 50 suite runs at worst (most shares sit well inside the floor).
pub const CONFIDENCE_Z: f64 = 4.0;
/// The most the spread may widen a bound: a test whose samples are too few for that must run
/// longer (or at a higher rate), not widen its bound further.
pub const MOST: f64 = 4.0;

/// The samples a report's shares rest on: one per period of its active time at its rate. (Its
/// own sample count is no measure of that: it adds up the pieces that several sources give one
/// period, the kernel's sample, a tick's read of the marks, a wait's; a 1 s single-threaded run
/// at 1000 Hz counts about 1280.)
pub fn samples_of(report: &Value) -> u64 {
    periods(report, report["total_ms"].as_f64().unwrap_or(0.0))
}

/// A share table's first line: its samples, and the report's total beside the truth's
/// (`truth_ms`), which tells a failure in every share at once (a total off) from one in a
/// feature.
pub fn samples_line(report: &Value, samples: u64, truth_ms: f64) -> String {
    let report_ms = report["total_ms"].as_f64().unwrap_or(0.0);
    format!("  {samples} samples; report total {report_ms:.0} ms, truth total {truth_ms:.0} ms\n")
}

/// [`samples_of`] for [`timed_share`]s: the waits in built-ins count as well, each period of
/// one as good as a sample (the switches in and out of it time it exactly).
pub fn timed_samples_of(report: &Value) -> u64 {
    let ms = |key: &str| report[key].as_f64().unwrap_or(0.0);
    periods(report, ms("total_ms") + ms("blocked_ms"))
}

fn periods(report: &Value, ms: f64) -> u64 {
    let rate = report["meta"]["rate_hz"].as_f64().unwrap_or(0.0);
    (ms * rate / 1000.0).round() as u64
}

/// One binomial standard deviation, in points, of a `truth_pct` share over `samples` samples.
pub fn share_sigma(truth_pct: f64, samples: u64) -> f64 {
    let p = (truth_pct / 100.0).clamp(0.0, 1.0);
    (p * (1.0 - p) / samples.max(1) as f64).sqrt() * 100.0
}

/// The bound, in points, on the error of a share whose truth is `truth_pct` percent, measured
/// over `samples` samples ([`samples_of`]), with `floor` the systematic error allowed: the
/// larger of `floor` and [`CONFIDENCE_Z`] binomial standard deviations (a 40% share over 3000
/// samples has one of 0.9 points). Panics when the spread alone passes [`MOST`]: the test has
/// too few samples to tell.
pub fn share_bound(truth_pct: f64, samples: u64, floor: f64) -> f64 {
    let spread = CONFIDENCE_Z * share_sigma(truth_pct, samples);
    assert!(
        spread <= MOST,
        "too few samples to tell: {samples} samples spread a {truth_pct:.1}% share by {spread:.2} points at {CONFIDENCE_Z} standard deviations (most {MOST}); run the test longer"
    );
    floor.max(spread)
}

/// Taken by each end-to-end test that measures time, alone: the suite's own parallelism never
/// loads the machine under a measurement (a 2-core machine oversubscribed by several busy
/// targets at once reads shares points off). Other tests that run programs take [`shared`].
/// Taken again by a thread that holds it, it gives nothing more; taken by a thread that holds it
/// shared, it panics (that would wait for itself).
pub fn serial() -> Held {
    match HELD.get() {
        Hold::Alone => Held::Again,
        Hold::Shared => {
            panic!("serial() taken by a test that holds shared(): it would wait for itself")
        }
        Hold::None => {
            let guard = LOCK.write().unwrap_or_else(|e| e.into_inner());
            HELD.set(Hold::Alone);
            Held::Alone { _guard: guard }
        }
    }
}

/// Taken by end-to-end tests that run programs but measure no time: any number of them run
/// together, never beside a [`serial`] one. Taken by a thread that holds the lock either way,
/// it gives nothing more.
pub fn shared() -> Held {
    if HELD.get() != Hold::None {
        return Held::Again;
    }
    let guard = LOCK.read().unwrap_or_else(|e| e.into_inner());
    HELD.set(Hold::Shared);
    Held::Shared { _guard: guard }
}

static LOCK: RwLock<()> = RwLock::new(());

/// How the calling thread holds [`LOCK`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    None,
    Shared,
    Alone,
}

thread_local! {
    static HELD: std::cell::Cell<Hold> = const { std::cell::Cell::new(Hold::None) };
}

/// [`serial`]'s or [`shared`]'s hold on the lock, given back when dropped.
pub enum Held {
    /// Held for as long as this lives (dropping it gives the lock back).
    Alone {
        _guard: RwLockWriteGuard<'static, ()>,
    },
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
    },
    /// The thread held it already.
    Again,
}

impl Drop for Held {
    fn drop(&mut self) {
        if !matches!(self, Held::Again) {
            HELD.set(Hold::None);
        }
    }
}

/// The `fsprof` binary built by this `cargo test` (it sits next to the `deps` directory).
pub fn fsprof() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join("fsprof");
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace`",
        path.display()
    );
    path
}

/// The ground-truth target program.
pub fn target() -> &'static str {
    env!("CARGO_BIN_EXE_fsprof-target")
}

/// A fresh temporary directory, removed when dropped unless its test failed (see [`TestDir`]).
pub fn tempdir() -> TestDir {
    remember_failures();
    let mut template = std::env::temp_dir()
        .join("fsprof-e2e-XXXXXX")
        .into_os_string()
        .into_vec();
    template.push(0);
    // SAFETY: a NUL-terminated template ending in six X's, which mkdtemp replaces in place.
    let made = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    assert!(
        !made.is_null(),
        "mkdtemp: {}",
        std::io::Error::last_os_error()
    );
    template.pop();
    TestDir {
        dir: Some(PathBuf::from(std::ffi::OsString::from_vec(template))),
        cpu_times: fsprof_tests::cpu_times(),
    }
}

/// Has `command` start with SIGINT, SIGTERM, SIGHUP and SIGTSTP at their default actions, as from a
/// terminal: the suite may run where they are ignored (a shell's background job ignores SIGINT,
/// `nohup` SIGHUP), and fsprof leaves a signal ignored at its start ignored.
pub fn as_from_a_terminal(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only `signal`, async-signal-safe, runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGTSTP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// A test's directory (its profiles, the target's truth): removed when the test passes, kept
/// when it fails (dropped while the thread panics), its path printed with the failure, so that
/// a rare failure seen once in a whole suite's run leaves its recording to look at.
///
/// Made with `mkdtemp` rather than the tempfile crate: as a dev-dependency, tempfile turned on
/// a feature of rustix (`fs`) that fsprof's own dependencies do not, so the workspace's test
/// build and a `cargo install` of fsprof built rustix, clap, ratatui and fsprof apart, and the
/// install test compiled fsprof again (90 s here, more on a fresh CI machine).
pub struct TestDir {
    dir: Option<PathBuf>,
    /// The machine's stolen and running CPU time when it was made (`fsprof_tests::cpu_times`),
    /// for what a failed test prints of the steal during it.
    cpu_times: Option<(u64, u64)>,
}

impl TestDir {
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("kept only on drop")
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let Some(kept) = self.dir.take() else {
            return;
        };
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&kept);
        } else {
            // The failure's first line again, last: a long table or report in its message
            // would otherwise leave it in the middle of the output (what CI shows of it is the
            // beginning and the end).
            let failure = FAILURE.with(|f| f.take());
            eprintln!(
                "the failure, again: {}",
                failure.as_deref().unwrap_or("(unknown)")
            );
            eprintln!("the failed test's directory is kept: {}", kept.display());
            for line in conditions(&kept) {
                eprintln!("the recording's conditions: {line}");
            }
            if let (Some(from), Some(now)) = (self.cpu_times, fsprof_tests::cpu_times()) {
                let (stolen, ran) = (now.0.saturating_sub(from.0), now.1.saturating_sub(from.1));
                let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
                let load = load.split_whitespace().next().unwrap_or("?");
                eprintln!(
                    "the recording's conditions: the machine stole {stolen} ticks against {ran} run during the test; 1-minute load {load}"
                );
            }
        }
    }
}

/// What the profiles in `dir` (and its subdirectories, one level down) say of how their
/// recording went, one line each: the figures that tell a starved or stolen-from fsprof from a
/// wrong attribution (late and slow ticks, samples the kernel lost or could not match with the
/// marks, CPU time estimated after losses). Read when a test fails, for CI's digest.
fn conditions(dir: &Path) -> Vec<String> {
    const FIGURES: [&str; 14] = [
        "ticks",
        "late_ticks",
        "slow_ticks",
        "perf_lost",
        "perf_unmatched",
        "perf_lost_cpu_us",
        "native_moved",
        "native_uncopied",
        "native_unseen_dropped",
        "native_preempted_unplaced_us",
        "native_blocked_unplaced_us",
        "native_departures_unmarked",
        "pause_p99_us",
        "torn_dropped",
    ];
    let below = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let dirs = std::iter::once(dir.to_path_buf()).chain(below.map(|entry| entry.path()));
    let mut lines = Vec::new();
    for profile in dirs.map(|d| d.join("profile.json")).filter(|p| p.is_file()) {
        let Ok(text) = std::fs::read_to_string(&profile) else {
            continue;
        };
        let Ok(json) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let meta = &json["meta"];
        let figures: Vec<String> = (FIGURES.iter())
            .filter_map(|key| meta[*key].as_u64().map(|v| format!("{key} {v}")))
            .collect();
        let name = profile
            .parent()
            .and_then(Path::file_name)
            .unwrap_or_default();
        let backend = meta["native_backend"].as_str().unwrap_or("none");
        lines.push(format!(
            "{}: {backend}, {}",
            name.to_string_lossy(),
            figures.join(", ")
        ));
    }
    lines
}

thread_local! {
    /// The first line of this thread's latest panic message (see [`remember_failures`]).
    static FAILURE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Has every panic keep the first line of its message (at most 500 characters) for
/// [`TestDir`]'s drop, before the usual report of it.
fn remember_failures() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = (payload.downcast_ref::<String>().map(String::as_str))
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("");
            let first: String = message
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(500)
                .collect();
            let at = info
                .location()
                .map(|l| format!(" ({}:{})", l.file(), l.line()));
            FAILURE.with(|f| *f.borrow_mut() = Some(first + &at.unwrap_or_default()));
            previous(info);
        }));
    });
}

/// A child process that is killed (and reaped) when dropped, so a failing test leaves nothing.
pub struct Guarded(pub Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Guarded {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Waits for exit, failing the test after `limit`.
    pub fn wait_with_deadline(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "process {} did not exit within {limit:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for exit (failing after `limit`) and returns the status and what it wrote to stderr
    /// (which must be piped; fsprof writes far less than a pipe holds).
    pub fn stderr_with_deadline(&mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let status = self.wait_with_deadline(limit);
        let mut stderr = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
        }
        (status, stderr)
    }
}

/// The lines `child` writes to its (piped) stderr, as they come.
pub fn stderr_lines(child: &mut Guarded) -> std::sync::mpsc::Receiver<String> {
    let pipe = child.0.stderr.take().expect("stderr must be piped");
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(pipe)) {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// Polls until `path` exists (written atomically by the target), failing after `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls until process `pid` has used `cpu` more CPU time (all its threads, user and system)
/// than when called, failing after `limit`: a test that wants a recording of so many samples
/// waits for the program's own work rather than for the clock, which a loaded machine makes
/// short (at 250 Hz, half a second of a busy program's time gave 100 samples or fewer once in
/// CI, on a machine at load 1.65).
pub fn wait_for_cpu_time(pid: u32, cpu: Duration, limit: Duration) {
    let used = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the name.
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Some(Duration::from_millis(ticks * 1000 / hz))
    };
    let start = used().unwrap_or_else(|| panic!("process {pid} is not running"));
    let deadline = Instant::now() + limit;
    loop {
        let now = used().unwrap_or_else(|| panic!("process {pid} exited while the test waited"));
        if now >= start + cpu {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} used {:?} of CPU in {limit:?}, the test waited for {cpu:?}",
            now - start
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The first CPU this process may run on (`Cpus_allowed_list`: a container's CPU set may
/// leave CPU 0 out), as `taskset -c` takes it.
pub fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    let first = list.trim().split([',', '-']).next().unwrap();
    first.to_string()
}

/// A thread's state letter and tracer pid, from /proc.
pub fn state_and_tracer(pid: u32) -> (char, u32) {
    task_state_and_tracer(pid, pid).unwrap()
}

/// The state letter and tracer pid of thread `tid` of process `pid`; `None` once it has exited.
pub fn task_state_and_tracer(pid: u32, tid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let state = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .trim_start()
        .chars()
        .next()
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    Some((state, tracer))
}

/// The rate of the tests that compare shares with a program's truth: a 3-second run of a busy
/// thread then gives about 6000 samples, so that the spread of the samples widens hardly any
/// bound past the floor (a 50% share's 4 standard deviations: 2.6 points; at 1000 Hz, 3.65).
/// The errors measured do not shrink with the rate (their mean stayed 0.2 points, one suite
/// run at each rate): the tighter bounds test the profiler, not the dice.
pub const ACCURACY_RATE: &str = "2000";

/// `fsprof run --rate ACCURACY_RATE -o DIR [args] -- fsprof-target SCENARIO SECS
/// --truth DIR/truth.json`. Without the agent: these tests check the program's own marks against
/// its truth, which knows nothing of the built-in features (tested in `builtins.rs`).
pub fn run_target(dir: &Path, scenario: &str, secs: f64, args: &[&str]) -> Output {
    launch_target(dir, scenario, secs, args, false)
}

/// [`run_target`] with the agent preloaded (its region, with no marks, beside the program's).
pub fn run_target_with_agent(dir: &Path, scenario: &str, secs: f64) -> Output {
    launch_target(dir, scenario, secs, &[], true)
}

fn launch_target(dir: &Path, scenario: &str, secs: f64, args: &[&str], agent: bool) -> Output {
    let truth = dir.join("truth.json");
    let mut command = Command::new(fsprof());
    command
        .arg("run")
        .args(agent.then_some("--agent"))
        .args(["--rate", ACCURACY_RATE])
        .arg("-o")
        .arg(dir)
        .args(args)
        .arg("--")
        .arg(target())
        .args([scenario, &secs.to_string(), "--truth"])
        .arg(&truth);
    succeeded(&mut command)
}

/// Runs `command` to its end (an `fsprof` command line) and returns its output; fails the test,
/// with the command and its stderr, unless it succeeded.
pub fn succeeded(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `fsprof report PATH --format json`.
pub fn report_json(path: &Path) -> Value {
    report_json_with(path, &[])
}

/// [`report_json`] with more options of `fsprof report` (`--idle`).
pub fn report_json_with(path: &Path, options: &[&str]) -> Value {
    let output = Command::new(fsprof())
        .arg("report")
        .arg(path)
        .args(["--format", "json"])
        .args(options)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fsprof report failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Reads the truth a target wrote.
pub fn truth(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("truth.json")).unwrap()).unwrap()
}

/// The truth of the part of a run that `report` recorded, from the target's `--timeline` file
/// `timeline` (its truth so far every 20 ms): the difference between the lines nearest the
/// recording's start and end, figure by figure (`extra` is the whole run's). A recording that
/// covers part of a run of `mixed` is compared with that part's truth, not the whole run's.
pub fn truth_in_window(timeline: &Path, report: &Value) -> Value {
    let lines: Vec<(f64, Value)> = std::fs::read_to_string(timeline)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| (line["unix_ns"].as_f64().unwrap(), line["truth"].clone()))
        .collect();
    let start = report["meta"]["start_unix_ns"].as_f64().unwrap();
    let end = start + report["meta"]["duration_ns"].as_f64().unwrap();
    let nearest = |at: f64| {
        let line = lines
            .iter()
            .min_by(|a, b| (a.0 - at).abs().total_cmp(&(b.0 - at).abs()));
        &line.expect("an empty timeline").1
    };
    let (first, last) = (nearest(start), nearest(end));
    let mut window = difference(last, first);
    window["extra"] = last["extra"].clone();
    window
}

/// `to` less `from`, number by number (a number missing from `from` is 0, and no figure is
/// below 0).
fn difference(to: &Value, from: &Value) -> Value {
    match to {
        Value::Number(n) => {
            let before = from.as_f64().unwrap_or(0.0);
            (n.as_f64().unwrap() - before).max(0.0).into()
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), difference(value, &from[key])))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The share of `item` (a feature or instance of `report`'s JSON) as the targets' truths count
/// it: every call they time, blocked or not. The report keeps a thread's waits inside built-in
/// features outside the program's own marks apart (`blocked_ms`, not in `percent`); this puts
/// them back, in the item and in the total. For a program without the agent `blocked_ms` is 0
/// and this is `percent`.
pub fn timed_share(report: &Value, item: &Value) -> f64 {
    let ms = |v: &Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    let total = ms(report, "total_ms") + ms(report, "blocked_ms");
    if total == 0.0 {
        return 0.0;
    }
    (ms(item, "ms") + ms(item, "blocked_ms")) * 100.0 / total
}

/// The share of the truth's total that `ms` is, as the interval the truth allows: its total
/// may lack up to `stolen_ms`, time the hypervisor took while threads ran (see
/// `fsprof_tests::steal_share`), so the share is between `ms / (total + stolen)` and
/// `ms / total` (the same point where nothing was stolen).
pub fn truth_share(ms: f64, truth: &Value) -> (f64, f64) {
    let total = truth["total_ms"].as_f64().unwrap();
    let stolen = truth["stolen_ms"].as_f64().unwrap_or(0.0).max(0.0);
    (ms * 100.0 / (total + stolen), ms * 100.0 / total)
}

/// How far `reported` is from the interval `(low, high)`: 0 inside it, else signed.
pub fn off_share(reported: f64, (low, high): (f64, f64)) -> f64 {
    if reported < low {
        reported - low
    } else if reported > high {
        reported - high
    } else {
        0.0
    }
}

/// Asserts that every feature and instance share in `report` (its `percent`) is within its
/// bound of the truth ([`share_bound`], with [`TOLERANCE`] the floor), in both directions
/// (nothing missing, nothing invented), for a program whose truth times its own marks: the
/// built-in features it does not name (the rules' or the agent's, whose time it does not
/// measure: `builtins.rs` tests them) are left out. Returns the worst error.
pub fn assert_shares_match(report: &Value, truth: &Value) -> f64 {
    assert_shares_within(report, truth, TOLERANCE)
}

/// [`assert_shares_match`] with another floor, for a scenario with a known, open bias (its
/// caller says which).
pub fn assert_shares_within(report: &Value, truth: &Value, tolerance: f64) -> f64 {
    compare_shares(report, truth, tolerance, false)
}

/// [`assert_shares_match`] for a program whose truth times its built-in calls too, blocked or
/// not, in their features and in its total ([`timed_share`]): every feature is compared.
pub fn assert_timed_shares_match(report: &Value, truth: &Value) -> f64 {
    compare_shares(report, truth, TOLERANCE, true)
}

fn compare_shares(report: &Value, truth: &Value, tolerance: f64, timed: bool) -> f64 {
    let share = |item: &Value| match timed {
        true => timed_share(report, item),
        false => item["percent"].as_f64().unwrap_or(0.0),
    };
    let total = truth["total_ms"].as_f64().unwrap();
    assert!(total > 0.0, "the target measured no time");
    let truth_pct = |ms: &Value| truth_share(ms.as_f64().unwrap_or(0.0), truth);
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    for feature in report["features"].as_array().unwrap() {
        let name = feature["name"].as_str().unwrap();
        let t = &truth["features"][name];
        if !timed && feature["builtin"] == true && t.is_null() {
            continue;
        }
        rows.push((name.to_owned(), share(feature), truth_pct(&t["ms"])));
        seen.push(name.to_owned());
        for instance in feature["instances"].as_array().unwrap() {
            let payload = instance["payload"].as_str().unwrap();
            rows.push((
                format!("{name} / {payload}"),
                share(instance),
                truth_pct(&t["instances"][payload]),
            ));
            seen.push(format!("{name} / {payload}"));
        }
    }
    for (name, feature) in truth["features"].as_object().unwrap() {
        if !seen.contains(name) {
            rows.push((name.clone(), 0.0, truth_pct(&feature["ms"])));
        }
        for (payload, ms) in feature["instances"].as_object().unwrap() {
            let key = format!("{name} / {payload}");
            if !seen.contains(&key) {
                rows.push((key, 0.0, truth_pct(ms)));
            }
        }
    }
    let mut table = format!(
        "report total {:.0} ms (+ {:.0} ms waiting in built-ins), truth total {total:.0} ms (+ up to {:.0} ms stolen), {} samples\n",
        report["total_ms"].as_f64().unwrap(),
        report["blocked_ms"].as_f64().unwrap_or(0.0),
        truth["stolen_ms"].as_f64().unwrap_or(0.0),
        samples_of(report)
    );
    let samples = match timed {
        true => timed_samples_of(report),
        false => samples_of(report),
    };
    let (mut worst, mut over): (f64, Vec<String>) = (0.0, Vec::new());
    for (name, reported, (low, expected)) in &rows {
        let error = off_share(*reported, (*low, *expected));
        let bound = share_bound(*expected, samples, tolerance);
        let sigmas = error / share_sigma(*expected, samples).max(0.01);
        worst = worst.max(error.abs());
        table += &format!(
            "  {name:<50} report {reported:6.2}%  truth {expected:6.2}%  error {error:+.2} ({sigmas:+.1} sd)  bound {bound:.2}\n"
        );
        if error.abs() > bound {
            over.push(format!("{name} (by {error:+.2}, bound {bound:.2})"));
        }
    }
    eprintln!("{table}");
    assert!(rows.len() > 1, "nothing to compare:\n{table}");
    assert!(
        over.is_empty(),
        "shares off by more than their bounds: {}:\n{table}",
        over.join(", ")
    );
    worst
}

/// Folded stacks of a saved profile: (frames, µs).
pub fn folded(dir: &Path) -> Vec<(Vec<String>, u64)> {
    folded_with(dir, &[])
}

/// Of the time in [`folded`]'s stacks, in µs: the time without a native stack that the
/// profile does not explain by a thread's waits for a CPU (perf backend: a preempted thread is
/// not sampled, and its latest sample's stack stands only where its marks had not changed:
/// `native_preempted_unplaced_us`), and the whole.
pub fn unexplained_without_stack(dir: &Path) -> (u64, u64) {
    let stacks = folded(dir);
    let total = stacks.iter().map(|(_, us)| us).sum();
    let without: u64 = (stacks.iter())
        .filter(|(frames, _)| frames[0] == "[no native stack]")
        .map(|(_, us)| us)
        .sum();
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("profile.json")).unwrap()).unwrap();
    let preempted = profile["meta"]["native_preempted_unplaced_us"]
        .as_u64()
        .unwrap_or(0);
    (without.saturating_sub(preempted), total)
}

/// [`folded`] with more options of `fsprof report` (`--idle`).
pub fn folded_with(dir: &Path, options: &[&str]) -> Vec<(Vec<String>, u64)> {
    let output = Command::new(fsprof())
        .args(["report", "--format", "folded"])
        .args(options)
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

/// Busy loops on every CPU of the machine, in threads of the test, until dropped: the target
/// then waits for a CPU, and fsprof counts its time preempted (`record/sampler/off_cpu.rs`).
pub struct BusyLoops {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoops {
    pub fn start() -> BusyLoops {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyLoops { stop, threads }
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// `go`, if installed; in CI its absence is a failure.
pub fn go() -> Option<&'static str> {
    let found = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "go is not installed: apt-get install golang-go"
        );
        eprintln!("go is not installed (apt-get install golang-go): not checked");
        return None;
    }
    Some("go")
}

/// Builds the program `tests/rust/NAME` apart from the workspace (its own lock file and target
/// directory), `hint` said where it fails; its executable.
pub fn build_apart(name: &str, hint: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("rust/{name}/Cargo.toml"));
    let target_dir = Path::new(target())
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join(name);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "building tests/rust/{name} failed ({hint}): {}",
        String::from_utf8_lossy(&built.stderr)
    );
    target_dir.join("release").join(name)
}
