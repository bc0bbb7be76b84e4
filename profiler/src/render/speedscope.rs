//! speedscope output (`fsprof report DIR --format speedscope`): the profile in speedscope's file
//! format (its published schema, `https://www.speedscope.app/file-format-schema.json`), for
//! <https://www.speedscope.app> or the `speedscope` command.
//!
//! One "sampled" profile per thread, each sample group a sample: its drawn stack (native frames
//! with the marks between them, as in `flamegraph.svg`; see `stacks.rs`), root first, weighted by
//! its time in nanoseconds in the report's time view. Frames are shared: native ones carry their
//! file and line, marks are named `[feature] payload`. Threads without counted time are left out.
//!
//! Not here: the order of samples in time (fsprof aggregates samples by stack, so speedscope's
//! "Time Order" view shows the groups one after the other; "Left Heavy" and "Sandwich" are
//! exact).

use crate::analysis::{group_weights, TimeView};
use crate::profile::Profile;
use crate::render::stacks::{self, StackFrame};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashMap;

/// A speedscope file (written as it is: a profile of deep stacks has tens of millions of frame
/// indexes, which as JSON values took a gigabyte).
#[derive(Serialize)]
pub struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Sampled>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: u32,
    exporter: String,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize)]
struct Frame<'a> {
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Sampled {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<u32>>,
    weights: Vec<u64>,
}

/// What makes a frame one: its name, file and line.
type FrameKey<'a> = (Cow<'a, str>, Option<&'a str>, Option<u32>);

/// The speedscope file of `profile` in `view`.
pub fn render(profile: &Profile, view: TimeView) -> File<'_> {
    let mut frames: Vec<Frame> = Vec::new();
    let mut frame_ids: HashMap<FrameKey, u32> = HashMap::new();
    // Per thread: its samples (frame indexes, root first) and their weights.
    let mut threads: Vec<(Vec<Vec<u32>>, Vec<u64>)> =
        vec![Default::default(); profile.threads.len()];
    for (group, ns) in profile.samples.iter().zip(group_weights(profile, view)) {
        let Some((samples, weights)) = threads.get_mut(group.thread as usize) else {
            continue;
        };
        if ns == 0 {
            continue;
        }
        let stack = stacks::drawn(profile, group, false)
            .iter()
            .map(|frame| {
                let key = match frame {
                    StackFrame::Native(native) => (
                        Cow::Borrowed(native.function.as_str()),
                        native.file.as_deref(),
                        native.line,
                    ),
                    other => (Cow::Owned(other.label()), None, None),
                };
                *frame_ids
                    .entry(key)
                    .or_insert_with_key(|(name, file, line)| {
                        frames.push(Frame {
                            name: name.clone(),
                            file: *file,
                            line: *line,
                        });
                        frames.len() as u32 - 1
                    })
            })
            .collect();
        samples.push(stack);
        weights.push(ns);
    }
    let profiles = (profile.threads.iter().zip(threads))
        .filter(|(_, (samples, _))| !samples.is_empty())
        .map(|(thread, (samples, weights))| Sampled {
            kind: "sampled",
            name: format!("{} (tid {})", thread.name, thread.tid),
            unit: "nanoseconds",
            start_value: 0,
            end_value: weights.iter().sum(),
            samples,
            weights,
        })
        .collect();
    File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames },
        profiles,
        name: format!("fsprof: {}", profile.meta.command.join(" ")),
        active_profile_index: 0,
        exporter: format!("fsprof {}", profile.meta.fsprof_version),
    }
}
