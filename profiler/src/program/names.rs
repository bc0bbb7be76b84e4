//! Turning addresses found in mark records into text: feature names and instance payloads.
//!
//! Strings live in the target (static descriptors, `&'static str`s, file names of
//! `Location`s), so they are read with `process_vm_readv` the first time an address is seen and
//! cached by address by the caller. Everything read is untrusted: lengths are capped, bytes are
//! decoded lossily and control characters replaced, and unreadable memory becomes a placeholder
//! rather than an error. A call-site payload (a C mark without a payload string) is a return
//! address and is shown as `0x…`; this module does not symbolize it. An alternative's and a
//! boundary's payload also keep their parts (`Detail`) for the analyses that use them.

use crate::profile::{clean, Detail, Payload, PayloadKind};
use crate::program::remote::Memory;
use fsprof_shim::abi::{self, RecordView};

/// Longest feature name we read.
pub const MAX_NAME: usize = 256;
/// Longest payload string we read.
pub const MAX_PAYLOAD: usize = 1024;

/// Reads the name of the feature whose descriptor is at `address`.
pub fn feature_name(remote: &impl Memory, address: u64) -> String {
    let mut bytes = [0u8; abi::FEATURE_DESCRIPTOR_SIZE];
    if remote.read(address, &mut bytes).is_err() {
        return format!("<unreadable feature at {address:#x}>");
    }
    let view = abi::parse_feature(&bytes).expect("sized");
    if view.magic != abi::FEATURE_MAGIC {
        return format!("<not a feature at {address:#x}>");
    }
    read_string(remote, view.name, view.name_len, MAX_NAME)
}

/// Reads a mark's payload; `None` for an antimark.
pub fn payload(remote: &impl Memory, record: &RecordView) -> Option<Payload> {
    let string = |address: u64, len: u64| read_string(remote, address, len, MAX_PAYLOAD);
    let plain = |(kind, text)| Payload {
        kind,
        text,
        detail: None,
    };
    match record.kind {
        abi::KIND_ALTERNATIVE => {
            let choice = string(record.payload, record.payload_len as u64);
            let branch = record.extra[0].min(u32::MAX as u64) as u32;
            Some(Payload {
                kind: PayloadKind::Alternative,
                text: format!("{choice}, branch {branch}"),
                detail: Some(Detail::Alternative {
                    choice,
                    branch,
                    offset: record.position,
                }),
            })
        }
        abi::KIND_BOUNDARY => {
            let value = string(record.payload, record.payload_len as u64);
            let from = string(record.position, record.extra[1] >> 32);
            let to = string(record.extra[0], record.extra[1] & 0xffff_ffff);
            Some(Payload {
                kind: PayloadKind::Boundary,
                text: format!("{value} ({from} -> {to})"),
                detail: Some(Detail::Boundary { value, from, to }),
            })
        }
        _ => plain_payload(remote, record).map(plain),
    }
}

/// The payload of the kinds that are one string (or an address); `None` for an antimark.
fn plain_payload(remote: &impl Memory, record: &RecordView) -> Option<(PayloadKind, String)> {
    match record.kind {
        abi::KIND_ANTIMARK => None,
        abi::KIND_LOCATION => {
            let file = read_string(
                remote,
                record.payload,
                record.payload_len as u64,
                MAX_PAYLOAD,
            );
            Some((
                PayloadKind::Location,
                format!("{file}:{}:{}", record.line, record.column),
            ))
        }
        abi::KIND_NAME => Some((
            PayloadKind::Name,
            read_string(
                remote,
                record.payload,
                record.payload_len as u64,
                MAX_PAYLOAD,
            ),
        )),
        abi::KIND_CALL_SITE => Some((PayloadKind::CallSite, format!("{:#x}", record.payload))),
        other => Some((PayloadKind::Name, format!("<unknown payload kind {other}>"))),
    }
}

