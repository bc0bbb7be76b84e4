//! The live view while recording: the status line (`status.rs`) or `fsprof top`'s view
//! (`top.rs`), as the recording loop asks for it after each tick (`record::schedule::Live`).

use crate::commands::status::Status;
use crate::commands::top::Top;
use crate::profile::ProfileBuilder;
use crate::record::schedule::Live;

/// What shows progress while recording.
pub enum LiveView {
    Status(Status),
    Top(Box<Top>),
}

impl LiveView {
    /// `fsprof top`'s view of process `pid` if `top` has a title and stdout is a terminal (its
    /// table made with `rules`, counting idle time if `count_idle`), else the status line
    /// (drawn only if `status`).
    pub fn new(
        top: Option<String>,
        pid: u32,
        (rules, count_idle): (&crate::rules::RuleSet, bool),
        status: bool,
    ) -> LiveView {
        match top.and_then(|title| Top::new(title, pid, rules.clone(), count_idle).ok()) {
            Some(top) => LiveView::Top(Box::new(top)),
            None => LiveView::Status(Status::new(status)),
        }
    }
}

impl Live for LiveView {
    fn update(&mut self, builder: &ProfileBuilder, threads: usize) -> bool {
        match self {
            LiveView::Status(status) => {
                status.update(builder, threads);
                true
            }
            LiveView::Top(top) => top.update(builder, threads),
        }
    }

    fn clear(&mut self) {
        match self {
            LiveView::Status(status) => status.clear(),
            LiveView::Top(top) => top.restore(),
        }
    }
}
