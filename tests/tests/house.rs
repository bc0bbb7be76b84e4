//! The house's shape holds: each stage of the profiler uses only the stages before it, and no
//! module imports one that imports it back. (Sizes are not checked: `tests/house-limits.py` lists
//! the rooms past the guide's hints, for a reader to ask whether they do two jobs.)

use std::collections::{HashMap, HashSet};
use std::path::Path;

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

/// The module a file of `profiler/src` is (`native/perf.rs`: `native::perf`; a `mod.rs` is its
/// folder's), `None` for the crate's root files.
fn module_of(relative: &Path) -> Option<String> {
    let text = relative.with_extension("").to_str()?.replace('/', "::");
    let text = text.strip_suffix("::mod").unwrap_or(&text).to_owned();
    (!matches!(text.as_str(), "lib" | "main")).then_some(text)
}

/// The modules a module's production code names (`crate::a::b::NAME` is `a::b`, the longest
/// prefix that is a module; `super::x` is resolved from where it is written), but its own
/// submodules, which are part of it.
fn modules_used(module: &str, code: &str, all: &HashSet<String>) -> HashSet<String> {
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|m| all.contains(m))
    };
    // `super::` in `a/b.rs` (module `a::b`) and in `a/mod.rs`'s submodules alike: the parent.
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let mut used = HashSet::new();
    for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_owned())] {
        for (at, _) in code.match_indices(prefix) {
            if prefix == "crate::" && at >= 6 && &code[at - 6..at] == "super::" {
                continue;
            }
            let path: String = code[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let full = match base.is_empty() {
                true => path.clone(),
                false => format!("{base}::{path}"),
            };
            if let Some(target) = resolve(full.trim_end_matches(':')) {
                if target != module && !target.starts_with(&format!("{module}::")) {
                    used.insert(target);
                }
            }
        }
    }
    used
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("profiler/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut code = HashMap::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        if relative.file_name().is_some_and(|name| name == "tests.rs") {
            continue;
        }
        if let Some(module) = module_of(relative) {
            code.insert(
                module,
                production_code(&std::fs::read_to_string(file).unwrap()),
            );
        }
    }
    let all: HashSet<String> = code.keys().cloned().collect();
    let graph: HashMap<String, HashSet<String>> = (code.iter())
        .map(|(module, text)| (module.clone(), modules_used(module, text, &all)))
        .collect();
    // A depth-first search: a module met again while it is on the path closes a loop.
    fn visit(
        module: &str,
        graph: &HashMap<String, HashSet<String>>,
        path: &mut Vec<String>,
        done: &mut HashSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut cycle = path[at..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if !done.insert(module.to_owned()) {
            return None;
        }
        path.push(module.to_owned());
        let mut next: Vec<&String> = graph.get(module).into_iter().flatten().collect();
        next.sort();
        for used in next {
            if let Some(cycle) = visit(used, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut modules: Vec<&String> = graph.keys().collect();
    modules.sort();
    let mut done = HashSet::new();
    for module in modules {
        if let Some(cycle) = visit(module, &graph, &mut Vec::new(), &mut done) {
            panic!("an import loop: {}", cycle.join(" -> "));
        }
    }
    assert!(graph.len() > 50, "{} modules read", graph.len());
}
