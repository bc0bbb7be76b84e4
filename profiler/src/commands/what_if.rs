//! `fsprof what-if`: causal profiling per feature and per instance. What would making this
//! feature (or this instance of it) faster buy the whole program? A profile cannot say: a
//! feature that takes 40% of the CPU may sit off the critical path, one that takes 5% may gate
//! everything. So, as Coz (Curtsinger and Berger, SOSP 2015) does for lines of code, each
//! experiment runs the program once with a *virtual speedup* of the selected code: the agent
//! slows every other thread while one runs it (`agent/src/builtin/whatif.rs`; the control page
//! that passes the selection and brings back the delays is `fsprof_shim::whatif`), and the
//! program's time less the delay inserted is its time with that code faster.
//!
//! Each round of experiments also has a quiet baseline (`Turn::Quiet`): nothing selected and
//! the looks slowed tenfold. The looks every millisecond cost the program a few percent in every
//! other run or stretch; against the quiet baselines fsprof measures that cost, and has a look
//! in the selected code credit that much more than its period (`what_if/results.rs`). The
//! first round begins with the two baselines, so that the experiments after have a measure.
//!
//! This module: the options, the candidates (named, or the heaviest features of a first profile
//! recorded with marks only), the experiments, and their results written out
//! (`what_if/results.rs`). Without a progress point the gains are of the program's run time,
//! and each experiment is a whole run of the program, in a shuffled order with the baselines
//! among them. With `--progress FEATURE` they are of the mean latency of that feature's marks
//! (a request), which the shim times in the run's virtual time (`fsprof_shim::abi::Progress`),
//! and the experiments take turns within one run (`what_if/rotation.rs`): a server need not end.

mod control;
mod results;
mod rotation;

use crate::analysis::{analyse, TimeView};
use crate::commands::session::{self, Backend, RecordOptions};
use crate::profile::Profile;
use crate::record::agent::{self, Preload};
use anyhow::{bail, Context, Result};
use control::{ControlPage, Counters};
use fsprof_shim::abi::{MAX_PROGRESS_NAME, PROGRESS_VARIABLE};
use fsprof_shim::whatif::{CONTROL_VARIABLE, MAX_CANDIDATES, NAME_CAPACITY};
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The options of `fsprof what-if`.
#[derive(Clone, Debug)]
pub struct WhatIfOptions {
    /// The candidates named (`--feature`, `--instance`), in order; empty: the first profile's.
    named: Vec<Candidate>,
    /// How many of the first profile's features to try when none is named.
    top: usize,
    /// The speedups tried, percent.
    speedups: Vec<u32>,
    /// Runs of each experiment and of the baseline (stretches of one run, with a progress
    /// point); `None`: the default, 3 runs or 10 stretches.
    runs: Option<usize>,
    /// The agent's built-in features marked too (and so candidates).
    agent: bool,
    /// The progress point: the feature whose marks' mean latency the gains are of (`None`:
    /// the program's run time).
    progress: Option<String>,
    /// Output directory.
    output: Option<PathBuf>,
}

/// What an experiment speeds up: a feature, or one instance of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Candidate {
    /// The feature's name.
    pub feature: String,
    /// The instance's text as the report names it; `None`: every instance.
    pub instance: Option<String>,
}

impl Candidate {
    /// How the table names it.
    pub fn label(&self) -> String {
        match &self.instance {
            Some(instance) => format!("{} ({instance})", self.feature),
            None => self.feature.clone(),
        }
    }
}

