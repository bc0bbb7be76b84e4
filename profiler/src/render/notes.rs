//! The report's notes: what the recording noticed that a reader should know (samples without a
//! native stack, sampling late or stretched, perf records lost, modules without symbols, ...),
//! from the profile's metadata and the feature analysis, one string each. Not here: the tables
//! (`text.rs`) or their numbers (`analysis`).

use crate::analysis::FeatureReport;
use crate::profile::{Meta, MissingSymbols};

/// The notes under the tables: what the reader should know of how the recording went.
pub fn notes(report: &FeatureReport, meta: &Meta, threads: usize) -> Vec<String> {
    let mut notes = meta.notes.clone();
    let missing = meta.missing_symbols.as_ref();
    notes.extend(
        missing
            .filter(|m| !m.modules.is_empty())
            .map(missing_symbols_note),
    );
    let builtin: Vec<&str> = report
        .features
        .iter()
        .filter(|f| f.builtin)
        .map(|f| f.name.as_str())
        .collect();
    if !builtin.is_empty() {
        notes.insert(
            0,
            format!(
                "built in: {} (not the program's own marks: found in the native stacks by the built-in rules (`fsprof rules`), or marked by fsprof's agent around libc calls with --agent; each instance a call site in the program; --no-builtin-rules turns the rules off)",
                builtin.join(", ")
            ),
        );
    }
    // Only where a sample was in the agent's code: without the agent (the default: the rules'
    // features alone) there is nothing to say of its cost.
    if let Some(share) =
        (report.agent_share()).filter(|_| report.agent_ns > 0 && !builtin.is_empty())
    {
        let share = if share < 0.05 {
            "under 0.1%".to_owned()
        } else {
            format!("{share:.1}%")
        };
        notes.push(format!(
            "the agent's own code (around each interposed libc call, partly outside the built-in marks) ran in {share} of the time sampled with a native stack: what the built-in features cost the program; without --agent the rules find them in the native stacks at no cost to the program"
        ));
    }
    if report.truncated_samples > 0 {
        notes.push(format!(
            "{} samples had mark stacks deeper than {} (up to {}): their stacks are truncated, marks beyond that depth are not attributed",
            report.truncated_samples, meta.reading.mark_capacity, report.max_truncated_depth
        ));
    }
    if meta.reading.threads_without_slot > 0 {
        notes.push(format!(
            "{} threads could not mark: every mark slot was taken",
            meta.reading.threads_without_slot
        ));
    }
    if meta.reading.later_branches_lost > 0 {
        let (lost, read) = (
            meta.reading.later_branches_lost,
            meta.reading.later_branches,
        );
        notes.push(format!(
            "{lost} of {} later branches the parser tried were written over before fsprof read them (a thread keeps its latest {}): the backtracking view misses the waste before them; a higher --rate reads them more often",
            lost + read,
            fsprof_shim::abi::HISTORY_CAPACITY
        ));
    }
    if meta.reading.torn_dropped > 0 {
        notes.push(format!(
            "{} samples were skipped because the thread was changing its marks on every retry; their time went to the thread's next sample",
            meta.reading.torn_dropped
        ));
    }
    if meta.reading.marks_unsettled * 100 > meta.sampling.ticks.max(1) {
        notes.push(format!(
            "{} samples combine marks copied a moment apart from the program's and the agent's regions (the thread changed them while they were copied, and had no perf sample, copied at one instant, to take them from): a built-in feature may show there without the program's own mark around it, so nested features may count a little twice",
            meta.reading.marks_unsettled
        ));
    }
    native_notes(meta, &mut notes);
    if meta.sampling.ticks > 100 && meta.sampling.stretched_ticks * 10 > meta.sampling.ticks {
        notes.push(format!(
            "sampling {threads} threads took so long that {} of {} intervals between samples were stretched (fsprof never samples more than half the time); lower --rate, or expect less precise shares",
            meta.sampling.stretched_ticks, meta.sampling.ticks
        ));
    }
    let losses = &meta.native_stacks.losses;
    let lost_ms = losses.perf_lost_cpu_us as f64 / 1000.0;
    if losses.perf_lost * 100 > meta.native_stacks.native_captured.max(1) {
        notes.push(format!(
            "{} perf records were lost (fsprof read the threads' rings too late: it was short of CPU), with {lost_ms:.1} ms of the threads' running time, shared among the samples that followed each loss",
            losses.perf_lost,
        ));
    } else if losses.perf_lost_cpu_us.saturating_mul(1000 * 100) > report.total_ns.max(1) {
        // Records dropped without a count: a ring read nearly full, or a thread's samples
        // beyond what is kept between two reads.
        notes.push(format!(
            "{lost_ms:.1} ms of the threads' running time had no sample of its own (fsprof read the rings too late: it was short of CPU); it is shared among the samples that followed each gap"
        ));
    }
    if meta.sampling.ticks > 0 && meta.sampling.late_ticks * 10 > meta.sampling.ticks {
        let sampling = &meta.sampling;
        let priority = match sampling.sampler_priority.as_str() {
            "" => "unknown",
            known => known,
        };
        // Why it was not real-time, where it asked and was refused; else what would allow it.
        let remedy = match sampling.realtime_refused.as_str() {
            "" => "Run on a quieter machine, or with the privilege to use real-time scheduling (root or CAP_SYS_NICE)".to_owned(),
            refused => format!("Run on a quieter machine; {refused}"),
        };
        notes.push(format!(
            "{:.0}% of samples were taken late because fsprof waited for a CPU (sampler priority: {priority}); shares may lean toward features in which the program blocks. {remedy}",
            sampling.late_ticks as f64 * 100.0 / sampling.ticks as f64,
        ));
    }
    notes
}

