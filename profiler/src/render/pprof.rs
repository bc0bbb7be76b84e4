//! pprof output (`fsprof report DIR --format pprof`): the profile as pprof's `profile.proto`,
//! gzipped, for `go tool pprof`, Grafana Pyroscope, Parca and the other tools that read it.
//!
//! Each distinct combined stack and set of labels becomes one pprof sample (the sample groups
//! that share them, threads apart, add up: pprof has no thread), built once: a file whose 2,000
//! groups share one 65,536-frame stack took minutes and gigabytes when each group was drawn
//! and written apart. A sample holds its combined stack (native frames with the marks
//! between them, as in `flamegraph.svg`; see `stacks.rs`), two values (the samples taken, and
//! their time in nanoseconds in the report's time view, so the time adds up to the report's
//! total), and string labels: `feature` once per feature the sample counts for (the report's
//! rule: a feature's innermost frame is a mark, not an antimark) and `instance` once per such
//! mark, as `[feature] payload` like its frame. `go tool pprof -tagfocus=feature=output` thus
//! shows the report's `output` time. A native frame and the frames inlined into it share one
//! location (inlined lines first, as pprof orders them); each module is a mapping with its path
//! and build id (the profile's `modules`). Mark frames have no mapping.
//!
//! Not here: addresses (fsprof symbolizes while recording and keeps names, files and lines, not
//! addresses), or reading pprof files. The messages are those of pprof's published
//! `proto/profile.proto`, written as prost derives.

use crate::analysis::{counted_marks, group_weights, TimeView};
use crate::profile::Profile;
use crate::render::stacks::{self, StackFrame};
use std::collections::HashMap;

/// The messages of pprof's `profile.proto` that fsprof writes (field numbers as published).
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// A location as interned: its mapping (0 for none) and its lines (function id, line),
/// innermost first.
type LocationKey = (u64, Vec<(u64, i64)>);

/// Interns strings, functions, mappings and locations (ids from 1; string 0 is "").
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: HashMap<(i64, i64), u64>,
    mappings: HashMap<i64, u64>,
    /// Per module name: its path and build id (from the profile's modules).
    files: HashMap<String, (String, Option<String>)>,
    locations: HashMap<LocationKey, u64>,
    out: proto::Profile,
}

impl Tables {
    fn string(&mut self, text: &str) -> i64 {
        if let Some(id) = self.string_ids.get(text) {
            return *id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(text.to_owned());
        self.string_ids.insert(text.to_owned(), id);
        id
    }

    fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let key = (self.string(name), self.string(file.unwrap_or("")));
        let next = self.functions.len() as u64 + 1;
        let id = *self.functions.entry(key).or_insert(next);
        if id == next {
            self.out.function.push(proto::Function {
                id,
                name: key.0,
                system_name: key.0,
                filename: key.1,
            });
        }
        id
    }

    fn mapping(&mut self, module: &str) -> u64 {
        let key = self.string(module);
        let next = self.mappings.len() as u64 + 1;
        let id = *self.mappings.entry(key).or_insert(next);
        if id == next {
            let (path, build_id) = self.files.get(module).cloned().unwrap_or_default();
            let filename = self.string(if path.is_empty() { module } else { &path });
            let build_id = self.string(build_id.as_deref().unwrap_or(""));
            self.out.mapping.push(proto::Mapping {
                id,
                filename,
                build_id,
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            });
        }
        id
    }

    fn location(&mut self, key: LocationKey) -> u64 {
        let next = self.locations.len() as u64 + 1;
        if let Some(id) = self.locations.get(&key) {
            return *id;
        }
        self.out.location.push(proto::Location {
            id: next,
            mapping_id: key.0,
            line: (key.1.iter())
                .map(|&(function_id, line)| proto::Line { function_id, line })
                .collect(),
        });
        self.locations.insert(key, next);
        next
    }
}

