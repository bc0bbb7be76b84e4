//! The feature analysis (the paper's section 14.3): how much time each feature, and each instance of
//! it, costs.
//!
//! Which marks a sample counts for is `attribution.rs`'s rule (per feature its innermost frame,
//! when a mark; features are independent: nested features both count a sample; a `write` under
//! the program's `output` mark is that mark's cost).
//!
//! Which time a sample stands for is the [`TimeView`]; `weights.rs`'s `group_weights` gives it for every sample
//! group (the folded stacks and flamegraphs count with it). In the default view, blocked time
//! counts only inside one of the program's own marks: a thread blocked in a libc call that only
//! the agent marked (a parked worker in `pthread_cond_wait`, a `poll` loop between requests) is
//! idle, not cost; that time is kept apart as the built-in feature's `blocked_ns`. And when the
//! process ran several programs one after the other (a wrapper script that `exec`s the real
//! one), the default view is of the last; the earlier ones are reported apart.
//!
//! When the profile has native stacks, the most expensive instances of each feature also get their
//! most expensive native call paths: the last few native frames before the instance's mark, so a
//! user sees which use of a feature costs. This module computes numbers only; the renderers turn
//! them into text, JSON or flamegraphs.

use super::attribution::{attribute, innermost_marks};
use super::weights::{counts_image, TimeView};
use crate::profile::{PayloadKind, Profile, SampleGroup};
use crate::symbolize::runtime_code;
use std::collections::HashMap;

/// Instances per feature (the most expensive) that get their call paths.
pub const PATH_INSTANCES: usize = 5;
/// Call paths kept per instance (the most expensive).
pub const PATHS_PER_INSTANCE: usize = 3;
/// Native frames a call path shows: the innermost ones before the mark.
pub const PATH_FRAMES: usize = 4;

/// The cost of one feature.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureCost {
    /// Feature name.
    pub name: String,
    /// Time attributed to it.
    pub ns: u64,
    /// Samples attributed to it.
    pub samples: u64,
    /// Time blocked inside it that does not count (see [`TimeView::Active`]): the built-in
    /// feature's waits outside the program's own marks. Zero with [`TimeView::All`].
    pub blocked_ns: u64,
    /// Its instances, most expensive first.
    pub instances: Vec<InstanceCost>,
    /// Marked (at least in part) by the agent's libc interposition: a built-in feature.
    pub builtin: bool,
    /// What its marks say beyond the time of each instance (`structure.rs`).
    pub structure: super::Structure,
}

/// The cost of one feature instance.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceCost {
    /// The payload's display text.
    pub payload: String,
    /// Time attributed to it.
    pub ns: u64,
    /// Samples attributed to it.
    pub samples: u64,
    /// Time blocked inside it that does not count (see [`FeatureCost::blocked_ns`]).
    pub blocked_ns: u64,
    /// The native call paths that reached its mark, most expensive first: at most
    /// [`PATHS_PER_INSTANCE`], and only for the [`PATH_INSTANCES`] most expensive instances of a
    /// feature in a profile with native stacks (empty otherwise).
    pub paths: Vec<CallPath>,
    /// Time of all its call paths (those left out included): what path shares are of. Equal to
    /// `ns` unless some stacks were taken with marks of their own (see `NativeStack::marks`).
    pub paths_ns: u64,
}

impl InstanceCost {
    /// `part` as a percentage of the instance's time, 0–100.
    pub fn share(&self, part_ns: u64) -> f64 {
        if self.paths_ns == 0 {
            0.0
        } else {
            part_ns as f64 * 100.0 / self.paths_ns as f64
        }
    }
}

/// Where an instance's mark was pushed from: the native frames right before it in the combined
/// stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallPath {
    /// Function names of the innermost native frames before the mark (at most [`PATH_FRAMES`]),
    /// outer to inner. Empty when the samples had no native stack (`cut` false), or when the mark
    /// was pushed above the frames that were unwound (`cut` true).
    pub functions: Vec<String>,
    /// Frames are left out at the outer end: the path is deeper than shown, or unwinding stopped
    /// before the thread's root.
    pub cut: bool,
    /// Time of the instance that went through this path.
    pub ns: u64,
    /// Samples of the instance that went through this path.
    pub samples: u64,
}