/// The note naming the modules some functions of which had no name (a stripped binary, say),
/// what was looked for, and how to get their symbols: a line for the system's files and one for
/// the others.
fn missing_symbols_note(missing: &MissingSymbols) -> String {
    // The names are the target's files' (a profile is a file anyone may have written).
    let clean = crate::profile::clean;
    let names: Vec<String> = (missing.modules.iter()).map(|m| clean(&m.name)).collect();
    let first: Vec<String> = (missing.modules.iter()).map(|m| clean(&m.first)).collect();
    let mut note = format!(
        "no symbols for {} (first {}): {} functions are named module+0xSTART (the function's start, from the unwind tables, as `nm` and `objdump` show addresses). Looked for: debug files under {} (by build id and debug link), MiniDebugInfo, {}.",
        names.join(", "),
        first.join(", "),
        if names.len() == 1 { "its" } else { "their" },
        missing.debug_dirs.join(", "),
        match missing.debuginfod {
            true => "the debuginfod servers DEBUGINFOD_URLS names",
            false => "no debuginfod server (DEBUGINFOD_URLS is not set, or --offline)",
        }
    );
    let list = |system: bool| {
        let names: Vec<String> = (missing.modules.iter())
            .filter(|m| m.system == system)
            .map(|m| clean(&m.name))
            .collect();
        names.join(", ")
    };
    let system = list(true);
    if !system.is_empty() {
        let debuginfod = match missing.debuginfod {
            true => "",
            false => ", or set DEBUGINFOD_URLS for fsprof to fetch them (Debian: https://debuginfod.debian.net, Ubuntu: https://debuginfod.ubuntu.com, Fedora: https://debuginfod.fedoraproject.org)",
        };
        note += &format!(
            "\n    the system's ({system}): install their debug symbols (Debian and Ubuntu: the -dbgsym packages; Fedora: debuginfo-install){debuginfod}"
        );
    }
    let others = list(false);
    if !others.is_empty() {
        note += &format!(
            "\n    others ({others}): build them with -g, or keep their debug files (objcopy --only-keep-debug) in a directory given with --debug-dir DIR, as DIR/.build-id/xx/yyyy.debug"
        );
    }
    note
}

