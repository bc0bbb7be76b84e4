//! Whole-input entry points for fuzzing the readers of untrusted bytes: a profile file (loaded,
//! then every report rendered from it) and a target's region (its header, every slot's marks,
//! every slot's history). Each takes any bytes and must not panic; what it reads is bounded by
//! the readers themselves (a stack's depth, a slot's capacity, a history's size), and the entry
//! asserts those bounds on what comes out.
//!
//! Two harnesses drive them: the test suite, over mutations of valid inputs for a fixed number
//! of cases (`tests` below; `FSPROF_FUZZ_CASES` scales it, see `fuzz.rs`), and cargo-fuzz's
//! coverage-guided targets in `fuzz/` (nightly; `fuzz/README.md`). Built for tests and with the
//! `fuzzing` feature only. Not here: the readers.

use crate::analysis::{self, TimeView};
use crate::commands::report::{Format, ReportOptions};
use crate::profile::Profile;
use crate::rules::RuleSet;
use std::path::Path;

/// Loads `bytes` as a profile file and renders every report from it, in both time views: the
/// text, JSON, folded (with and without native frames), pprof and speedscope formats, the
/// flamegraph and the boundary graph, and the report of one thread and of one process. Returns
/// whether the bytes were loaded as a profile (most mutations are refused: the harnesses count
/// how many got through).
pub fn profile_file(bytes: &[u8]) -> bool {
    let Ok(profile) = Profile::parse(bytes, Path::new("fuzzed")) else {
        return false;
    };
    let thread = profile.threads.first().map(|t| t.tid.to_string());
    let process = profile.meta.pid.to_string();
    for idle in [false, true] {
        for format in [
            Format::Text,
            Format::Json,
            Format::Folded,
            Format::Pprof,
            Format::Speedscope,
        ] {
            let options = ReportOptions {
                format,
                output: None,
                idle,
                features_only: idle && format == Format::Folded,
                flamegraph: None,
                boundaries: None,
                thread: None,
                process: None,
                rules: RuleSet::catalog(),
            };
            // A report may refuse a profile (a filter that matches nothing): not a failure.
            let _ = crate::commands::report::report_profile(
                profile.clone(),
                Path::new("fuzzed"),
                &options,
            );
        }
        let filtered = ReportOptions {
            format: Format::Text,
            output: None,
            idle,
            features_only: false,
            flamegraph: None,
            boundaries: None,
            thread: thread.clone().filter(|_| idle),
            process: Some(process.clone()).filter(|_| !idle),
            rules: RuleSet::default(),
        };
        let _ = crate::commands::report::report_profile(
            profile.clone(),
            Path::new("fuzzed"),
            &filtered,
        );
        let view = if idle {
            TimeView::All
        } else {
            TimeView::Active
        };
        let folded = crate::render::folded::fold(&profile, view, false);
        crate::render::flamegraph::svg(&folded).expect("an SVG in memory");
        crate::render::boundary_graph::svg(&analysis::analyse(&profile, view));
    }
    true
}

