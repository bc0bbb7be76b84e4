//! The commands that record: `fsprof run` and `fsprof attach`, and the output directory they write.
//!
//! A session checks what can be checked before the target is touched (the output directory, the
//! permission to read the target), records with the sampler until the target exits, the user
//! interrupts or the duration elapses, and then always writes what it collected: the saved profile
//! and `report.txt`, the flamegraphs `flamegraph.svg` (native stacks with marks) and
//! `features.svg` (marks only), and the report on stderr. The target is never stopped, signalled
//! or killed.

use crate::analysis::TimeView;
use crate::commands::live::LiveView;
use crate::profile::{Meta, Profile};
use crate::program::process;
use crate::program::remote::Remote;
use crate::record::agent;
use crate::record::announce::Registry;
use crate::record::children::{self, Tree};
use crate::record::sampler::{Sampler, SamplerOptions};
use crate::record::schedule::{self, End, Schedule};
use crate::render;
use crate::symbolize::debuginfod::Debuginfod;
use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the text report inside an output directory.
pub const REPORT_FILE: &str = "report.txt";
/// Name of the flamegraph of native stacks with marks inside an output directory.
pub const FLAMEGRAPH_FILE: &str = "flamegraph.svg";
/// Name of the features-only flamegraph inside an output directory.
pub const FEATURES_FILE: &str = "features.svg";
/// Name of the boundary graph inside an output directory (when a feature marks boundaries).
pub const BOUNDARIES_FILE: &str = "boundaries.svg";

/// How native stacks of running threads are taken (see `--backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// perf where allowed, else ptrace.
    Auto,
    /// perf events (and BPF); an error where the kernel refuses.
    Perf,
    /// ptrace stops.
    Ptrace,
}

/// Options common to `run` and `attach`.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Output directory; `None` picks `./fsprof-<program>-<n>`.
    pub output: Option<PathBuf>,
    /// Mean samples per second.
    pub rate_hz: f64,
    /// Stop recording after this long.
    pub duration: Option<Duration>,
    /// Count all thread time, idle included.
    pub count_idle: bool,
    /// Record native stacks.
    pub native: bool,
    /// How running threads' native stacks are taken.
    pub backend: Backend,
    /// `run` only: preload the agent (`libfsprof_agent.so`) for the built-in features.
    pub agent: bool,
    /// Where to look for separate debug files first (then `/usr/lib/debug`).
    pub debug_dirs: Vec<PathBuf>,
    /// The debuginfod servers to fetch the debug files found nowhere else from, after
    /// recording (`DEBUGINFOD_URLS`, unless `--offline`).
    pub debuginfod: Option<Arc<Debuginfod>>,
    /// `fsprof top`: show the live view (this title) and write no output.
    pub top: Option<String>,
    /// Record the program's child processes too (`run` unless `--no-follow`; `attach
    /// --children`).
    pub follow: bool,
    /// Span ids as instances of the feature `span_id` (OpenTelemetry thread contexts).
    pub span_ids: bool,
    /// The feature rules the report applies to the native stacks (the catalog and the user's).
    pub rules: crate::rules::RuleSet,
}

impl RecordOptions {
    /// Whether the perf backend may be used (native stacks, and not `--backend ptrace`).
    pub fn may_use_perf(&self) -> bool {
        self.native && self.backend != Backend::Ptrace
    }
}