impl WhatIfOptions {
    /// The options, or why they do not make sense.
    pub fn new(
        features: Vec<String>,
        instances: Vec<String>,
        top: usize,
        mut speedups: Vec<u32>,
        runs: Option<usize>,
        agent: bool,
        output: Option<PathBuf>,
    ) -> Result<WhatIfOptions, String> {
        let mut named: Vec<Candidate> = features
            .into_iter()
            .map(|feature| Candidate {
                feature,
                instance: None,
            })
            .collect();
        for spec in instances {
            let Some((feature, instance)) = spec.split_once('=') else {
                return Err(format!(
                    "--instance {spec}: write FEATURE=INSTANCE (an instance as the report names it)"
                ));
            };
            named.push(Candidate {
                feature: feature.to_owned(),
                instance: Some(instance.to_owned()),
            });
        }
        for candidate in &named {
            let too_long = |text: &str| text.is_empty() || text.len() > NAME_CAPACITY;
            if too_long(&candidate.feature) || candidate.instance.as_deref().is_some_and(too_long) {
                return Err(format!(
                    "{}: a feature's name and an instance's text take 1 to {NAME_CAPACITY} bytes",
                    candidate.label()
                ));
            }
        }
        speedups.sort_unstable();
        speedups.dedup();
        if speedups.is_empty() || speedups.iter().any(|&s| s == 0 || s > 100) {
            return Err(
                "--speedups takes percentages from 1 to 100 (the baseline, 0, is always run)"
                    .to_owned(),
            );
        }
        if runs == Some(0) || top == 0 {
            return Err("--runs and --top take at least 1".to_owned());
        }
        if named.len() > MAX_CANDIDATES || top > MAX_CANDIDATES {
            return Err(format!(
                "at most {MAX_CANDIDATES} candidates (--feature, --instance, --top) in one what-if"
            ));
        }
        Ok(WhatIfOptions {
            named,
            top,
            speedups,
            runs,
            agent,
            progress: None,
            output,
        })
    }

    /// The same options with the progress point `progress` (`--progress`).
    pub fn with_progress(self, progress: Option<String>) -> Result<WhatIfOptions, String> {
        if let Some(name) = &progress {
            if name.is_empty() || name.len() > MAX_PROGRESS_NAME {
                return Err(format!(
                    "--progress {name}: a feature's name takes 1 to {MAX_PROGRESS_NAME} bytes"
                ));
            }
            if !cfg!(target_arch = "x86_64") {
                return Err("--progress needs an x86-64 machine (the marks' other path)".to_owned());
            }
        }
        Ok(WhatIfOptions { progress, ..self })
    }
}

/// One experiment (a run of the program, or a stretch of one) and what the agent counted in it.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Outcome {
    /// Which candidate (an index into the candidates), `None` for a baseline.
    pub candidate: Option<usize>,
    /// The speedup, percent (0 for a baseline).
    pub speedup: u32,
    /// The round of the run or stretch (each round holds one of each experiment, of the
    /// baseline and of the quiet baseline, in a shuffled order).
    pub round: Option<usize>,
    /// Its wall time: the program's, from its start to its end, or the stretch's.
    pub wall_ns: u64,
    /// The global delay: the selected code's time the experiment removed.
    pub delay_ns: u64,
    /// What its threads slept, all together.
    pub paid_ns: u64,
    /// What blocked threads were forgiven, all together.
    pub forgiven_ns: u64,
    /// Looks at a thread's marks, and those in the selected code.
    pub samples: u64,
    /// Looks that found a thread in the selected code.
    pub selected_samples: u64,
    /// Threads timed (in the whole run, for a stretch).
    pub threads: u64,
    /// Threads whose timer could not be armed (the same).
    pub failures: u64,
    /// Marks of the progress feature that ended (0 without `--progress`).
    pub progress_ends: u64,
    /// Of those, the ones timed, and their latencies in virtual time added up.
    pub progress_timed: u64,
    pub progress_latency_ns: u64,
    /// A quiet baseline: a run or stretch with nothing selected and the looks slowed tenfold,
    /// which measures the program with little of the looks' cost.
    pub quiet: bool,
    /// What a look of the perf clock in the selected code credited beyond its period, parts
    /// per million of it: the looks' cost as measured before this run or stretch.
    pub credit_ppm: u64,
}

