//! The profile's metadata: how and when it was recorded (`Meta` and its parts: the target,
//! the reading of its marks, the sampling, perf's losses, the native side's counters), saved as
//! one object in `profile.json`. Not here: the samples and their tables (`profile.rs`), what the
//! report makes of these figures (`render/notes.rs`).

use serde::{Deserialize, Serialize};

/// How and when a profile was recorded. In the saved file its parts are one object (their
/// fields side by side, as before they were grouped).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    /// `fsprof` version that recorded it.
    pub fsprof_version: String,
    /// `run` or `attach`.
    pub mode: String,
    /// The target's command line.
    pub command: Vec<String>,
    /// The target's process id.
    pub pid: u32,
    /// Mean sampling rate asked for.
    pub rate_hz: f64,
    /// Wall time from the first to the last sample.
    pub duration_ns: u64,
    /// When the first sample was taken, in ns since the Unix epoch (0 if unknown).
    #[serde(default)]
    pub start_unix_ns: u64,
    /// Whether the default view counts idle time (`--idle`).
    pub count_idle: bool,
    /// How the marks were read (see [`ReadingMeta`]).
    #[serde(flatten)]
    pub reading: ReadingMeta,
    /// Why recording stopped, e.g. "the program exited with code 0".
    pub end: String,
    /// How the sampler ticked (see [`SamplingMeta`]).
    #[serde(flatten)]
    pub sampling: SamplingMeta,
    /// How native stacks were taken (see [`NativeMeta`]).
    #[serde(flatten)]
    pub native_stacks: NativeMeta,
    /// Things the recording noticed that the report should say (e.g. an incompatible region).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Features marked by the agent (`libfsprof_agent.so` interposing libc) rather than by the
    /// program; a program's own feature of the same name is reported together with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub builtin_features: Vec<String>,
    /// The feature rules given to `run` or `attach` (`--feature`, `--rules`), as
    /// `NAME=PATTERN,...`: `fsprof report` applies them too. The built-in catalog is not here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// The modules some of whose functions went without a name, and where names were looked
    /// for: the report's note about missing symbols, one for the whole process tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_symbols: Option<MissingSymbols>,
}

/// Modules whose functions went unnamed (`module+0xSTART`), and where names were looked for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MissingSymbols {
    /// By name, each once.
    pub modules: Vec<UnnamedModule>,
    /// The directories searched for separate debug files.
    pub debug_dirs: Vec<String>,
    /// Whether debuginfod servers were asked.
    pub debuginfod: bool,
}

/// A module with functions left unnamed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnnamedModule {
    /// Its file name.
    pub name: String,
    /// The first unnamed function's name (`module+0xSTART`).
    pub first: String,
    /// The system's packages installed it (its debug symbols are a package away).
    pub system: bool,
}

impl MissingSymbols {
    /// Adds `other`'s modules not listed yet (a child process's).
    pub fn join(&mut self, other: &MissingSymbols) {
        for module in &other.modules {
            if !self.modules.iter().any(|m| m.name == module.name) {
                self.modules.push(module.clone());
            }
        }
        for dir in &other.debug_dirs {
            if !self.debug_dirs.contains(dir) {
                self.debug_dirs.push(dir.clone());
            }
        }
        self.debuginfod |= other.debuginfod;
    }
}

