//! The text report, in the spirit of the original feature profiler:
//!
//! ```text
//! Output accounts for 54.70% of running time (4240 / 7752 ms)
//!   3354 ms : src/main.rs:13:28
//!    886 ms : src/main.rs:14:20
//! ```
//!
//! When the process ran several programs (a wrapper script that `exec`s the real one), a line
//! under the header names them and says which are counted.
//!
//! A built-in feature whose threads also waited in it outside the program's own marks says how
//! long (`; threads also waited in it for 2950 ms, idle time not counted`), and so do its
//! instances (`(+ 2950 ms waiting)`): that time is not in the percentages (see
//! `analysis::TimeView::Active`).
//!
//! With native stacks, the most expensive instances also list the call paths that reached them
//! (the innermost native frames before the mark, outer to inner; `… >` where frames are left out)
//! with their share of the instance's time:
//!
//! ```text
//!   3354 ms : src/main.rs:13:28
//!                71% … > app::main > app::report > app::print_row
//!                29% app::main > app::summary
//! ```
//!
//! A feature whose marks nest (a server running connections, a task running sub-tasks) also
//! gets its tree: each path of its instances, with its total and self time and its share of its
//! parent (see `analysis/tree.rs`), indented by depth.

use crate::analysis::{
    BranchCost, CallPath, Edge, FeatureReport, FunctionReport, ProcessTime, ThreadTime, TimeView,
    Tree, MAX_NODES,
};
use crate::profile::Meta;
use std::fmt::Write;

/// Formats milliseconds like the paper: whole numbers, with a decimal below 10 ms (`<0.1` for
/// less than that, so that nothing that took time reads 0).
fn ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 10.0 || ms == 0.0 {
        format!("{ms:.0}")
    } else if ms < 0.05 {
        "<0.1".to_owned()
    } else {
        format!("{ms:.1}")
    }
}

fn capitalised(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A call path as `a > b > c`, `… > ` first when frames are left out.
fn describe_path(path: &CallPath) -> String {
    match (path.functions.is_empty(), path.cut) {
        (true, false) => "[no native stack]".to_owned(),
        (true, true) => "… [mark pushed outside the unwound frames]".to_owned(),
        (false, cut) => {
            let functions: Vec<_> = (path.functions.iter())
                .map(|name| super::short_names::elide_arguments(name))
                .collect();
            format!("{}{}", if cut { "… > " } else { "" }, functions.join(" > "))
        }
    }
}

/// `before N ms after` for blocked time that does not count, or nothing.
fn blocked(ns: u64, before: &str, after: &str) -> String {
    if ns < 500_000 {
        return String::new(); // under a millisecond: not worth a word
    }
    format!("{before}{} ms{after}", ms(ns))
}

/// A line on the program images the process ran, when it ran several (an `exec`).
fn describe_images(report: &FeatureReport) -> Option<String> {
    let (last, earlier) = report.images.split_last()?;
    let seconds = |ns: u64| ns as f64 / 1e9;
    let before: Vec<String> = if earlier.len() <= 2 {
        earlier
            .iter()
            .map(|image| {
                format!(
                    "{} for {:.2} s ({:.2} s running)",
                    image.name,
                    seconds(image.wall_ns),
                    seconds(image.active_ns)
                )
            })
            .collect()
    } else {
        let names: Vec<&str> = earlier.iter().map(|image| image.name.as_str()).collect();
        let wall = earlier.iter().map(|image| image.wall_ns).sum();
        let active = earlier.iter().map(|image| image.active_ns).sum();
        vec![format!(
            "{} programs for {:.2} s ({:.2} s running: {})",
            earlier.len(),
            seconds(wall),
            seconds(active),
            names.join(", ")
        )]
    };
    Some(if earlier.iter().all(|image| image.counted) {
        format!(
            "the process ran {} programs one after the other (each exec starts one), all counted: {}, then {}",
            report.images.len(),
            before.join(", then "),
            last.name
        )
    } else {
        format!(
            "the process replaced itself by exec: these figures are of the last program it ran, {}; before it ran {} (not counted; --idle counts it)",
            last.name,
            before.join(", then ")
        )
    })
}

/// Renders the report.
pub fn render(
    report: &FeatureReport,
    functions: &FunctionReport,
    (thread_times, processes): (&[ThreadTime], &[ProcessTime]),
    meta: &Meta,
    threads: usize,
) -> String {
    let mut out = header(report, meta, (threads, processes.len()));
    process_table(&mut out, report, processes);
    feature_tables(&mut out, report);
    super::functions::text(&mut out, functions, report.features.is_empty());
    thread_table(&mut out, report, thread_times);
    let notes = super::notes::notes(report, meta, threads);
    if !notes.is_empty() {
        let _ = writeln!(out, "Notes:");
        for note in notes {
            let _ = writeln!(out, "  - {note}");
        }
    }
    out
}

/// How the time counted divides between processes, when the recording followed the program's
/// children: the twenty with the most.
fn process_table(out: &mut String, report: &FeatureReport, processes: &[ProcessTime]) {
    if processes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Processes: {} (the program and its children; the tables below add them up; `fsprof report --process PID|PROGRAM` shows one):",
        processes.len()
    );
    for process in processes.iter().take(20) {
        let command: String = process.command.chars().take(100).collect();
        let parent = match process.parent {
            Some(parent) => format!(", child of {parent}"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:5.1}%  {:>7} ms  pid {}{parent}: {command}",
            report.percent(process.ns),
            ms(process.ns),
            process.pid,
        );
    }
    if processes.len() > 20 {
        let _ = writeln!(
            out,
            "  ({} more processes with less time)",
            processes.len() - 20
        );
    }
    let _ = writeln!(out);
}

