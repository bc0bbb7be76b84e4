//! Collapsed ("folded") stacks, the input format of flamegraph tools: one line per distinct
//! stack, root first, frames joined by `;`, then a space and the stack's time:
//!
//! ```text
//! _start;main;app::run;[output] src/main.rs:57:27;app::write_row 1234
//! ```
//!
//! Stacks are the combined stacks of [`crate::render::stacks`]: native frames with each mark drawn where it
//! was pushed (`[feature] payload`), or, for the features-only view, the marks alone (samples
//! without marks become one `[no feature]` frame). Sample groups with the same stack (other
//! threads, say) are merged. A group without a native stack in a profile that has native stacks
//! starts with `[no native stack]`; unwinding that stopped before the thread's root starts with
//! `[stack truncated]`.
//!
//! The count is **time in microseconds**, rounded, in the report's time view (see
//! [`TimeView`]: active time, plus blocked time inside marks, by
//! default; all thread time with `--idle` or a profile recorded with it), not a number of samples.
//! Stacks whose time rounds to 0 µs are left out. Lines are sorted, so the output is deterministic.
//!
//! Frame text never contains `;` (replaced by `:`) or control characters (replaced by spaces), so
//! each line splits unambiguously; the count is always the last space-separated field.
//!
//! This module folds and formats; it computes no feature costs (the weights come from
//! [`analysis::group_weights`]) and draws nothing (see
//! [`flamegraph`](super::flamegraph)).

use crate::analysis::{self, TimeView};
use crate::profile::{NativeFrame, Profile};
use crate::render::stacks::{self, StackFrame};
use std::collections::{BTreeMap, HashMap};

pub use stacks::{NO_FEATURE, NO_NATIVE_STACK};

/// What a frame of a folded stack stands for (flamegraphs colour them apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Native code.
    Native,
    /// A mark, antimark, or marks missing from a too deep mark stack.
    Mark,
    /// Not code: `[stack truncated]`, `[no feature]`, `[no native stack]`.
    Placeholder,
}

/// The folded stacks of a profile.
#[derive(Clone, Debug)]
pub struct Folded {
    /// `stack COUNT`, sorted.
    lines: Vec<String>,
    /// Kinds of the frame labels that are not native code.
    kinds: HashMap<String, FrameKind>,
    view: TimeView,
    marks_only: bool,
    native: bool,
    total_us: u64,
}