impl Outcome {
    /// The experiment (`candidate` at `speedup`) that took `wall_ns` and counted `counts`, in
    /// a run that timed `threads` threads and failed to time `failures`.
    fn new(
        (candidate, speedup): (Option<usize>, u32),
        wall_ns: u64,
        counts: Counters,
        (threads, failures): (u64, u64),
    ) -> Outcome {
        Outcome {
            candidate,
            speedup: if candidate.is_some() { speedup } else { 0 },
            round: None,
            wall_ns,
            delay_ns: counts.delay_ns,
            paid_ns: counts.paid_ns,
            forgiven_ns: counts.forgiven_ns,
            samples: counts.samples,
            selected_samples: counts.selected_samples,
            threads,
            failures,
            progress_ends: counts.progress_ends,
            progress_timed: counts.progress_timed,
            progress_latency_ns: counts.progress_latency_ns,
            quiet: false,
            credit_ppm: 0,
        }
    }
}

/// `fsprof what-if`: the candidates, the experiments, the table (stdout), `what-if.json` and
/// `what-if.svg`.
pub fn what_if(program: &[OsString], options: &WhatIfOptions) -> Result<()> {
    let Some(name) = program.first() else {
        bail!("no program given: fsprof what-if -- PROGRAM [ARGS...]")
    };
    let dir = session::prepare_output(options.output.as_deref(), &name.to_string_lossy())?;
    let library = match agent::preload(name) {
        Preload::Library(path) => path,
        other => bail!(
            "what-if needs fsprof's agent in the program, and {}",
            other
                .note()
                .unwrap_or_else(|| "it cannot be preloaded".to_owned())
        ),
    };
    // With a progress point and no candidate named, they are found in the run itself (a
    // server need not end for a first profile): see `rotation::rotate`.
    let candidates = match (options.named.is_empty(), &options.progress) {
        (false, _) => options.named.clone(),
        (true, Some(_)) => Vec::new(),
        (true, None) => discover(program, options, &dir)?,
    };
    let log_path = dir.join("what-if.log");
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let setup = Setup {
        program,
        library: &library,
        options,
        candidates: &candidates,
        dir: &dir,
        log: &log,
        log_path: &log_path,
    };
    let (candidates, outcomes, running_on) = match options.progress.is_some() {
        true => rotation::rotate(&setup)?,
        false => (candidates.clone(), whole_runs(&setup)?, None),
    };
    let summary = results::summarize(
        &candidates,
        &options.speedups,
        options.progress.as_deref(),
        &outcomes,
    );
    if let (Some(feature), true) = (&options.progress, summary.baseline_s.is_empty()) {
        bail!(
            "no baseline stretch timed a {feature} mark, so there is nothing to compare with: check the name as the report shows it (a feature the program marks, on x86-64), and that the program runs long enough for its experiments ({} has its output)",
            log_path.display()
        );
    }
    print!("{}", results::table(&summary));
    for warning in results::warnings(&summary, &outcomes) {
        eprintln!("fsprof: what-if: {warning}");
    }
    let json = dir.join("what-if.json");
    std::fs::write(&json, results::json(program, &summary, &outcomes)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let svg = dir.join("what-if.svg");
    std::fs::write(&svg, results::svg(&summary))
        .with_context(|| format!("writing {}", svg.display()))?;
    eprintln!(
        "fsprof: wrote {}, {} and {} (the program's output)",
        json.display(),
        svg.display(),
        log_path.display()
    );
    if let Some(running_on) = running_on {
        running_on.wait();
    }
    Ok(())
}

/// The heaviest features of a first profile (marks only: no native stacks, so no feature a
/// rule finds in the stacks, which no mark could slow down), the agent's built-in ones only
/// with `--agent`.
fn discover(program: &[OsString], options: &WhatIfOptions, dir: &Path) -> Result<Vec<Candidate>> {
    let profile_dir = dir.join("profile");
    eprintln!(
        "fsprof: what-if: a first profile of the program, for its heaviest features ({})",
        profile_dir.display()
    );
    let code = session::run(program, &first_profile(options, &profile_dir, None))?;
    if code != 0 {
        bail!("the program exited with status {code} in the first profile: what-if needs a program that ends well by itself");
    }
    heaviest(options, &profile_dir)
}

/// How the first profile, or a `--progress` run's survey of `duration`, records the program
/// into `profile_dir`: marks only, at 1 kHz.
fn first_profile(
    options: &WhatIfOptions,
    profile_dir: &Path,
    duration: Option<std::time::Duration>,
) -> RecordOptions {
    RecordOptions {
        output: Some(profile_dir.to_owned()),
        rate_hz: 1000.0,
        duration,
        count_idle: false,
        native: false,
        backend: Backend::Auto,
        agent: options.agent,
        debug_dirs: Vec::new(),
        debuginfod: None,
        top: None,
        follow: false,
        span_ids: false,
        rules: crate::rules::RuleSet::none(),
    }
}

/// The `--top` heaviest features of the profile in `profile_dir` by the time the program's
/// threads were active in them: not a built-in one unless `--agent`, not the progress point's
/// feature (a speedup of a whole request predicts itself), not a name longer than a control
/// page holds.
fn heaviest(options: &WhatIfOptions, profile_dir: &Path) -> Result<Vec<Candidate>> {
    let profile = Profile::load(profile_dir)?;
    let report = analyse(&profile, TimeView::Active);
    let candidates: Vec<Candidate> = report
        .features
        .iter()
        .filter(|feature| options.agent || !feature.builtin)
        .filter(|feature| options.progress.as_deref() != Some(feature.name.as_str()))
        .filter(|feature| !feature.name.is_empty() && feature.name.len() <= NAME_CAPACITY)
        .take(options.top)
        .map(|feature| Candidate {
            feature: feature.name.clone(),
            instance: None,
        })
        .collect();
    if candidates.is_empty() {
        bail!(
            "{} shows no feature the program marks{}: name one with --feature NAME, or mark the program's features (see the README's \"Marking features\")",
            match options.progress {
                Some(_) => "the survey",
                None => "the first profile",
            },
            match &options.progress {
                Some(feature) => format!(" besides {feature}"),
                None => String::new(),
            }
        );
    }
    Ok(candidates)
}

/// Each experiment as a whole run of the program, in `--runs` rounds of every experiment, the
/// baseline and the quiet baseline (see [`plan`]); each run credits the looks' cost measured
/// before it.
fn whole_runs(setup: &Setup) -> Result<Vec<Outcome>> {
    let Setup {
        options,
        candidates,
        log_path,
        ..
    } = *setup;
    let rounds = plan(
        candidates.len(),
        &options.speedups,
        options.runs.unwrap_or(3),
    );
    let plan: Vec<(usize, Turn)> = (rounds.iter().enumerate())
        .flat_map(|(round, turns)| turns.iter().map(move |&turn| (round, turn)))
        .collect();
    let mut outcomes = Vec::with_capacity(plan.len());
    let stop = rotation::Stop::install()?;
    for (done, &(round, turn)) in plan.iter().enumerate() {
        let what = describe(candidates, turn);
        eprintln!(
            "fsprof: what-if: run {} of {}: {what}",
            done + 1,
            plan.len()
        );
        let cost = results::looks_cost(None, &outcomes);
        let outcome = whole_run(setup, turn, cost).map(|outcome| Outcome {
            round: Some(round),
            ..outcome
        });
        if stop.any() {
            // Ctrl-C from the terminal ends the run too (one that ended well is kept): what
            // the runs measured is written.
            outcomes.extend(outcome.ok());
            eprintln!(
                "fsprof: what-if: interrupted after {} of {} runs",
                outcomes.len(),
                plan.len()
            );
            if !outcomes.iter().any(results::is_baseline) {
                bail!("interrupted before a baseline run: nothing to compare with");
            }
            break;
        }
        outcomes.push(outcome.with_context(|| {
            format!(
                "run {} ({what}); the program's output is in {}",
                done + 1,
                log_path.display()
            )
        })?);
    }
    Ok(outcomes)
}

/// A run's or stretch's turn in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Turn {
    /// An experiment (a candidate and speedup), or the baseline (`None`).
    Experiment((Option<usize>, u32)),
    /// A quiet baseline: nothing selected, the looks every [`QUIET_PERIOD_NS`]. Against it
    /// the baseline measures what the looks every millisecond cost the program, which the
    /// looks in the selected code credit (`results.rs`).
    Quiet,
}