/// The result of the analysis.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureReport {
    /// Time view used.
    pub view: TimeView,
    /// Number of samples.
    pub samples: u64,
    /// Total counted time: the denominator of every percentage.
    pub total_ns: u64,
    /// Time threads spent blocked inside built-in marks only, not counted in `total_ns`.
    pub blocked_ns: u64,
    /// Features seen in any sample, most expensive first.
    pub features: Vec<FeatureCost>,
    /// Samples whose mark stack was deeper than the recorded capacity.
    pub truncated_samples: u64,
    /// Deepest mark stack seen, when some were truncated.
    pub max_truncated_depth: u32,
    /// Whether the profile has native stacks (then instances have call paths).
    pub native: bool,
    /// The program images the process ran, when it ran more than one (an `exec`): in the
    /// default view only the last one's samples count, the others are reported apart.
    pub images: Vec<ImageTime>,
    /// Counted time of the samples taken with a native stack.
    pub native_ns: u64,
    /// Of that, samples whose innermost native frame is the agent's own code: the cost of its
    /// interposition, inside the built-in marks or not (see [`agent_share`](Self::agent_share)).
    pub agent_ns: u64,
    /// Time outside every feature (no mark counted for it).
    pub no_feature_ns: u64,
}

/// The time of one program image (see [`FeatureReport::images`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ImageTime {
    /// Its name (`/proc/PID/comm`).
    pub name: String,
    /// All its threads' wall time.
    pub wall_ns: u64,
    /// Of that, running or waiting for a CPU.
    pub active_ns: u64,
    /// Whether its samples count in the report's features and total.
    pub counted: bool,
}

impl FeatureReport {
    /// The share of the time sampled with a native stack that the thread spent in the agent's
    /// own code (interposing libc), 0–100; `None` without native stacks.
    pub fn agent_share(&self) -> Option<f64> {
        (self.native_ns > 0).then(|| self.agent_ns as f64 * 100.0 / self.native_ns as f64)
    }

    /// `part` as a percentage of the total, 0–100.
    pub fn percent(&self, part_ns: u64) -> f64 {
        if self.total_ns == 0 {
            0.0
        } else {
            part_ns as f64 * 100.0 / self.total_ns as f64
        }
    }
}

