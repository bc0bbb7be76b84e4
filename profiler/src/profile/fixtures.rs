//! Profiles for unit tests, built from a few lines each: samples given as their mark stacks
//! and native addresses, named by a fake symbolizer. Used by the tests of every later stage.

use crate::profile::{
    Frame, Meta, NativeFrame, Payload, PayloadKind, Profile, ProfileBuilder, RawNativeStack, Stack,
};

/// A fake symbolizer: address `n` is function `f{n}`; address 100 + n is `g{n}` with `f{n}`
/// inlined into it (two frames).
pub(crate) fn symbolize(address: u64) -> Vec<NativeFrame> {
    let frame = |name: String, inlined| NativeFrame {
        function: name,
        file: None,
        line: None,
        module: "app".into(),
        inlined,
        calls: None,
    };
    if address >= 100 {
        vec![
            frame(format!("g{}", address - 100), false),
            frame(format!("f{}", address - 100), true),
        ]
    } else {
        vec![frame(format!("f{address}"), false)]
    }
}

/// One sample: mark stack as (feature, payload) pairs (payload `None`: antimark), native stack
/// as (addresses, marks_at, truncated) or none, thread id, wall ms, active ms.
pub(crate) struct S {
    pub marks: Vec<(&'static str, Option<&'static str>)>,
    pub native: Option<(Vec<u64>, Vec<u32>, bool)>,
    pub tid: u32,
    pub wall_us: u64,
    pub active_us: u64,
}

pub(crate) fn build(samples: &[S]) -> Profile {
    let mut b = ProfileBuilder::new();
    for s in samples {
        let thread = b.thread(s.tid, || format!("t{}", s.tid));
        let frames = s
            .marks
            .iter()
            .map(|(feature, payload)| Frame {
                feature: b.feature((*feature).into()),
                payload: payload.map(|text| {
                    b.payload(Payload {
                        kind: PayloadKind::Location,
                        text: text.into(),
                        detail: None,
                    })
                }),
                builtin: false,
            })
            .collect();
        let stack = b.stack(Stack {
            frames,
            truncated_depth: None,
        });
        let native = s.native.clone().map(|(addresses, marks_at, truncated)| {
            b.native_stack(RawNativeStack {
                addresses,
                marks_at,
                truncated,
                marks: None,
            })
        });
        b.add_sample(thread, stack, native, s.wall_us * 1000, s.active_us * 1000);
    }
    b.finish(Meta::default(), symbolize)
}