/// `fsprof run`: launches `program` with its stdio untouched, records until it exits, writes the
/// profile, and returns the program's exit code (128 + signal if a signal killed it).
pub fn run(program: &[OsString], options: &RecordOptions) -> Result<i32> {
    let Some((name, args)) = program.split_first() else {
        bail!("no program given: fsprof run -- PROGRAM [ARGS...]")
    };
    check_backend(options)?;
    check_top(options)?;
    let signals = Signals::install()?;
    let dir = match options.top {
        None => Some(prepare_output(
            options.output.as_deref(),
            &program_name(name),
        )?),
        Some(_) => None,
    };
    let preload = if options.agent {
        agent::preload(name)
    } else {
        agent::Preload::Off
    };
    if let Some(note) = preload.note() {
        say!("fsprof: {note}");
    }
    // The perf sampler before the program: the kernel verifies the stack walk's program (15 to
    // 20 ms of CPU, see `native/rules.rs`) while the program is not yet competing for the CPU,
    // and a deep program's first samples have it (rustc's first 40 to 90 ms stopped short when
    // it was verified beside the compiler).
    // Where the program and its children announce their regions: without it (a kernel without
    // abstract sockets, say) their maps are looked at every few milliseconds instead.
    let listener = crate::record::announce::Listener::start().ok();
    let announcements = listener.as_ref().map(|listener| listener.registry());
    let sampling = SamplerOptions {
        announcements: announcements.clone(),
        ..sampler_options(options)
    };
    let mut perf = sampling.perf_sampler();
    if let Some(Ok(perf)) = &mut perf {
        perf.lock().rules().walk_ready(WALK_WAIT);
    }
    let announce = announcements.as_deref().map(|registry| registry.variable());
    let mut child = match spawn(name, args, preload.library(), announce) {
        Ok(child) => child,
        Err(error) => {
            if let (None, Some(dir)) = (&options.output, &dir) {
                let _ = std::fs::remove_dir(dir); // ours, and still empty
            }
            return Err(error);
        }
    };
    let pid = child.id();
    let cpu_at_start = crate::os::time::own_cpu_ns();
    // Raised only now, so that the program does not inherit fsprof's higher limit.
    let descriptors = crate::os::descriptors::raise_limit();

    let mut sampler = Sampler::new(pid, descriptors, sampling, perf);
    let shared_perf = sampler.share_perf();
    let mut tree = follow(pid, descriptors, options, "run", shared_perf, announcements);
    let mut status: Option<ExitStatus> = None;
    let schedule = schedule(options, &signals, tree.as_ref());
    let mut live = live(options, (&program_name(name), pid), true);
    let mut end = schedule::record(&mut sampler, schedule, &mut live, |sampler| {
        if signals.any() {
            return Some(End::Interrupted);
        }
        if let Some(tree) = &mut tree {
            tree.poll();
        }
        if options.native {
            // The program is traced: only the tracer may wait for it (a wait here could take a
            // stop for an exit, and leave the program stopped).
            let exit = sampler.exit_status()?;
            status = Some(exit);
            return Some(End::TargetExited(describe_exit(exit)));
        }
        // Reaped normally scheduled (see `priority::normally`).
        match crate::os::priority::normally(|| child.try_wait()) {
            Ok(Some(exit)) => {
                status = Some(exit);
                Some(End::TargetExited(describe_exit(exit)))
            }
            _ => None,
        }
    });
    if let Some(tree) = &tree {
        tree.stop();
    }
    let cpu_us = (crate::os::time::own_cpu_ns().saturating_sub(cpu_at_start)) / 1000;
    if status.is_none() {
        status = sampler.exit_status(); // collected while detaching
    }
    crate::os::privilege::drop_all(); // no kernel object is made after recording
    if matches!(end, End::TargetExited(_)) {
        // The sampler saw it go; collect its status unless detaching did (if our parent ignores
        // SIGCHLD there is none), and say how it ended either way (once, with the status
        // collected while detaching, the report said only "the program exited").
        if status.is_none() {
            status = child.wait().ok();
        }
        end = End::TargetExited(
            status.map_or_else(|| "the program exited".to_owned(), describe_exit),
        );
    }

    let command: Vec<String> = program
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut profile = sampler.finish(meta("run", command.clone(), pid, options, &end));
    if let Some(tree) = tree {
        profile = tree.finish(profile, command);
    }
    profile.meta.sampling.fsprof_cpu_us = cpu_us;
    if let Some(note) = preload.note() {
        profile.meta.notes.push(note);
    }
    if let Some(dir) = &dir {
        // The program's exit code is returned whatever happened to the files (said above).
        if let Err(error) = write_outputs(dir, profile, &options.rules) {
            say!("fsprof: {}", crate::profile::clean(&format!("{error:#}")));
        }
    }

    if let Some(status) = status {
        return Ok(exit_code(status));
    }
    if matches!(end, End::TargetExited(_)) {
        return Ok(1); // exited, status unknown
    }
    if signals.terminated.load(Ordering::Relaxed) {
        // SIGTERM or SIGHUP came to fsprof alone (from `timeout`, say): the program was not
        // asked to stop.
        say!("fsprof: stopped by SIGTERM or SIGHUP; the program (pid {pid}) keeps running");
        return Ok(128 + 15);
    }
    wait_for_program(&mut child, pid, &signals, &end)
}