/// Runs the analysis. Linear in the total size of the profile's stacks and samples.
pub fn analyse(profile: &Profile, view: TimeView) -> FeatureReport {
    let feature_count = profile.features.len();
    let mut seen = vec![false; feature_count];
    let mut feature_ns = vec![0u64; feature_count];
    let mut feature_samples = vec![0u64; feature_count];
    let mut feature_blocked = vec![0u64; feature_count];
    // For the innermost-frame-per-feature walk: the stack last seen to have this feature.
    let mut visited_in = vec![usize::MAX; feature_count];
    // Per instance: (ns, samples, blocked ns).
    let mut instances: HashMap<(u32, u32), (u64, u64, u64)> = HashMap::new();
    // (feature, payload, mark's index in the mark stack)
    let mut attributed: Vec<(u32, u32, usize)> = Vec::new();
    let native = !profile.native_stacks.is_empty();
    let instance_of = profile.instance_ids();
    // Per instance (feature, payload), per call path: (ns, samples).
    let mut paths: HashMap<(u32, u32), PathCosts> = HashMap::new();
    let mut report = FeatureReport {
        view,
        samples: 0,
        total_ns: 0,
        blocked_ns: 0,
        features: Vec::new(),
        truncated_samples: 0,
        max_truncated_depth: 0,
        native,
        images: image_times(profile, view),
        native_ns: 0,
        agent_ns: 0,
        no_feature_ns: 0,
    };

    for (index, group) in profile.samples.iter().enumerate() {
        if !counts_image(profile, view, group) {
            continue;
        }
        let stack = &profile.stacks[group.stack as usize];
        attribute(stack, index, &mut seen, &mut visited_in, &mut attributed);
        // Inside one of the program's own marks, blocked time counts too (see
        // `TimeView::Active`); inside built-in marks only, it is kept apart.
        let own = attributed
            .iter()
            .any(|(_, _, at)| !stack.frames[*at].builtin);
        let (ns, blocked) = match view {
            TimeView::Active if !own => (
                group.active_ns,
                group.wall_ns.saturating_sub(group.active_ns),
            ),
            _ => (group.wall_ns, 0),
        };
        let blocked = if attributed.is_empty() { 0 } else { blocked };
        report.samples = report.samples.saturating_add(group.count);
        report.total_ns = report.total_ns.saturating_add(ns);
        if attributed.is_empty() {
            report.no_feature_ns = report.no_feature_ns.saturating_add(ns);
        }
        report.blocked_ns = report.blocked_ns.saturating_add(blocked);
        count_native(&mut report, profile, group, ns);
        if let Some(depth) = stack.truncated_depth {
            report.truncated_samples = report.truncated_samples.saturating_add(group.count);
            report.max_truncated_depth = report.max_truncated_depth.max(depth);
        }
        for (feature, payload, _) in &attributed {
            let f = *feature as usize;
            feature_ns[f] = feature_ns[f].saturating_add(ns);
            feature_samples[f] = feature_samples[f].saturating_add(group.count);
            feature_blocked[f] = feature_blocked[f].saturating_add(blocked);
            let entry = instances
                .entry((*feature, instance_of[*payload as usize]))
                .or_default();
            entry.0 = entry.0.saturating_add(ns);
            entry.1 = entry.1.saturating_add(group.count);
            entry.2 = entry.2.saturating_add(blocked);
        }
        // Call paths: a native stack taken with marks of its own counts for the instances of
        // those marks (the flamegraph's view); otherwise for the sample's.
        if native {
            let stack = group
                .native
                .and_then(|id| profile.native_stacks[id as usize].marks);
            let own = stack.map(|own| innermost_marks(&profile.stacks[own as usize]));
            for (feature, payload, at) in own.as_ref().unwrap_or(&attributed) {
                let path = call_path(profile, group, *at);
                let entry = paths
                    .entry((*feature, instance_of[*payload as usize]))
                    .or_default()
                    .entry(path)
                    .or_default();
                entry.0 = entry.0.saturating_add(ns);
                entry.1 = entry.1.saturating_add(group.count);
            }
        }
    }

    let mut by_feature: Vec<Vec<(InstanceCost, u32)>> = vec![Vec::new(); feature_count];
    for ((feature, payload), (ns, samples, blocked_ns)) in instances {
        let instance = InstanceCost {
            payload: profile.payloads[payload as usize].text.clone(),
            ns,
            samples,
            blocked_ns,
            paths: Vec::new(),
            paths_ns: ns,
        };
        by_feature[feature as usize].push((instance, payload));
    }
    let mut structures = super::structure::structures(profile, view);
    // Features with the same name (two descriptors) were interned to one id by the recorder.
    for ((id, name), mut instances) in profile.features.iter().enumerate().zip(by_feature) {
        if !seen[id] {
            continue;
        }
        instances.sort_by(|(a, _), (b, _)| {
            (b.ns, b.blocked_ns)
                .cmp(&(a.ns, a.blocked_ns))
                .then_with(|| a.payload.cmp(&b.payload))
        });
        for (instance, payload) in instances.iter_mut().take(PATH_INSTANCES) {
            if let Some(found) = paths.remove(&(id as u32, *payload)) {
                instance.paths_ns = found.values().map(|(ns, _)| ns).sum();
                instance.paths = top_paths(found);
            }
        }
        report.features.push(FeatureCost {
            builtin: profile.meta.builtin_features.contains(name),
            name: name.clone(),
            ns: feature_ns[id],
            samples: feature_samples[id],
            blocked_ns: feature_blocked[id],
            instances: instances.into_iter().map(|(i, _)| i).collect(),
            structure: structures.remove(&(id as u32)).unwrap_or_default(),
        });
    }
    report.features.sort_by(|a, b| {
        (b.ns, b.blocked_ns)
            .cmp(&(a.ns, a.blocked_ns))
            .then_with(|| a.name.cmp(&b.name))
    });
    report
}

