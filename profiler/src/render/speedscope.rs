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
use serde_json::{json, Value};
use std::collections::HashMap;

/// The speedscope file of `profile` in `view`.
pub fn render(profile: &Profile, view: TimeView) -> Value {
    let mut frames: Vec<Value> = Vec::new();
    let mut frame_ids: HashMap<(String, Option<String>, Option<u32>), usize> = HashMap::new();
    // Per thread: its samples (frame indexes, root first) and their weights.
    let mut threads: Vec<(Vec<Vec<usize>>, Vec<u64>)> =
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
                    StackFrame::Native(native) => {
                        (native.function.clone(), native.file.clone(), native.line)
                    }
                    other => (other.label(), None, None),
                };
                *frame_ids
                    .entry(key)
                    .or_insert_with_key(|(name, file, line)| {
                        let mut frame = json!({ "name": name });
                        if let Some(file) = file {
                            frame["file"] = json!(file);
                        }
                        if let Some(line) = line {
                            frame["line"] = json!(line);
                        }
                        frames.push(frame);
                        frames.len() - 1
                    })
            })
            .collect();
        samples.push(stack);
        weights.push(ns);
    }
    let profiles: Vec<Value> = (profile.threads.iter().zip(threads))
        .filter(|(_, (samples, _))| !samples.is_empty())
        .map(|(thread, (samples, weights))| {
            let total: u64 = weights.iter().sum();
            json!({
                "type": "sampled",
                "name": format!("{} (tid {})", thread.name, thread.tid),
                "unit": "nanoseconds",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            })
        })
        .collect();
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": { "frames": frames },
        "profiles": profiles,
        "name": format!("fsprof: {}", profile.meta.command.join(" ")),
        "activeProfileIndex": 0,
        "exporter": format!("fsprof {}", profile.meta.fsprof_version),
    })
}