/// Reads `bytes` as a target's region laid out from its start (the rest of the region zero), the
/// way fsprof reads a region it cannot map: the header, every used slot's marks, and each of the
/// first slots' history, from the start and from a point the input's last word gives. Returns
/// how many records and history entries came through.
pub fn region(bytes: &[u8]) -> usize {
    crate::program::region::read_arbitrary(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A real profile (a process tree with marks, call sites, trees, alternatives, boundaries
    /// and native stacks; its texts hold escape sequences), as `fsprof run` wrote it.
    const RECORDED: &[u8] = include_bytes!("../../tests/data/esc-profile.json");

    /// The recorded profile and mutations of it, byte by byte and node by node (see
    /// [`mutate_json`]): every one loads or is refused, and renders, without a panic; a share
    /// of the node mutations must load, or the harness is not reaching the renderers.
    #[test]
    fn arbitrary_profile_files_load_and_render_or_are_refused() {
        assert!(profile_file(RECORDED), "the recorded profile does not load");
        let valid: Value = serde_json::from_slice(RECORDED).unwrap();
        let mut rng = fastrand::Rng::with_seed(40);
        let cases = crate::fuzz::cases(60);
        let mut loaded = 0;
        for case in 0..cases {
            let bytes = if case % 4 == 0 {
                crate::fuzz::mutate(&mut rng, RECORDED)
            } else {
                let mut value = valid.clone();
                for _ in 0..rng.usize(1..3) {
                    mutate_json(&mut rng, &mut value);
                }
                serde_json::to_vec(&value).unwrap()
            };
            loaded += usize::from(profile_file(&bytes));
        }
        eprintln!("{loaded} of {cases} mutated profiles loaded and rendered");
        assert!(
            loaded * 5 >= cases,
            "{loaded} of {cases} mutated profiles loaded: the renderers were hardly reached"
        );
    }

    /// A region this process made by marking through the shim (a header, one slot with marks and
    /// an alternative in its history), and mutations of it: every one is read within the
    /// capacities, without a panic.
    #[test]
    fn arbitrary_regions_read_whole_stay_within_bounds() {
        static FEATURE: fsprof_shim::Feature = fsprof_shim::Feature::new("fuzzed");
        let _outer = FEATURE.mark_with("outer");
        let _choice = FEATURE.mark_alternative("choice", 1, 7);
        let address = fsprof_shim::region_address().expect("marking made a region");
        let used = fsprof_shim::abi::HEADER_SIZE + 2 * fsprof_shim::abi::SLOT_SIZE;
        let mut valid = vec![0u8; used];
        crate::program::remote::Remote::new(std::process::id())
            .read(address as u64, &mut valid)
            .unwrap();
        assert!(region(&valid) > 0, "the valid region read as empty");
        let mut rng = fastrand::Rng::with_seed(41);
        for _ in 0..crate::fuzz::cases(300) {
            let bytes = crate::fuzz::mutate(&mut rng, &valid);
            region(&bytes);
        }
        for _ in 0..crate::fuzz::cases(30) {
            let len = rng.usize(..used);
            region(&crate::fuzz::bytes(&mut rng, len));
        }
    }

    /// Changes one node of `value`, chosen at random along a path from the root: a number
    /// becomes an extreme one, a string a long or odd one, an array loses, repeats or reorders
    /// elements, an object loses a key; or the node becomes another type.
    fn mutate_json(rng: &mut fastrand::Rng, node: &mut Value) {
        let descend = rng.u8(..4) != 0;
        match node {
            Value::Array(items) if descend && !items.is_empty() => {
                let at = rng.usize(..items.len());
                return mutate_json(rng, &mut items[at]);
            }
            Value::Object(fields) if descend && !fields.is_empty() => {
                let at = rng.usize(..fields.len());
                return mutate_json(rng, fields.values_mut().nth(at).unwrap());
            }
            _ => {}
        }
        *node = match std::mem::take(node) {
            Value::Number(_) => match rng.u8(..8) {
                0 => Value::from(u64::MAX),
                1 => Value::from(-1),
                2 => Value::from(u32::MAX),
                3 => Value::from(1e300),
                4 | 5 => Value::from(rng.u64(..64)),
                _ => Value::from(0),
            },
            Value::String(text) => match rng.u8(..4) {
                0 => Value::from("\u{1b}[2J\u{7}\u{202e}"),
                1 => Value::from(text.repeat(rng.usize(2..64))),
                2 => Value::from(""),
                _ => Value::from(format!("{text};[stack truncated] … \0")),
            },
            Value::Array(mut items) => {
                match rng.u8(..4) {
                    0 => items.truncate(rng.usize(..=items.len())),
                    1 if !items.is_empty() => {
                        let copy = items[rng.usize(..items.len())].clone();
                        let times = rng.usize(1..256);
                        items.extend(std::iter::repeat_n(copy, times));
                    }
                    2 => items.reverse(),
                    _ => items.clear(),
                }
                Value::Array(items)
            }
            Value::Object(mut fields) => {
                if let Some(key) = fields.keys().nth(rng.usize(..fields.len().max(1))).cloned() {
                    fields.remove(&key);
                }
                Value::Object(fields)
            }
            Value::Bool(b) => Value::from(!b),
            Value::Null => Value::from(rng.u64(..)),
        };
        if rng.u8(..32) == 0 {
            *node = Value::Null;
        }
    }
}