/// `fsprof attach`: records process `pid` until Ctrl-C, the duration or its exit; it keeps running.
pub fn attach(pid: u32, options: &RecordOptions) -> Result<()> {
    // Raised from the start to fsprof's exit, the profile's finish, its files and the
    // process's teardown included (see `priority::raise`): beside 1000 busy threads a normally
    // scheduled fsprof took about 10 s to begin recording, by which time the program had nearly
    // ended, and once it was raised for the recording alone, up to 25 s more to finish and exit
    // (each of its steps waited its turn among the 1000). The finish takes the CPU it takes
    // either way; raised, it takes it at once.
    let _ = crate::os::priority::raise();
    check_attachable(pid)?;
    check_backend(options)?;
    check_top(options)?;
    let signals = Signals::install()?;
    let descriptors = crate::os::descriptors::raise_limit();
    let command = process::command_line(pid);
    let name = command
        .first()
        .map(|c| program_name(c.as_ref()))
        .unwrap_or_else(|| pid.to_string());
    let dir = match options.top {
        None => Some(prepare_output(options.output.as_deref(), &name)?),
        Some(_) => None,
    };
    if let Some(dir) = &dir {
        say!(
            "fsprof: recording process {pid} ({name}) at {} Hz into {}; Ctrl-C to stop",
            options.rate_hz,
            dir.display()
        );
    }
    let sampling = sampler_options(options);
    let perf = sampling.perf_sampler();
    let mut sampler = Sampler::new(pid, descriptors, sampling, perf);
    let mut tree = follow(
        pid,
        descriptors,
        options,
        "attach",
        sampler.share_perf(),
        None,
    );
    let mut next_check = Instant::now();
    let liveness = process::Liveness::new(pid);
    let schedule = schedule(options, &signals, tree.as_ref());
    let mut live = live(options, (&name, pid), false);
    let cpu_at_start = crate::os::time::own_cpu_ns();
    let end = schedule::record(&mut sampler, schedule, &mut live, |_| {
        if signals.any() {
            return Some(End::Interrupted);
        }
        if let Some(tree) = &mut tree {
            tree.poll();
        }
        // A zombie still lists its threads; look at its state now and then.
        if Instant::now() >= next_check {
            next_check = Instant::now() + Duration::from_millis(100);
            if !liveness.alive() {
                return Some(End::TargetExited("the program exited".to_owned()));
            }
        }
        None
    });
    if let Some(tree) = &tree {
        tree.stop();
    }
    let cpu_us = (crate::os::time::own_cpu_ns().saturating_sub(cpu_at_start)) / 1000;
    crate::os::privilege::drop_all(); // no kernel object is made after recording
    let meta = meta("attach", command.clone(), pid, options, &end);
    let mut profile = sampler.finish(meta);
    if let Some(tree) = tree {
        profile = tree.finish(profile, command);
    }
    profile.meta.sampling.fsprof_cpu_us = cpu_us;
    match &dir {
        Some(dir) => write_outputs(dir, profile, &options.rules),
        None => Ok(()),
    }
}