/// The profile in `view` as a gzipped pprof `profile.proto`.
pub fn encode(profile: &Profile, view: TimeView) -> Vec<u8> {
    let mut tables = Tables::default();
    tables.string("");
    for module in profile.modules.iter().rev() {
        let file = (module.path.clone(), module.build_id.clone());
        tables.files.insert(module.name.clone(), file);
    }
    let (samples, count) = (tables.string("samples"), tables.string("count"));
    let (time, nanoseconds) = (tables.string("time"), tables.string("nanoseconds"));
    let (feature_key, instance_key) = (tables.string("feature"), tables.string("instance"));
    let mut labels_of: HashMap<u32, Vec<proto::Label>> = HashMap::new();
    // What a group's pprof sample is made of (`stacks::drawn`): its marks, its native stack and,
    // with several processes, its thread's process; the index of that sample.
    let mut sample_of: HashMap<(u32, Option<u32>, Option<u32>), usize> = HashMap::new();
    for (group, ns) in profile.samples.iter().zip(group_weights(profile, view)) {
        if ns == 0 {
            continue;
        }
        let process = (profile.processes.len() > 1)
            .then(|| {
                profile
                    .threads
                    .get(group.thread as usize)
                    .map(|t| t.process)
            })
            .flatten();
        let (count, ns) = (
            group.count.min(i64::MAX as u64) as i64,
            ns.min(i64::MAX as u64) as i64,
        );
        if let Some(&index) = sample_of.get(&(group.stack, group.native, process)) {
            let value = &mut tables.out.sample[index].value;
            value[0] = value[0].saturating_add(count);
            value[1] = value[1].saturating_add(ns);
            continue;
        }
        sample_of.insert(
            (group.stack, group.native, process),
            tables.out.sample.len(),
        );
        let mut keys: Vec<LocationKey> = Vec::new();
        let mut after_physical = false;
        for frame in &stacks::drawn(profile, group, false) {
            match frame {
                StackFrame::Native(native) => {
                    let function = tables.function(&native.function, native.file.as_deref());
                    let line = (function, i64::from(native.line.unwrap_or(0)));
                    match keys.last_mut() {
                        // Inlined into the frame before it: the same location, innermost first.
                        Some((_, lines)) if native.inlined && after_physical => {
                            lines.insert(0, line)
                        }
                        _ => keys.push((tables.mapping(&native.module), vec![line])),
                    }
                    after_physical = true;
                }
                other => {
                    keys.push((0, vec![(tables.function(&other.label(), None), 0)]));
                    after_physical = false;
                }
            }
        }
        let location_id = keys
            .into_iter()
            .rev()
            .map(|key| tables.location(key))
            .collect();
        let label = labels_of.entry(group.stack).or_insert_with(|| {
            let stack = &profile.stacks[group.stack as usize];
            let mut labels = Vec::new();
            for (feature, payload) in counted_marks(stack) {
                let name = &profile.features[feature as usize];
                let text = &profile.payloads[payload as usize].text;
                labels.push(proto::Label {
                    key: feature_key,
                    str: tables.string(name),
                });
                labels.push(proto::Label {
                    key: instance_key,
                    str: tables.string(&format!("[{name}] {text}")),
                });
            }
            labels
        });
        tables.out.sample.push(proto::Sample {
            location_id,
            value: vec![count, ns],
            label: label.clone(),
        });
    }
    let comment = format!(
        "fsprof {}: {} (time view: {})",
        profile.meta.fsprof_version,
        profile.meta.command.join(" "),
        match view {
            TimeView::Active => "active",
            TimeView::All => "all",
        }
    );
    let comment = tables.string(&comment);
    let mut out = std::mem::take(&mut tables.out);
    out.sample_type = vec![
        proto::ValueType {
            r#type: samples,
            unit: count,
        },
        proto::ValueType {
            r#type: time,
            unit: nanoseconds,
        },
    ];
    out.default_sample_type = time;
    out.period_type = Some(proto::ValueType {
        r#type: time,
        unit: nanoseconds,
    });
    out.period = (1e9 / profile.meta.rate_hz.max(1.0)) as i64;
    out.time_nanos = profile.meta.start_unix_ns.min(i64::MAX as u64) as i64;
    out.duration_nanos = profile.meta.duration_ns.min(i64::MAX as u64) as i64;
    out.comment = vec![comment];
    out.string_table = tables.strings;
    gzip(&prost::Message::encode_to_vec(&out))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Meta, NativeFrame, ProfileBuilder, RawNativeStack, Stack};

    /// 2,000 groups (one per thread) sharing one 20,000-frame native stack are one pprof sample
    /// with their counts and times added: the stack drawn and its locations made once.
    #[test]
    fn groups_that_share_a_stack_are_one_sample_drawn_once() {
        let mut b = ProfileBuilder::new();
        let feature = b.feature("eval".into());
        let stack = b.stack(Stack {
            frames: vec![Frame {
                feature,
                payload: None,
                builtin: false,
            }],
            truncated_depth: None,
        });
        let native = b.native_stack(RawNativeStack {
            addresses: (0..20_000u64).map(|i| 0x1000 + i * 16).collect(),
            ..RawNativeStack::default()
        });
        for tid in 0..2_000 {
            let thread = b.thread(tid, || format!("t{tid}"));
            b.add_sample(thread, stack, Some(native), 1_000_000, 1_000_000);
        }
        let profile = b.finish(Meta::default(), |address| {
            vec![NativeFrame {
                function: format!("f{address:x}"),
                file: None,
                line: None,
                module: "app".into(),
                inlined: false,
                calls: None,
            }]
        });
        let gz = encode(&profile, TimeView::Active);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
        let decoded: proto::Profile = prost::Message::decode(&bytes[..]).unwrap();
        assert_eq!(decoded.sample.len(), 1);
        assert_eq!(decoded.sample[0].value, vec![2_000, 2_000 * 1_000_000]);
        assert!(decoded.sample[0].location_id.len() >= 20_000);
    }
}
