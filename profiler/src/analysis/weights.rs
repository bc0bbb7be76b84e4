//! Which time counts ([`TimeView`]: the default active view or `--idle`'s all of it) and what
//! each sample group weighs in it ([`group_weights`]), the rule every analysis of time shares.
//! Not here: what the time is attributed to (`attribution.rs`, `features.rs`).

use super::attribution::inside_own_mark;
use crate::profile::{Profile, SampleGroup};

/// Which part of the threads' time counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeView {
    /// Running or runnable time, plus blocked time inside one of the program's own marks (the
    /// default): a thread idle outside them, even inside a built-in mark (a libc call the agent
    /// marked), does not dilute the profile.
    Active,
    /// All wall time of every thread (`--idle`).
    All,
}

impl TimeView {
    /// A sentence for reports.
    pub fn describe(self) -> &'static str {
        match self {
            TimeView::Active => {
                "time counted: threads running or waiting for a CPU, plus blocked time inside the \
                 program's own marks (threads blocked elsewhere, built-in waits included, do not \
                 count; --idle counts all thread time)"
            }
            TimeView::All => "time counted: all wall time of every thread, idle or not (--idle)",
        }
    }
}

/// Whether `group`'s program image counts in `view`: in the default view, only the last image a
/// process ran (a wrapper script's time before it `exec`s the program is reported apart).
pub(super) fn counts_image(profile: &Profile, view: TimeView, group: &SampleGroup) -> bool {
    view == TimeView::All || profile.is_last_image(group.image)
}

/// The time each sample group stands for in `view`, indexed like [`Profile::samples`]: the same
/// rule as [`analyse`](crate::analysis::features::analyse) (in the active view, a sample inside some feature's mark counts its wall
/// time, blocked time included; other samples their active time), so the weights add up to the
/// report's total.
pub fn group_weights(profile: &Profile, view: TimeView) -> Vec<u64> {
    let inside_own_mark: Vec<bool> = match view {
        TimeView::All => Vec::new(),
        TimeView::Active => profile.stacks.iter().map(inside_own_mark).collect(),
    };
    profile
        .samples
        .iter()
        .map(|group| match view {
            _ if !counts_image(profile, view, group) => 0,
            TimeView::Active if !inside_own_mark[group.stack as usize] => group.active_ns,
            _ => group.wall_ns,
        })
        .collect()
}