/// A marks-only look at `pid`, fsprof's own child that runs already (`command`), for
/// `options.duration`: `what-if --progress`'s survey of the program's features, written to
/// `options.output` as `run` writes a profile (the report on stderr too). Unlike `attach`, it
/// installs no signal handlers of its own (`ended` says when to stop: the program's exit,
/// fsprof's signals) and keeps fsprof's capabilities; the recording raises fsprof's priority
/// while it lasts, as every recording does. An error, before anything is recorded, if the
/// program's memory cannot be read. Returns how the recording ended.
pub(crate) fn survey(
    pid: u32,
    command: Vec<String>,
    options: &RecordOptions,
    mut ended: impl FnMut() -> Option<End>,
) -> Result<End> {
    let readable = process::some_readable_address(pid)
        .ok()
        .flatten()
        .is_some_and(|address| Remote::new(pid).read(address, &mut [0u8; 8]).is_ok());
    if !readable {
        bail!(
            "cannot read the program's memory (pid {pid}) to look at its marks: fsprof reads it with process_vm_readv, which kernel.yama.ptrace_scope 2 or 3 refuses even for fsprof's own child (sysctl kernel.yama.ptrace_scope=1, or run as root)"
        );
    }
    let dir = prepare_output(options.output.as_deref(), "survey")?;
    // Raised now, after the program started (it does not inherit the higher limit).
    let descriptors = crate::os::descriptors::raise_limit();
    let sampling = sampler_options(options);
    let perf = sampling.perf_sampler();
    let mut sampler = Sampler::new(pid, descriptors, sampling, perf);
    let schedule = Schedule {
        rate_hz: options.rate_hz,
        duration: options.duration,
        suspend: Arc::default(),
        asks_between_ticks: false,
    };
    let mut live = LiveView::new(None, pid, (&options.rules, options.count_idle), false);
    let end = schedule::record(&mut sampler, schedule, &mut live, |_| ended());
    let profile = sampler.finish(meta("survey", command, pid, options, &end));
    write_outputs(&dir, profile, &options.rules)?;
    Ok(end)
}

/// For `fsprof top`, fails unless stdout is a terminal, before anything is started.
fn check_top(options: &RecordOptions) -> Result<()> {
    use std::io::IsTerminal;
    if options.top.is_some() && !std::io::stdout().is_terminal() {
        bail!("fsprof top needs a terminal on stdout; to record without one, use fsprof run or fsprof attach");
    }
    Ok(())
}

/// Fails with a clear message unless `pid` is a live process whose memory we may read.
fn check_attachable(pid: u32) -> Result<()> {
    if pid == 0 || !process::proc_dir(pid).exists() {
        bail!("no process with pid {pid}");
    }
    if !process::is_alive(pid) {
        bail!("process {pid} has already exited (it is a zombie waiting for its parent)");
    }
    if pid == std::process::id() {
        bail!("fsprof cannot profile itself");
    }
    if let Err(why) = crate::os::privilege::may_trace(pid) {
        bail!("{}", crate::os::privilege::refusal(pid, &why));
    }
    let address = match process::some_readable_address(pid) {
        Ok(Some(address)) => address,
        Ok(None) => bail!("process {pid} has no readable memory (a kernel thread?)"),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            bail!(
                "no permission to read process {pid}: {}",
                process::permission_advice(pid)
            )
        }
        Err(_) => bail!("no process with pid {pid}"),
    };
    match Remote::new(pid).read(address, &mut [0u8; 1]) {
        Ok(()) => Ok(()),
        Err(Errno::EPERM | Errno::EACCES) => {
            bail!(
                "no permission to read the memory of process {pid}: {}",
                process::permission_advice(pid)
            )
        }
        Err(Errno::ESRCH) => bail!("no process with pid {pid}"),
        Err(errno) => bail!("cannot read the memory of process {pid}: {}", errno.desc()),
    }
}