/// How the time counted divides between threads, when more than one has some: the ten with
/// the most.
fn thread_table(out: &mut String, report: &FeatureReport, threads: &[ThreadTime]) {
    if threads.len() < 2 {
        return;
    }
    let _ = writeln!(
        out,
        "Threads (time counted; `fsprof report --thread NAME|TID` shows one):"
    );
    for thread in threads.iter().take(10) {
        let _ = writeln!(
            out,
            "  {:5.1}%  {:>7} ms  {} (tid {})",
            report.percent(thread.ns),
            ms(thread.ns),
            thread.name,
            thread.tid
        );
    }
    if threads.len() > 10 {
        let _ = writeln!(
            out,
            "  ({} more threads with less time)",
            threads.len() - 10
        );
    }
    let _ = writeln!(out);
}

/// What fsprof's own process spent while it recorded, as a share of one CPU over the
/// recording: on a machine with no idle CPU, it was taken from the program. Of the whole
/// recording, whichever processes the report shows (a share of the time counted below was
/// wrong for `--process`: 1032%). `None` where not measured (a profile from an older fsprof, a
/// survey).
fn describe_own_cpu(meta: &Meta) -> Option<String> {
    let us = meta.sampling.fsprof_cpu_us;
    if us == 0 {
        return None;
    }
    // Not of a recording too short to say (fsprof's start of the program and its first tick
    // are in the CPU, not in the recording's length).
    let share = match meta.duration_ns {
        wall if wall < 100_000_000 => String::new(),
        wall => format!(
            " over {:.2} s, {:.1}% of one CPU",
            wall as f64 / 1e9,
            us as f64 * 1e3 / wall as f64 * 100.0
        ),
    };
    Some(format!(
        "fsprof's own CPU while recording: {:.0} ms{share} (all its threads; where no CPU is idle, taken from the program)",
        us as f64 / 1e3
    ))
}

