//! The command line (clap). Parsed arguments are turned into plain option structs here, so the
//! rest of the crate never sees clap types.

use crate::commands::report::{DiffFormat, DiffOptions, Format, ReportOptions};
use crate::commands::session::{Backend, RecordOptions};
use crate::rules::RuleSet;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The default sampling rate. At 250 Hz a CPU-bound program with every core busy ran 1 to 3%
/// slower in the latest measurements, and 1000 Hz costs it a few points more (BENCHMARKS.md);
/// a 10-second run of a busy thread gives about 2500 samples, a feature's share known to about
/// one percentage point. Short runs want `--rate 1000`.
pub const DEFAULT_RATE_HZ: f64 = 250.0;

/// fsprof: a feature-specific profiler. Reports how much time each feature marked in a program
/// (and each instance of it: a call site, a named rule, a task) costs.
#[derive(Debug, Parser)]
#[command(name = "fsprof", version, propagate_version = true, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

const EXAMPLES: &str = "Examples:
  fsprof run -- ./app --input data.txt     profile a program until it exits
  fsprof attach 4242 --duration 10         profile a running process for 10 s
  fsprof report fsprof-app-1 --format json re-render a saved profile
  fsprof report fsprof-app-1 --format folded > app.folded
                                           collapsed stacks for other flamegraph tools
  fsprof report fsprof-app-1 --features-only --flamegraph features.svg
                                           redraw the features-only flamegraph";

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Launch a program under the profiler; report when it exits (or on Ctrl-C).
    #[command(override_usage = "fsprof run [OPTIONS] -- PROGRAM [ARGS]...")]
    Run {
        #[command(flatten)]
        record: RecordArgs,
        /// Preload fsprof's agent into the program (libfsprof_agent.so, by LD_PRELOAD appended
        /// to any the environment sets), which marks the built-in features (output, input,
        /// allocation, locks, sleep, poll, process, files) at each libc call as the program makes
        /// it. Not needed where native stacks are taken (the default): the built-in rules find
        /// the same features in the stacks, and nothing is put into the program. With
        /// `--no-native` it is the only source of built-in features. The library FSPROF_AGENT
        /// names, else the one built into fsprof (written once to $XDG_CACHE_HOME/fsprof,
        /// ~/.cache/fsprof by default; `fsprof agent` prints its path).
        #[arg(long)]
        agent: bool,
        /// Record the program's process alone. By default `run` also records every process the
        /// program starts (fork, exec, posix_spawn: a shell script's commands, `make -j`'s
        /// compilers), each with its own sampler, and reports them per process and together.
        #[arg(long)]
        no_follow: bool,
        /// The program and its arguments (after `--`).
        #[arg(
            required = true,
            trailing_var_arg = true,
            value_name = "PROGRAM [ARGS]..."
        )]
        program: Vec<OsString>,
    },
    /// A live view of the features and their instances while a program runs, refreshed every
    /// second (like `py-spy top`): `fsprof top PID`, or `fsprof top -- PROGRAM [ARGS]`. `q` stops;
    /// no file is written.
    Top {
        #[command(flatten)]
        record: RecordArgs,
        /// With a program: preload fsprof's agent (see `run --agent`).
        #[arg(long)]
        agent: bool,
        /// Process id of a running target.
        pid: Option<u32>,
        /// Or the program to launch and its arguments (after `--`).
        #[arg(last = true, value_name = "PROGRAM [ARGS]...")]
        program: Vec<OsString>,
    },
    /// Profile a running process until Ctrl-C, --duration, or its exit; it keeps running.
    Attach {
        #[command(flatten)]
        record: RecordArgs,
        /// Process id of the target.
        pid: u32,
        /// Also record the process's children, those running now and those it starts, each
        /// with its own sampler (reported per process and together).
        #[arg(long)]
        children: bool,
    },
    /// Re-render a saved profile: the report, folded stacks, pprof, or a flamegraph.
    Report {
        /// An output directory, or the profile.json in it.
        path: PathBuf,
        /// Output format, printed to stdout (or written to --output).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Write the --format output to this file instead of stdout.
        #[arg(short, long, value_name = "FILE", conflicts_with_all = ["flamegraph", "boundaries"])]
        output: Option<PathBuf>,
        /// Count all thread time, idle included (whatever the recording used). Also sets what
        /// folded counts and flamegraph widths measure.
        #[arg(long)]
        idle: bool,
        /// With --format folded or --flamegraph: the feature marks alone, without native frames
        /// (samples without marks become one "[no feature]" frame).
        #[arg(long)]
        features_only: bool,
        /// Write a flamegraph SVG to this file instead of printing a report (widths are µs of
        /// the report's time view; marks are blue). Not with --format.
        #[arg(long, value_name = "OUT.svg", conflicts_with = "format")]
        flamegraph: Option<PathBuf>,
        /// Write the boundary graph (the checks marked with mark_boundary, by edge between
        /// components) to this SVG file instead of printing a report, as `boundaries.svg` was
        /// drawn when recording. Not with --format or --flamegraph.
        #[arg(long, value_name = "OUT.svg", conflicts_with_all = ["format", "flamegraph", "features_only"])]
        boundaries: Option<PathBuf>,
        /// Only this thread's samples (its name, or its id), in any format.
        #[arg(long, value_name = "NAME|TID")]
        thread: Option<String>,
        /// Only this process's samples (its id, or its program's name), in any format: for a
        /// recording that followed the program's children (see the report's Processes table).
        #[arg(long, value_name = "PID|PROGRAM")]
        process: Option<String>,
        #[command(flatten)]
        rules: RuleArgs,
    },
    /// Print the built-in feature rules (the catalog): each feature, what it is, and the
    /// functions whose frames in a native stack put a sample in it. A rules file given with
    /// --rules has this format.
    Rules,
    /// Compare two saved profiles (the same program at two input sizes, before and after a
    /// change): each feature's and instance's time in A and in B, the change and the ratio.
    Diff {
        /// The first profile (an output directory, or the profile.json in it).
        a: PathBuf,
        /// The second profile.
        b: PathBuf,
        /// Output format, printed to stdout.
        #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
        format: DiffFormat,
        /// Also write a differential flamegraph SVG here: B's stacks, coloured by their change
        /// from A (red grew, blue shrank, A scaled to B's total).
        #[arg(long, value_name = "OUT.svg")]
        flamegraph: Option<PathBuf>,
        /// Count all thread time, idle included, in both (also when either was recorded so).
        #[arg(long)]
        idle: bool,
        #[command(flatten)]
        rules: RuleArgs,
    },
    /// Predict what making a feature faster would buy the whole program (causal profiling):
    /// runs the program again and again under the agent, which slows every other thread while
    /// one runs the selected feature (a virtual speedup of it, as Coz does for lines of code),
    /// and reports, per feature and speedup, how much sooner the program would end. The
    /// candidates are the features named, else the heaviest ones of a first profile.
    #[command(override_usage = "fsprof what-if [OPTIONS] -- PROGRAM [ARGS]...")]
    WhatIf {
        /// A feature to try (its name, as the report shows it); repeatable. By default the
        /// --top heaviest features of a first profile of the program.
        #[arg(long = "feature", value_name = "NAME")]
        features: Vec<String>,
        /// An instance to try, FEATURE=INSTANCE as the report names it (a name, or
        /// file:line:column); repeatable.
        #[arg(long = "instance", value_name = "FEATURE=INSTANCE")]
        instances: Vec<String>,
        /// How many of the first profile's heaviest features to try when none is named.
        #[arg(long, value_name = "N", default_value_t = 3)]
        top: usize,
        /// The speedups to try, in percent of the selected code's time (0 < S <= 100).
        #[arg(long, value_name = "S,S,...", value_delimiter = ',', default_values_t = [25u32, 50, 75, 100])]
        speedups: Vec<u32>,
        /// Runs of each experiment, and of the baseline (every run is timed; the table gives
        /// their median and range); with --progress, stretches of the one run. Default: 3 runs,
        /// or 10 stretches.
        #[arg(long, value_name = "N")]
        runs: Option<usize>,
        /// A progress point: the feature whose marks' ends are the program's progress (a
        /// request, a task). The gain predicted is then how much shorter its marks would take
        /// (their mean latency), not how much sooner the program would end; and the
        /// experiments take turns within one run of the program, a stretch each (about 0.25 s,
        /// longer until 20 marks ended), until each has --runs stretches: a server need not end.
        /// The program then runs on, without experiments, until it exits (Ctrl-C ends both).
        #[arg(long, value_name = "FEATURE")]
        progress: Option<String>,
        /// Preload the agent's built-in features too (output, allocation, locks, ...), which
        /// makes them candidates.
        #[arg(long)]
        agent: bool,
        /// Output directory for what-if.json, what-if.svg, the first profile and the program's
        /// output. Default: `./fsprof-<program>-<n>`.
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
        /// Program and arguments.
        #[arg(last = true, required = true, value_name = "PROGRAM")]
        program: Vec<OsString>,
    },
    /// Print the path of the agent library that `run --agent` preloads, for a program you start
    /// yourself and attach to: `LD_PRELOAD=$(fsprof agent) ./app & fsprof attach $!`.
    Agent,
    /// Print a shell completion script: `fsprof completions bash > /etc/bash_completion.d/fsprof`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print fsprof's manual page (roff): `fsprof manpage > ~/.local/share/man/man1/fsprof.1`.
    Manpage,
}

