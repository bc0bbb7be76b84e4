//! Whole native stacks of deep programs: `deep leaves` recurses 400 to 2,400 frames deep (up to
//! about 480 KiB of stack; `deep tenk`, 9,000 to 10,000) and marks its leaves; the leaves' time must be drawn under the
//! program's `main`, not under `[stack truncated]`, with either backend (perf copies 8 KiB of
//! stack per sample; the rest comes from an image of the thread's outer stack, checked against
//! the sample: `native/complete.rs`). `deep roots` runs the same recursion under `left_root` and
//! `right_root` in turns: each leaf must be drawn under its own root, each root's share of the
//! leaves as the program measured it. (A completion that does not check the image against the sample drew 93
//! to 97% of the leaves under one root.) And no stack may be spliced: a recursion with a leaf's
//! frames in its middle, as an image read after the thread had moved on gives (a third of the
//! leaves' time before the turn rule of `complete.rs`). `deep paths` goes down another way at
//! each descent, as a compiler does, so that with perf only the BPF program's walk at the
//! sample (`native/walk.rs`) reaches its root; each leaf must be drawn under its own way down.
//! The target runs in a frame of 600 KiB, as rustc's driver does.

use crate::support;

use std::path::Path;
use std::process::Command;
use support::interrupts::ptrace_stops_late;
use support::native::perf_backend_available;
use support::*;

/// `fsprof run --rate ACCURACY_RATE -o DIR [extra] -- deep SCENARIO SECONDS`: 3 s
/// for `roots` (perf completes less in a thread's first few hundred ms, while its images
/// accumulate, and the first phase is always `left`: in 2 s runs the left root's share read 2.9
/// points low in one run of five), 2 s otherwise.
fn record(dir: &Path, scenario: &str, extra: &[&str]) {
    let seconds = if scenario == "roots" { "3" } else { "2" };
    let deep = Path::new(&fsprof()).with_file_name("deep");
    succeeded(
        Command::new(fsprof())
            .args(["run", "--rate", ACCURACY_RATE, "-o"])
            .arg(dir)
            .args(extra)
            .arg("--")
            .arg(deep)
            .args([scenario, seconds, "--truth"])
            .arg(dir.join("truth.json")),
    );
}

/// Whether a folded stack goes down from the program's `main`, unwound to the root.
fn whole(frames: &[String]) -> bool {
    frames.iter().any(|f| f == "deep::main")
        && !frames.iter().any(|f| f.contains("[stack truncated]"))
}

/// Of the time of the stacks with a `[leaf]` mark (and a native stack): the share whose stack goes down from the
/// program's `main` (unwound to the root), and the deepest stack seen, in frames. Asserts that
/// none of them is spliced (`deep::descend`'s frames are one run, with nothing in between), and
/// none cut before it reaches `deep::descend`.
fn leaves_under_main(dir: &Path) -> (f64, usize) {
    let (mut under_main, mut all, mut deepest, mut spliced, mut cut_in_leaf) = (0, 0, 0, 0, 0);
    let mut cut_stacks = Vec::new();
    for (frames, us) in folded(dir) {
        if !frames.iter().any(|f| f.starts_with("[leaf]")) || frames[0] == NO_STACK {
            continue;
        }
        all += us;
        deepest = deepest.max(frames.len());
        if whole(&frames) {
            under_main += us;
        } else if !frames.iter().any(|f| f == "deep::descend") {
            cut_in_leaf += us;
            cut_stacks.push((us, frames.join(";")));
        }
        let descents: Vec<usize> = (0..frames.len())
            .filter(|i| frames[*i] == "deep::descend")
            .collect();
        if let (Some(first), Some(last)) = (descents.first(), descents.last()) {
            if last - first + 1 != descents.len() {
                spliced += us;
            }
        }
    }
    assert!(all > 0, "no leaf time in {}", dir.display());
    let cut_in_leaf = cut_in_leaf as f64 * 100.0 / all as f64;
    // The leaf's own frames (its spin, the clock, the vdso) are always in the copy: hardly any
    // may be cut there. 0.1 to 0.8% before `unwind.rs` took the frame pointer's popped word at
    // a `ret` from the register; after, 0.000% in 8 tests, once 0.078% (three samples in
    // `__vdso_clock_gettime` cut after it), and in a CI run at heavy preemption 0.291%: samples
    // for which the kernel had copied no stack at all, unwound from their registers to one
    // frame (seen here: a few such samples a run). Those now go without a native stack
    // (`native_uncopied`); the bound catches the old cut where it was above a quarter point.
    cut_stacks.sort_unstable_by(|a, b| b.cmp(a));
    cut_stacks.truncate(5);
    assert!(
        cut_in_leaf < 0.25,
        "{cut_in_leaf:.3}% of the leaves' time cut in the leaf's own frames; the heaviest (µs, \
         frames root first): {cut_stacks:?}"
    );
    let spliced = spliced as f64 * 100.0 / all as f64;
    assert!(
        spliced < 0.5,
        "{spliced:.2}% of the leaves' time on spliced stacks"
    );
    assert_few_without_stack(dir);
    assert_none_cut(dir);
    (under_main as f64 * 100.0 / all as f64, deepest)
}