/// Adds `ns` of `group` to the time sampled with a native stack, and to the agent's own time
/// when the stack's innermost frame is in the agent.
fn count_native(report: &mut FeatureReport, profile: &Profile, group: &SampleGroup, ns: u64) {
    let Some(native) = group
        .native
        .and_then(|id| profile.native_stacks.get(id as usize))
    else {
        return;
    };
    report.native_ns = report.native_ns.saturating_add(ns);
    let innermost = native
        .frames
        .last()
        .and_then(|f| profile.native_frames.get(*f as usize));
    if innermost.is_some_and(|frame| crate::program::modules::is_agent_path(&frame.module)) {
        report.agent_ns = report.agent_ns.saturating_add(ns);
    }
}

/// The time of each program image the program's process ran (not its children's), when there
/// were several.
fn image_times(profile: &Profile, view: TimeView) -> Vec<ImageTime> {
    let own = |image: &crate::profile::Image| image.process == 0;
    if profile.images.iter().filter(|image| own(image)).count() < 2 {
        return Vec::new();
    }
    let mut times: Vec<ImageTime> = profile
        .images
        .iter()
        .map(|image| ImageTime {
            name: image.name.clone(),
            wall_ns: 0,
            active_ns: 0,
            counted: false,
        })
        .collect();
    for group in &profile.samples {
        if let Some(time) = times.get_mut(group.image as usize) {
            time.wall_ns = time.wall_ns.saturating_add(group.wall_ns);
            time.active_ns = time.active_ns.saturating_add(group.active_ns);
            time.counted = counts_image(profile, view, group);
        }
    }
    let mut index = 0;
    times.retain(|_| {
        index += 1;
        own(&profile.images[index - 1])
    });
    if let Some(last) = times.last_mut() {
        last.counted = true;
    }
    times
}

/// The call path of the mark at index `mark` of the mark stack `group`'s native stack was placed
/// with: the function names of the innermost [`PATH_FRAMES`] native frames before it, less the
/// runtime's frames innermost (libc, Rust's standard library), and whether frames are left out.
fn call_path<'a>(profile: &'a Profile, group: &SampleGroup, mark: usize) -> (Vec<&'a str>, bool) {
    let Some(native) = group
        .native
        .and_then(|id| profile.native_stacks.get(id as usize))
    else {
        return (Vec::new(), false);
    };
    let mut before = native
        .marks_at
        .get(mark)
        .map_or(0, |at| (*at as usize).min(native.frames.len()));
    // A label (custom labels) is placed at the root, pushed from no frame: its path is where
    // the thread was, the stack's innermost frames.
    let marks = native.marks.unwrap_or(group.stack);
    let label = (profile.stacks.get(marks as usize))
        .and_then(|stack| stack.frames.get(mark)?.payload)
        .and_then(|payload| profile.payloads.get(payload as usize))
        .is_some_and(|payload| payload.kind == PayloadKind::Label);
    if label {
        before = native.frames.len();
    }
    // A built-in mark placed at the interposed call (its call site in the program was not found
    // in this stack) has the runtime's frames before it: the path is of the program's frames.
    let runtime = |frame: &u32| {
        profile.native_frames.get(*frame as usize).is_some_and(|f| {
            runtime_code::is_runtime_module(&f.module)
                || runtime_code::is_runtime_function(&f.function, f.file.as_deref())
        })
    };
    match native.frames[..before].iter().rposition(|f| !runtime(f)) {
        Some(program) => before = program + 1,
        // Unwinding stopped inside the runtime: the program's frames are not in this stack.
        None if before > 0 => return (Vec::new(), true),
        None => {}
    }
    let first = before.saturating_sub(PATH_FRAMES);
    let functions = native.frames[first..before]
        .iter()
        .map(|frame| profile.native_frames[*frame as usize].function.as_str())
        .collect();
    (functions, first > 0 || native.truncated || before == 0)
}

