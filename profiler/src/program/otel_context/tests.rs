//! The OpenTelemetry thread-context reader against records and process contexts laid out by
//! the specifications (OTEP 4947 and 4719), in a memory of the test's making: the reading
//! rules, the bounds, and the seqlock. Finding them in a real program from outside is the
//! end-to-end test's (`tests/c/otel_context.c`).

use super::*;
use nix::errno::Errno;

/// Memory at `base`, as a target's would be read.
struct Fake {
    base: u64,
    bytes: Vec<u8>,
}

impl Memory for Fake {
    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let start = address.checked_sub(self.base).ok_or(Errno::EFAULT)? as usize;
        let end = start.checked_add(buf.len()).ok_or(Errno::EFAULT)?;
        buf.copy_from_slice(self.bytes.get(start..end).ok_or(Errno::EFAULT)?);
        Ok(())
    }
}

fn record(valid: u8, attributes: &[(u8, &str)]) -> Vec<u8> {
    let mut bytes = vec![0xab; 24];
    bytes.extend([valid, 1]);
    let data: Vec<u8> = (attributes.iter())
        .flat_map(|(index, value)| [&[*index, value.len() as u8][..], value.as_bytes()].concat())
        .collect();
    bytes.extend((data.len() as u16).to_ne_bytes());
    bytes.extend(data);
    bytes
}