#[derive(Debug, Args)]
struct RecordArgs {
    /// Output directory for profile.json and report.txt (created if missing).
    /// Default: `./fsprof-<program>-<n>`, with the first n not already taken.
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Mean sampling rate, samples per second; intervals are jittered around it.
    #[arg(long, value_name = "HZ", default_value_t = DEFAULT_RATE_HZ, value_parser = parse_rate)]
    rate: f64,
    /// Stop recording after this many seconds (the target keeps running).
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Count all thread time, idle included. By default a thread's time counts while it runs (or
    /// waits for a CPU), or while it is blocked inside a mark.
    #[arg(long)]
    idle: bool,
    /// Record marks only, without native call stacks.
    #[arg(long)]
    no_native: bool,
    /// How running threads' native stacks are taken. `perf`: a perf event copies the registers,
    /// the top of the stack and (with a small BPF program) the marks at one instant, without
    /// stopping the thread; needs root, or CAP_PERFMON and CAP_BPF. `ptrace`: each running
    /// thread is stopped for an instant (tens of microseconds) per sample. `auto` uses perf
    /// where the kernel allows it. Threads that are not running are always read with ptrace.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Also look for separate debug files (symbols of stripped programs and libraries) under
    /// this directory, before /usr/lib/debug: by build id (DIR/.build-id/xx/yyyy.debug) and by
    /// debug link (DIR/<the module's directory>/<the name its .gnu_debuglink gives>). Repeatable.
    #[arg(long, value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
    /// Fetch no debug files from the debuginfod servers DEBUGINFOD_URLS names. Without it, the
    /// debug files of modules without symbols that no directory holds are fetched by build id
    /// once recording has ended, into ~/.cache/fsprof/debuginfod (DEBUGINFOD_TIMEOUT and
    /// DEBUGINFOD_MAXSIZE are honoured).
    #[arg(long)]
    offline: bool,
    /// Count each OpenTelemetry span the program publishes (a thread context, OTEP 4947) as an
    /// instance: a feature `span_id` whose instances are the span ids (16 hex digits) of the
    /// records its threads show at each sample, beside the records' attributes. A recording
    /// keeps 4096 distinct ones; later ones count as `[other values]`.
    #[arg(long)]
    span_ids: bool,
    #[command(flatten)]
    rules: RuleArgs,
}

