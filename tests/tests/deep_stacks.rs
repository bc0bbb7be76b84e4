//! Whole native stacks of deep programs: `deep leaves` recurses 400 to 2,400 frames deep (up to
//! about 480 KiB of stack) and marks its leaves; the leaves' time must be drawn under the
//! program's `main`, not under `[stack truncated]`. With the ptrace backend today; the perf
//! backend copies 16 KiB of stack per sample and does not complete deeper stacks yet (see
//! README, "Limits today").

mod support;

use std::path::Path;
use std::process::Command;
use support::*;

/// `fsprof run --no-agent --rate ACCURACY_RATE -o DIR [extra] -- deep SCENARIO 2`.
fn record(dir: &Path, scenario: &str, extra: &[&str]) {
    let deep = Path::new(&fsprof()).with_file_name("deep");
    let output = Command::new(fsprof())
        .args(["run", "--no-agent", "--rate", ACCURACY_RATE, "-o"])
        .arg(dir)
        .args(extra)
        .arg("--")
        .arg(deep)
        .args([scenario, "2", "--truth"])
        .arg(dir.join("truth.json"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fsprof run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Of the time of the stacks with a `[leaf]` mark: the share whose stack goes down from the
/// program's `main` (unwound to the root), and the deepest stack seen, in frames.
fn leaves_under_main(dir: &Path) -> (f64, usize) {
    let (mut under_main, mut all, mut deepest) = (0, 0, 0);
    for (frames, us) in folded(dir) {
        if !frames.iter().any(|f| f.starts_with("[leaf]")) {
            continue;
        }
        all += us;
        deepest = deepest.max(frames.len());
        if frames.iter().any(|f| f == "deep::main")
            && !frames.iter().any(|f| f.contains("[stack truncated]"))
        {
            under_main += us;
        }
    }
    assert!(all > 0, "no leaf time in {}", dir.display());
    (under_main as f64 * 100.0 / all as f64, deepest)
}

#[test]
fn a_2400_frame_recursion_is_unwound_to_main_with_ptrace() {
    let _serial = serial();
    let dir = tempdir();
    record(dir.path(), "leaves", &["--backend", "ptrace"]);
    let (share, deepest) = leaves_under_main(dir.path());
    eprintln!("ptrace: {share:.1}% of the leaves' time under main; deepest stack {deepest} frames");
    assert!(share >= 95.0, "{share:.1}% under main");
    // Depths run to 2,400: stacks of more than 2,000 frames were kept whole.
    assert!(deepest > 2_000, "deepest stack {deepest} frames");
}
