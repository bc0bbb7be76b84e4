//! The backtracking analysis (the thesis's Parsack study): for a feature marked with
//! `mark_alternative` (a parser's choice points), the time spent in branches the parser later
//! abandoned, per branch of each choice point.
//!
//! A parser with ordered choice tries branch `b + 1` of a choice point at an input offset only
//! after branch `b` failed there. So an alternative (choice, branch, offset) is wasted when any
//! sample shows a later branch of the same choice at the same offset, or the profile's
//! `later_branches` (read from the threads' histories of later branches pushed, sampled or not)
//! hold one. Its time is that of every
//! counted sample with it among the feature's marks (everything the branch did, the choices
//! nested in it included), with the feature analysis's rule and weights (the innermost frame of
//! the feature is a mark, not an antimark; [`group_weights`]).
//!
//! What it cannot see: a wasted visit is counted only when a sample falls inside it, so at rate R
//! a visit shorter than 1/R is seen with a probability of about its length times R (repeated
//! over many offsets, the totals stay unbiased). That it failed is known from the later branch,
//! sampled or in a history: a history holds a thread's latest `HISTORY_CAPACITY` later branches,
//! read at every tick, so a parser that tries more than that many between two ticks (about
//! 10 ms apart with the perf backend) loses some, and the waste before them is not counted: the
//! report's notes say how many were lost (see README.md).
//!
//! Numbers only; renderers format them. Not here: the time of instances (features.rs).

use super::weights::{group_weights, TimeView};
use crate::profile::{Detail, Profile};
use std::collections::{HashMap, HashSet};

/// The cost of one branch of one choice point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchCost {
    /// The choice point.
    pub choice: String,
    /// The branch (0 the first tried).
    pub branch: u32,
    /// Time inside the branch at the offsets where a later branch was tried.
    pub wasted_ns: u64,
    /// All time inside the branch.
    pub ns: u64,
}