/// Starts the program with `preload` (the agent), its environment telling where to `announce`
/// its regions (the variable and its value).
fn spawn(
    name: &OsString,
    args: &[OsString],
    preload: Option<&Path>,
    announce: Option<(&str, &str)>,
) -> Result<Child> {
    let mut command = Command::new(name);
    command.args(args);
    // A capable fsprof runs in the C library's secure mode, which removed variables such as
    // LD_LIBRARY_PATH and TMPDIR from its environment; the program runs as the user, without
    // privilege, and gets the user's environment back.
    let user_environment = crate::os::privilege::user_environment();
    let user_preload = match &user_environment {
        Some(environment) => {
            command.env_clear().envs(environment.iter().cloned());
            environment
                .iter()
                .find(|(key, _)| key == "LD_PRELOAD")
                .map(|(_, value)| value.clone())
        }
        None => std::env::var_os("LD_PRELOAD"),
    };
    match preload {
        Some(library) => {
            command.env("LD_PRELOAD", agent::ld_preload(user_preload, library));
        }
        // A program that links the agent (for its C ABI) must not mark built-in features either.
        None => {
            command.env("FSPROF_BUILTINS", "0");
        }
    }
    if let Some((variable, value)) = announce {
        command.env(variable, value);
    }
    crate::native::tracer::with_starting_mask(&mut command);
    command.spawn().map_err(|e| {
        let shown = name.to_string_lossy();
        match e.kind() {
            ErrorKind::NotFound => anyhow::anyhow!(
                "program not found: {shown} (check the name, or give a path such as ./{shown})"
            ),
            ErrorKind::PermissionDenied => anyhow::anyhow!(
                "cannot execute {shown}: permission denied (is it executable? chmod +x)"
            ),
            _ => anyhow::anyhow!("cannot start {shown}: {e}"),
        }
    })
}

