//! An analysis written outside fsprof, against the saved `profile.json` alone: copy it to start
//! your own. It prints, for one feature, the time of each *core sample*: the feature's marks on a
//! sample's mark stack, outermost first, with their payloads (an alternative's offset, a
//! boundary's components included), heaviest first.
//!
//!   cargo run --release -p fsprof-tests --example core_samples -- fsprof-app-1/profile.json FEATURE
//!
//! The format is documented in `profiler/src/profile.rs` (`features`, `payloads`, `stacks` and
//! `samples`). This example counts each sample group's `active_ns` (time the thread was running
//! or waiting for a CPU); fsprof's own report also counts blocked time inside the program's
//! marks (`wall_ns`). It needs only `serde_json`.

use serde_json::Value;
use std::collections::HashMap;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: core_samples PROFILE.json FEATURE");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).expect("reading the profile");
    let profile: Value = serde_json::from_str(&text).expect("a JSON profile");
    assert_eq!(profile["format"], "fsprof-profile", "not an fsprof profile");
    let feature = profile["features"]
        .as_array()
        .unwrap()
        .iter()
        .position(|name| name == args[2].as_str())
        .unwrap_or_else(|| panic!("no feature {} in the profile", args[2]));
    let payloads = profile["payloads"].as_array().unwrap();
    let stacks = profile["stacks"].as_array().unwrap();
    // The payload's text, and its detail when it has one (an alternative's offset, say).
    let describe = |payload: &Value| -> String {
        let payload = &payloads[payload.as_u64().unwrap() as usize];
        match payload["detail"]["type"].as_str() {
            Some("alternative") => format!(
                "{} @{}",
                payload["text"].as_str().unwrap(),
                payload["detail"]["offset"]
            ),
            _ => payload["text"].as_str().unwrap().to_owned(),
        }
    };
    let mut time: HashMap<String, u64> = HashMap::new();
    for sample in profile["samples"].as_array().unwrap() {
        let frames = stacks[sample["stack"].as_u64().unwrap() as usize]["frames"]
            .as_array()
            .unwrap();
        let marks: Vec<&Value> = frames
            .iter()
            .filter(|frame| frame["feature"].as_u64() == Some(feature as u64))
            .collect();
        // The sample counts for the feature when its innermost frame of it is a mark (an
        // antimark has no payload).
        if marks.last().is_none_or(|frame| frame["payload"].is_null()) {
            continue;
        }
        let core: Vec<String> = marks
            .iter()
            .filter(|frame| !frame["payload"].is_null())
            .map(|frame| describe(&frame["payload"]))
            .collect();
        *time.entry(core.join(" > ")).or_default() += sample["active_ns"].as_u64().unwrap();
    }
    let mut rows: Vec<(String, u64)> = time.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (core, ns) in rows {
        println!("{:>10.1} ms  {core}", ns as f64 / 1e6);
    }
}