impl Turn {
    /// The candidate and speedup it selects (a quiet baseline selects nothing).
    fn experiment(self) -> (Option<usize>, u32) {
        match self {
            Turn::Experiment(experiment) => experiment,
            Turn::Quiet => (None, 0),
        }
    }

    /// The control page's period of looks for it (`None`: what-if's own).
    fn looks_period_ns(self) -> Option<u64> {
        matches!(self, Turn::Quiet).then_some(QUIET_PERIOD_NS)
    }
}

/// The looks' period in a quiet baseline: ten times what-if's. The server of the ground truths
/// took 1.057 times its time alone with looks every millisecond, 1.013 every 10 ms and 1.015
/// every second (`tests/benches/what-if-period.py`, 2026-12-03).
const QUIET_PERIOD_NS: u64 = 10_000_000;

/// How the progress lines name an experiment.
fn describe(candidates: &[Candidate], turn: Turn) -> String {
    match turn.experiment() {
        (None, _) if turn == Turn::Quiet => "quiet baseline (looks every 10 ms)".to_owned(),
        (None, _) => "baseline".to_owned(),
        (Some(index), speedup) => format!("{} {speedup}% faster", candidates[index].label()),
    }
}

/// `runs` rounds of the baseline, a quiet baseline and each candidate at each speedup, each
/// round shuffled (drift of the machine spreads over all of them rather than biasing one) and
/// seconds long, so that a run is compared with its own round's baseline (a machine slowed for
/// a while slows both).
fn plan(candidates: usize, speedups: &[u32], runs: usize) -> Vec<Vec<Turn>> {
    let mut round = vec![Turn::Experiment((None, 0)), Turn::Quiet];
    for candidate in 0..candidates {
        round.extend((speedups.iter()).map(|&s| Turn::Experiment((Some(candidate), s))));
    }
    (0..runs)
        .map(|index| {
            shuffle(&mut round);
            if index == 0 {
                baselines_first(&mut round);
            }
            round.clone()
        })
        .collect()
}