/// After recording stopped but the program did not, waits for it and returns its exit code.
/// The program is never signalled: after Ctrl-C it got the terminal's Ctrl-C too and is
/// presumably ending; after `--duration` it simply goes on. Another Ctrl-C, SIGTERM or SIGHUP stops the
/// wait and leaves it running.
fn wait_for_program(child: &mut Child, pid: u32, signals: &Signals, end: &End) -> Result<i32> {
    signals.interrupted.store(false, Ordering::Relaxed);
    match end {
        End::Duration => say!(
            "fsprof: recording stopped after --duration; the program (pid {pid}) goes on, and fsprof will exit with its exit code"
        ),
        End::Refused(why) => say!(
            "fsprof: recording stopped: this fsprof's user can no longer trace the program (pid {pid}): {why}; waiting for it to exit, Ctrl-C to stop waiting"
        ),
        _ => say!("fsprof: waiting for the program (pid {pid}) to exit; Ctrl-C again to stop waiting"),
    }
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(exit_code(status)),
            Ok(None) => {}
            Err(_) => return Ok(1),
        }
        if signals.suspend.swap(false, Ordering::Relaxed)
            && !crate::program::process::own_group_is_orphaned()
        {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
        if signals.any() {
            say!("fsprof: leaving the program (pid {pid}) running");
            return Ok(if signals.terminated.load(Ordering::Relaxed) {
                128 + 15
            } else {
                128 + 2
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ctrl-C (SIGINT), and SIGTERM or SIGHUP (the terminal went away), recorded as flags the loops
/// poll: either way the recording ends, is written, and the target is released.
struct Signals {
    interrupted: Arc<AtomicBool>,
    terminated: Arc<AtomicBool>,
    /// SIGTSTP (Ctrl-Z): suspend, once the program's own stop went through (see
    /// [`schedule::suspend`]).
    suspend: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Signals> {
        let signals = Signals {
            interrupted: Arc::default(),
            terminated: Arc::default(),
            suspend: Arc::default(),
        };
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGTSTP};
        let handlers = [
            (SIGTSTP, &signals.suspend, "the Ctrl-Z handler"),
            (SIGINT, &signals.interrupted, "the Ctrl-C handler"),
            (SIGTERM, &signals.terminated, "the SIGTERM handler"),
            (SIGHUP, &signals.terminated, "the SIGHUP handler"),
        ];
        for (signal, flag, what) in handlers {
            // A signal ignored when fsprof started (`nohup`, a shell's background job) stays
            // ignored, for fsprof and for the program it starts, which inherits the
            // disposition through `exec` as it would without fsprof.
            if !ignored(signal) {
                signal_hook::flag::register(signal, Arc::clone(flag))
                    .with_context(|| format!("installing {what}"))?;
            }
        }
        Ok(signals)
    }

    fn any(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed) || self.terminated.load(Ordering::Relaxed)
    }
}

/// Whether `signal`'s disposition is to be ignored (left so by whoever started fsprof).
pub(crate) fn ignored(signal: i32) -> bool {
    // SAFETY: a query of the current action (no new one), into a zeroed struct of our own.
    unsafe {
        let mut action: nix::libc::sigaction = std::mem::zeroed();
        nix::libc::sigaction(signal, std::ptr::null(), &mut action) == 0
            && action.sa_sigaction == nix::libc::SIG_IGN
    }
}

/// The follower of `pid`'s children when the options ask for one (not in `fsprof top`).
/// Its followers join `shared_perf`, the program's per-CPU perf sampler, where there is one:
/// their processes then cost no events of their own (`native/perf/shared.rs`).
fn follow(
    pid: u32,
    descriptors: usize,
    options: &RecordOptions,
    mode: &str,
    shared_perf: Option<crate::native::perf::SharedPerf>,
    announcements: Option<Arc<Registry>>,
) -> Option<Tree> {
    if !options.follow || options.top.is_some() {
        return None;
    }
    let sampling = children::Sampling {
        options: SamplerOptions {
            perf_threads: crate::native::perf::CHILD_THREADS,
            shared_perf,
            announcements,
            ..sampler_options(options)
        },
        rate_hz: options.rate_hz,
        // The program's sampler keeps most: a child seldom has as many threads.
        descriptors: descriptors / 8,
        meta: meta(mode, Vec::new(), 0, options, &End::Interrupted),
    };
    Some(Tree::new(pid, sampling))
}

fn sampler_options(options: &RecordOptions) -> SamplerOptions {
    SamplerOptions {
        native: options.native,
        // Each running thread sampled about once per sampling period of its CPU time, on
        // average about once per tick of a busy thread.
        perf: (options.backend != Backend::Ptrace)
            .then(|| crate::native::perf::sampling_period(options.rate_hz)),
        count_idle: options.count_idle,
        debug_dirs: options.debug_dirs.clone(),
        debuginfod: options.debuginfod.clone(),
        perf_threads: 0,
        shared_perf: None,
        announcements: None,
        span_ids: options.span_ids,
    }
}

/// Longest wait for the stack walk's program before `run` starts the program (it takes 15 ms
/// on an idle machine).
const WALK_WAIT: Duration = Duration::from_millis(100);

/// Fails, before anything is started, when perf was asked for explicitly and is refused.
fn check_backend(options: &RecordOptions) -> Result<()> {
    if options.native && options.backend == Backend::Perf {
        if let Err(why) = crate::native::perf::PerfSampler::new(
            1_000_000,
            1,
            crate::native::perf::Following::WhileCheap,
        ) {
            bail!("--backend perf: {why} (or use --backend ptrace)");
        }
    }
    Ok(())
}

/// The loop's schedule for recording program `name`, process `pid`; `launched`: `run`'s
/// program, which writes to fsprof's terminal unless its stdout is redirected.
fn schedule(options: &RecordOptions, signals: &Signals, tree: Option<&Tree>) -> Schedule {
    Schedule {
        rate_hz: options.rate_hz,
        duration: options.duration,
        suspend: Arc::clone(&signals.suspend),
        asks_between_ticks: tree.is_some(),
    }
}

/// What shows progress while recording program `name`, process `pid`: `fsprof top`'s view if
/// asked for and stdout is a terminal, else the status line, drawn unless `launched` (`run`'s
/// program) writes to fsprof's terminal (its stdout not redirected).
fn live(options: &RecordOptions, (name, pid): (&str, u32), launched: bool) -> LiveView {
    use std::io::IsTerminal;
    let title =
        (options.top.as_ref()).map(|_| format!("{} (pid {pid})", crate::profile::clean(name)));
    let report = (&options.rules, options.count_idle);
    LiveView::new(
        title,
        pid,
        report,
        !launched || !std::io::stdout().is_terminal(),
    )
}

fn meta(mode: &str, command: Vec<String>, pid: u32, options: &RecordOptions, end: &End) -> Meta {
    Meta {
        fsprof_version: env!("CARGO_PKG_VERSION").to_owned(),
        mode: mode.to_owned(),
        command,
        pid,
        rate_hz: options.rate_hz,
        count_idle: options.count_idle,
        end: end.describe(),
        ..Meta::default()
    }
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("the program exited with code {code}"),
        (None, Some(signal)) => format!("the program was killed by signal {signal}"),
        _ => "the program exited".to_owned(),
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        _ => 1,
    }
}

fn program_name(path: &std::ffi::OsStr) -> String {
    let name = Path::new(path)
        .file_name()
        .unwrap_or(path)
        .to_string_lossy();
    name.chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Creates the output directory and checks that it is writable, before anything is recorded.
/// Without `-o`, picks `./fsprof-<program>-<n>` with the first `n` not yet taken, so no earlier
/// profile is ever overwritten.
pub fn prepare_output(explicit: Option<&Path>, program: &str) -> Result<PathBuf> {
    let dir = match explicit {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| {
                format!(
                    "cannot create output directory {} (choose another with -o DIR)",
                    dir.display()
                )
            })?;
            dir.to_owned()
        }
        None => {
            let mut n = 1;
            loop {
                let dir = PathBuf::from(format!("fsprof-{program}-{n}"));
                match std::fs::create_dir(&dir) {
                    Ok(()) => break dir,
                    Err(e) if e.kind() == ErrorKind::AlreadyExists && n < 100_000 => n += 1,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!(
                                "cannot create output directory {} (choose one with -o DIR)",
                                dir.display()
                            )
                        })
                    }
                }
            }
        }
    };
    crate::os::output::probe(&dir).with_context(|| {
        format!(
            "output directory {} is not writable (choose another with -o DIR)",
            dir.display()
        )
    })?;
    Ok(dir)
}

