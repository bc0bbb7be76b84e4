//! Which marks a sample counts for (the paper's rule, section 14.3): for each feature
//! separately, a sample counts toward the feature when the innermost frame with that feature in
//! its mark stack is a mark, not an antimark, and its time goes to that mark's payload. One
//! exception: a built-in mark (the agent's, around a libc call) nested in the program's own mark
//! of the same feature counts for the program's mark, unless the program's innermost frame of it
//! is an antimark. Only the rule: what a sample's time is, and the sums, are `features.rs`'s.

use crate::profile::{Frame, Stack};
use std::collections::HashSet;

/// Fills `attributed` with the frames sample group `index`'s mark stack `stack` counts for: per
/// feature its innermost frame, if a mark (not an antimark), as (feature, payload, the frame's
/// index; a built-in mark inside the program's own mark of the same feature counts for that
/// one). Marks each feature `seen`; `visited_in` remembers the group that last visited it.
pub(super) fn attribute(
    stack: &Stack,
    index: usize,
    seen: &mut [bool],
    visited_in: &mut [usize],
    attributed: &mut Vec<(u32, u32, usize)>,
) {
    attributed.clear();
    for (at, frame) in stack.frames.iter().enumerate().rev() {
        let feature = frame.feature as usize;
        seen[feature] = true;
        if std::mem::replace(&mut visited_in[feature], index) == index {
            continue;
        }
        if let Some(payload) = frame.payload {
            let (payload, at) = if frame.builtin {
                program_mark_around(&stack.frames[..at], frame.feature).unwrap_or((payload, at))
            } else {
                (payload, at)
            };
            attributed.push((frame.feature, payload, at));
        }
    }
}

/// The marks a sample of mark stack `stack` counts for, outermost first, as (feature, payload):
/// per feature its innermost frame when that is a mark, not an antimark (the rule of
/// `analyse`; a built-in mark inside the program's own mark of its feature counts for that).
pub fn counted_marks(stack: &Stack) -> Vec<(u32, u32)> {
    let features = (stack.frames.iter().map(|f| f.feature as usize + 1))
        .max()
        .unwrap_or(0);
    let (mut seen, mut visited_in) = (vec![false; features], vec![usize::MAX; features]);
    let mut attributed = Vec::new();
    attribute(stack, 0, &mut seen, &mut visited_in, &mut attributed);
    attributed.sort_by_key(|(_, _, at)| *at);
    (attributed.into_iter())
        .map(|(feature, payload, _)| (feature, payload))
        .collect()
}

/// The program's own mark that a built-in mark of `feature` is nested in, if any: the innermost
/// frame of `feature` in `outer` that is not built in, when it is a mark (its payload and
/// index). A program that marks its own output has a `write` inside counted by its mark.
fn program_mark_around(outer: &[Frame], feature: u32) -> Option<(u32, usize)> {
    let (at, frame) = outer
        .iter()
        .enumerate()
        .rev()
        .find(|(_, frame)| frame.feature == feature && !frame.builtin)?;
    Some((frame.payload?, at))
}

/// The instances a mark stack counts for: each feature's innermost frame, when it is a mark
/// (feature, payload, index in the stack).
pub(super) fn innermost_marks(stack: &Stack) -> Vec<(u32, u32, usize)> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (at, frame) in stack.frames.iter().enumerate().rev() {
        if seen.insert(frame.feature) {
            if let Some(payload) = frame.payload {
                out.push((frame.feature, payload, at));
            }
        }
    }
    out
}

/// Whether some feature's innermost frame in the stack is one of the program's own marks (not
/// an antimark, not built in), or a built-in mark nested in the program's own mark of the same
/// feature (which counts for that mark): the rule `analyse` applies.
pub fn inside_own_mark(stack: &Stack) -> bool {
    let mut seen = HashSet::new();
    stack.frames.iter().enumerate().rev().any(|(at, frame)| {
        seen.insert(frame.feature)
            && frame.payload.is_some()
            && (!frame.builtin || program_mark_around(&stack.frames[..at], frame.feature).is_some())
    })
}
