//! `fsprof what-if` (causal profiling per feature): its predictions against the gain a real
//! speedup buys. The target (`tests/src/bin/whatif.rs`) has a knob that cuts a feature's work by
//! a percentage; the truth is the program's time with the knob against without, measured here
//! in rounds of every setting (the median of 5 rounds' gains), and `what-if` (medians of 5 runs)
//! must predict it within 5 points, including a feature whose speedup buys nothing.

use crate::support::{again_if_stolen, fsprof, serial, shared, tempdir};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

fn whatif() -> &'static str {
    env!("CARGO_BIN_EXE_whatif")
}

/// The ground truth of a set of knob settings: what each really buys.
#[derive(Debug)]
struct Truth {
    /// The program's median measure without the knob, in s.
    baseline: f64,
    /// How far the measure without the knob spread over its runs: (slowest - fastest) / median,
    /// the single slowest and fastest left out where there are four runs or more.
    baseline_spread: f64,
    /// Each knob setting's gain in percent of the baseline: per round (every setting run once,
    /// the baseline first), the setting's run against that round's baseline run, then the
    /// median over the rounds. Pairing within a round cancels a machine slowed for a few
    /// seconds, which medians of each setting's runs alone did not (the suite, 2026-12-03: a
    /// 20% speedup's truth read 7.3% where its share said 12.8%, and its 50% read 31.9%).
    gains: Vec<f64>,
}

/// The program's wall time over `runs` rounds of the baseline and every case's knob setting
/// (see [`Truth`]).
fn knob_times(mode: &str, cases: &[(&str, u32)], runs: usize) -> Truth {
    knob_times_of(Path::new(whatif()), &[mode], cases, runs, cheaper)
}

/// The ground truth's knob: `feature`'s work cut by `percent`.
fn cheaper(feature: &str, percent: u32) -> Vec<String> {
    vec!["--cheaper".into(), format!("{feature}={percent}")]
}

/// The C ground truths' knob (`tests/c/whatif_*.c`): `FEATURE=PERCENT`.
fn c_knob(feature: &str, percent: u32) -> Vec<String> {
    vec![format!("{feature}={percent}")]
}

/// [`knob_times`] of any program: `program args` then, for a setting, `knob(feature, percent)`.
fn knob_times_of(
    program: &Path,
    args: &[&str],
    cases: &[(&str, u32)],
    runs: usize,
    knob: impl Fn(&str, u32) -> Vec<String>,
) -> Truth {
    knob_truth(program, args, cases, runs, knob, |command| {
        let start = Instant::now();
        assert!(command.status().unwrap().success());
        start.elapsed().as_secs_f64()
    })
}