/// The lines above the tables: what was recorded, how time is counted, and why there is no table.
fn header(report: &FeatureReport, meta: &Meta, (threads, processes): (usize, usize)) -> String {
    let mut out = String::new();
    let program = meta.command.first().map(String::as_str).unwrap_or("?");
    let processes = match processes {
        0 | 1 => String::new(),
        n => format!(" in {n} processes"),
    };
    let _ = writeln!(
        out,
        "fsprof: {} sample{} of {} thread{}{processes} of {program} (pid {}) over {:.2} s at {} Hz; {}",
        report.samples,
        if report.samples == 1 { "" } else { "s" },
        threads,
        if threads == 1 { "" } else { "s" },
        meta.pid,
        meta.duration_ns as f64 / 1e9,
        meta.rate_hz,
        meta.end,
    );
    let _ = writeln!(out, "{}", report.view.describe());
    let native = &meta.native_stacks;
    let _ = writeln!(
        out,
        "native stacks: {}",
        match native.native_backend.as_str() {
            _ if !native.native => "not recorded (--no-native)",
            "perf" if native.perf_at_tick => "perf, one event per CPU, at the kernel's own tick (each running thread sampled when its CPU's tick finds it running, without stopping it)",
            "perf" if native.perf_per_cpu => "perf, one event per CPU (each running thread sampled every period of its CPU time, without stopping it)",
            "perf" => "perf, one event per thread (each running thread sampled every period of its CPU time, without stopping it)",
            "ptrace" => "ptrace (each running thread stopped for an instant per sample: perf was not available)",
            _ => "recorded",
        }
    );
    if let Some(line) = describe_images(report) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(line) = describe_own_cpu(meta) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out);

    if report.samples == 0 {
        let why = if meta.end.contains("exited") || meta.end.contains("killed") {
            "the program ended before the first sample"
        } else {
            "recording stopped before the first sample"
        };
        let _ = writeln!(out, "No samples were taken: {why}.");
    } else if (meta.reading.custom_labels || meta.reading.otel_context) && meta.reading.regions == 0
    {
        let how = if meta.reading.custom_labels {
            "the custom-labels ABI, as parca-agent reads them"
        } else {
            "an OpenTelemetry thread context, as the OpenTelemetry eBPF profiler reads it"
        };
        let _ = writeln!(
            out,
            "The program publishes labels ({how}), read at each sample: each label's key is a feature, its value the instance; the other features are the built-in ones."
        );
    } else if report.features.is_empty() || meta.reading.regions == 0 {
        let _ = writeln!(
            out,
            "{}{}{}.",
            if report.features.is_empty() {
                "No feature marks were seen"
            } else {
                "No marks of the program's own were seen"
            },
            if meta.reading.regions == 0 {
                " (the program has no fsprof region: it never marked, or does not link fsprof-shim)"
            } else {
                ""
            },
            if report.features.is_empty() {
                ""
            } else {
                ": the features below are the built-in ones"
            }
        );
        if report.native {
            let _ = writeln!(
                out,
                "What was recorded: the native stacks, in the function view below and in flamegraph.svg."
            );
        }
        if !meta.native_stacks.native && meta.builtin_features.is_empty() {
            let _ = writeln!(
                out,
                "Built-in features (input, output, allocation, locks, ...) come from the native stacks, not taken here (--no-native), or from fsprof's agent in the program from its start: `fsprof run --agent -- PROGRAM`, or start it with LD_PRELOAD=$(fsprof agent) and attach to it."
            );
        }
    }
    out
}

/// One table per feature: its share, its instances and their most expensive call paths.
fn feature_tables(out: &mut String, report: &FeatureReport) {
    let total = ms(report.total_ns);
    // A feature seen only in samples that count no time (a blocked thread's, outside every
    // wait) has nothing to show: "Allocation accounts for 0.00% (0 / 3196 ms)" and no line.
    let shown = (report.features.iter()).filter(|f| f.ns > 0 || f.blocked_ns > 0);
    for feature in shown {
        let _ = writeln!(
            out,
            "{} accounts for {:.2}% of {} ({} / {total} ms){}",
            capitalised(&feature.name),
            report.percent(feature.ns),
            match report.view {
                TimeView::Active => "running time",
                TimeView::All => "all thread time",
            },
            ms(feature.ns),
            blocked(
                feature.blocked_ns,
                "; threads also waited in it for ",
                ", idle time not counted"
            ),
        );
        let (shown, rest) = feature
            .instances
            .split_at(feature.instances.len().min(INSTANCES_LISTED));
        let width = shown.iter().map(|i| ms(i.ns).len()).max().unwrap_or(0);
        for instance in shown {
            let _ = writeln!(
                out,
                "  {:>width$} ms : {}{}",
                // Only waits (kept apart): no time of its own to show.
                if instance.ns == 0 {
                    "-".to_owned()
                } else {
                    ms(instance.ns)
                },
                super::short_names::elide_instance(&instance.payload),
                blocked(instance.blocked_ns, "  (+ ", " waiting)"),
            );
            // Paths under half a percent would read 0%: left out.
            for path in instance
                .paths
                .iter()
                .filter(|p| instance.share(p.ns) >= 0.5)
            {
                let _ = writeln!(
                    out,
                    "  {:width$}        {:>3.0}% {}",
                    "",
                    instance.share(path.ns),
                    describe_path(path)
                );
            }
        }
        if !rest.is_empty() {
            let ns: u64 = rest.iter().map(|instance| instance.ns).sum();
            let blocked_ns: u64 = rest.iter().map(|instance| instance.blocked_ns).sum();
            let _ = writeln!(
                out,
                "  {:>width$}      … {} more instance{}, together {} ms ({:.1}% of the feature){} (all of them: --format json)",
                "",
                rest.len(),
                if rest.len() == 1 { "" } else { "s" },
                ms(ns),
                ns as f64 * 100.0 / feature.ns.max(1) as f64,
                blocked(blocked_ns, ", + ", " waiting"),
            );
        }
        tree(out, &feature.structure.tree);
        backtracking(out, &feature.structure.backtracking);
        boundaries(out, &feature.structure.boundaries, report);
        let _ = writeln!(out);
    }
    if !report.features.is_empty() && report.no_feature_ns > 0 {
        let _ = writeln!(
            out,
            "No feature: {:.2}% ({} / {total} ms)\n",
            report.percent(report.no_feature_ns),
            ms(report.no_feature_ns),
        );
    }
}