/// Time and samples per call path (functions, cut) of one instance.
type PathCosts<'a> = HashMap<(Vec<&'a str>, bool), (u64, u64)>;

/// The most expensive paths, ties by path text.
fn top_paths(found: PathCosts) -> Vec<CallPath> {
    let mut paths: Vec<CallPath> = found
        .into_iter()
        .map(|((functions, cut), (ns, samples))| CallPath {
            functions: functions.into_iter().map(str::to_owned).collect(),
            cut,
            ns,
            samples,
        })
        .collect();
    paths.sort_by(|a, b| {
        b.ns.cmp(&a.ns)
            .then_with(|| a.functions.cmp(&b.functions))
            .then_with(|| a.cut.cmp(&b.cut))
    });
    paths.truncate(PATHS_PER_INSTANCE);
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::group_weights;
    use crate::profile::PayloadKind;
    use crate::profile::{Frame, Meta, Payload, ProfileBuilder, Stack};

    fn mark(feature: u32, payload: u32) -> Frame {
        Frame {
            feature,
            payload: Some(payload),
            builtin: false,
        }
    }
    fn anti(feature: u32) -> Frame {
        Frame {
            feature,
            payload: None,
            builtin: false,
        }
    }
    fn builtin(feature: u32, payload: u32) -> Frame {
        Frame {
            builtin: true,
            ..mark(feature, payload)
        }
    }

    #[test]
    fn builtin_marks_inside_the_programs_own_mark_of_the_feature_count_for_it() {
        let p = profile(&[
            (vec![mark(0, 0), builtin(0, 1)], 10, 10), // output a, the write inside it
            (vec![builtin(0, 1)], 10, 10),             // a write the program did not mark
            (vec![mark(0, 0), anti(0), builtin(0, 1)], 10, 10), // a write in user code
            (vec![mark(1, 2), builtin(0, 1)], 10, 10), // a write under parse c
        ]);
        let r = analyse(&p, TimeView::Active);
        let output = &r.features[0];
        let by_payload: Vec<(&str, u64)> = output
            .instances
            .iter()
            .map(|i| (i.payload.as_str(), i.ns / 1_000_000))
            .collect();
        assert_eq!(by_payload, [("b", 30), ("a", 10)]);
        assert_eq!(r.features[1].ns, 10_000_000);
    }

    /// Builds a profile from (frames, wall ms, active ms) samples on one thread.
    fn profile(samples: &[(Vec<Frame>, u64, u64)]) -> Profile {
        let mut b = ProfileBuilder::new();
        let output = b.feature("output".into());
        let parse = b.feature("parse".into());
        assert_eq!((output, parse), (0, 1));
        for text in ["a", "b", "c"] {
            b.payload(Payload {
                kind: PayloadKind::Name,
                text: text.into(),
                detail: None,
            });
        }
        let thread = b.thread(1, || "main".into());
        for (frames, wall, active) in samples {
            let stack = b.stack(Stack {
                frames: frames.clone(),
                truncated_depth: None,
            });
            b.add_sample(thread, stack, None, wall * 1_000_000, active * 1_000_000);
        }
        b.finish(Meta::default(), |_| Vec::new())
    }

    #[test]
    fn innermost_mark_per_feature_wins_and_antimarks_cancel() {
        let p = profile(&[
            (vec![mark(0, 0)], 10, 10),                      // output a
            (vec![mark(0, 0), mark(0, 1)], 10, 10),          // output b (innermost)
            (vec![mark(0, 0), anti(0)], 10, 10),             // user code inside output
            (vec![mark(0, 0), mark(1, 2)], 10, 10),          // both output a and parse c
            (vec![mark(0, 0), anti(0), mark(0, 2)], 10, 10), // output again, instance c
            (vec![], 50, 50),                                // unmarked
        ]);
        let r = analyse(&p, TimeView::Active);
        assert_eq!(r.total_ns, 100_000_000);
        let output = &r.features[0];
        assert_eq!((output.name.as_str(), output.ns), ("output", 40_000_000));
        let by_payload: Vec<(&str, u64)> = output
            .instances
            .iter()
            .map(|i| (i.payload.as_str(), i.ns / 1_000_000))
            .collect();
        assert_eq!(by_payload, [("a", 20), ("b", 10), ("c", 10)]);
        assert_eq!(r.features[1].name, "parse");
        assert_eq!(r.features[1].ns, 10_000_000);
        assert!((r.percent(output.ns) - 40.0).abs() < 1e-9);
    }

    #[test]
    fn idle_time_counts_only_inside_marks_unless_asked() {
        // 100 ms idle outside marks, 30 ms blocked inside a mark, 20 ms running outside marks.
        let p = profile(&[
            (vec![], 100, 0),
            (vec![mark(0, 0)], 30, 0),
            (vec![], 20, 20),
        ]);
        let active = analyse(&p, TimeView::Active);
        assert_eq!(active.total_ns, 50_000_000);
        assert_eq!(active.features[0].ns, 30_000_000);
        let all = analyse(&p, TimeView::All);
        assert_eq!(all.total_ns, 150_000_000);
        assert_eq!(all.features[0].ns, 30_000_000);
    }

    #[test]
    fn waits_inside_builtin_marks_only_are_kept_apart() {
        let p = profile(&[
            (vec![builtin(0, 1)], 100, 0), // a write blocked on a full pipe
            (vec![builtin(0, 1)], 5, 5),   // a write copying
            (vec![mark(1, 2), builtin(0, 1)], 30, 0), // a read under parse c, blocked
            (vec![mark(0, 0), builtin(0, 1)], 20, 0), // output a around a blocked write
            (vec![mark(1, 2)], 45, 45),    // parse running
        ]);
        let active = analyse(&p, TimeView::Active);
        assert_eq!(active.total_ns, 100_000_000, "the 100 ms wait is out");
        assert_eq!(active.blocked_ns, 100_000_000);
        let parse = &active.features[0];
        assert_eq!((parse.name.as_str(), parse.ns), ("parse", 75_000_000));
        let output = &active.features[1];
        assert_eq!((output.ns, output.blocked_ns), (55_000_000, 100_000_000));
        let by_payload: Vec<(&str, u64, u64)> = output
            .instances
            .iter()
            .map(|i| {
                (
                    i.payload.as_str(),
                    i.ns / 1_000_000,
                    i.blocked_ns / 1_000_000,
                )
            })
            .collect();
        assert_eq!(by_payload, [("b", 35, 100), ("a", 20, 0)]);
        // The two samples of the write share a group (same thread and stack).
        let weights = group_weights(&p, TimeView::Active);
        assert_eq!(weights, [5_000_000, 30_000_000, 20_000_000, 45_000_000]);
        let all = analyse(&p, TimeView::All);
        assert_eq!((all.total_ns, all.blocked_ns), (200_000_000, 0));
        assert_eq!(all.features[0].ns, 155_000_000, "output");
    }

    #[test]
    fn features_seen_only_under_antimarks_are_reported_at_zero_and_unseen_ones_not_at_all() {
        let p = profile(&[(vec![anti(0)], 10, 10)]);
        let r = analyse(&p, TimeView::Active);
        assert_eq!(r.features.len(), 1);
        assert_eq!(
            (r.features[0].name.as_str(), r.features[0].ns),
            ("output", 0)
        );
        assert!(analyse(&profile(&[]), TimeView::Active).features.is_empty());
    }

    #[test]
    fn an_instance_lists_its_three_most_expensive_paths() {
        use crate::profile::fixtures::{build, S};
        // One instance reached through five call paths, 500 µs down to 100 µs.
        let samples: Vec<S> = (0..5u64)
            .map(|i| S {
                marks: vec![("output", Some("x"))],
                native: Some((vec![1, 20 + i], vec![2], false)),
                tid: 1,
                wall_us: 500 - 100 * i,
                active_us: 500 - 100 * i,
            })
            .collect();
        let r = analyse(&build(&samples), TimeView::Active);
        let paths = &r.features[0].instances[0].paths;
        assert_eq!(paths.len(), PATHS_PER_INSTANCE);
        let kept: Vec<u64> = paths.iter().map(|p| p.ns / 1000).collect();
        assert_eq!(kept, vec![500, 400, 300]);
    }

    #[test]
    fn top_instances_get_the_native_paths_that_reached_their_marks() {
        use crate::profile::fixtures::{build, S};
        let s = |marks, native, us| S {
            marks,
            native: Some(native),
            tid: 1,
            wall_us: us,
            active_us: us,
        };
        let mut samples = vec![
            // Instance a through f1 > f2 (600 µs), and through a deeper path cut to 4 frames.
            s(
                vec![("output", Some("a"))],
                (vec![1, 2, 9], vec![2], false),
                600,
            ),
            s(
                vec![("output", Some("a")), ("parse", Some("p"))],
                (vec![1, 2, 3, 4, 5, 6], vec![5, 6], false),
                300,
            ),
            // Instance b: pushed from a truncated stack, and from outside the unwound frames.
            s(vec![("output", Some("b"))], (vec![7], vec![1], true), 200),
            s(vec![("output", Some("b"))], (vec![7], vec![0], false), 100),
        ];
        // Six more instances: only the top five get paths.
        for (payload, us) in [("c", 90), ("d", 80), ("e", 70), ("f", 60), ("g", 50)] {
            samples.push(s(
                vec![("output", Some(payload))],
                (vec![1], vec![1], false),
                us,
            ));
        }
        let p = build(&samples);
        let r = analyse(&p, TimeView::Active);
        assert!(r.native);
        let output = &r.features[0];
        let paths = |i: usize| -> Vec<(String, bool, u64)> {
            output.instances[i]
                .paths
                .iter()
                .map(|p| (p.functions.join(">"), p.cut, p.ns / 1000))
                .collect()
        };
        assert_eq!(output.instances[0].payload, "a");
        assert_eq!(
            paths(0),
            [
                ("f1>f2".into(), false, 600),
                ("f2>f3>f4>f5".into(), true, 300)
            ]
        );
        assert!((output.instances[0].share(600_000) - 66.666).abs() < 0.01);
        assert_eq!(paths(1), [("f7".into(), true, 200), ("".into(), true, 100)]);
        assert_eq!(paths(4), [("f1".into(), false, 70)]);
        assert!(output.instances[5].paths.is_empty());
        // The parse instance inside it.
        assert_eq!(
            r.features[1].instances[0].paths[0].functions,
            ["f3", "f4", "f5", "f6"]
        );

        // Without native stacks, no paths.
        let plain = profile(&[(vec![mark(0, 0)], 10, 10)]);
        let r = analyse(&plain, TimeView::Active);
        assert!(!r.native && r.features[0].instances[0].paths.is_empty());
    }

    #[test]
    fn group_weights_add_up_to_the_report_total() {
        let p = profile(&[
            (vec![], 100, 0),
            (vec![mark(0, 0)], 30, 0),
            (vec![mark(0, 0), anti(0)], 30, 5),
            (vec![], 20, 20), // merged with the first
        ]);
        for view in [TimeView::Active, TimeView::All] {
            let sum: u64 = group_weights(&p, view).iter().sum();
            assert_eq!(sum, analyse(&p, view).total_ns);
        }
        assert_eq!(
            group_weights(&p, TimeView::Active),
            [20_000_000, 30_000_000, 5_000_000]
        );
    }
}