/// No native stack was cut to its innermost frames by the profile's budget of frames (its note
/// says how many): a cut stack does not reach `main` whatever the unwinding did, so the shares
/// here would measure the budget. The targets' scenarios stay well within it.
fn assert_none_cut(dir: &Path) {
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("profile.json")).unwrap()).unwrap();
    let notes = profile["meta"]["notes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let cut = notes
        .iter()
        .filter_map(|note| note.as_str())
        .find(|note| note.contains("native stacks were cut"));
    assert!(cut.is_none(), "the profile's budget was reached: {cut:?}");
}

/// For a failure's message: the profile's counts of the native stacks taken and completed, and
/// the heaviest of the leaves' stacks not unwound to `main`, by their outermost and innermost
/// frames.
fn not_whole(dir: &Path) -> String {
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("profile.json")).unwrap()).unwrap();
    let meta = profile["meta"].as_object().unwrap();
    let counts: Vec<String> = (meta.iter())
        .filter(|(key, _)| {
            key.starts_with("native_") || key.ends_with("_ticks") || *key == "perf_lost"
        })
        .map(|(key, value)| format!("{key} {value}"))
        .collect();
    let mut stacks: Vec<(u64, String)> = (folded(dir).into_iter())
        .filter(|(frames, _)| {
            frames[0] != NO_STACK && frames.iter().any(|f| f.starts_with("[leaf]"))
        })
        .filter(|(frames, _)| !whole(frames))
        .map(|(frames, us)| {
            let ends = |range: &[String]| range.join(";");
            let (outer, inner) = (frames.len().min(3), frames.len().saturating_sub(3));
            let shown = format!(
                "{} frames: {} ... {}",
                frames.len(),
                ends(&frames[..outer]),
                ends(&frames[inner..])
            );
            (us, shown)
        })
        .collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.0));
    let heaviest: Vec<String> = (stacks.iter().take(8))
        .map(|(us, shown)| format!("  {us} µs: {shown}"))
        .collect();
    format!(
        "{}\nthe heaviest stacks not under main:\n{}",
        counts.join(", "),
        heaviest.join("\n")
    )
}

/// What the folded stacks start with where a sample has no native stack.
const NO_STACK: &str = "[no native stack]";

/// The time without a native stack, less the waits for a CPU that perf cannot place (beside a
/// busy loop, 12 to 15% of `deep leaves`' time: see `unexplained_without_stack`), is at most
/// 10% of the time: the shares above are of the stacks taken, this bounds what they leave out.
fn assert_few_without_stack(dir: &Path) {
    let (unexplained, total) = unexplained_without_stack(dir);
    assert!(
        unexplained * 10 <= total,
        "{unexplained} of {total} µs without a native stack, not waiting for a CPU"
    );
}

#[test]
fn a_2400_frame_recursion_is_unwound_to_main_with_ptrace() {
    let _serial = serial();
    if ptrace_stops_late("a 2400-frame recursion with ptrace").is_some() {
        return;
    }
    let dir = tempdir();
    record(dir.path(), "leaves", &["--backend", "ptrace"]);
    let (share, deepest) = leaves_under_main(dir.path());
    eprintln!("ptrace: {share:.1}% of the leaves' time under main; deepest stack {deepest} frames");
    assert!(share >= 95.0, "{share:.1}% under main");
    // Depths run to 2,400: stacks of more than 2,000 frames were kept whole.
    assert!(deepest > 2_000, "deepest stack {deepest} frames");
}