/// The median pause of a ptrace stop, µs, from which the notes say that stops come late: they
/// take 30 to 70 µs where the machine delivers the interrupt that stops a running thread at
/// once; on a nested AMD guest that delivered it at the CPU's next timer tick (fifty-sixth
/// session), a thread spinning in user space stopped 0.8 to 4.9 ms late, and a program whose
/// labelled loops make no system call paused 265 µs at the median.
const LATE_STOP_P50_US: u64 = 200;

/// Stops enough for their median to say something of the machine.
const LATE_STOP_LEAST: u64 = 50;

/// Where ptrace's stops came late (see [`LATE_STOP_P50_US`]): a thread that runs on stops at its
/// next entry into the kernel, so samples lean toward its system calls and its CPU's ticks.
fn late_stops_note(meta: &Meta) -> Option<String> {
    let stops = &meta.native_stacks.stops;
    (meta.native_stacks.native_backend == "ptrace"
        && stops.native_stops >= LATE_STOP_LEAST
        && stops.pause_p50_us > LATE_STOP_P50_US)
        .then(|| format!(
            "ptrace's stops came late: a sampled thread stayed stopped {} µs at the median (tens of µs where the machine delivers the interrupt that stops a running thread at once), so a thread ran on to its next system call or its CPU's next timer tick before its stack was taken: samples lean toward the moments the program enters the kernel, away from long stretches of user code. The perf backend takes samples at their instant (root, or CAP_PERFMON and CAP_BPF: docs/permissions.md)",
            stops.pause_p50_us
        ))
}

/// Least time waiting for a CPU without a native stack, in ms, that the notes mention.
const PREEMPTED_NOTE_MS: u64 = 10;