impl Folded {
    /// The lines, `frame;...;frame COUNT`, sorted, without newlines.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The lines, each ending in a newline: the `--format folded` output.
    pub fn text(&self) -> String {
        let mut text = String::with_capacity(self.lines.iter().map(|l| l.len() + 1).sum());
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// What the frame with this label stands for.
    pub fn kind(&self, label: &str) -> FrameKind {
        self.kinds.get(label).copied().unwrap_or(FrameKind::Native)
    }

    /// The labels of frames that are not native code, with their kinds.
    pub fn special_frames(&self) -> impl Iterator<Item = (&str, FrameKind)> {
        self.kinds
            .iter()
            .map(|(label, kind)| (label.as_str(), *kind))
    }

    /// Time view of the counts.
    pub fn view(&self) -> TimeView {
        self.view
    }

    /// Whether these are the features-only stacks (marks alone).
    pub fn marks_only(&self) -> bool {
        self.marks_only
    }

    /// Whether the profile has native stacks (without them, the full stacks are the marks alone).
    pub fn has_native(&self) -> bool {
        self.native
    }

    /// Sum of the counts, µs.
    pub fn total_us(&self) -> u64 {
        self.total_us
    }
}

/// Folds the profile's sample groups in `view`; with `marks_only`, the features-only stacks.
/// Each distinct frame is named and cleaned once, and groups merge by their frames' ids: a line's
/// text is made once per distinct stack, not once per group (a recursion 10,000 frames deep made
/// a 400 KB line for each of thousands of groups).
pub fn fold(profile: &Profile, view: TimeView, marks_only: bool) -> Folded {
    let weights = analysis::group_weights(profile, view);
    let has_native = !profile.native_stacks.is_empty();
    let mut labels = Labels::default();
    let mut by_ids: HashMap<Vec<u32>, u64> = HashMap::new();
    let mut ids = Vec::new();
    for (group, ns) in profile.samples.iter().zip(weights) {
        if ns == 0 {
            continue;
        }
        ids.clear();
        ids.extend((stacks::drawn(profile, group, marks_only).iter()).map(|f| labels.id(f)));
        let total = by_ids.entry(ids.clone()).or_default();
        *total = total.saturating_add(ns);
    }
    // Frames of different ids may read the same (two functions of one name): their stacks merge.
    let mut by_stack: BTreeMap<String, u64> = BTreeMap::new();
    for (ids, ns) in by_ids {
        let mut line = String::new();
        for (at, id) in ids.into_iter().enumerate() {
            if at > 0 {
                line.push(';');
            }
            line.push_str(&labels.text[id as usize]);
        }
        let total = by_stack.entry(line).or_default();
        *total = total.saturating_add(ns);
    }
    let mut total_us = 0u64;
    let lines = by_stack
        .into_iter()
        .filter_map(|(stack, ns)| {
            let us = ns.saturating_add(500) / 1000;
            total_us = total_us.saturating_add(us);
            (us > 0).then(|| format!("{stack} {us}"))
        })
        .collect();
    Folded {
        lines,
        kinds: labels.kinds,
        view,
        marks_only,
        native: has_native,
        total_us,
    }
}

/// The distinct frames of the stacks being folded, each with its cleaned text: native frames by
/// their entry in the profile's table, the others by their label; and the kinds of the frames
/// that are not native code, by text.
#[derive(Default)]
struct Labels {
    native: HashMap<*const NativeFrame, u32>,
    other: HashMap<String, u32>,
    text: Vec<String>,
    kinds: HashMap<String, FrameKind>,
}

impl Labels {
    /// The id of `frame`'s text, named the first time it is seen.
    fn id(&mut self, frame: &StackFrame) -> u32 {
        let next = self.text.len() as u32;
        let id = match frame {
            StackFrame::Native(native) => *self.native.entry(*native as *const _).or_insert(next),
            other => *self.other.entry(other.label()).or_insert(next),
        };
        if id == next {
            let text = clean(&frame.label());
            let kind = match frame {
                StackFrame::Native(_) => FrameKind::Native,
                StackFrame::Truncated | StackFrame::Placeholder(_) | StackFrame::Process(_) => {
                    FrameKind::Placeholder
                }
                StackFrame::Mark { .. } | StackFrame::MarksTruncated => FrameKind::Mark,
            };
            if kind != FrameKind::Native {
                self.kinds.entry(text.clone()).or_insert(kind);
            }
            self.text.push(text);
        }
        id
    }
}

/// A frame label safe in a folded line: no `;`, no control characters, not empty.
fn clean(label: &str) -> String {
    let cleaned: String = label
        .chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if cleaned.trim().is_empty() {
        "?".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::fixtures::{build, S};

    fn sample(
        marks: Vec<(&'static str, Option<&'static str>)>,
        native: Option<(Vec<u64>, Vec<u32>, bool)>,
        tid: u32,
        us: u64,
    ) -> S {
        S {
            marks,
            native,
            tid,
            wall_us: us,
            active_us: us,
        }
    }

    #[test]
    fn marks_sit_between_the_native_frames_that_pushed_them_and_threads_merge() {
        let p = build(&[
            // f1 > f2 pushed [output] a, then f3 runs inside it.
            sample(
                vec![("output", Some("a.rs:1:1"))],
                Some((vec![1, 2, 3], vec![2], false)),
                1,
                300,
            ),
            // Same stacks on another thread: merged.
            sample(
                vec![("output", Some("a.rs:1:1"))],
                Some((vec![1, 2, 3], vec![2], false)),
                2,
                200,
            ),
            // Inlined frames expand (g5 > f5), a mark at the innermost end, truncated unwinding;
            // an antimark of output inside parse's instance; a `;` in a payload.
            sample(
                vec![("parse", Some("x;y")), ("output", None)],
                Some((vec![105, 4], vec![1, 2], true)),
                1,
                1000,
            ),
            // No marks, no native stack.
            sample(vec![], None, 1, 40),
            // Rounds to 0 µs: left out.
            S {
                marks: vec![],
                native: Some((vec![1], vec![], false)),
                tid: 1,
                wall_us: 0,
                active_us: 0,
            },
        ]);
        let folded = fold(&p, TimeView::Active, false);
        assert_eq!(
            folded.lines(),
            [
                "[no native stack];[no feature] 40",
                // The mark goes after the physical function g5, before f5 inlined into it.
                "[stack truncated];g5;[parse] x:y;f5;f4;[output] antimark 1000",
                "f1;f2;[output] a.rs:1:1;f3 500",
            ]
        );
        assert_eq!(folded.total_us(), 1540);
        assert_eq!(folded.kind("[output] a.rs:1:1"), FrameKind::Mark);
        assert_eq!(folded.kind("[stack truncated]"), FrameKind::Placeholder);
        assert_eq!(folded.kind("f1"), FrameKind::Native);

        let marks = fold(&p, TimeView::Active, true);
        assert_eq!(
            marks.text(),
            "[no feature] 40\n[output] a.rs:1:1 500\n[parse] x:y;[output] antimark 1000\n"
        );
    }

    #[test]
    fn counts_are_microseconds_of_the_time_view() {
        let p = build(&[
            // Idle outside marks: only the all view counts it.
            S {
                marks: vec![],
                native: Some((vec![1], vec![], false)),
                tid: 1,
                wall_us: 5000,
                active_us: 0,
            },
            // Blocked inside a mark: both views count its wall time.
            S {
                marks: vec![("io", Some("r.rs:2:2"))],
                native: Some((vec![1, 2], vec![1], false)),
                tid: 1,
                wall_us: 3000,
                active_us: 1,
            },
        ]);
        assert_eq!(
            fold(&p, TimeView::Active, false).lines(),
            ["f1;[io] r.rs:2:2;f2 3000"]
        );
        assert_eq!(
            fold(&p, TimeView::All, false).lines(),
            ["f1 5000", "f1;[io] r.rs:2:2;f2 3000"]
        );
        let report = analysis::analyse(&p, TimeView::All);
        assert_eq!(
            fold(&p, TimeView::All, false).total_us() * 1000,
            report.total_ns
        );
    }

    #[test]
    fn an_empty_profile_folds_to_nothing() {
        let folded = fold(&build(&[]), TimeView::Active, false);
        assert!(folded.lines().is_empty());
        assert_eq!(folded.text(), "");
    }

    #[test]
    fn labels_are_cleaned() {
        assert_eq!(clean("<[u8; 8]>\n"), "<[u8: 8]> ");
        assert_eq!(clean(""), "?");
    }
}