fn keys(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn pairs(labels: &[Label]) -> Vec<(&str, &str)> {
    (labels.iter())
        .map(|l| (l.key.as_str(), l.value.as_str()))
        .collect()
}

#[test]
fn a_record_is_read_by_the_specifications_rules() {
    let names = keys(&["http.route", "tenant"]);
    let (labels, unknown) = parse_record(&record(1, &[(0, "GET /a"), (1, "acme")]), &names);
    assert_eq!(
        pairs(&labels),
        [("http.route", "GET /a"), ("tenant", "acme")]
    );
    assert!(!unknown);
    // Only 1 is valid.
    for valid in [0, 2, 255] {
        let (labels, _) = parse_record(&record(valid, &[(0, "GET /a")]), &names);
        assert!(labels.is_empty(), "valid = {valid}: {labels:?}");
    }
    // Of two with one key, the last counts.
    let (labels, _) = parse_record(&record(1, &[(0, "GET /a"), (0, "GET /b")]), &names);
    assert_eq!(pairs(&labels), [("http.route", "GET /b")]);
    // An index the key map does not name is skipped, and said.
    let (labels, unknown) = parse_record(&record(1, &[(7, "x"), (1, "acme")]), &names);
    assert_eq!(pairs(&labels), [("tenant", "acme")]);
    assert!(unknown);
}

#[test]
fn a_records_bytes_are_bounded_by_its_size_and_its_copy() {
    let names = keys(&["k"]);
    // A truncated last entry ends the attributes.
    let mut bytes = record(1, &[(0, "abc")]);
    bytes.extend([0, 9, b'x']);
    let size = (bytes.len() - RECORD_HEADER) as u16;
    bytes[26..28].copy_from_slice(&size.to_ne_bytes());
    assert_eq!(pairs(&parse_record(&bytes, &names).0), [("k", "abc")]);
    // A size beyond the bytes copied reads what was copied.
    let mut bytes = record(1, &[(0, "abc")]);
    bytes[26..28].copy_from_slice(&600u16.to_ne_bytes());
    assert_eq!(pairs(&parse_record(&bytes, &names).0), [("k", "abc")]);
    // A size below the attributes' ends them there.
    let mut bytes = record(1, &[(0, "abc"), (0, "def")]);
    bytes[26..28].copy_from_slice(&5u16.to_ne_bytes());
    assert_eq!(pairs(&parse_record(&bytes, &names).0), [("k", "abc")]);
    // No header, no labels.
    assert!(parse_record(&[1; 20], &names).0.is_empty());
}

/// A `ProcessContext` payload as the reference writer (sig-profiling's `otel_process_ctx.c`)
/// encodes it: a resource, then the thread-local schema and key map as attributes (field 2).
fn payload(schema: &str, names: &[&str]) -> Vec<u8> {
    fn bytes(field: u8, inner: &[u8]) -> Vec<u8> {
        let mut out = vec![field << 3 | 2];
        let mut len = inner.len();
        while len >= 0x80 {
            out.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend(inner);
        out
    }
    let string = |text: &str| bytes(1, text.as_bytes());
    let attribute = |key: &str, value: Vec<u8>| {
        bytes(2, &[bytes(1, key.as_bytes()), bytes(2, &value)].concat())
    };
    let resource = bytes(
        1,
        &bytes(
            1,
            &[bytes(1, b"service.name"), bytes(2, &string("demo"))].concat(),
        ),
    );
    let array: Vec<u8> = names.iter().flat_map(|n| bytes(1, &string(n))).collect();
    [
        resource,
        attribute("threadlocal.schema_version", string(schema)),
        attribute("threadlocal.attribute_key_map", bytes(5, &array)),
    ]
    .concat()
}

/// A process context at `base` (its mapping's start), its payload after the header.
fn context(base: u64, published_at: u64, payload: &[u8]) -> Fake {
    let mut bytes = b"OTEL_CTX".to_vec();
    bytes.extend(2u32.to_ne_bytes());
    bytes.extend((payload.len() as u32).to_ne_bytes());
    bytes.extend(published_at.to_ne_bytes());
    bytes.extend((base + 32).to_ne_bytes());
    bytes.extend(payload);
    Fake { base, bytes }
}

fn mapping(start: u64, path: &str) -> Mapping {
    Mapping {
        range: start..start + 4096,
        read: true,
        execute: false,
        offset: 0,
        inode: 1,
        device: 1,
        path: path.to_owned(),
        deleted: true,
    }
}

#[test]
fn the_key_map_is_read_from_the_process_context() {
    let base = 0x7000_0000;
    let memory = context(
        base,
        42,
        &payload("tlsdesc_v1_dev", &["http.route", "tenant"]),
    );
    for name in [
        "/memfd:OTEL_CTX",
        "[anon:OTEL_CTX]",
        "[anon_shmem:OTEL_CTX]",
    ] {
        let map = read_key_map(&memory, &[mapping(0x1000, "/bin/x"), mapping(base, name)]);
        assert_eq!(
            map,
            Ok(KeyMap {
                keys: keys(&["http.route", "tenant"]),
                published_at: 42
            }),
            "{name}"
        );
    }
    let other = [mapping(base, "/memfd:OTEL_CTX_BACKUP")];
    assert_eq!(read_key_map(&memory, &other), Err(ContextError::Absent));
}

#[test]
fn a_context_being_written_or_of_another_schema_is_not_read() {
    let base = 0x7000_0000;
    let maps = [mapping(base, "/memfd:OTEL_CTX")];
    // Published at 0: being written.
    let memory = context(base, 0, &payload("tlsdesc_v1_dev", &["k"]));
    assert_eq!(read_key_map(&memory, &maps), Err(ContextError::Absent));
    let memory = context(base, 7, &payload("go_pprof_labels_v1", &["k"]));
    assert_eq!(
        read_key_map(&memory, &maps),
        Err(ContextError::Schema("go_pprof_labels_v1".into()))
    );
    // A wrong signature or version, or a payload past its bound.
    let mut memory = context(base, 7, &payload("tls_v1", &["k"]));
    assert!(read_key_map(&memory, &maps).is_ok());
    memory.bytes[8] = 1;
    assert_eq!(read_key_map(&memory, &maps), Err(ContextError::Absent));
    memory.bytes[8] = 2;
    memory.bytes[12..16].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_ne_bytes());
    assert_eq!(read_key_map(&memory, &maps), Err(ContextError::Absent));
}

#[test]
fn malformed_payloads_give_what_was_read_before_the_fault() {
    let good = payload("tls_v1", &["a", "b"]);
    for cut in 0..good.len() {
        // Never a panic, whatever the cut.
        let _ = decode_context(&good[..cut]);
    }
    let (schema, names) = decode_context(&good);
    assert_eq!(schema.as_deref(), Some("tls_v1"));
    assert_eq!(names, keys(&["a", "b"]));
    // A length past the end, a varint without end.
    assert_eq!(
        decode_context(&[0x12, 0xff, 0xff, 0x03]),
        (None, Vec::new())
    );
    assert_eq!(decode_context(&[0x80; 12]), (None, Vec::new()));
}

#[test]
fn a_threads_record_is_read_through_its_pointer() {
    // The thread pointer at 0x2000, the pointer 16 bytes below it, the record at 0x3000.
    let mut bytes = vec![0u8; 0x2000];
    bytes[0xff0..0xff8].copy_from_slice(&0x3000u64.to_ne_bytes());
    let mut rec = record(1, &[(0, "GET /a")]);
    rec.resize(0x1000, 0); // the rest of its page
    bytes.extend(rec);
    let memory = Fake {
        base: 0x1000,
        bytes,
    };
    let context = OtelContext { tls_offset: -16 };
    let read = context.read_record(&memory, 0x2000);
    assert_eq!(read.len(), RECORD_HEADER + 8);
    assert_eq!(
        pairs(&parse_record(&read, &keys(&["r"])).0),
        [("r", "GET /a")]
    );
    // A null pointer: no record.
    let mut memory = memory;
    memory.bytes[0xff0..0xff8].fill(0);
    assert!(context.read_record(&memory, 0x2000).is_empty());
}

#[test]
fn a_records_span_id_is_a_label_when_valid_and_not_zero() {
    let mut bytes = record(1, &[(0, "GET /a")]);
    bytes[16..24].copy_from_slice(&[0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a]);
    let span = span_label(&bytes).expect("a span");
    assert_eq!(
        (span.key.as_str(), span.value.as_str()),
        (SPAN_KEY, "030405060708090a")
    );
    bytes[24] = 0;
    assert_eq!(span_label(&bytes), None, "not valid");
    let mut zero = record(1, &[]);
    zero[16..24].fill(0);
    assert_eq!(span_label(&zero), None, "span id zero");
    assert_eq!(span_label(&zero[..20]), None, "a header cut short");
}