/// The notes about native stacks: samples without one, and stacks not unwound to their root.
fn native_notes(meta: &Meta, notes: &mut Vec<String>) {
    let native_samples = meta.native_stacks.native_captured
        + meta.native_stacks.native_not_stopped
        + meta.native_stacks.native_blocked_skipped
        + meta.native_stacks.native_uncopied;
    if meta.native_stacks.native && native_samples > 0 {
        let no_cpu = meta
            .native_stacks
            .native_not_stopped
            .saturating_sub(meta.native_stacks.native_late);
        let without = meta.native_stacks.native_moved
            + no_cpu
            + meta.native_stacks.native_blocked_skipped
            + meta.native_stacks.native_uncopied;
        if without * 20 > native_samples {
            let (moved, no_cpu_why) = if meta.native_stacks.native_backend == "perf" {
                (
                    "the kernel's copy of its marks caught it in the middle of pushing one",
                    "it did not run for 10 µs of CPU time before the next sample",
                )
            } else {
                (
                    "the thread's marks changed between the sample and the moment it stopped (a thread stops at its next return to user space, which lags on virtual machines)",
                    "it had no CPU to stop on until the next sample",
                )
            };
            let causes: Vec<String> = [
                (meta.native_stacks.native_moved, moved),
                (no_cpu, no_cpu_why),
                (
                    meta.native_stacks.native_blocked_skipped,
                    "the thread was blocked and its stack could not be read without stopping it (a stop would lengthen its wait)",
                ),
                (
                    meta.native_stacks.native_uncopied,
                    "the kernel copied none of its stack with the sample (it could not read the stack's memory at that instant)",
                ),
            ]
            .into_iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, why)| format!("{count} because {why}"))
            .collect();
            notes.push(format!(
                "{:.0}% of the samples for which a native stack was sought ({without} of {native_samples}: a running thread's, or a blocked one's inside a mark; the header's count has blocked threads' samples too, which seek none) have none (they count in the tables, not in flamegraph.svg): {}",
                without as f64 * 100.0 / native_samples as f64,
                causes.join(", ")
            ));
        }
        if let Some(note) = late_stops_note(meta) {
            notes.push(note);
        }
        let unmarked = meta.native_stacks.native_departures_unmarked;
        if unmarked * 20 > native_samples {
            notes.push(format!(
                "{unmarked} stretches off the CPU have no native stack: the kernel's copy of the thread's marks as it left was lost, failed or caught a push half done, so those of its latest sample stand in (a departure's stack would be drawn with other marks)"
            ));
        }
        let dropped = meta.native_stacks.unseen.native_unseen_dropped;
        if dropped > 0 {
            notes.push(format!(
                "{dropped} perf samples of threads that ended before any of fsprof's ticks found them are left out: the process marks (or publishes labels), and those threads' marks were never read (their time is missing from every share; --rate raises the ticks' rate too)"
            ));
        }
        let unplaced_ms = meta.native_stacks.native_preempted_unplaced_us / 1_000;
        if unplaced_ms >= PREEMPTED_NOTE_MS {
            notes.push(format!(
                "{unplaced_ms} ms of waiting for a CPU (the thread preempted) have no native stack: the kernel copies a thread's stack as it is preempted at most once per sampling period (or never, without the kernel's BTF), and between two copies the thread's marks had changed since its latest sample (on a busy machine; --backend ptrace stops the thread instead)"
            ));
        }
        if meta.native_stacks.native_captured > 0
            && meta.native_stacks.native_complete * 100 < meta.native_stacks.native_captured * 99
        {
            notes.push(format!(
                "{:.1}% of native stacks were unwound to the thread's root; the others start with [stack truncated]",
                meta.native_stacks.native_complete as f64 * 100.0 / meta.native_stacks.native_captured as f64
            ));
        }
        let beyond = &meta.native_stacks.beyond;
        if beyond.native_walked + beyond.native_completed > 0 {
            notes.push(format!(
                "{} of the {} native stacks reached the root beyond the {} KiB perf copies of the top of the stack: {} through words of the stack the BPF program read along it at each sample, {} through an image of the thread's outer stack read while it ran, checked against words read at each sample (README: Native stacks)",
                beyond.native_walked + beyond.native_completed,
                meta.native_stacks.native_complete,
                crate::native::layout::STACK_DUMP / 1024,
                beyond.native_walked,
                beyond.native_completed,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{analyse, TimeView};
    use crate::profile::fixtures::build;

    /// The note names every module, says what was looked for, and advises each kind of module
    /// on its own line.
    #[test]
    fn the_missing_symbols_note_advises_the_systems_files_and_the_others_apart() {
        let module = |name: &str, system| crate::profile::UnnamedModule {
            name: name.to_owned(),
            first: format!("{name}+0x1130"),
            system,
        };
        let mut missing = MissingSymbols {
            modules: vec![module("stripped", false)],
            debug_dirs: vec!["/usr/lib/debug".to_owned()],
            debuginfod: false,
        };
        // A child's modules join the list once.
        missing.join(&MissingSymbols {
            modules: vec![module("systool", true), module("stripped", false)],
            debug_dirs: vec!["/usr/lib/debug".to_owned()],
            debuginfod: false,
        });
        let note = missing_symbols_note(&missing);
        let lines: Vec<&str> = note.lines().collect();
        assert!(
            lines[0].starts_with(
                "no symbols for stripped, systool (first stripped+0x1130, systool+0x1130): their"
            ),
            "{note}"
        );
        assert!(
            lines[0].contains("Looked for: debug files under /usr/lib/debug"),
            "{note}"
        );
        assert!(lines[0].contains("no debuginfod server"), "{note}");
        assert!(
            lines[1].starts_with("    the system's (systool): install")
                && lines[1].contains("DEBUGINFOD_URLS"),
            "{note}"
        );
        assert!(
            lines[2].starts_with("    others (stripped): build them with -g")
                && lines[2].contains("--debug-dir"),
            "{note}"
        );
        assert_eq!(lines.len(), 3, "{note}");
    }

    #[test]
    fn the_note_on_samples_without_a_native_stack_adds_up_and_names_no_empty_cause() {
        let mut meta = Meta::default();
        let native = &mut meta.native_stacks;
        native.native = true;
        native.native_backend = "perf".into();
        (native.native_captured, native.native_not_stopped) = (80, 20);
        native.native_complete = 80;
        (native.native_moved, native.native_late) = (0, 8);
        native.native_blocked_skipped = 5;
        native.native_uncopied = 3;
        let mut notes = Vec::new();
        native_notes(&meta, &mut notes);
        // 12 not stopped in time (20, less the 8 taken late), 5 skipped and 3 not copied: 20
        // of 108.
        assert_eq!(notes.len(), 1, "{notes:?}");
        let note = &notes[0];
        assert!(
            note.starts_with("19% of the samples for which a native stack was sought (20 of 108: "),
            "{note}"
        );
        assert!(note.contains("12 because it did not run"), "{note}");
        assert!(note.contains("5 because the thread was blocked"), "{note}");
        assert!(note.contains("3 because the kernel copied none"), "{note}");
        assert!(!note.contains("0 because"), "{note}");
    }

    /// Stops that came late are noted with ptrace alone, past the median and count that say so.
    #[test]
    fn ptraces_late_stops_are_noted_past_their_bound() {
        let with = |backend: &str, stops: u64, p50: u64| {
            let mut meta = Meta::default();
            let native = &mut meta.native_stacks;
            (native.native, native.native_backend) = (true, backend.into());
            (native.native_captured, native.native_complete) = (stops, stops);
            (native.stops.native_stops, native.stops.pause_p50_us) = (stops, p50);
            let mut notes = Vec::new();
            native_notes(&meta, &mut notes);
            notes
        };
        let notes = with("ptrace", 641, 265);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0]
                .starts_with("ptrace's stops came late: a sampled thread stayed stopped 265 µs"),
            "{notes:?}"
        );
        assert!(with("ptrace", 641, LATE_STOP_P50_US).is_empty());
        assert!(with("ptrace", LATE_STOP_LEAST - 1, 265).is_empty());
        assert!(with("perf", 641, 265).is_empty());
    }

    /// Running time without samples is noted past 1% of the time counted, as records lost
    /// where the kernel counted them, else as gaps (a ring read nearly full, samples beyond
    /// what a thread keeps between reads).
    #[test]
    fn running_time_lost_is_noted_with_or_without_lost_records() {
        let mut report = analyse(&build(&[]), TimeView::Active);
        report.total_ns = 1_000_000_000;
        let mut meta = Meta::default();
        meta.native_stacks.native_captured = 1_000;
        meta.native_stacks.losses.perf_lost_cpu_us = 5_000;
        assert!(notes(&report, &meta, 2).is_empty());
        meta.native_stacks.losses.perf_lost_cpu_us = 20_000;
        let gaps = notes(&report, &meta, 2);
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert!(
            gaps[0].starts_with("20.0 ms of the threads' running time had no sample of its own"),
            "{gaps:?}"
        );
        meta.native_stacks.losses.perf_lost = 11;
        let lost = notes(&report, &meta, 2);
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert!(
            lost[0].starts_with("11 perf records were lost") && lost[0].contains("20.0 ms"),
            "{lost:?}"
        );
    }

    #[test]
    fn late_and_stretched_sampling_are_noted_past_a_tenth_of_the_ticks() {
        let mut meta = Meta::default();
        meta.sampling.ticks = 1_000;
        (meta.sampling.late_ticks, meta.sampling.stretched_ticks) = (100, 100);
        let report = analyse(&build(&[]), TimeView::Active);
        assert!(notes(&report, &meta, 300).is_empty());
        (meta.sampling.late_ticks, meta.sampling.stretched_ticks) = (250, 101);
        meta.sampling.sampler_priority = "nice 0".into();
        let notes = notes(&report, &meta, 300);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with(
                "sampling 300 threads took so long that 101 of 1000 intervals between samples were stretched"
            ),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with(
                "25% of samples were taken late because fsprof waited for a CPU (sampler priority: nice 0)"
            ),
            "{notes:?}"
        );
        assert!(notes[1].ends_with("(root or CAP_SYS_NICE)"), "{notes:?}");
        // Refused real-time scheduling: the note says why instead.
        meta.sampling.realtime_refused = "real-time scheduling refused: because".into();
        let notes = super::notes(&report, &meta, 300);
        assert!(
            notes[1].ends_with("Run on a quieter machine; real-time scheduling refused: because"),
            "{notes:?}"
        );
    }
}
