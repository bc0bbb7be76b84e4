//! `fsprof what-if --progress FEATURE`: the experiments take turns within one run of the
//! program, as Coz's do. Each holds for a stretch: [`SETTLE`] for the requests begun in the one
//! before to end, then at least [`SHORTEST`], longer until [`MIN_ENDS`] progress marks ended (at
//! most [`LONGEST`]); its counts are what the agent and the shim counted between the stretch's
//! two reads (`control.rs`). Rounds of every experiment once, each round in a new order, go on
//! until each has `--runs` stretches, the program ends, or fsprof is interrupted; the program
//! then runs on without experiments. Baselines and experiments alternate within seconds of each
//! other, so a machine that slows down for a while slows both.
//!
//! Not here: what the stretches predict (`results.rs`), and whole runs (`what_if.rs`).

use super::control::{ControlPage, Counters};
use super::{
    baselines_first, first_profile, heaviest, plan, results, shuffle, Candidate, Outcome, Setup,
    Turn, NOT_STARTED,
};
use crate::commands::session;
use crate::program::scanned::ScannedFiles;
use crate::record::schedule::End;
use anyhow::{bail, Context, Result};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// After an experiment is set, the time left for requests begun under the one before to end
/// before its stretch is counted.
const SETTLE: Duration = Duration::from_millis(30);
/// The shortest stretch counted.
const SHORTEST: Duration = Duration::from_millis(250);
/// Progress marks a stretch waits for, past [`SHORTEST`] (a mean latency of fewer is noise).
const MIN_ENDS: u64 = 20;
/// The longest stretch, whatever its count.
const LONGEST: Duration = Duration::from_millis(2500);
/// How often the program's end and fsprof's signals are looked at.
const POLL: Duration = Duration::from_millis(10);

/// How long the program's features are looked at, when no candidate is named, before the
/// experiments begin (a thousand looks a second at its marks).
const SURVEY: Duration = Duration::from_secs(3);

/// Stretches of each experiment when `--runs` is not given.
const DEFAULT_STRETCHES: usize = 10;

/// The program, still running once the experiments are done.
pub struct RunningOn {
    child: Child,
    stop: Stop,
    log: std::path::PathBuf,
}

impl RunningOn {
    /// Waits until the program exits, or fsprof is interrupted (Ctrl-C reaches the program
    /// too, from the terminal).
    pub fn wait(mut self) {
        eprintln!(
            "fsprof: what-if: the experiments are done; the program (pid {}) runs on without them until it exits (its output goes to {}; Ctrl-C ends both)",
            self.child.id(),
            self.log.display()
        );
        while !self.stop.any() {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(POLL * 5);
        }
    }
}

/// Ctrl-C, SIGTERM and SIGHUP, as flags: the experiments end and what they measured is written.
pub(super) struct Stop(Arc<AtomicBool>);