#[test]
fn a_2400_frame_recursion_is_unwound_to_main_with_perf() {
    let _serial = serial();
    if !perf_backend_available() {
        return; // not as root here: the perf backend is off (perf_backend_available says why)
    }
    let dir = tempdir();
    record(dir.path(), "leaves", &["--backend", "perf"]);
    let (share, deepest) = leaves_under_main(dir.path());
    eprintln!("perf: {share:.1}% of the leaves' time under main; deepest stack {deepest} frames");
    assert!(share >= 95.0, "{share:.1}% under main");
    assert!(deepest > 2_000, "deepest stack {deepest} frames");
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("profile.json")).unwrap())
            .unwrap();
    assert!(
        profile["meta"]["native_completed"].as_u64().unwrap() > 0,
        "the completions are counted"
    );
}

/// With perf, `deep leaves` beside a busy loop on every CPU: the time the recursion waits for a
/// CPU is drawn on its latest sample's stack only where its marks are those of that sample,
/// pushed at the same stack addresses; else without a native stack. (Placed by the marks alone,
/// a leaf pushed at another depth was drawn in the middle of the sample's recursion: 8 to 20% of
/// the leaves' time on spliced stacks.) Of the leaves' time with a native stack, 95% is drawn
/// under `main`.
#[test]
fn a_recursion_waiting_for_a_cpu_is_never_drawn_spliced_with_perf() {
    let _serial = serial();
    if !perf_backend_available() {
        return; // not as root here: the perf backend is off (perf_backend_available says why)
    }
    let dir = tempdir();
    {
        let _busy = BusyLoops::start();
        record(dir.path(), "leaves", &["--backend", "perf"]);
    }
    let (share, _) = leaves_under_main(dir.path()); // none spliced
    eprintln!("beside busy loops: of the leaves' time with a native stack, {share:.1}% under main");
    assert!(share >= 95.0, "{share:.1}% under main");
}

/// Per side: the share of the leaves' time with a native stack drawn under its own root, the
/// share under the other root, and the truth's share of that side in all leaf time. (Samples
/// without a native stack, which ptrace leaves when the marks moved before the stop, are not in
/// the shares: where they go is not this test's business.)
fn roots(dir: &Path) -> Vec<(&'static str, f64, f64, f64)> {
    let truth = truth(dir);
    let instances = &truth["features"]["leaf"]["instances"];
    let truth_ms = |side: &str| instances[side].as_f64().unwrap();
    let stacks: Vec<(Vec<String>, u64)> = folded(dir)
        .into_iter()
        .filter(|(frames, _)| frames[0] != NO_STACK)
        .collect();
    let with_stack: u64 = (stacks.iter())
        .filter(|(frames, _)| frames.iter().any(|f| f.starts_with("[leaf]")))
        .map(|(_, us)| us)
        .sum();
    ["left", "right"]
        .into_iter()
        .map(|side| {
            let (own, other) = match side {
                "left" => ("deep::left_root", "deep::right_root"),
                _ => ("deep::right_root", "deep::left_root"),
            };
            let (mut right, mut wrong) = (0u64, 0u64);
            for (frames, us) in &stacks {
                if !frames.iter().any(|f| f == &format!("[leaf] {side}")) {
                    continue;
                }
                if frames.iter().any(|f| f == own) {
                    right += us;
                }
                if frames.iter().any(|f| f == other) {
                    wrong += us;
                }
            }
            let share = |us: u64| us as f64 * 100.0 / with_stack as f64;
            let expected = truth_ms(side) * 100.0 / (truth_ms("left") + truth_ms("right"));
            (side, share(right), share(wrong), expected)
        })
        .collect()
}

/// `deep roots` with `backend`: each side's leaves under their own root as measured, none under
/// the other.
fn two_roots(backend: &str) {
    let dir = tempdir();
    record(dir.path(), "roots", &["--backend", backend]);
    leaves_under_main(dir.path()); // none spliced
    for (side, right, wrong, expected) in roots(dir.path()) {
        eprintln!("{backend} {side}: {right:.2}% of the leaves under its root, {wrong:.2}% under the other, truth {expected:.2}%");
        assert!(
            (right - expected).abs() <= TOLERANCE,
            "{side}: {right:.2}% against {expected:.2}%"
        );
        assert!(wrong < 0.5, "{side}: {wrong:.2}% under the other root");
    }
}