/// Feature rules: which frames of the native stacks are which feature (see `fsprof rules`).
#[derive(Debug, Args)]
struct RuleArgs {
    /// A feature found in the native stacks: a sample is in it when its stack holds a frame of
    /// one of the functions named, and its instance is the program's call site. Each pattern
    /// is a function's path (`serde_json`, `regex::*Regex::new`: the paths below it match too)
    /// or a C symbol (`printf`), without generic arguments, `*` for any characters, and
    /// optionally its module first (`libc.so*!write`). A program's mark of the same name is the
    /// same feature. Repeatable.
    #[arg(long = "feature", value_name = "NAME=PATTERN[,PATTERN...]")]
    features: Vec<String>,
    /// Feature rules from a TOML file (the format `fsprof rules` prints). Repeatable.
    #[arg(long = "rules", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Leave the built-in rules out: features come from the program's marks, the agent's and
    /// the rules given.
    #[arg(long)]
    no_builtin_rules: bool,
}

impl RuleArgs {
    fn into_rules(self) -> Result<RuleSet, String> {
        let mut rules = match self.no_builtin_rules {
            true => RuleSet::none(),
            false => RuleSet::catalog(),
        };
        for path in &self.files {
            rules.extend(crate::rules::from_file(path)?);
        }
        for spec in &self.features {
            rules.rules.push(crate::rules::from_spec(spec)?);
        }
        Ok(rules)
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text.parse().map_err(|_| format!("not a number: {text}"))?;
    if !(1.0..=20_000.0).contains(&rate) {
        return Err("the rate must be between 1 and 20000 Hz".to_owned());
    }
    Ok(rate)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("not a number of seconds: {text}"))?;
    if !(secs > 0.0 && secs < 1e9) {
        return Err("the duration must be a positive number of seconds".to_owned());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What the user asked for, without clap types.
#[derive(Debug)]
pub enum Command {
    /// `fsprof run`.
    Run {
        /// Program and arguments.
        program: Vec<OsString>,
        /// Recording options.
        options: RecordOptions,
    },
    /// `fsprof attach`.
    Attach {
        /// Target process.
        pid: u32,
        /// Recording options.
        options: RecordOptions,
    },
    /// `fsprof report`.
    Report {
        /// Directory or file.
        path: PathBuf,
        /// What to render.
        options: ReportOptions,
    },
    /// `fsprof diff`.
    Diff {
        /// The two profiles (directories or files).
        paths: [PathBuf; 2],
        /// What to render.
        options: DiffOptions,
    },
    /// `fsprof what-if`.
    WhatIf {
        /// Program and arguments.
        program: Vec<OsString>,
        /// The experiments' options.
        options: crate::commands::what_if::WhatIfOptions,
    },
    /// `fsprof agent`.
    Agent,
    /// `fsprof completions` and `fsprof manpage`: text generated from this command line.
    Print(String),
}

impl RecordArgs {
    /// The recording options, or why the rules given cannot be used.
    fn into_options(self) -> Result<RecordOptions, String> {
        let args = self;
        Ok(RecordOptions {
            output: args.output,
            rate_hz: args.rate,
            duration: args.duration,
            count_idle: args.idle,
            native: !args.no_native && cfg!(target_arch = "x86_64"),
            backend: args.backend,
            agent: false,
            debug_dirs: args.debug_dir,
            debuginfod: match args.offline {
                true => None,
                false => crate::symbolize::debuginfod::Debuginfod::from_env().map(Arc::new),
            },
            top: None,
            follow: false,
            span_ids: args.span_ids,
            rules: args.rules.into_rules()?,
        })
    }
}

impl Cli {
    /// Parses the process's arguments; exits with a usage error (code 2) when they are wrong.
    pub fn parse_command() -> Command {
        match Cli::parse().into_command() {
            Ok(command) => command,
            Err(message) => {
                use clap::CommandFactory;
                Cli::command()
                    .error(clap::error::ErrorKind::ArgumentConflict, message)
                    .exit()
            }
        }
    }

    /// The parsed command, or why the arguments do not go together.
    pub fn into_command(self) -> Result<Command, String> {
        Ok(match self.command {
            Cmd::Run {
                record,
                agent,
                no_follow,
                program,
            } => Command::Run {
                program,
                options: RecordOptions {
                    agent,
                    follow: !no_follow,
                    ..record.into_options()?
                },
            },
            Cmd::Top {
                record,
                agent,
                pid,
                program,
            } => {
                if record.output.is_some() {
                    return Err(
                        "fsprof top writes no files: -o goes with run and attach".to_owned()
                    );
                }
                let options = RecordOptions {
                    agent,
                    top: Some(String::new()),
                    ..record.into_options()?
                };
                match (pid, program.is_empty()) {
                    (Some(pid), true) => Command::Attach { pid, options },
                    (None, false) => Command::Run { program, options },
                    _ => {
                        return Err(
                            "fsprof top takes a PID, or a program after --, not both".to_owned()
                        )
                    }
                }
            }
            Cmd::Attach {
                record,
                pid,
                children,
            } => Command::Attach {
                pid,
                options: RecordOptions {
                    follow: children,
                    ..record.into_options()?
                },
            },
            Cmd::Report {
                path,
                format,
                output,
                idle,
                features_only,
                flamegraph,
                boundaries,
                thread,
                process,
                rules,
            } => {
                if features_only && flamegraph.is_none() && format != Format::Folded {
                    return Err(
                        "--features-only goes with --format folded or --flamegraph OUT.svg"
                            .to_owned(),
                    );
                }
                Command::Report {
                    path,
                    options: ReportOptions {
                        format,
                        output,
                        idle,
                        features_only,
                        flamegraph,
                        boundaries,
                        thread,
                        process,
                        rules: rules.into_rules()?,
                    },
                }
            }
            Cmd::Diff {
                a,
                b,
                format,
                flamegraph,
                idle,
                rules,
            } => Command::Diff {
                paths: [a, b],
                options: DiffOptions {
                    format,
                    flamegraph,
                    idle,
                    rules: rules.into_rules()?,
                },
            },
            Cmd::WhatIf {
                features,
                instances,
                top,
                speedups,
                runs,
                progress,
                agent,
                output,
                program,
            } => Command::WhatIf {
                program,
                options: crate::commands::what_if::WhatIfOptions::new(
                    features, instances, top, speedups, runs, agent, output,
                )?
                .with_progress(progress)?,
            },
            Cmd::Agent => Command::Agent,
            Cmd::Rules => Command::Print(crate::rules::catalog_text().to_owned()),
            Cmd::Completions { shell } => Command::Print(completions(shell)),
            Cmd::Manpage => Command::Print(manpage()),
        })
    }
}

/// The completion script of `shell` for fsprof's command line.
fn completions(shell: clap_complete::Shell) -> String {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "fsprof", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// fsprof's manual page, in roff: the command, then one section per subcommand (its synopsis,
/// description and options), then the examples.
fn manpage() -> String {
    use clap::CommandFactory;
    let command = Cli::command();
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    // Writing into memory cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_synopsis_section(&mut out);
    let _ = man.render_description_section(&mut out);
    for sub in command.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let name = format!("fsprof {}", sub.get_name());
        let man = clap_mangen::Man::new(sub.clone().bin_name(name.clone()));
        let mut section = Vec::new();
        let _ = man.render_synopsis_section(&mut section);
        let _ = man.render_description_section(&mut section);
        let _ = man.render_options_section(&mut section);
        out.extend(format!(".SH \"{}\"\n", name.to_uppercase()).into_bytes());
        // The subcommand's own sections become subsections of its section.
        for line in String::from_utf8_lossy(&section).lines() {
            let line = line
                .strip_prefix(".SH ")
                .map_or(line.to_owned(), |title| format!(".SS {title}"));
            out.extend(line.into_bytes());
            out.push(b'\n');
        }
    }
    let _ = man.render_extra_section(&mut out);
    let _ = man.render_version_section(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_program_after_dashes() {
        let cli = Cli::try_parse_from([
            "fsprof", "run", "--rate", "500", "--", "./app", "-x", "--rate",
        ])
        .unwrap();
        let Ok(Command::Run { program, options }) = cli.into_command() else {
            panic!()
        };
        assert_eq!(program, ["./app", "-x", "--rate"]);
        assert_eq!(options.rate_hz, 500.0);
        assert!(!options.agent, "nothing is preloaded by default");
        let cli = Cli::try_parse_from(["fsprof", "run", "--agent", "--", "./app"]).unwrap();
        let Ok(Command::Run { options, .. }) = cli.into_command() else {
            panic!()
        };
        assert!(options.agent);
        assert!(Cli::try_parse_from(["fsprof", "run", "--rate", "0", "--", "x"]).is_err());
    }

    fn report(args: &[&str]) -> Result<ReportOptions, String> {
        let cli = Cli::try_parse_from(["fsprof", "report", "dir"].iter().chain(args))
            .map_err(|e| e.kind().to_string())?;
        match cli.into_command()? {
            Command::Report { options, .. } => Ok(options),
            _ => panic!(),
        }
    }

    #[test]
    fn diff_takes_two_profiles_a_format_and_a_flamegraph() {
        let cli = Cli::try_parse_from(["fsprof", "diff", "a", "b", "--format", "json"]).unwrap();
        let Ok(Command::Diff { paths, options }) = cli.into_command() else {
            panic!()
        };
        assert_eq!(paths, [PathBuf::from("a"), PathBuf::from("b")]);
        assert_eq!(
            options,
            DiffOptions {
                format: DiffFormat::Json,
                flamegraph: None,
                idle: false,
                rules: RuleSet::catalog(),
            }
        );
        assert!(Cli::try_parse_from(["fsprof", "diff", "a"]).is_err());
        assert!(Cli::try_parse_from(["fsprof", "diff", "a", "b", "--format", "pprof"]).is_err());
    }

    #[test]
    fn report_options_and_their_bad_combinations() {
        let folded = report(&["--format", "folded", "--features-only"]).unwrap();
        assert_eq!(
            (folded.format, folded.features_only),
            (Format::Folded, true)
        );
        let svg = report(&["--flamegraph", "x.svg", "--features-only", "--idle"]).unwrap();
        assert_eq!(svg.flamegraph, Some(PathBuf::from("x.svg")));
        assert!(svg.features_only && svg.idle);
        assert!(report(&["--features-only"]).is_err());
        assert!(report(&["--format", "json", "--features-only"]).is_err());
        assert!(report(&["--format", "text", "--flamegraph", "x.svg"]).is_err());
        let pprof = report(&["--format", "pprof", "-o", "app.pb.gz"]).unwrap();
        assert_eq!(
            (pprof.format, pprof.output),
            (Format::Pprof, Some(PathBuf::from("app.pb.gz")))
        );
        assert!(report(&["-o", "x", "--flamegraph", "x.svg"]).is_err());
        assert!(report(&["-o", "x", "--boundaries", "x.svg"]).is_err());
    }
}
