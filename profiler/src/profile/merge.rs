//! One profile from the profiles of a process tree (`fsprof run` following a program's
//! children): the tables joined (equal features, payloads, stacks and frames become one), each
//! thread and program image tagged with its process, the counters of the recordings added up.
//! Not here: recording the processes (`record/children.rs`) or reporting per process (`analysis`).

use super::*;
use std::hash::Hash;

/// The profile of a process tree: `root` (the program, recorded as `root_process`) and each
/// child's profile with its process, in the order found.
pub fn merge(
    mut root: Profile,
    root_process: Process,
    children: Vec<(Process, Profile)>,
) -> Profile {
    let mut merged = Joined::default();
    let root_notes = std::mem::take(&mut root.meta.notes);
    // Each child's note, with the processes that gave it, in the order first given.
    let mut child_notes: Vec<(String, Vec<(u32, String)>)> = Vec::new();
    let mut meta = root.meta.clone();
    merged.add(root, 0);
    let mut processes = vec![root_process];
    for (process, profile) in children {
        let index = processes.len() as u32;
        let name = process.command.first().cloned().unwrap_or_default();
        for note in &profile.meta.notes {
            if root_notes.contains(note) {
                continue;
            }
            match child_notes.iter_mut().find(|(text, _)| text == note) {
                Some((_, processes))
                    if processes.last().is_some_and(|(p, _)| *p == process.pid) => {}
                Some((_, processes)) => processes.push((process.pid, name.clone())),
                None => child_notes.push((note.clone(), vec![(process.pid, name.clone())])),
            }
        }
        add_counters(&mut meta, &profile.meta);
        if let Some(missing) = &profile.meta.missing_symbols {
            (meta.missing_symbols.get_or_insert_with(Default::default)).join(missing);
        }
        for feature in &profile.meta.builtin_features {
            if !meta.builtin_features.contains(feature) {
                meta.builtin_features.push(feature.clone());
            }
        }
        merged.add(profile, index);
        processes.push(process);
    }
    meta.notes = root_notes;
    (meta.notes).extend(
        child_notes
            .iter()
            .map(|(note, processes)| format!("{}: {note}", describe_processes(processes))),
    );
    Profile {
        format: FORMAT.to_owned(),
        version: VERSION,
        meta,
        features: merged.features.values,
        payloads: merged.payloads.values,
        stacks: merged.stacks.values,
        threads: merged.threads,
        samples: merged.samples,
        native_frames: merged.native_frames.values,
        native_stacks: merged.native_stacks.values,
        images: merged.images,
        later_branches: merged.later_branches.values,
        modules: merged.modules.values,
        processes,
    }
}

/// Most processes a merged note names one by one.
const PROCESSES_NAMED: usize = 4;

/// `process 12 (bash)`, or `3 processes (12, 13, 14: bash)` for a note several gave.
fn describe_processes(processes: &[(u32, String)]) -> String {
    if let [(pid, name)] = processes {
        return format!("process {pid} ({name})");
    }
    let mut pids: Vec<String> = (processes.iter().take(PROCESSES_NAMED))
        .map(|(pid, _)| pid.to_string())
        .collect();
    if processes.len() > PROCESSES_NAMED {
        pids.push("…".to_owned());
    }
    let mut names: Vec<&str> = Vec::new();
    for (_, name) in processes {
        if names.contains(&name.as_str()) {
            continue;
        }
        if names.len() == PROCESSES_NAMED {
            names.push("…");
            break;
        }
        names.push(name);
    }
    format!(
        "{} processes ({}: {})",
        processes.len(),
        pids.join(", "),
        names.join(", ")
    )
}