/// Moves the baseline and the quiet baseline to the front (the looks' cost is measured by
/// them: the experiments after them credit it).
fn baselines_first(turns: &mut [Turn]) {
    turns.sort_by_key(|turn| !matches!(turn, Turn::Quiet | Turn::Experiment((None, _))));
}

/// Shuffles `items` (xorshift, seeded by the clock).
fn shuffle<T>(items: &mut [T]) {
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

/// What every experiment of one `what-if` shares: the program, the agent, the options, the
/// candidates, and where the results and the program's output go.
struct Setup<'a> {
    program: &'a [OsString],
    library: &'a Path,
    options: &'a WhatIfOptions,
    /// Empty with `--progress`: the run's survey finds them (`rotation.rs`).
    candidates: &'a [Candidate],
    /// The output directory.
    dir: &'a Path,
    log: &'a File,
    log_path: &'a Path,
}

impl Setup<'_> {
    /// The program under the agent with the control page `page` (not started).
    fn command(&self, page: &ControlPage) -> Result<std::process::Command> {
        let (program, options) = (self.program, self.options);
        let mut command = std::process::Command::new(&program[0]);
        command
            .args(&program[1..])
            .env(
                "LD_PRELOAD",
                agent::ld_preload(std::env::var_os("LD_PRELOAD"), self.library),
            )
            .env(CONTROL_VARIABLE, page.fd().to_string())
            .stdin(std::process::Stdio::null())
            .stdout(self.log.try_clone()?)
            .stderr(self.log.try_clone()?);
        if !options.agent {
            command.env("FSPROF_BUILTINS", "0");
        }
        match &options.progress {
            Some(feature) => command.env(PROGRESS_VARIABLE, feature),
            None => command.env_remove(PROGRESS_VARIABLE),
        };
        Ok(command)
    }
}