#[test]
fn leaves_under_two_roots_in_turns_are_drawn_under_their_own_root_with_perf() {
    let _serial = serial();
    if perf_backend_available() {
        again_if_stolen(|| two_roots("perf"));
    }
}

#[test]
fn leaves_under_two_roots_in_turns_are_drawn_under_their_own_root_with_ptrace() {
    let _serial = serial();
    if ptrace_stops_late("two roots with ptrace").is_some() {
        return;
    }
    again_if_stolen(|| two_roots("ptrace"));
}

#[test]
fn stacks_of_ten_thousand_frames_are_kept_whole() {
    let _serial = serial();
    let mut backends = vec![];
    if ptrace_stops_late("ten thousand frames with ptrace").is_none() {
        backends.push("ptrace");
    }
    if perf_backend_available() {
        backends.push("perf");
    }
    for backend in backends {
        let dir = tempdir();
        record(dir.path(), "tenk", &["--backend", backend]);
        let (share, deepest) = leaves_under_main(dir.path());
        eprintln!("{backend}: {share:.1}% under main; deepest stack {deepest} frames");
        // 99.4 to 99.9% with perf, 99.4 to 100% with ptrace (15 runs, 11 of them beside one
        // or two busy processes); on an Intel machine, perf 97.9 to 99.8% in 20 runs, quiet,
        // beside one or two busy processes, or pinned to one CPU with one. CI read perf 92.9%
        // once (1f6273b), on a machine it did not describe: a failure now prints what the
        // stacks not under main were. Before `tenk` kept to five depths, perf read 73 to 99%:
        // the profile's budget of 16 M native frames was spent within the two seconds and
        // later stacks were cut to their innermost frames (`assert_none_cut` now says so).
        assert!(
            share >= 95.0,
            "{backend}: {share:.1}% under main\n{}",
            not_whole(dir.path())
        );
        assert!(deepest > 9_000, "{backend}: deepest stack {deepest} frames");
    }
}

/// `deep paths` with `backend`: a compiler's way down, another at every descent (40 to 90
/// levels of four functions, 30 to 80 KiB of stack), so that with perf no image of an earlier
/// stack is this one beyond the 8 KiB copy: the BPF program's walk at the sample has to
/// reach the root (`native/walk.rs`). At least 95% of the leaves' time with a native stack is drawn under `main`,
/// and each leaf under its own descent: the two outermost levels' functions are the ones its
/// mark names.
fn paths(backend: &str) {
    let dir = tempdir();
    record(dir.path(), "paths", &["--backend", backend]);
    let (mut all, mut under_main, mut wrong) = (0u64, 0u64, 0u64);
    for (frames, us) in folded(dir.path()) {
        let Some(mark) = frames.iter().find_map(|f| f.strip_prefix("[leaf] ")) else {
            continue;
        };
        if frames[0] == NO_STACK {
            continue;
        }
        all += us;
        if !whole(&frames) {
            continue;
        }
        under_main += us;
        // Root first: the outermost levels come first.
        let outer: String = (frames.iter())
            .filter_map(|f| f.strip_prefix("deep::step_"))
            .take(2)
            .collect();
        if outer != mark {
            wrong += us;
        }
    }
    assert!(all > 0, "no leaf time");
    assert_few_without_stack(dir.path());
    let share = |us: u64| us as f64 * 100.0 / all as f64;
    eprintln!(
        "{backend}: {:.1}% of the leaves' time under main, {:.2}% under another descent",
        share(under_main),
        share(wrong)
    );
    assert!(
        share(under_main) >= 95.0,
        "{:.1}% under main",
        share(under_main)
    );
    assert!(
        share(wrong) < 0.5,
        "{:.2}% under another descent",
        share(wrong)
    );
}

#[test]
fn a_compilers_changing_ways_down_are_unwound_to_main_with_perf() {
    let _serial = serial();
    if !perf_backend_available() {
        return; // not as root here: the perf backend is off (perf_backend_available says why)
    }
    paths("perf");
}

#[test]
fn a_compilers_changing_ways_down_are_unwound_to_main_with_ptrace() {
    let _serial = serial();
    if ptrace_stops_late("a compiler's ways down with ptrace").is_some() {
        return;
    }
    paths("ptrace");
}