/// A table whose equal values share one index.
struct Interned<T> {
    values: Vec<T>,
    ids: HashMap<T, u32>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Interned {
            values: Vec::new(),
            ids: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Interned<T> {
    fn id(&mut self, value: T) -> u32 {
        if let Some(id) = self.ids.get(&value) {
            return *id;
        }
        let id = self.values.len() as u32;
        self.values.push(value.clone());
        self.ids.insert(value, id);
        id
    }
}

#[derive(Default)]
struct Joined {
    features: Interned<String>,
    payloads: Interned<Payload>,
    stacks: Interned<Stack>,
    threads: Vec<Thread>,
    samples: Vec<SampleGroup>,
    native_frames: Interned<NativeFrame>,
    native_stacks: Interned<NativeStack>,
    images: Vec<Image>,
    later_branches: Interned<LaterBranch>,
    modules: Interned<ModuleFile>,
}

impl Joined {
    /// Adds `profile`'s tables and samples, its threads and images as process `process`'s.
    fn add(&mut self, profile: Profile, process: u32) {
        let features: Vec<u32> = profile
            .features
            .into_iter()
            .map(|name| self.features.id(name))
            .collect();
        let payloads: Vec<u32> = profile
            .payloads
            .into_iter()
            .map(|payload| self.payloads.id(payload))
            .collect();
        let stacks: Vec<u32> = profile
            .stacks
            .into_iter()
            .map(|mut stack| {
                for frame in &mut stack.frames {
                    frame.feature = features[frame.feature as usize];
                    frame.payload = frame.payload.map(|p| payloads[p as usize]);
                }
                self.stacks.id(stack)
            })
            .collect();
        let frames: Vec<u32> = profile
            .native_frames
            .into_iter()
            .map(|frame| self.native_frames.id(frame))
            .collect();
        let natives: Vec<u32> = profile
            .native_stacks
            .into_iter()
            .map(|mut native| {
                native
                    .frames
                    .iter_mut()
                    .for_each(|f| *f = frames[*f as usize]);
                native.marks = native.marks.map(|m| stacks[m as usize]);
                self.native_stacks.id(native)
            })
            .collect();
        let thread_base = self.threads.len() as u32;
        self.threads.extend(
            profile
                .threads
                .into_iter()
                .map(|thread| Thread { process, ..thread }),
        );
        let image_base = self.images.len() as u32;
        let mut images = profile.images;
        if images.is_empty() {
            // Older profiles: one image, unnamed.
            images.push(Image {
                name: String::new(),
                process,
            });
        }
        self.images
            .extend(images.into_iter().map(|image| Image { process, ..image }));
        self.samples
            .extend(profile.samples.into_iter().map(|group| SampleGroup {
                thread: thread_base + group.thread,
                stack: stacks[group.stack as usize],
                native: group.native.map(|n| natives[n as usize]),
                image: image_base + group.image,
                ..group
            }));
        for branch in profile.later_branches {
            self.later_branches.id(LaterBranch {
                feature: features[branch.feature as usize],
                payload: payloads[branch.payload as usize],
            });
        }
        for module in profile.modules {
            self.modules.id(module);
        }
    }
}

/// Adds the counters of a child's recording to the tree's (the rates, priority and pause
/// quantiles stay the program's).
fn add_counters(meta: &mut Meta, child: &Meta) {
    let (r, c) = (&mut meta.reading, &child.reading);
    r.regions += c.regions;
    r.torn_retries += c.torn_retries;
    r.torn_dropped += c.torn_dropped;
    r.marks_unsettled += c.marks_unsettled;
    r.threads_without_slot += c.threads_without_slot;
    r.later_branches += c.later_branches;
    r.later_branches_lost += c.later_branches_lost;
    r.custom_labels |= c.custom_labels;
    r.otel_context |= c.otel_context;
    let (n, c) = (&mut meta.native_stacks, &child.native_stacks);
    n.losses.perf_lost += c.losses.perf_lost;
    n.losses.perf_unmatched += c.losses.perf_unmatched;
    n.losses.perf_lost_cpu_us += c.losses.perf_lost_cpu_us;
    n.native_captured += c.native_captured;
    n.native_complete += c.native_complete;
    n.native_not_stopped += c.native_not_stopped;
    n.native_moved += c.native_moved;
    n.native_departures_unmarked += c.native_departures_unmarked;
    n.native_late += c.native_late;
    n.native_preempted_unplaced_us += c.native_preempted_unplaced_us;
    n.native_blocked_unplaced_us += c.native_blocked_unplaced_us;
    n.native_blocked += c.native_blocked;
    n.native_blocked_skipped += c.native_blocked_skipped;
    n.native_uncopied += c.native_uncopied;
    n.unseen.native_unseen_threads += c.unseen.native_unseen_threads;
    n.unseen.native_unseen_samples += c.unseen.native_unseen_samples;
    n.unseen.native_unseen_dropped += c.unseen.native_unseen_dropped;
    n.stops.native_stops += c.stops.native_stops;
    n.beyond.native_completed += c.beyond.native_completed;
    n.beyond.native_walked += c.beyond.native_walked;
    // Every tick count summed, the ticks with them: the report's shares of late and stretched
    // ticks are of all the tree's ticks (the program's own alone, they read over 100% for a
    // build, whose processes tick more than `make` does).
    let (s, c) = (&mut meta.sampling, &child.sampling);
    s.ticks += c.ticks;
    s.late_ticks += c.late_ticks;
    s.stretched_ticks += c.stretched_ticks;
    s.slow_ticks += c.slow_ticks;
    // Not `fsprof_cpu_us`: fsprof's one process measured it for the whole tree (the children's
    // are 0).
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::{build, S};

    fn process(pid: u32, parent: Option<u32>) -> Process {
        Process {
            pid,
            parent,
            command: vec![format!("p{pid}")],
        }
    }

    #[test]
    fn a_trees_profiles_join_with_each_thread_in_its_process() {
        let s = |marks: Vec<(&'static str, Option<&'static str>)>, tid, us| S {
            marks,
            native: None,
            tid,
            wall_us: us,
            active_us: us,
        };
        let root = build(&[s(vec![("output", Some("a.rs:1"))], 1, 300)]);
        let child = build(&[
            s(vec![("parse", Some("b.rs:2"))], 2, 500),
            s(vec![("output", Some("a.rs:1"))], 2, 200),
        ]);
        let merged = merge(root, process(1, None), vec![(process(2, Some(1)), child)]);
        merged.check().unwrap();
        assert_eq!(merged.features.len(), 2, "{:?}", merged.features);
        assert_eq!(merged.processes.len(), 2);
        assert_eq!(merged.threads[1].process, 1);
        assert_eq!(
            merged.images.iter().map(|i| i.process).collect::<Vec<_>>(),
            [0, 1]
        );
        // The same (feature, payload) in both processes is one stack.
        let output: Vec<u32> = merged
            .samples
            .iter()
            .filter(|g| g.wall_ns != 500_000)
            .map(|g| g.stack)
            .collect();
        assert_eq!(output.len(), 2);
        assert_eq!(output[0], output[1]);
    }

    #[test]
    fn a_trees_tick_counts_are_all_its_processes() {
        let ticked = |ticks, late| {
            let mut profile = build(&[]);
            profile.meta.sampling.ticks = ticks;
            profile.meta.sampling.late_ticks = late;
            profile
        };
        let children = vec![(process(2, Some(1)), ticked(40, 3))];
        let merged = merge(ticked(5, 1), process(1, None), children);
        assert_eq!(merged.meta.sampling.ticks, 45);
        assert_eq!(merged.meta.sampling.late_ticks, 4);
    }

    #[test]
    fn a_note_several_processes_gave_is_given_once() {
        let noted = |notes: &[&str]| {
            let mut profile = build(&[]);
            profile.meta.notes = notes.iter().map(|n| n.to_string()).collect();
            profile
        };
        let root = noted(&["the program's own", "shared with the root"]);
        let children = (2..=7)
            .map(|pid| {
                let note = if pid == 7 {
                    "its own"
                } else {
                    "no symbols for bash"
                };
                (
                    process(pid, Some(1)),
                    noted(&[note, "shared with the root"]),
                )
            })
            .collect();
        let merged = merge(root, process(1, None), children);
        assert_eq!(
            merged.meta.notes,
            [
                "the program's own",
                "shared with the root",
                "5 processes (2, 3, 4, 5, …: p2, p3, p4, p5, …): no symbols for bash",
                "process 7 (p7): its own",
            ]
        );
    }
}