/// The agent did not start: why that may be.
const NOT_STARTED: &str = "the agent did not start the experiments in the program (a statically linked program, one that resets LD_PRELOAD, or an agent older than this fsprof)";

/// One run of the program under the agent for `turn`: an experiment (a candidate index and
/// speedup), or a baseline, timed and looked at the same way with nothing selected.
/// A look in the selected code credits `looks_cost` more than its period (the looks' cost
/// measured so far).
fn whole_run(setup: &Setup, turn: Turn, looks_cost: Option<f64>) -> Result<Outcome> {
    let program = setup.program;
    let mut page = ControlPage::new(setup.candidates)?;
    let experiment = turn.experiment();
    page.set(experiment.0, experiment.1);
    page.slow_looks(turn.looks_period_ns());
    let credit_ppm = page.credit_looks(looks_cost.unwrap_or(0.0));
    let mut command = setup.command(&page)?;
    let start = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("starting {}", program[0].to_string_lossy()))?;
    let wall_ns = start.elapsed().as_nanos() as u64;
    if !status.success() {
        bail!("the program ended with {status}");
    }
    if !page.started() {
        bail!(NOT_STARTED);
    }
    let counts = page.counters(None).unwrap_or_default();
    Ok(Outcome {
        quiet: turn == Turn::Quiet,
        credit_ppm,
        ..Outcome::new(experiment, wall_ns, counts, page.threads())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_has_every_run_once() {
        let rounds = plan(2, &[25, 50], 3);
        assert_eq!(rounds.len(), 3);
        assert!(rounds.iter().all(|round| round.len() == 2 + 2 * 2));
        let first: Vec<bool> = rounds[0][..2]
            .iter()
            .map(|&turn| turn == Turn::Quiet || turn.experiment() == (None, 0))
            .collect();
        assert_eq!(first, [true, true], "{:?}", rounds[0]);
        let mut plan: Vec<Turn> = rounds.concat();
        plan.sort();
        let count = |turn: Turn| plan.iter().filter(|&&t| t == turn).count();
        assert_eq!(count(Turn::Experiment((None, 0))), 3);
        assert_eq!(count(Turn::Quiet), 3);
        assert_eq!(count(Turn::Experiment((Some(1), 50))), 3);
    }

    #[test]
    fn options_say_what_is_wrong() {
        let options = |instances: Vec<&str>, speedups: Vec<u32>| {
            WhatIfOptions::new(
                vec![],
                instances.into_iter().map(str::to_owned).collect(),
                3,
                speedups,
                Some(3),
                false,
                None,
            )
        };
        assert!(options(vec!["parsing"], vec![50])
            .unwrap_err()
            .contains("FEATURE=INSTANCE"));
        assert!(options(vec![], vec![0]).unwrap_err().contains("--speedups"));
        assert!(options(vec![], vec![101])
            .unwrap_err()
            .contains("--speedups"));
        let fine = options(vec!["parsing=a.rs:1:2"], vec![50, 20, 50]).unwrap();
        assert_eq!(fine.speedups, vec![20, 50]);
        assert_eq!(fine.named[0].instance.as_deref(), Some("a.rs:1:2"));
    }
}
