//! The house's limits hold (the developers' guide): no source file over 800 lines, no struct over
//! 15 fields, no function over 150 lines, as `tests/house-limits.py` reads the workspace.

use std::path::Path;
use std::process::Command;

#[test]
fn files_structs_and_functions_stay_within_the_limits() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = Command::new("python3")
        .arg(root.join("tests/house-limits.py"))
        .arg(root)
        .output()
        .expect("python3 runs tests/house-limits.py");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// The profiler's stages, lowest first (as `profiler/src/lib.rs` declares them): a file may use
/// its own stage and the ones before it, never a later one. `fuzz` is the unit tests' mutation
/// harness; `fuzzing`, `lib` and `main` sit on top.
const STAGES: [&str; 15] = [
    "fuzz",
    "os",
    "profile",
    "program",
    "native",
    "symbolize",
    "record",
    "rules",
    "analysis",
    "render",
    "commands",
    "cli",
    "fuzzing",
    "lib",
    "main",
];

/// The stage of a file of `profiler/src`, from its path there (`native/perf.rs`: `native`).
fn stage_of(relative: &Path) -> &str {
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap();
    first.strip_suffix(".rs").unwrap_or(first)
}

/// A file's text without its unit tests (a `#[cfg(test)]` module, which ends the file by the
/// house's habit, may check its results with a later stage's functions), and with no comments.
fn production_code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    (text[..end].lines())
        .map(|line| line.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn each_stage_uses_only_the_stages_before_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("profiler/src");
    let rank = |stage: &str| STAGES.iter().position(|s| *s == stage);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let stage = stage_of(relative);
        let here = rank(stage).unwrap_or_else(|| panic!("{} is in no stage", relative.display()));
        if relative.file_name().is_some_and(|name| name == "tests.rs") {
            continue; // a module's unit tests, kept in a file of their own
        }
        let code = production_code(&std::fs::read_to_string(file).unwrap());
        for (number, line) in code.lines().enumerate() {
            for prefix in ["crate::", "fsprof::"] {
                for (at, _) in line.match_indices(prefix) {
                    let name: String = line[at + prefix.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if rank(&name).is_some_and(|there| there > here) {
                        upward.push(format!(
                            "{}:{}: {stage} uses {name}",
                            relative.display(),
                            number + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "a stage uses a later one:\n{}",
        upward.join("\n")
    );
    assert!(files.len() > 50, "{} files read", files.len());
}