/// The branches of each feature that has alternatives (by feature id), most wasted first.
pub fn backtracking(profile: &Profile, view: TimeView) -> HashMap<u32, Vec<BranchCost>> {
    let weights = group_weights(profile, view);
    let alternative = |payload: Option<u32>| match payload
        .and_then(|id| profile.payloads.get(id as usize))
        .and_then(|p| p.detail.as_ref())
    {
        Some(Detail::Alternative {
            choice,
            branch,
            offset,
        }) => Some((choice.as_str(), *branch, *offset)),
        _ => None,
    };
    // The latest branch seen per (feature, choice, offset).
    let mut latest: HashMap<(u32, &str, u64), u32> = HashMap::new();
    for later in &profile.later_branches {
        if let Some((choice, branch, offset)) = alternative(Some(later.payload)) {
            let entry = latest.entry((later.feature, choice, offset)).or_default();
            *entry = (*entry).max(branch);
        }
    }
    for (group, &ns) in profile.samples.iter().zip(&weights) {
        if ns == 0 {
            continue;
        }
        for frame in &profile.stacks[group.stack as usize].frames {
            if let Some((choice, branch, offset)) = alternative(frame.payload) {
                let entry = latest.entry((frame.feature, choice, offset)).or_default();
                *entry = (*entry).max(branch);
            }
        }
    }
    // Per (feature, choice, branch): (wasted, all).
    let mut costs: HashMap<(u32, &str, u32), (u64, u64)> = HashMap::new();
    for (group, &ns) in profile.samples.iter().zip(&weights) {
        if ns == 0 {
            continue;
        }
        let frames = &profile.stacks[group.stack as usize].frames;
        // Per feature, whether the sample counts for it: its innermost frame of it is a mark.
        let mut counts: HashMap<u32, bool> = HashMap::new();
        for frame in frames.iter().rev() {
            counts
                .entry(frame.feature)
                .or_insert(frame.payload.is_some());
        }
        let mut seen: HashSet<(u32, &str, u32, u64)> = HashSet::new();
        for frame in frames {
            if !counts[&frame.feature] {
                continue;
            }
            let Some((choice, branch, offset)) = alternative(frame.payload) else {
                continue;
            };
            if !seen.insert((frame.feature, choice, branch, offset)) {
                continue; // the same alternative twice on one stack: once
            }
            let cost = costs.entry((frame.feature, choice, branch)).or_default();
            if latest[&(frame.feature, choice, offset)] > branch {
                cost.0 = cost.0.saturating_add(ns);
            }
            cost.1 = cost.1.saturating_add(ns);
        }
    }
    let mut out: HashMap<u32, Vec<BranchCost>> = HashMap::new();
    for ((feature, choice, branch), (wasted_ns, ns)) in costs {
        out.entry(feature).or_default().push(BranchCost {
            choice: choice.to_owned(),
            branch,
            wasted_ns,
            ns,
        });
    }
    for branches in out.values_mut() {
        branches.sort_by(|a, b| {
            (b.wasted_ns, b.ns)
                .cmp(&(a.wasted_ns, a.ns))
                .then_with(|| (&a.choice, a.branch).cmp(&(&b.choice, b.branch)))
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::PayloadKind;
    use crate::profile::{Frame, LaterBranch, Meta, Payload, ProfileBuilder, Stack};

    /// An alternative (choice, branch, offset), or `None` for an antimark.
    type Alternative<'a> = Option<(&'a str, u32, u64)>;

    /// A profile of feature 0 ("parse") whose samples are (alternatives outermost first, ms).
    fn profile(samples: &[(&[Alternative], u64)]) -> Profile {
        profile_with_later(samples, &[])
    }

    /// The payload of an alternative.
    fn alternative(b: &mut ProfileBuilder, (choice, branch, offset): (&str, u32, u64)) -> u32 {
        b.payload(Payload {
            kind: PayloadKind::Alternative,
            text: format!("{choice}, branch {branch}"),
            detail: Some(Detail::Alternative {
                choice: choice.into(),
                branch,
                offset,
            }),
        })
    }

    /// [`profile`], with later branches read from histories.
    fn profile_with_later(
        samples: &[(&[Alternative], u64)],
        later: &[(&str, u32, u64)],
    ) -> Profile {
        let mut b = ProfileBuilder::new();
        assert_eq!(b.feature("parse".into()), 0);
        let thread = b.thread(1, || "main".into());
        for place in later {
            let payload = alternative(&mut b, *place);
            b.later_branch(LaterBranch {
                feature: 0,
                payload,
            });
        }
        for (alternatives, ms) in samples {
            let frames = alternatives
                .iter()
                .map(|place| Frame {
                    feature: 0,
                    payload: place.map(|place| alternative(&mut b, place)),
                    builtin: false,
                })
                .collect();
            let stack = b.stack(Stack {
                frames,
                truncated_depth: None,
            });
            b.add_sample(thread, stack, None, ms * 1_000_000, ms * 1_000_000);
        }
        b.finish(Meta::default(), |_| Vec::new())
    }

    fn cost(choice: &str, branch: u32, wasted: u64, all: u64) -> BranchCost {
        BranchCost {
            choice: choice.into(),
            branch,
            wasted_ns: wasted * 1_000_000,
            ns: all * 1_000_000,
        }
    }

    #[test]
    fn a_branch_followed_by_a_later_one_at_the_same_offset_is_wasted() {
        let p = profile(&[
            (&[Some(("item", 0, 10))], 30), // later abandoned: branch 1 at 10 is seen
            (&[Some(("item", 1, 10))], 5),
            (&[Some(("item", 0, 20))], 40), // succeeded: nothing later at 20
            // Nested: the inner choice's time is also its outer branch's (abandoned at 30).
            (&[Some(("item", 0, 30)), Some(("word", 0, 31))], 8),
            (&[Some(("item", 2, 30))], 2),
            // User code under an antimark: not the parser's time.
            (&[Some(("item", 0, 10)), None], 100),
        ]);
        let found = backtracking(&p, TimeView::Active);
        assert_eq!(
            found[&0],
            vec![
                cost("item", 0, 38, 78),
                cost("word", 0, 0, 8),
                cost("item", 1, 0, 5),
                cost("item", 2, 0, 2),
            ]
        );
    }

    #[test]
    fn a_later_branch_no_sample_saw_still_tells_the_branch_before_it_failed() {
        let p = profile_with_later(
            &[
                (&[Some(("item", 0, 10))], 30), // its branch 1 ran too briefly to be sampled
                (&[Some(("item", 0, 20))], 40), // succeeded: nothing later at 20
                (&[Some(("item", 1, 30))], 5),
            ],
            &[("item", 1, 10), ("other", 1, 20)],
        );
        let found = backtracking(&p, TimeView::Active);
        assert_eq!(
            found[&0],
            vec![cost("item", 0, 30, 70), cost("item", 1, 0, 5)]
        );
    }
}
