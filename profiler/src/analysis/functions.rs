//! The classic function view, from the native stacks: each function's self time (its frame was
//! the innermost) and total time (it was on the stack; a recursive function counts once per
//! sample, as Racket's `profile` counts it), with its callers and callees and the time of each
//! edge. Same weights as the feature analysis (`group_weights`), so its percentages are of the
//! same total. A function is named `function (file)` when its file is known: frames of one
//! function at different lines are one function. The agent's own frames are left out: their
//! time is their caller's (the agent's cost is a note of its own). It does not render.

use super::{group_weights, TimeView};
use crate::profile::{NativeFrame, Profile};
use std::collections::{HashMap, HashSet};

/// One function's costs.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionCost {
    /// `function (file)`, or the function alone.
    pub name: String,
    /// Time it was the innermost frame.
    pub self_ns: u64,
    /// Time it was on the stack.
    pub total_ns: u64,
    /// The functions that called it, with the time of the calls, most first.
    pub callers: Vec<(String, u64)>,
    /// The functions it called, with the time of the calls, most first.
    pub callees: Vec<(String, u64)>,
}

/// The function view of a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FunctionReport {
    /// The time counted (the feature report's total).
    pub total_ns: u64,
    /// Of that, samples without a native stack.
    pub without_stack_ns: u64,
    /// Functions by self time, most first (then by total time, then by name).
    pub functions: Vec<FunctionCost>,
}

impl FunctionReport {
    /// `part_ns` as a percentage of the time counted, 0–100.
    pub fn percent(&self, part_ns: u64) -> f64 {
        if self.total_ns == 0 {
            0.0
        } else {
            part_ns as f64 * 100.0 / self.total_ns as f64
        }
    }
}

/// Runs the analysis (empty for a profile without native stacks). Linear in the size of the
/// sample groups' native stacks.
pub fn functions(profile: &Profile, view: TimeView) -> FunctionReport {
    let weights = group_weights(profile, view);
    let mut report = FunctionReport {
        total_ns: weights.iter().sum(),
        ..FunctionReport::default()
    };
    // Each native frame's function, as an index into `names` (None: the agent's).
    let mut names: Vec<String> = Vec::new();
    let mut by_name: HashMap<String, u32> = HashMap::new();
    let ids: Vec<Option<u32>> = profile
        .native_frames
        .iter()
        .map(|frame| {
            (!crate::program::modules::is_agent_path(&frame.module)).then(|| {
                let name = display_name(frame);
                *by_name.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    names.len() as u32 - 1
                })
            })
        })
        .collect();
    let mut self_ns = vec![0u64; names.len()];
    let mut total_ns = vec![0u64; names.len()];
    let mut edges: HashMap<(u32, u32), u64> = HashMap::new();
    let (mut on_stack, mut calls) = (HashSet::new(), HashSet::new());
    let mut chain: Vec<u32> = Vec::new();
    for (group, &ns) in profile.samples.iter().zip(&weights) {
        if ns == 0 {
            continue;
        }
        let Some(native) = group
            .native
            .and_then(|id| profile.native_stacks.get(id as usize))
        else {
            report.without_stack_ns += ns;
            continue;
        };
        chain.clear();
        chain.extend(
            native
                .frames
                .iter()
                .filter_map(|frame| ids.get(*frame as usize).copied().flatten()),
        );
        let Some(&leaf) = chain.last() else {
            report.without_stack_ns += ns;
            continue;
        };
        self_ns[leaf as usize] += ns;
        on_stack.clear();
        calls.clear();
        for &function in &chain {
            if on_stack.insert(function) {
                total_ns[function as usize] += ns;
            }
        }
        for pair in chain.windows(2) {
            if pair[0] != pair[1] && calls.insert((pair[0], pair[1])) {
                *edges.entry((pair[0], pair[1])).or_default() += ns;
            }
        }
    }
    let mut callers: Vec<Vec<(String, u64)>> = vec![Vec::new(); names.len()];
    let mut callees: Vec<Vec<(String, u64)>> = vec![Vec::new(); names.len()];
    for ((caller, callee), ns) in edges {
        callers[callee as usize].push((names[caller as usize].clone(), ns));
        callees[caller as usize].push((names[callee as usize].clone(), ns));
    }
    for (id, name) in names.into_iter().enumerate() {
        if total_ns[id] == 0 {
            continue;
        }
        let most_first = |mut list: Vec<(String, u64)>| {
            list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            list
        };
        report.functions.push(FunctionCost {
            name,
            self_ns: self_ns[id],
            total_ns: total_ns[id],
            callers: most_first(std::mem::take(&mut callers[id])),
            callees: most_first(std::mem::take(&mut callees[id])),
        });
    }
    report.functions.sort_by(|a, b| {
        (b.self_ns, b.total_ns)
            .cmp(&(a.self_ns, a.total_ns))
            .then_with(|| a.name.cmp(&b.name))
    });
    report
}

/// `function (file)` (the file without Rust's `/rustc/<commit>/` or Cargo's registry prefix), or
/// the function alone.
fn display_name(frame: &NativeFrame) -> String {
    match &frame.file {
        Some(file) => format!(
            "{} ({})",
            frame.function,
            crate::symbolize::call_sites::short_path(file)
        ),
        None => frame.function.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::{build, S};

    /// f0 > f1 > f2 (300), f0 > f1 (200), f0 > f3 (500), f0 > f4 > f4 (100), and 50 without a
    /// native stack (the fake symbolizer names address n `fn`, with no file).
    fn profile() -> Profile {
        let s = |native: Option<Vec<u64>>, us| S {
            marks: vec![],
            native: native.map(|frames| (frames, vec![], false)),
            tid: 1,
            wall_us: us,
            active_us: us,
        };
        build(&[
            s(Some(vec![0, 1, 2]), 300),
            s(Some(vec![0, 1]), 200),
            s(Some(vec![0, 3]), 500),
            s(Some(vec![0, 4, 4]), 100),
            s(None, 50),
        ])
    }

    #[test]
    fn self_and_total_time_with_callers_and_callees_recursion_counted_once() {
        let report = functions(&profile(), TimeView::Active);
        let us = |ns: u64| ns / 1000;
        assert_eq!(
            (us(report.total_ns), us(report.without_stack_ns)),
            (1150, 50)
        );
        let get = |name: &str| report.functions.iter().find(|f| f.name == name).unwrap();
        let times = |name: &str| (us(get(name).self_ns), us(get(name).total_ns));
        assert_eq!(times("f0"), (0, 1100));
        assert_eq!(times("f1"), (200, 500));
        assert_eq!(times("f2"), (300, 300));
        assert_eq!(times("f3"), (500, 500));
        assert_eq!(times("f4"), (100, 100));
        assert_eq!(report.functions[0].name, "f3");
        let edges = |list: &[(String, u64)]| {
            list.iter()
                .map(|(name, ns)| (name.clone(), us(*ns)))
                .collect::<Vec<_>>()
        };
        assert_eq!(edges(&get("f2").callers), vec![("f1".to_owned(), 300)]);
        assert_eq!(
            edges(&get("f0").callees),
            vec![
                ("f1".to_owned(), 500),
                ("f3".to_owned(), 500),
                ("f4".to_owned(), 100)
            ]
        );
        assert_eq!(edges(&get("f4").callers), vec![("f0".to_owned(), 100)]);
        assert!(get("f4").callees.is_empty());
        assert!((report.percent(500_000) - 43.478).abs() < 0.01);
    }
}