impl Stop {
    pub(super) fn install() -> Result<Stop> {
        let flag = Arc::new(AtomicBool::new(false));
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            // One ignored when fsprof started (`nohup`, a background job) stays ignored, for
            // fsprof and the program, as `run` leaves it.
            if !crate::commands::session::ignored(signal) {
                signal_hook::flag::register(signal, Arc::clone(&flag))
                    .context("installing fsprof's signal handlers")?;
            }
        }
        Ok(Stop(flag))
    }

    pub(super) fn any(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// How a stretch ended.
enum Stretch {
    /// Counted: its wall time and counts.
    Done(u64, Counters),
    /// The program ended during it (its counts are left out).
    Ended(ExitStatus),
    /// fsprof was interrupted.
    Stopped,
}

/// Runs the program once, the experiments in turn (see the module's documentation): the
/// candidates (those named, or the survey's), the stretches' outcomes, and the program if it
/// runs on.
pub(super) fn rotate(setup: &Setup) -> Result<(Vec<Candidate>, Vec<Outcome>, Option<RunningOn>)> {
    let Setup {
        program,
        options,
        log_path,
        ..
    } = *setup;
    let rounds = options.runs.unwrap_or(DEFAULT_STRETCHES);
    let page = ControlPage::new(setup.candidates)?;
    let stop = Stop::install()?;
    let mut child = setup
        .command(&page)?
        .spawn()
        .with_context(|| format!("starting {}", program[0].to_string_lossy()))?;
    let mut turns = Turns {
        page,
        pid: child.id(),
        files: ScannedFiles::new(child.id()),
    };
    let candidates = match setup.candidates.is_empty() {
        false => setup.candidates.to_vec(),
        true => {
            let found = survey(setup, &mut child, &stop).map_err(|error| {
                // The program runs on unless it ended (a Ctrl-C from the terminal reached it
                // too: a moment for it to end).
                match wait(&mut child, &Stop(Arc::default()), POLL * 10) {
                    None => anyhow::anyhow!(
                        "{error:#}; the program (pid {}) runs on without experiments, its output in {}",
                        turns.pid,
                        log_path.display()
                    ),
                    Some(_) => error,
                }
            })?;
            turns.page.set_candidates(&found);
            found
        }
    };
    // Each round: every experiment, the baseline, and a quiet baseline (the looks slowed).
    let mut experiments = plan(candidates.len(), &options.speedups, 1).concat();
    let mut outcomes = Vec::with_capacity(rounds * experiments.len());
    let mut ended = None;
    'rounds: for round in 0..rounds {
        shuffle(&mut experiments);
        if round == 0 {
            baselines_first(&mut experiments);
        }
        eprintln!(
            "fsprof: what-if: round {} of {rounds}: {} stretches (every experiment, the baseline, a quiet baseline) of at least {:.2} s each",
            round + 1,
            experiments.len(),
            (SETTLE + SHORTEST).as_secs_f64()
        );
        for &turn in &experiments {
            let experiment = turn.experiment();
            let quiet = turn == Turn::Quiet;
            turns.page.slow_looks(turn.looks_period_ns());
            let cost = results::looks_cost(options.progress.as_deref(), &outcomes);
            let credit_ppm = turns.page.credit_looks(cost.unwrap_or(0.0));
            turns.page.set(experiment.0, experiment.1);
            match turns.stretch(&mut child, &stop)? {
                Stretch::Done(wall_ns, counts) => outcomes.push(Outcome {
                    round: Some(round),
                    quiet,
                    credit_ppm,
                    ..Outcome::new(experiment, wall_ns, counts, turns.page.threads())
                }),
                Stretch::Ended(status) => {
                    ended = Some(status);
                    break 'rounds;
                }
                Stretch::Stopped => break 'rounds,
            }
            if !turns.page.started() {
                bail!(
                    "{NOT_STARTED}; the program (pid {}) runs on, its output in {}",
                    turns.pid,
                    log_path.display()
                );
            }
        }
    }
    turns.page.slow_looks(None);
    turns.page.set(None, 0);
    let wanted = rounds * experiments.len();
    if let Some(status) = ended {
        if !turns.page.started() {
            bail!(
                "{NOT_STARTED} (it ended with {status}; its output is in {})",
                log_path.display()
            );
        }
        eprintln!(
            "fsprof: what-if: the program ended ({status}) after {} of {wanted} stretches{}",
            outcomes.len(),
            match outcomes.len() < wanted {
                true => ": give it more to do, or ask fewer --runs",
                false => "",
            }
        );
    } else if stop.any() {
        // A Ctrl-C from the terminal reached the program too: a moment for it to end.
        let gone = wait(&mut child, &Stop(Arc::default()), POLL * 10).is_some();
        eprintln!(
            "fsprof: what-if: interrupted after {} of {wanted} stretches{}",
            outcomes.len(),
            match gone {
                true => String::new(),
                false => format!(
                    "; the program (pid {}) runs on without experiments",
                    turns.pid
                ),
            }
        );
    }
    let running = (ended.is_none() && !stop.any()).then(|| RunningOn {
        child,
        stop,
        log: log_path.to_owned(),
    });
    Ok((candidates, outcomes, running))
}