/// How the marks were read: regions, torn copies, threads without a slot.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReadingMeta {
    /// Number of fsprof regions found in the target.
    pub regions: u32,
    /// Slot copies retried because the thread was writing its marks.
    pub torn_retries: u64,
    /// Thread samples dropped (time carried to the thread's next sample) after all retries.
    pub torn_dropped: u64,
    /// Thread samples whose marks in several regions (the program's, the agent's) may not be of
    /// one instant (the thread changed them while fsprof copied them), and that had no perf
    /// sample to take them from.
    #[serde(default)]
    pub marks_unsettled: u64,
    /// Threads of the target that could not get a mark slot.
    pub threads_without_slot: u64,
    /// Mark stack capacity of the region.
    pub mark_capacity: u32,
    /// Later branches of alternatives read from the threads' histories (each tells that the
    /// earlier branches at its offset failed; see
    /// [`Profile::later_branches`](super::Profile::later_branches)).
    #[serde(default)]
    pub later_branches: u64,
    /// Later branches written over in a history before fsprof read them: more than the history
    /// holds were pushed between two reads, and the backtracking view may miss their waste.
    #[serde(default)]
    pub later_branches_lost: u64,
    /// The program published custom labels (the custom-labels ABI), read at its samples: each
    /// label a mark of the feature its key names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub custom_labels: bool,
    /// The program published an OpenTelemetry thread context (OTEP 4947), read at its samples:
    /// each attribute a mark of the feature its key names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub otel_context: bool,
}

/// How the sampler ticked: its scheduling, and its ticks late, stretched or slow.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SamplingMeta {
    /// How the sampler was scheduled: "real-time", "deadline" (real-time refused; a deadline
    /// task instead), "raised" (nice 10 below fsprof's), "nice -20" (real-time and a deadline
    /// refused), or "normal" (see `os/priority.rs`).
    #[serde(default)]
    pub sampler_priority: String,
    /// Why real-time scheduling was refused to the sampler, where it asked for it (its ticks
    /// came late) and was refused; empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub realtime_refused: String,
    /// Ticks that started more than half a period late (the sampler waited for a CPU).
    #[serde(default)]
    pub late_ticks: u64,
    /// Ticks whose cost made the next interval longer than drawn (too many threads for the rate:
    /// the sampler is never busy more than half the time).
    #[serde(default)]
    pub stretched_ticks: u64,
    /// All ticks.
    #[serde(default)]
    pub ticks: u64,
    /// Of those, ticks after a long interval (while perf's samples carried every thread's time,
    /// fsprof woke only every few milliseconds).
    #[serde(default)]
    pub slow_ticks: u64,
    /// fsprof's own CPU time, all its threads, from the program's start (`run`) or the
    /// recording's (`attach`) to the recording's end, microseconds (0: not measured). Its start
    /// before it (the BPF programs verified) and its report after it are left out.
    #[serde(default)]
    pub fsprof_cpu_us: u64,
}

/// What the perf backend lost: samples, and the running time they stood for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PerfLosses {
    /// perf records the kernel could not write (a thread's ring was full: fsprof came late).
    #[serde(default)]
    pub perf_lost: u64,
    /// perf samples whose marks were not copied.
    #[serde(default)]
    pub perf_unmatched: u64,
    /// The running time the samples lost stood for, shared among the samples that followed
    /// each loss, microseconds.
    #[serde(default)]
    pub perf_lost_cpu_us: u64,
}