/// Prints the report to stderr, then saves the profile (as recorded, with the rules the user
/// gave, for later reports: `fsprof report` applies rules itself), the text report, the two
/// flamegraphs and the boundary graph (if any, these with `rules` applied), each whole or not at
/// all (`os/output.rs`). A file that cannot be written (a full disk) is said and skipped; the error,
/// after every other file was tried, names those not written.
fn write_outputs(dir: &Path, mut profile: Profile, rules: &crate::rules::RuleSet) -> Result<()> {
    let view = if profile.meta.count_idle {
        TimeView::All
    } else {
        TimeView::Active
    };
    profile.meta.rules = crate::rules::saved(rules);
    let recorded = profile.to_json();
    crate::rules::apply(&mut profile, rules);
    let text = crate::commands::report::text_report(&profile, view);
    {
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), "\n{text}");
    }
    let mut files: Vec<(PathBuf, Result<Vec<u8>>)> = vec![
        (dir.join(crate::profile::FILE_NAME), recorded),
        (dir.join(REPORT_FILE), Ok(text.into_bytes())),
    ];
    for (file, marks_only) in [(FLAMEGRAPH_FILE, false), (FEATURES_FILE, true)] {
        let folded = render::folded::fold(&profile, view, marks_only);
        files.push((dir.join(file), render::flamegraph::svg(&folded)));
    }
    // Only when a feature marks boundary checks.
    if let Some(svg) = render::boundary_graph::svg(&crate::analysis::analyse(&profile, view)) {
        files.push((dir.join(BOUNDARIES_FILE), Ok(svg.into_bytes())));
    }
    let (mut written, mut failed) = (Vec::new(), Vec::new());
    for (path, bytes) in files {
        let result = bytes.and_then(|bytes| {
            crate::os::output::write(&path, &bytes)
                .with_context(|| format!("cannot write {}", path.display()))
        });
        match result {
            Ok(()) => written.push(path.display().to_string()),
            Err(error) => {
                say!("fsprof: {}", crate::profile::clean(&format!("{error:#}")));
                failed.push(path.display().to_string());
            }
        }
    }
    if let Some(last) = written.pop() {
        let all = match written.is_empty() {
            true => last,
            false => format!("{} and {last}", written.join(", ")),
        };
        say!(
            "fsprof: wrote {all} (re-render with: fsprof report {})",
            dir.display()
        );
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "not written: {} (the report above is whole; free some space, or choose another directory with -o DIR)",
            failed.join(", ")
        );
    }
    Ok(())
}