/// The candidates of a run that names none: the heaviest features of a marks-only look at the
/// running program for [`SURVEY`] (no experiment runs meanwhile), written to the output
/// directory's `profile/` as a first profile is. An error if the program ends or fsprof is
/// interrupted first, or if the survey shows no feature to try.
fn survey(setup: &Setup, child: &mut Child, stop: &Stop) -> Result<Vec<Candidate>> {
    let profile_dir = setup.dir.join("profile");
    eprintln!(
        "fsprof: what-if: a look at the program's features for {} s, for its heaviest ({})",
        SURVEY.as_secs(),
        profile_dir.display()
    );
    let options = first_profile(setup.options, &profile_dir, Some(SURVEY));
    let command = (setup.program.iter())
        .map(|argument| argument.to_string_lossy().into_owned())
        .collect();
    let end = session::survey(child.id(), command, &options, || {
        if stop.any() {
            return Some(End::Interrupted);
        }
        match child.try_wait() {
            Ok(Some(status)) => Some(End::TargetExited(format!("the program ended ({status})"))),
            _ => None,
        }
    })?;
    match end {
        End::Interrupted => bail!(
            "interrupted during the look at the program's features, before any experiment"
        ),
        End::TargetExited(how) => bail!(
            "{how} during the look at its features ({} s), before any experiment: name the candidates (--feature NAME), or give it more to do; its output is in {}",
            SURVEY.as_secs(),
            setup.log_path.display()
        ),
        End::Refused(why) => bail!(
            "the look at the program's features stopped: {why}; name the candidates (--feature NAME)"
        ),
        End::Duration => {}
    }
    let candidates = heaviest(setup.options, &profile_dir)?;
    eprintln!(
        "fsprof: what-if: the candidates: {}",
        candidates
            .iter()
            .map(|candidate| candidate.feature.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(candidates)
}

/// The control page and what reads the program's counts.
struct Turns {
    page: ControlPage,
    pid: u32,
    files: ScannedFiles,
}

impl Turns {
    /// One stretch of the experiment just set.
    fn stretch(&mut self, child: &mut Child, stop: &Stop) -> Result<Stretch> {
        if let Some(end) = wait(child, stop, SETTLE) {
            return Ok(end);
        }
        let start = Instant::now();
        let Some(before) = self.counters(child)? else {
            return Ok(ended(child, stop));
        };
        loop {
            if let Some(end) = wait(child, stop, POLL) {
                return Ok(end);
            }
            let elapsed = start.elapsed();
            if elapsed < SHORTEST {
                continue;
            }
            let Some(now) = self.counters(child)? else {
                return Ok(ended(child, stop));
            };
            let counts = now.since(&before);
            if counts.progress_ends >= MIN_ENDS || elapsed >= LONGEST {
                return Ok(Stretch::Done(elapsed.as_nanos() as u64, counts));
            }
        }
    }

    /// The counts now; `None` if the program has just ended; an error if its regions cannot
    /// be read while it runs.
    fn counters(&mut self, child: &mut Child) -> Result<Option<Counters>> {
        if let Some(counts) = self.page.counters(Some((self.pid, &mut self.files))) {
            return Ok(Some(counts));
        }
        if !matches!(child.try_wait(), Ok(None)) || self.page.exited() {
            return Ok(None);
        }
        bail!(
            "cannot read the progress point's counts in the program's memory (pid {}): fsprof reads them with process_vm_readv, which kernel.yama.ptrace_scope 2 or 3 refuses even for fsprof's own child (sysctl kernel.yama.ptrace_scope=1, or run as root); the program runs on",
            self.pid
        )
    }
}

/// Waits `time`, looking at the program and fsprof's signals: how the stretch ended, if it did.
fn wait(child: &mut Child, stop: &Stop, time: Duration) -> Option<Stretch> {
    let deadline = Instant::now() + time;
    loop {
        if stop.any() {
            return Some(Stretch::Stopped);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Some(Stretch::Ended(status));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::sleep(left.min(POLL));
    }
}

/// The stretch's end once its counts could not be read: the program's end (waited for), or
/// fsprof's signal.
fn ended(child: &mut Child, stop: &Stop) -> Stretch {
    loop {
        if let Some(end) = wait(child, stop, POLL) {
            return end;
        }
    }
}