/// Most instances of a feature the text report lists, the most costly first (the JSON report
/// has them all): a compiler's `allocation` had 121, down to a tenth of a millisecond.
const INSTANCES_LISTED: usize = 12;

/// Most nodes of a feature's tree the text report lists (the JSON report has them all).
const TREE_ROWS: usize = 40;

/// A feature's tree (its nested instances), under its table: total, self and share of the parent
/// per path, indented by depth.
fn tree(out: &mut String, tree: &Tree) {
    let nodes = &tree.nodes;
    if nodes.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  Nested instances (total, self, share of the parent):"
    );
    for node in nodes.iter().take(TREE_ROWS) {
        let share = if node.parent_ns == 0 {
            0.0
        } else {
            node.total_ns as f64 * 100.0 / node.parent_ns as f64
        };
        let _ = writeln!(
            out,
            "  {:>8} ms {:>8} ms {share:>6.1}%  {}{}",
            ms(node.total_ns),
            ms(node.self_ns),
            "  ".repeat(node.depth - 1),
            node.instance,
        );
    }
    if nodes.len() > TREE_ROWS {
        let _ = writeln!(
            out,
            "  ({} more paths in `fsprof report --format json`)",
            nodes.len() - TREE_ROWS
        );
    }
    if tree.cut_ns > 0 {
        let _ = writeln!(
            out,
            "  ({} ms of paths cut short: a tree keeps at most {MAX_NODES} nodes, and their \
             deeper instances count at the deepest node kept)",
            ms(tree.cut_ns)
        );
    }
}

/// A feature's branches of choice points (a parser's alternatives), under its table: the time
/// of each spent where a later branch was tried at the same offset, most wasted first.
fn backtracking(out: &mut String, branches: &[BranchCost]) {
    if branches.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  Backtracking (time in branches abandoned for a later one at the same offset):"
    );
    for branch in branches.iter().take(TREE_ROWS) {
        let _ = writeln!(
            out,
            "  {:>8} ms wasted of {:>8} ms  {}, branch {}",
            ms(branch.wasted_ns),
            ms(branch.ns),
            branch.choice,
            branch.branch
        );
    }
}

/// A feature's boundary checks, under its table: each edge between components with the time
/// of its checks, and under it each checked value's (also drawn in `boundaries.svg`).
fn boundaries(out: &mut String, edges: &[Edge], report: &FeatureReport) {
    if edges.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  Boundaries (checks on each edge between components):"
    );
    for edge in edges.iter().take(TREE_ROWS) {
        let _ = writeln!(
            out,
            "  {:>8} ms {:>6.2}%  {} -> {}",
            ms(edge.ns),
            report.percent(edge.ns),
            edge.from,
            edge.to
        );
        for (value, ns) in edge.values.iter().take(5) {
            let _ = writeln!(
                out,
                "  {:>8} ms {:>6.2}%      {value}",
                ms(*ns),
                report.percent(*ns)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyse;
    use crate::profile::fixtures::{build, S};

    #[test]
    fn instances_list_their_call_paths_only_with_native_stacks() {
        let s = |native, us| S {
            marks: vec![("output", Some("src/main.rs:13:28"))],
            native,
            tid: 1,
            wall_us: us,
            active_us: us,
        };
        let p = build(&[
            s(Some((vec![1, 2, 3, 4, 5], vec![5], false)), 7_000),
            s(Some((vec![1, 2], vec![2], false)), 2_000),
            s(None, 1_000),
        ]);
        let text = render(
            &analyse(&p, TimeView::Active),
            &FunctionReport::default(),
            (&[], &[]),
            &p.meta,
            1,
        );
        assert!(
            text.contains(
                "  10 ms : src/main.rs:13:28\n\
                 \x20            70% … > f2 > f3 > f4 > f5\n\
                 \x20            20% f1 > f2\n\
                 \x20            10% [no native stack]\n\n"
            ),
            "{text}"
        );
        let plain = build(&[s(None, 1_000)]);
        let text = render(
            &analyse(&plain, TimeView::Active),
            &FunctionReport::default(),
            (&[], &[]),
            &plain.meta,
            1,
        );
        assert!(text.contains("1.0 ms : src/main.rs:13:28\n\n"), "{text}");
    }
}