/// The mean request latency the `server` mode measures itself (`latency_ns` on its stderr),
/// over `runs` rounds of every knob setting, as [`knob_times`].
fn knob_latencies(cases: &[(&str, u32)], runs: usize) -> Truth {
    knob_truth(
        Path::new(whatif()),
        &["server"],
        cases,
        runs,
        cheaper,
        |command| {
            let output = command.output().unwrap();
            assert!(output.status.success());
            let stderr = String::from_utf8_lossy(&output.stderr);
            let ns: f64 = (stderr.lines())
                .find_map(|line| line.strip_prefix("latency_ns "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no latency_ns in {stderr}"));
            ns / 1e9
        },
    )
}

/// `measure` of `program args` (then, for a case, `knob(feature, percent)`) in `runs` rounds
/// of the baseline and then every case in the order given (see [`Truth`]).
fn knob_truth(
    program: &Path,
    args: &[&str],
    cases: &[(&str, u32)],
    runs: usize,
    knob: impl Fn(&str, u32) -> Vec<String>,
    measure: impl Fn(&mut Command) -> f64,
) -> Truth {
    let settings: Vec<_> = std::iter::once(None)
        .chain(cases.iter().map(|&case| Some(case)))
        .collect();
    let rounds: Vec<Vec<f64>> = (0..runs)
        .map(|_| {
            (settings.iter())
                .map(|setting| {
                    let mut command = Command::new(program);
                    command.args(args).stdout(Stdio::null());
                    if let Some((feature, percent)) = setting {
                        command.args(knob(feature, *percent));
                    }
                    measure(&mut command)
                })
                .collect()
        })
        .collect();
    let mut baselines: Vec<f64> = rounds.iter().map(|round| round[0]).collect();
    baselines.sort_by(f64::total_cmp);
    let baseline = median(baselines.clone());
    // One run apart from the rest (which the paired gains' median shrugs off) does not count:
    // the second fastest against the second slowest, where there are four runs or more.
    let trim = usize::from(baselines.len() >= 4);
    let (fastest, slowest) = (baselines[trim], baselines[baselines.len() - 1 - trim]);
    let gains = (1..settings.len())
        .map(|index| {
            median(
                (rounds.iter())
                    .map(|round| (round[0] - round[index]) * 100.0 / round[0])
                    .collect(),
            )
        })
        .collect();
    Truth {
        baseline,
        baseline_spread: (slowest - fastest) / baseline,
        gains,
    }
}

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `fsprof what-if` with `options` on the target in `mode`; returns its JSON.
fn what_if(dir: &Path, options: &[&str], mode: &str) -> Value {
    what_if_of(dir, options, &[whatif(), mode])
}

/// `fsprof what-if` with `options` on `program` (and its arguments), writing into `out` (emptied
/// first).
fn what_if_command(options: &[&str], out: &Path, program: &[&str]) -> Command {
    let _ = std::fs::remove_dir_all(out);
    let mut command = Command::new(fsprof());
    command
        .arg("what-if")
        .args(options)
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(program);
    command
}

/// Runs `fsprof what-if` with `options` on `program` (and its arguments); returns its JSON.
fn what_if_of(dir: &Path, options: &[&str], program: &[&str]) -> Value {
    let out = dir.join("whatif");
    let output = what_if_command(options, &out, program).output().unwrap();
    assert!(
        output.status.success(),
        "fsprof what-if failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
    serde_json::from_str(&std::fs::read_to_string(out.join("what-if.json")).unwrap()).unwrap()
}

/// The predicted gain of `label` at `speedup`, and its "in it" share.
fn predicted(json: &Value, label: &str, speedup: u64) -> (f64, f64) {
    let curve = json["summary"]["curves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|curve| {
            let candidate = &curve["candidate"];
            let feature = candidate["feature"].as_str().unwrap();
            let name = match candidate["instance"].as_str() {
                Some(instance) => format!("{feature}={instance}"),
                None => feature.to_owned(),
            };
            name == label
        })
        .unwrap_or_else(|| panic!("no curve for {label} in {json}"));
    let point = curve["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|point| point["speedup"].as_u64() == Some(speedup))
        .unwrap();
    (
        point["median"].as_f64().unwrap(),
        point["selected_share"].as_f64().unwrap(),
    )
}

/// Compares each (feature, speedup)'s prediction with the knob's truth; panics with the table
/// if any is more than 5 points off.
fn compare(mode: &str, json: &Value, cases: &[(&str, u32)], truth: &Truth) {
    let mut table = format!(
        "{mode}: baseline {:.3} ms alone (its runs {:.1}% apart)\n",
        truth.baseline * 1e3,
        truth.baseline_spread * 100.0
    );
    let mut worst: f64 = 0.0;
    for ((feature, speedup), &real) in cases.iter().zip(&truth.gains) {
        let (guess, share) = predicted(json, feature, u64::from(*speedup));
        worst = worst.max((guess - real).abs());
        table += &format!(
            "  {feature} {speedup}% faster: real gain {real:+.1}%, predicted {guess:+.1}% ({share:.1}% in it)\n"
        );
    }
    eprintln!("{table}");
    assert!(
        worst <= 5.0,
        "a prediction is {worst:.1} points off{}:\n{table}",
        slowed(json, truth)
    );
}

/// Says why a failure may be the machine's (see [`again_if_slowed`]), or nothing: the
/// program's CPU slowed in some of what-if's runs (its spread, [`cpu_spread`], over 5%), or the
/// truth's own baseline runs spread over 10% (1-2% on a calm machine): a truth that moved that
/// much is not one to hold a prediction to within 5 points.
fn slowed(json: &Value, truth: &Truth) -> String {
    let spread = cpu_spread(json);
    if spread > 0.05 {
        return format!(
            " ({SLOWED}: runs of one experiment took up to {:.0}% more CPU time for the same work)",
            spread * 100.0
        );
    }
    if truth.baseline_spread > 0.10 {
        return format!(
            " ({SLOWED}: the truth's runs without the knob were {:.0}% apart)",
            truth.baseline_spread * 100.0
        );
    }
    String::new()
}

/// Marks a failure while the machine slowed the program's CPU in some runs (see
/// [`again_if_slowed`]).
const SLOWED: &str = "the CPU slowed";

/// How much more CPU time (the agent's looks, one a millisecond of a thread's CPU time) the
/// slowest run of an experiment took than its fastest, for the same work: 0.01-0.02 on a calm
/// machine; 0.08-0.22 while a neighbour slowed the CPU (the suite, 2026-12-03: four of five runs
/// of one experiment 8-10% slower, which no prediction can see). With the experiments in turn
/// within one run, a stretch's looks per request spread 5-10% by chance alone (a few hundred
/// to a few thousand looks each): there, the looks per request of each round (every experiment once) against
/// their median over the rounds, 0.01-0.03 on a calm machine.
fn cpu_spread(json: &Value) -> f64 {
    let runs = json["runs"].as_array().unwrap();
    let field = |run: &Value, name: &str| run[name].as_f64().unwrap();
    if !json["summary"]["measure"].is_string() {
        let mut rounds: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
        for run in runs {
            let round = rounds.entry(run["round"].as_u64().unwrap()).or_default();
            round.0 += field(run, "samples");
            round.1 += field(run, "progress_ends");
        }
        let mut per_request: Vec<f64> = (rounds.values())
            .map(|(samples, ends)| samples / ends.max(1.0))
            .collect();
        per_request.sort_by(f64::total_cmp);
        let median = per_request[per_request.len() / 2];
        return per_request.last().unwrap() / median.max(f64::MIN_POSITIVE) - 1.0;
    }
    let mut groups: std::collections::HashMap<String, (f64, f64)> = Default::default();
    for run in runs {
        let key = format!("{}/{}/{}", run["candidate"], run["speedup"], run["quiet"]);
        let samples = field(run, "samples");
        let (low, high) = groups.entry(key).or_insert((f64::INFINITY, 0.0));
        *low = low.min(samples);
        *high = high.max(samples);
    }
    groups
        .values()
        .map(|(low, high)| high / low.max(1.0) - 1.0)
        .fold(0.0, f64::max)
}

/// Runs `attempt` once more when it failed while the machine slowed the program's CPU in some
/// runs ([`SLOWED`] in its message), as `again_if_stolen` does for steal: the experiments need
/// the machine to themselves. When the second attempt fails so too, the test passes as
/// inconclusive and says so past the harness's capture (as `again_if_stolen` does: CI's digest
/// repeats such lines); a failure on a machine that ran the same work at the same speed is the
/// test's.
fn again_if_slowed(attempt: impl Fn()) {
    for tries in 1..=2 {
        let Err(failure) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&attempt)) else {
            return;
        };
        let message = failure
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        if !message.contains(SLOWED) {
            std::panic::resume_unwind(failure);
        }
        if tries == 2 {
            use std::io::Write;
            let test = std::thread::current().name().unwrap_or("a test").to_owned();
            let first = message.lines().next().unwrap_or_default().to_owned();
            let _ = writeln!(
                std::io::stderr(),
                "inconclusive: {test}: both attempts failed while {SLOWED} ({first})"
            );
            return;
        }
        eprintln!("the attempt above failed while {SLOWED}: once more");
    }
}

/// `fsprof what-if` with `options` at 20% and 50%, 5 runs, on the target in `mode`, against its
/// knob (5 rounds of every setting): every case within 5 points (see [`compare`]). Returns the
/// truth.
fn predicts(dir: &Path, mode: &str, options: &[&str], cases: &[(&str, u32)]) -> Truth {
    let mut all = options.to_vec();
    all.extend(["--speedups", "20,50", "--runs", "5"]);
    let json = what_if(dir, &all, mode);
    let truth = knob_times(mode, cases, 5);
    compare(mode, &json, cases, &truth);
    truth
}

#[test]
fn a_pipelines_bottleneck_is_predicted_and_its_other_stage_buys_nothing() {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    let cases = [
        ("decode", 20),
        ("decode", 50),
        ("render", 20),
        ("render", 50),
    ];
    let features = ["--feature", "decode", "--feature", "render"];
    again_if_stolen(|| {
        again_if_slowed(|| {
            let truth = predicts(dir, "pipeline", &features, &cases);
            // The truth itself: render's speedup really buys nothing, decode's half the time.
            assert!(truth.gains[3].abs() < 5.0, "{truth:?}");
            assert!(truth.gains[1] > 40.0, "{truth:?}");
        })
    });
}

/// The server's features and speedups its test tries. (Its whole runs, timed as a batch job's,
/// were a test of their own until 2026-12-03: they told nothing the batch and pipeline tests do
/// not, took 19 s of the suite, and `tests/benches/what-if.sh` still measures them.)
const SERVER_CASES: [(&str, u32); 4] = [
    ("prepare", 20),
    ("prepare", 50),
    ("handle", 20),
    ("handle", 50),
];

/// The loopback server with its requests as the progress point (`--progress request`), no
/// candidate named: a look at the running program's marks finds the features to try (not the
/// progress point's own), the experiments take turns within the same run, and the predicted
/// shortening of a `request` mark's mean latency (which the shim times in the run's virtual
/// time) is compared with the mean latency the client measures itself with the knob, in runs
/// of their own.
#[test]
fn a_progress_points_mean_latency_is_predicted() {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    let cases = SERVER_CASES;
    let options = [
        "--progress",
        "request",
        "--speedups",
        "20,50",
        "--runs",
        "10",
    ];
    again_if_stolen(|| {
        again_if_slowed(|| {
            // The look at the features takes 3 s, then 10 rounds of 6 stretches (the four
            // experiments, the baseline, a quiet baseline) of about 0.3 s take 18-20 s; the
            // program runs on after them until its 70000 requests (about 29 s under the
            // agent) are done. 10 stretches each and 9 rounds of the truth, not 6 and 5: on
            // the noisy 2-CPU virtual machines here a median of 8 stretches moved by 2-3
            // points from run to run and a truth of 7 rounds by 1.5-2 (2026-12-03), too much
            // of the bar.
            let json = what_if_of(dir, &options, &[whatif(), "server", "70000"]);
            assert_eq!(json["summary"]["measure"]["latency"], "request", "{json}");
            let mut found: Vec<&str> = (json["summary"]["curves"].as_array().unwrap().iter())
                .map(|curve| curve["candidate"]["feature"].as_str().unwrap())
                .collect();
            found.sort();
            assert_eq!(found, ["handle", "prepare"], "the look's candidates");
            assert!(dir.join("whatif/profile/profile.json").exists());
            let stretches = json["runs"].as_array().unwrap();
            assert_eq!(stretches.len(), 10 * 6, "one run, 10 rounds of 6 stretches");
            let quiet = stretches.iter().filter(|s| s["quiet"] == true).count();
            assert_eq!(quiet, 10, "a quiet baseline a round");
            for stretch in stretches {
                // Every request of the stretch timed (each one mark), and at least 20 of them.
                // The shim counts an end, then its timing, in two counters that fsprof reads at
                // any instant: a stretch whose first or last read fell between the two has one
                // more of either (611 timed of 610 ends in 1 suite run of 3, 2026-12-04).
                assert!(stretch["round"].as_u64().is_some(), "{stretch}");
                let (timed, ends) = (
                    stretch["progress_timed"].as_u64(),
                    stretch["progress_ends"].as_u64(),
                );
                let (timed, ends) = (timed.unwrap(), ends.unwrap());
                assert!(timed.abs_diff(ends) <= 1, "{stretch}");
                assert!(
                    stretch["progress_timed"].as_u64().unwrap() >= 20,
                    "{stretch}"
                );
            }
            let truth = knob_latencies(&cases, 9);
            compare("server, latency", &json, &cases, &truth);
        })
    });
}

/// The loopback server beside a busy process (threads of this test spinning, one fewer than
/// the CPUs): with no idle CPU the client, woken by the server's answer, takes the server's CPU and the
/// server waits inside its `write` while the client runs `prepare`. That wait is forgiven
/// (`whatif::wake_end` in the agent); owed, the server paid the client's delay inside the next
/// request, and `prepare` 50% faster read +1-2% against +16% really bought (2026-12-05, AMD VM).
/// Not retried when the CPU slowed (`again_if_slowed`): a busy neighbour is what it tests.
#[test]
fn a_server_beside_a_busy_process_is_predicted() {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    let cases = [("prepare", 50)];
    let options = [
        "--progress",
        "request",
        "--feature",
        "prepare",
        "--speedups",
        "50",
        "--runs",
        "10",
    ];
    again_if_stolen(|| {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        let _busy = (1..cpus.max(2)).map(|_| Busy::start()).collect::<Vec<_>>();
        // 10 rounds of 3 stretches of about 0.3 s, then the rest of 25000 requests (about 10 s).
        let json = what_if_of(dir, &options, &[whatif(), "server", "25000"]);
        let truth = knob_latencies(&cases, 9);
        compare(
            "server beside a busy process, latency",
            &json,
            &cases,
            &truth,
        );
    });
}

/// A thread of this process spinning until dropped.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start() -> Busy {
        use std::sync::atomic::Ordering::Relaxed;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut x = 1u64;
            while !flag.load(Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
        Busy {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A C client and server handing requests over by POSIX semaphores (`tests/c/
/// whatif_semaphores.c`: `sem_post`, `sem_wait`), both features on the critical path. Before the
/// agent took part in semaphores (2026-12-03) the thread waiting in `sem_wait` was not forgiven
/// what accrued meanwhile and paid it after: both speedups predicted about -1% against +14% and
/// +28% really bought.
#[test]
fn a_c_server_of_posix_semaphores_is_predicted() {
    let cases = [("prepare", 50), ("handle", 50)];
    c_program_predicted("whatif_semaphores", &cases, 5, |_| {});
}

/// Two C threads meeting at a `pthread_barrier_wait` each phase of about 2 ms (`tests/c/
/// whatif_barrier.c`): `solve` 50% faster buys only what the other half, `check`, leaves (a
/// phase is its longer half), and `check` faster nothing. Before the agent took part in barriers
/// (2026-12-03) the last thread to arrive woke the other without paying its delay and the waiter
/// was not forgiven: `solve` 50% faster predicted +28.2% to +33.5% against +39.1% to +40.6% in
/// three runs (phases of 1 ms: +23.1% against +39.4%).
#[test]
fn a_c_programs_barrier_phases_are_predicted() {
    let cases = [("solve", 20), ("solve", 50), ("check", 20), ("check", 50)];
    c_program_predicted("whatif_barrier", &cases, 9, |truth| {
        // The truth itself: solve's 50% is capped by check's half (at 40%), check's buys
        // nothing.
        assert!(truth.gains[1] < 46.0, "{truth:?}");
        assert!(truth.gains[3].abs() < 5.0, "{truth:?}");
    });
}

/// `fsprof what-if` of the C ground truth `name` (`tests/c/NAME.c`, built with the agent), each
/// feature of `cases` named and tried at each speedup of `cases`, `runs` runs each, against its
/// knob (9 rounds): every case within 5 points ([`compare`]); then `also` holds of the truth.
/// Over 5 rounds the truth moved with a loaded CI machine (2026-12-04: the barrier's `solve` 20%
/// read +16.7% and +17.6% there, 17.9-20.1% on a calm one), and so failed the prediction.
fn c_program_predicted(name: &str, cases: &[(&str, u32)], runs: u32, also: impl Fn(&Truth)) {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    let program = crate::support::native::build_c_with_agent(dir, name).exe;
    let mut options = Vec::new();
    let mut features: Vec<&str> = cases.iter().map(|(feature, _)| *feature).collect();
    features.dedup();
    for feature in features {
        options.extend(["--feature".to_owned(), feature.to_owned()]);
    }
    let mut speedups: Vec<String> = cases.iter().map(|(_, s)| s.to_string()).collect();
    speedups.sort();
    speedups.dedup();
    options.extend(["--speedups".to_owned(), speedups.join(",")]);
    options.extend(["--runs".to_owned(), runs.to_string()]);
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    again_if_stolen(|| {
        again_if_slowed(|| {
            let json = what_if_of(dir, &options, &[program.to_str().unwrap()]);
            let truth = knob_times_of(&program, &[], cases, 9, c_knob);
            compare(name, &json, cases, &truth);
            also(&truth);
        })
    });
}

#[test]
fn a_c_pipeline_of_pthread_locks_and_condition_variables_is_predicted() {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    let program = crate::support::native::build_c_with_agent(dir, "whatif_pipeline").exe;
    let cases = [("decode", 50), ("render", 50)];
    again_if_stolen(|| {
        again_if_slowed(|| {
            let json = what_if_of(
                dir,
                &[
                    "--feature",
                    "decode",
                    "--feature",
                    "render",
                    "--speedups",
                    "50",
                    "--runs",
                    "5",
                ],
                &[program.to_str().unwrap()],
            );
            let truth = knob_times_of(&program, &[], &cases, 5, c_knob);
            // Not the 5-point bar of the Rust programs, whose runs spread less: this program's runs
            // alone spread by 1% on a calm machine and its predictions read within 1.3 points
            // there (2026-12-03), but in noisy stretches its baselines spread 402-500 ms and even
            // its truth moved 6 points between two tests. What must hold, and what the shared
            // baselines' noise cancels out of: the difference between the bottleneck's gain and
            // the other stage's, predicted as really bought. Without the pthread waits and
            // wake-ups taking part, render waited in pthread_cond_wait unforgiven and became the
            // bottleneck in the experiments.
            let real = |index: usize| truth.gains[index];
            let (decode, _) = predicted(&json, "decode", 50);
            let (render, _) = predicted(&json, "render", 50);
            eprintln!(
                "C pipeline: decode 50% faster: real {:+.1}%, predicted {decode:+.1}%; render 50%: real {:+.1}%, predicted {render:+.1}%",
                real(0),
                real(1)
            );
            let (predicted_gap, real_gap) = (decode - render, real(0) - real(1));
            assert!(
                (predicted_gap - real_gap).abs() <= 8.0,
                "decode's gain over render's: {predicted_gap:.1} points predicted, {real_gap:.1} real{}",
                slowed(&json, &truth)
            );
        })
    });
}

#[test]
fn a_batch_jobs_features_are_found_by_a_first_profile_and_predicted() {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    let cases = [("parse", 20), ("parse", 50), ("check", 20), ("check", 50)];
    again_if_stolen(|| {
        again_if_slowed(|| {
            predicts(dir, "batch", &["--top", "2"], &cases);
            assert!(dir.join("whatif/profile/profile.json").exists());
            assert!(std::fs::read_to_string(dir.join("whatif/what-if.svg"))
                .unwrap()
                .contains("<svg"));
        })
    });
}

#[test]
fn an_instance_is_selected_by_its_name_in_the_report() {
    let _serial = serial();
    let temp = tempdir();
    let dir = temp.path();
    again_if_stolen(|| {
        again_if_slowed(|| {
            // The instance of `parse` as the report names it (its mark's location), from a profile.
            let profile = dir.join("profile");
            let status = Command::new(fsprof())
                .args(["run", "--no-native", "-o"])
                .arg(&profile)
                .args(["--", whatif(), "batch", "300"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            let report = Command::new(fsprof())
                .args(["report", "--format", "json"])
                .arg(&profile)
                .output()
                .unwrap();
            let report: Value = serde_json::from_slice(&report.stdout).unwrap();
            let parse = report["features"]
                .as_array()
                .unwrap()
                .iter()
                .find(|feature| feature["name"] == "parse")
                .unwrap();
            let location = parse["instances"][0]["payload"]
                .as_str()
                .unwrap()
                .to_owned();
            let this = format!("parse={location}");
            let json = what_if(
                dir,
                &[
                    "--instance",
                    &this,
                    "--instance",
                    "parse=nowhere.rs:1:1",
                    "--speedups",
                    "50",
                    // Five, not three: the instance no run finds predicts the baselines' noise
                    // (+4.0% once in a suite run with three, baselines of 0.420 to 0.442 s).
                    "--runs",
                    "5",
                ],
                "batch",
            );
            let (gain, share) = predicted(&json, &this, 50);
            let (other, none) = predicted(&json, "parse=nowhere.rs:1:1", 50);
            eprintln!(
            "{this}: {gain:+.1}% ({share:.1}% in it); no such instance: {other:+.1}% ({none:.1}%)"
        );
            // parse is three quarters of the work: half of it off is 37.5% sooner.
            assert!(share > 65.0, "{share}");
            assert_eq!(none, 0.0);
            let spread = cpu_spread(&json);
            let slowed = match spread > 0.05 {
                true => format!(
                    " ({SLOWED}: runs took up to {:.0}% more CPU time)",
                    spread * 100.0
                ),
                false => String::new(),
            };
            assert!((gain - 37.5).abs() <= 5.0, "{gain}{slowed}");
            assert!(other.abs() <= 3.0, "{other}{slowed}");
        })
    });
}

#[test]
fn what_if_says_why_it_cannot_run() {
    let _shared = shared();
    let temp = tempdir();
    let dir = temp.path();
    let run = |args: &[&str]| {
        let output = Command::new(fsprof())
            .arg("what-if")
            .arg("-o")
            .arg(dir.join("out"))
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let message = run(&["--instance", "parse", "--", "true"]);
    assert!(message.contains("FEATURE=INSTANCE"), "{message}");
    let message = run(&["--speedups", "0", "--", "true"]);
    assert!(message.contains("--speedups"), "{message}");
    let message = run(&["--", "true"]);
    assert!(
        message.contains("no feature the program marks"),
        "{message}"
    );
    let message = run(&["--feature", "x", "--", "false"]);
    assert!(message.contains("the program ended with"), "{message}");
    // A progress point no run timed (a name mistyped): nothing to compare with.
    let args = [
        "--progress",
        "requets",
        "--feature",
        "handle",
        "--speedups",
        "50",
    ];
    let message = run(&[&args[..], &["--runs", "1", "--", whatif(), "server", "50"]].concat());
    assert!(
        message.contains("no baseline stretch timed a requets mark"),
        "{message}"
    );
    // A progress point without candidates, in a program that ends before the look at its
    // features does.
    let message = run(&["--progress", "request", "--", whatif(), "server", "50"]);
    assert!(
        message.contains("during the look at its features"),
        "{message}"
    );
}

/// Ctrl-C (a SIGINT to fsprof alone here) ends the experiments, whole runs or turns within one
/// run, and what they measured is written; the program fsprof started in turn runs on.
#[test]
fn an_interrupted_what_if_writes_what_it_measured() {
    use crate::support::{as_from_a_terminal, stderr_lines, Guarded};
    use std::time::Duration;
    let _serial = serial();
    let temp = tempdir();
    // Interrupted once `ready` holds for the lines printed so far (described by `after`).
    let interrupt =
        |options: &[&str], program: &[&str], after: &str, ready: &dyn Fn(&[String]) -> bool| {
            let out = temp.path().join("interrupted");
            let mut what_if = Guarded(
                as_from_a_terminal(&mut what_if_command(options, &out, program))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
            let lines = stderr_lines(&mut what_if);
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut seen = Vec::new();
            while !ready(&seen) {
                let left = deadline.saturating_duration_since(Instant::now());
                match lines.recv_timeout(left) {
                    Ok(line) => seen.push(line),
                    Err(_) => panic!("no {after:?} within 60 s: {seen:#?}"),
                }
            }
            // SAFETY: a signal to the child this test started.
            assert_eq!(unsafe { libc::kill(what_if.pid() as i32, libc::SIGINT) }, 0);
            let status = what_if.wait_with_deadline(Duration::from_secs(30));
            seen.extend(lines.try_iter());
            assert!(status.success(), "{status}: {seen:#?}");
            assert!(
                seen.iter()
                    .any(|l| l.contains("fsprof: what-if: interrupted after")),
                "{seen:#?}"
            );
            let json: Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("what-if.json")).unwrap())
                    .unwrap();
            (json["runs"].as_array().unwrap().len(), seen)
        };
    // Whole runs: 3 of each of 3 experiments (the baseline, a quiet one, decode 50% faster)
    // planned; interrupted during the third run.
    let (runs, _) = interrupt(
        &["--feature", "decode", "--speedups", "50", "--runs", "3"],
        &[whatif(), "pipeline"],
        "run 3 of 9 and a baseline run done",
        // The first round begins with the baseline and the quiet baseline, in either order:
        // interrupted before a baseline run ended, what-if has nothing to compare with and says
        // so (exit status 1), which is not this test's case.
        &|seen| {
            let baseline = seen.iter().position(|l| l.contains(": baseline"));
            let third = seen.iter().position(|l| l.contains("run 3 of 9"));
            // A line after the baseline's: that run ended.
            baseline.is_some_and(|b| seen.len() > b + 1) && third.is_some()
        },
    );
    assert!((2..9).contains(&runs), "{runs} runs written");
    // Turns within one run of a server with far more requests than the experiments need.
    let (stretches, seen) = interrupt(
        &[
            "--progress",
            "request",
            "--feature",
            "handle",
            "--speedups",
            "50",
        ],
        &[whatif(), "server", "1000000"],
        "round 3 of 10",
        &|seen| seen.iter().any(|l| l.contains("round 3 of 10")),
    );
    assert!(
        (4..20).contains(&stretches),
        "{stretches} stretches written"
    );
    // It runs on without experiments (the signal was fsprof's alone): ended here.
    let note = seen
        .iter()
        .find_map(|l| {
            l.split_once("the program (pid ")
                .map(|(_, rest)| rest.to_owned())
        })
        .unwrap_or_else(|| panic!("no word of the program running on: {seen:#?}"));
    let pid: i32 = note.split(')').next().unwrap().parse().unwrap();
    // SAFETY: a signal to the program this test's fsprof started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}
