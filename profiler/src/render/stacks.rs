//! A sample's combined stack: its native frames, root first, with each mark drawn as a frame
//! between the native frames where it was pushed. The folded output and both flamegraphs are made
//! of these; nothing here counts time or renders anything.

use crate::profile::{NativeFrame, Process, Profile, SampleGroup};

/// One frame of a combined stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackFrame<'a> {
    /// Frames are missing here: unwinding stopped before the thread's root.
    Truncated,
    /// A native frame.
    Native(&'a NativeFrame),
    /// A mark (with its instance's payload) or an antimark (without).
    Mark {
        /// Feature name.
        feature: &'a str,
        /// Instance payload text; `None` for an antimark.
        payload: Option<&'a str>,
    },
    /// The mark stack was deeper than recorded: marks are missing here (innermost end).
    MarksTruncated,
    /// Stands for what a sample lacks (see [`drawn`]): [`NO_NATIVE_STACK`] or [`NO_FEATURE`].
    Placeholder(&'static str),
    /// The process the sample's thread belongs to, at the root of a recording of several.
    Process(&'a Process),
}

/// The frame of samples without marks, in the features-only view.
pub const NO_FEATURE: &str = "[no feature]";
/// The first frame of samples without a native stack, in a profile that has native stacks.
pub const NO_NATIVE_STACK: &str = "[no native stack]";

impl StackFrame<'_> {
    /// The frame's text in folded stacks and flamegraphs: the function name for native frames,
    /// `[feature] payload` for marks (the brackets set them apart), `[feature] antimark`.
    pub fn label(&self) -> String {
        match self {
            StackFrame::Truncated => "[stack truncated]".to_owned(),
            StackFrame::Native(frame) => frame.function.clone(),
            StackFrame::Mark {
                feature,
                payload: Some(payload),
            } => format!("[{feature}] {payload}"),
            StackFrame::Mark {
                feature,
                payload: None,
            } => format!("[{feature}] antimark"),
            StackFrame::MarksTruncated => "[more marks]".to_owned(),
            StackFrame::Placeholder(text) => (*text).to_owned(),
            StackFrame::Process(process) => format!("[pid {}] {}", process.pid, process.program()),
        }
    }

    /// Whether the frame stands for a mark or antimark (not native code).
    pub fn is_mark(&self) -> bool {
        matches!(self, StackFrame::Mark { .. } | StackFrame::MarksTruncated)
    }
}

/// The frames drawn for a sample group (folded stacks, flamegraphs, pprof, speedscope): its
/// [`combined`] stack, after a [`NO_NATIVE_STACK`] frame when the profile has native stacks and
/// the group none (unless `marks_only`), and a [`NO_FEATURE`] frame for a group without frames;
/// in a recording of several processes, after its process's frame (`[pid 4242] cc1`).
pub fn drawn<'a>(
    profile: &'a Profile,
    group: &SampleGroup,
    marks_only: bool,
) -> Vec<StackFrame<'a>> {
    let mut frames = combined(profile, group, marks_only);
    if frames.is_empty() {
        frames.push(StackFrame::Placeholder(NO_FEATURE));
    }
    if !marks_only && !profile.native_stacks.is_empty() && group.native.is_none() {
        frames.insert(0, StackFrame::Placeholder(NO_NATIVE_STACK));
    }
    if profile.processes.len() > 1 {
        let thread = profile.threads.get(group.thread as usize);
        if let Some(process) = thread.and_then(|t| profile.processes.get(t.process as usize)) {
            frames.insert(0, StackFrame::Process(process));
        }
    }
    frames
}

/// The combined stack of a sample group, root first. With `marks_only`, or when the group has no
/// native stack, only its marks (the paper's "core samples").
pub fn combined<'a>(
    profile: &'a Profile,
    group: &SampleGroup,
    marks_only: bool,
) -> Vec<StackFrame<'a>> {
    let native = group
        .native
        .filter(|_| !marks_only)
        .and_then(|id| profile.native_stacks.get(id as usize));
    // A native stack taken with other marks than the sample's is drawn with its own.
    let marks = native.and_then(|n| n.marks).unwrap_or(group.stack);
    let stack = &profile.stacks[marks as usize];
    let marks = stack.frames.iter().map(|frame| StackFrame::Mark {
        feature: &profile.features[frame.feature as usize],
        payload: frame
            .payload
            .map(|payload| profile.payloads[payload as usize].text.as_str()),
    });
    let more_marks = stack.truncated_depth.map(|_| StackFrame::MarksTruncated);
    let Some(native) = native else {
        return marks.chain(more_marks).collect();
    };
    let mut out = Vec::with_capacity(native.frames.len() + stack.frames.len() + 2);
    if native.truncated {
        out.push(StackFrame::Truncated);
    }
    let mut marks = native.marks_at.iter().zip(marks).peekable();
    for (index, frame) in native.frames.iter().enumerate() {
        while let Some((_, mark)) = marks.next_if(|(at, _)| **at as usize <= index) {
            out.push(mark);
        }
        let frame = &profile.native_frames[*frame as usize];
        // The agent's own frames (under an interposed call) are not the program's: their time
        // is the call's (the report's note gives the agent's cost).
        if !crate::program::modules::is_agent_path(&frame.module) {
            out.push(StackFrame::Native(frame));
        }
    }
    out.extend(marks.map(|(_, mark)| mark));
    out.extend(more_marks);
    out
}