/// Reads at most `max` bytes of a string at `address`, marking truncation with `…`.
fn read_string(remote: &impl Memory, address: u64, len: u64, max: usize) -> String {
    let take = (len as usize).min(max);
    let mut bytes = vec![0u8; take];
    if take > 0 && remote.read(address, &mut bytes).is_err() {
        return format!("<unreadable string at {address:#x}>");
    }
    let mut text = clean(&String::from_utf8_lossy(&bytes));
    if (len as usize) > take {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::remote::Remote;
    use fsprof_shim::Feature;

    static F: Feature = Feature::new("feature\nwith control");

    #[test]
    fn reads_names_from_a_process_and_survives_garbage() {
        let remote = Remote::new(std::process::id());
        assert_eq!(
            feature_name(&remote, &F as *const Feature as u64),
            "feature\u{FFFD}with control"
        );
        assert_eq!(
            clean("a\u{1b}]0;x\u{7}b\u{202E}c"),
            "a\u{FFFD}]0;x\u{FFFD}b\u{FFFD}c"
        );
        let not_a_feature = b"just some bytes that are long enough";
        assert!(feature_name(&remote, not_a_feature.as_ptr() as u64).starts_with("<not a feature"));
        assert!(feature_name(&remote, 8).starts_with("<unreadable"));
        let record = RecordView {
            feature: 0,
            kind: abi::KIND_NAME,
            payload: "hello".as_ptr() as u64,
            payload_len: u32::MAX,
            line: 0,
            column: 0,
            sp: 0,
            position: 0,
            extra: [0, 0],
        };
        // A huge claimed length is capped, and reading past the end of the mapping fails softly.
        let Payload { kind, text, .. } = payload(&remote, &record).unwrap();
        assert_eq!(kind, PayloadKind::Name);
        assert!(text.starts_with("hello") || text.starts_with("<unreadable"));
        // A call site is an address, not a string: nothing is read.
        let call_site = RecordView {
            kind: abi::KIND_CALL_SITE,
            payload: 0x5555_0000_1234,
            payload_len: 0,
            ..record
        };
        assert_eq!(
            payload(&remote, &call_site),
            Some(Payload {
                kind: PayloadKind::CallSite,
                text: "0x555500001234".to_owned(),
                detail: None,
            })
        );
        // An alternative and a boundary keep their parts.
        let (choice, from, to) = ("item", "client", "matrix");
        let alternative = RecordView {
            kind: abi::KIND_ALTERNATIVE,
            payload: choice.as_ptr() as u64,
            payload_len: 4,
            position: 1234,
            extra: [2, 0],
            ..record
        };
        let expected = Detail::Alternative {
            choice: "item".into(),
            branch: 2,
            offset: 1234,
        };
        let found = payload(&remote, &alternative).unwrap();
        assert_eq!(
            (found.text.as_str(), found.detail),
            ("item, branch 2", Some(expected))
        );
        let boundary = RecordView {
            kind: abi::KIND_BOUNDARY,
            payload: "positive?".as_ptr() as u64,
            payload_len: 9,
            position: from.as_ptr() as u64,
            extra: [to.as_ptr() as u64, 6 << 32 | 6],
            ..record
        };
        let found = payload(&remote, &boundary).unwrap();
        assert_eq!(found.text, "positive? (client -> matrix)");
    }

    /// Marks whose kind, payload address and length are arbitrary (pointing into this process's
    /// own memory of random bytes, or anywhere) and feature addresses anywhere: every string
    /// read is bounded and printable, nothing panics.
    #[test]
    fn arbitrary_marks_give_bounded_clean_strings() {
        let remote = Remote::new(std::process::id());
        let mut rng = fastrand::Rng::with_seed(15);
        let memory = crate::fuzz::bytes(&mut rng, 64 * 1024);
        let base = memory.as_ptr() as u64;
        let cases = crate::fuzz::cases(20_000);
        for _ in 0..cases {
            let inside = base + rng.u64(..memory.len() as u64);
            let record = RecordView {
                feature: if rng.bool() { inside } else { rng.u64(..) },
                kind: rng.u32(..8),
                payload: if rng.bool() { inside } else { rng.u64(..) },
                payload_len: if rng.bool() {
                    rng.u32(..2048)
                } else {
                    rng.u32(..)
                },
                line: rng.u32(..),
                column: rng.u32(..),
                sp: rng.u64(..),
                position: if rng.bool() { inside } else { rng.u64(..) },
                extra: [
                    if rng.bool() { inside } else { rng.u64(..) },
                    if rng.bool() {
                        rng.u64(..2048) << 32 | rng.u64(..2048)
                    } else {
                        rng.u64(..)
                    },
                ],
            };
            let name = feature_name(&remote, record.feature);
            assert!(name.len() <= MAX_NAME * 4 + 64, "{} bytes", name.len());
            assert_eq!(clean(&name), name);
            if let Some(Payload { text, .. }) = payload(&remote, &record) {
                // A boundary's text has three strings.
                assert!(
                    text.len() <= 3 * MAX_PAYLOAD * 4 + 64,
                    "{} bytes",
                    text.len()
                );
                assert_eq!(clean(&text), text);
            }
        }
    }
}