/// How native stacks were taken: the backend, what it captured and missed, and the stops.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NativeMeta {
    /// What the perf backend lost.
    #[serde(flatten)]
    pub losses: PerfLosses,
    /// Whether native stacks were recorded (not `--no-native`).
    #[serde(default)]
    pub native: bool,
    /// How running threads' stacks were taken: "perf" or "ptrace" (empty without native stacks).
    #[serde(default)]
    pub native_backend: String,
    /// With perf, whether its events were one per CPU (keeping the program's threads' samples)
    /// rather than one per thread (`FSPROF_PER_CPU`, `perf::Design`).
    #[serde(default)]
    pub perf_per_cpu: bool,
    /// Per CPU, whether the events sampled at the scheduler's tick rather than on a clock of
    /// fsprof's (`FSPROF_CLOCK`, `native/cpu_wide/tick.rs`).
    #[serde(default)]
    pub perf_at_tick: bool,
    /// Thread samples whose native stack was captured (by perf or a ptrace stop).
    #[serde(default)]
    pub native_captured: u64,
    /// Of those, stacks unwound to the thread's root.
    #[serde(default)]
    pub native_complete: u64,
    /// Thread samples whose thread did not stop in time (no native stack).
    #[serde(default)]
    pub native_not_stopped: u64,
    /// Thread samples whose marks changed between the sample's instant and the thread's stop:
    /// they have marks but no native stack.
    #[serde(default)]
    pub native_moved: u64,
    /// Stretches off the CPU (perf, switches followed) whose marks were not copied as the
    /// thread left: the latest sample's marks stand in, without a native stack. Not samples of
    /// a tick, so apart from `native_moved`.
    #[serde(default)]
    pub native_departures_unmarked: u64,
    /// Thread samples whose thread had no CPU at the sample and was stopped later, when it got
    /// one (its stack had not changed meanwhile).
    #[serde(default)]
    pub native_late: u64,
    /// Time threads waited for a CPU (perf backend: preempted) with no stack copied as they
    /// left (at most one copy per sampling period) and marks other than those of their latest
    /// perf sample, which then gives no native stack, microseconds.
    #[serde(default)]
    pub native_preempted_unplaced_us: u64,
    /// Time threads were blocked (perf backend: switches followed) with no native stack to
    /// place it by: no block with the same marks had a stack copied yet, nor did a tick read
    /// one. Inside the program's marks it counts for them; outside, no built-in feature can
    /// claim it, so it is in no feature's waits. Microseconds.
    #[serde(default)]
    pub native_blocked_unplaced_us: u64,
    /// Perf samples for which the kernel copied none of the thread's stack: no native stack
    /// (the registers alone name only the innermost function).
    #[serde(default)]
    pub native_uncopied: u64,
    /// Of `native_captured`: stacks of blocked threads taken without stopping them.
    #[serde(default)]
    pub native_blocked: u64,
    /// Threads no tick saw, known by their perf samples alone.
    #[serde(flatten)]
    pub unseen: UnseenThreads,
    /// Thread samples of blocked threads left without a stack rather than stopped (the thread
    /// last ran on fsprof's CPU, or ran again meanwhile).
    #[serde(default)]
    pub native_blocked_skipped: u64,
    /// Of `native_complete`: perf samples of deep stacks unwound beyond the copy of the top of
    /// the stack, and how.
    #[serde(flatten)]
    pub beyond: BeyondCopy,
    /// The ptrace stops that took native stacks.
    #[serde(flatten)]
    pub stops: Stops,
}

/// Threads born and gone between two of the sampler's ticks, known by the bare samples perf
/// took of them (per CPU: `record/sampler/unseen.rs`); in the profile, as fields of
/// [`NativeMeta`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnseenThreads {
    /// Such threads added to the profile, without marks (their process neither marks nor
    /// publishes labels).
    #[serde(default)]
    pub native_unseen_threads: u64,
    /// Their samples.
    #[serde(default)]
    pub native_unseen_samples: u64,
    /// Samples of such threads left out: their process marks or publishes labels, and their
    /// marks were never read.
    #[serde(default)]
    pub native_unseen_dropped: u64,
}

/// The ptrace stops that took native stacks, and how long threads stayed stopped (in the
/// profile, as fields of [`NativeMeta`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stops {
    /// Times a thread was stopped (ptrace) to take its native stack.
    #[serde(default)]
    pub native_stops: u64,
    /// Median time a sampled thread stayed stopped, microseconds.
    #[serde(default)]
    pub pause_p50_us: u64,
    /// 99th percentile of the time a sampled thread stayed stopped, microseconds.
    #[serde(default)]
    pub pause_p99_us: u64,
}

/// Perf samples of deep stacks unwound beyond the kernel's copy of the top of the stack (in
/// the profile, as fields of [`NativeMeta`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeyondCopy {
    /// Through the words the BPF program read at the sample (`native/walk.rs`).
    #[serde(default)]
    pub native_walked: u64,
    /// Through an image of the thread's outer stack, read while it ran (`native/complete.rs`).
    #[serde(default)]
    pub native_completed: u64,
}
