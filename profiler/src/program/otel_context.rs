//! Labels a program publishes by the OpenTelemetry thread context (OTEP 4947, which the
//! OpenTelemetry eBPF profiler reads): a module (the executable or a library) exports the
//! thread-local `otel_thread_ctx_v1`, a pointer to the thread's current record (null: none):
//! `trace_id[16]`, `span_id[8]`, `valid` (a byte: only 1 is valid), `trace_flags`, a 16-bit
//! `attrs_data_size` (native endian), then that many bytes of attributes, each `{u8
//! key_index, u8 length, bytes}`. The key indexes name keys listed in the process context
//! (OTEP 4719): a mapping named `OTEL_CTX` (a memfd, or an anonymous mapping named so) whose
//! 32-byte header (`"OTEL_CTX"`, version 2, payload size, publication time, payload pointer)
//! points to a protobuf `ProcessContext`, whose attributes `threadlocal.schema_version`
//! (`tlsdesc_v1_dev`, or `tls_v1`) and `threadlocal.attribute_key_map` (an array of strings:
//! index i names key i) say how to read the records.
//!
//! Here: finding the thread-local (`thread_local.rs`), reading the key map from outside as
//! the specification's seqlock asks (the publication time read before and after the payload),
//! and parsing a record's bytes into labels (a key a feature, its value the instance): all of
//! it untrusted input, bounded ([`MAX_RECORD`], `MAX_PAYLOAD`, `MAX_KEYS`). A record not
//! valid has no labels; of two attributes with one key the last counts; an index the key map
//! does not name is skipped (and says the map may have grown). Not here: copying a thread's
//! record at a sample (`native/sampling.rs`), or turning labels into features.

use crate::program::custom_labels::{Label, Missing};
use crate::program::modules::{Mapping, Module};
use crate::program::remote::Memory;
use crate::program::thread_local::{read_u64, Exports};

/// The thread-local pointer to the current record.
const SYMBOL: &[u8] = b"otel_thread_ctx_v1";
/// A record's fixed part: ids, `valid`, flags, the attributes' size.
pub const RECORD_HEADER: usize = 28;
/// The most of a record read: the specification's recommended bound (612 bytes of attributes).
pub const MAX_RECORD: usize = 640;
/// The process context's header: signature, version, payload size, time, payload pointer.
const CONTEXT_HEADER: usize = 32;
/// The largest process context payload read.
const MAX_PAYLOAD: usize = 1 << 16;
/// Most keys kept from the key map (an index is a byte).
const MAX_KEYS: usize = 256;
/// Longest key name kept, in bytes.
const MAX_KEY: usize = 256;
/// The schemas whose records are read as above.
const SCHEMAS: [&str; 2] = ["tlsdesc_v1_dev", "tls_v1"];

/// A process's OpenTelemetry thread context: where its record pointer lies from a thread's
/// pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtelContext {
    /// The pointer's address minus the thread pointer (negative: static TLS lies below it).
    pub tls_offset: i64,
}

/// The process context's reference data for thread records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyMap {
    /// Key names by index.
    pub keys: Vec<String>,
    /// When the context was published (its header's time): a later one may hold more keys.
    pub published_at: u64,
}

/// Why the key map could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContextError {
    /// No mapping named `OTEL_CTX`, or one whose header is not (yet) a context.
    Absent,
    /// A context whose thread-local schema is not read here (named), or that has none.
    Schema(String),
}

impl OtelContext {
    /// The thread-local in `modules` of the process whose memory is `memory`, if one exports
    /// it (`executable`: the executable's path); else whether one exports it though its place
    /// cannot be read yet ([`Missing`]).
    pub fn find(
        memory: &impl Memory,
        modules: &[Module],
        executable: &str,
    ) -> Result<OtelContext, Missing> {
        let mut missing = Missing::Absent;
        for module in modules {
            let Some(exports) = Exports::of(&module.image) else {
                continue;
            };
            let Some(pointer) = exports.thread_local(SYMBOL) else {
                continue;
            };
            missing = Missing::NotYet;
            if let Some(tls_offset) = pointer.offset(memory, module, module.path == executable) {
                return Ok(OtelContext { tls_offset });
            }
        }
        Err(missing)
    }

    /// The record of the thread whose thread pointer is `thread_pointer`, as a sample copies
    /// it (its header, then its attributes, at most [`MAX_RECORD`] bytes); empty when it has
    /// none or it cannot be read.
    pub fn read_record(&self, memory: &impl Memory, thread_pointer: u64) -> Vec<u8> {
        let Some(record) = read_u64(memory, thread_pointer.wrapping_add_signed(self.tls_offset))
        else {
            return Vec::new();
        };
        let mut bytes = vec![0u8; RECORD_HEADER];
        if record == 0 || memory.read(record, &mut bytes).is_err() {
            return Vec::new();
        }
        let size = usize::from(u16::from_ne_bytes([bytes[26], bytes[27]]));
        let size = size.min(MAX_RECORD - RECORD_HEADER);
        bytes.resize(RECORD_HEADER + size, 0);
        if memory
            .read(record + RECORD_HEADER as u64, &mut bytes[RECORD_HEADER..])
            .is_err()
        {
            bytes.truncate(RECORD_HEADER);
        }
        bytes
    }
}

/// The feature a record's span id is an instance of, with `--span-ids`.
pub const SPAN_KEY: &str = "span_id";

/// A record's span id as a label of [`SPAN_KEY`] (16 hex digits, as W3C trace context writes
/// it); none where the record is not valid or its span id is zero.
pub fn span_label(bytes: &[u8]) -> Option<Label> {
    let header = bytes.get(..RECORD_HEADER)?;
    let span = &header[16..24];
    if header[24] != 1 || span.iter().all(|&b| b == 0) {
        return None;
    }
    Some(Label {
        key: SPAN_KEY.to_owned(),
        value: span.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// The labels of a record's bytes (`bytes`: its header, then as much of its attributes as was
/// copied), keys named by `keys`; and whether an index was not in `keys` (the key map may have
/// grown since it was read).
pub fn parse_record(bytes: &[u8], keys: &[String]) -> (Vec<Label>, bool) {
    let Some(header) = bytes.get(..RECORD_HEADER) else {
        return (Vec::new(), false);
    };
    if header[24] != 1 {
        return (Vec::new(), false);
    }
    let size = usize::from(u16::from_ne_bytes([header[26], header[27]]));
    let end = bytes.len().min(RECORD_HEADER + size);
    let mut attributes = &bytes[RECORD_HEADER..end];
    let (mut labels, mut unknown) = (Vec::<Label>::new(), false);
    while let [index, len, rest @ ..] = attributes {
        let Some(value) = rest.get(..usize::from(*len)) else {
            break; // a truncated entry ends the attributes
        };
        attributes = &rest[value.len()..];
        let Some(key) = keys.get(usize::from(*index)) else {
            unknown = true;
            continue;
        };
        let value = String::from_utf8_lossy(value).into_owned();
        match labels.iter_mut().find(|l| l.key == *key) {
            Some(label) => label.value = value,
            None => labels.push(Label {
                key: key.clone(),
                value,
            }),
        }
    }
    (labels, unknown)
}

/// The key map of the process whose memory is `memory` and whose mappings are `maps`, read
/// by the specification's seqlock: the header's time before and after the payload must agree
/// (and not be 0, which a writer sets while it writes); three tries.
pub fn read_key_map(memory: &impl Memory, maps: &[Mapping]) -> Result<KeyMap, ContextError> {
    let mapping = maps
        .iter()
        .find(|m| m.read && !m.execute && is_context_name(&m.path))
        .ok_or(ContextError::Absent)?;
    let at = mapping.range.start;
    for _ in 0..3 {
        let mut header = [0u8; CONTEXT_HEADER];
        memory
            .read(at, &mut header)
            .map_err(|_| ContextError::Absent)?;
        let word = |from: usize| u64::from_ne_bytes(header[from..from + 8].try_into().unwrap());
        let version = u32::from_ne_bytes(header[8..12].try_into().unwrap());
        if &header[..8] != b"OTEL_CTX" || version != 2 {
            return Err(ContextError::Absent);
        }
        let size = u32::from_ne_bytes(header[12..16].try_into().unwrap()) as usize;
        let (published_at, payload) = (word(16), word(24));
        if published_at == 0 {
            continue;
        }
        if size == 0 || size > MAX_PAYLOAD {
            return Err(ContextError::Absent);
        }
        let mut bytes = vec![0u8; size];
        memory
            .read(payload, &mut bytes)
            .map_err(|_| ContextError::Absent)?;
        let mut again = [0u8; 8];
        memory
            .read(at + 16, &mut again)
            .map_err(|_| ContextError::Absent)?;
        if u64::from_ne_bytes(again) != published_at {
            continue;
        }
        let (schema, keys) = decode_context(&bytes);
        return match schema {
            Some(schema) if SCHEMAS.contains(&schema.as_str()) => Ok(KeyMap { keys, published_at }),
            Some(schema) => Err(ContextError::Schema(schema)),
            None => Err(ContextError::Schema(String::new())),
        };
    }
    Err(ContextError::Absent)
}

/// Whether a mapping's name (its path, `" (deleted)"` removed) is the process context's: a
/// memfd named `OTEL_CTX`, or a mapping named so by `PR_SET_VMA_ANON_NAME`.
fn is_context_name(path: &str) -> bool {
    path == "/memfd:OTEL_CTX"
        || path.starts_with("[anon_shmem:OTEL_CTX]")
        || path.starts_with("[anon:OTEL_CTX]")
}

/// The thread-local schema and key map of a `ProcessContext` payload: its attributes (field
/// 2, `KeyValue`s: key 1, value 2) named `threadlocal.schema_version` (an `AnyValue` string,
/// field 1) and `threadlocal.attribute_key_map` (an `AnyValue` array, field 5, whose values,
/// field 1, are strings).
fn decode_context(payload: &[u8]) -> (Option<String>, Vec<String>) {
    let (mut schema, mut keys) = (None, Vec::new());
    for (field, attribute) in Fields(payload) {
        let Field::Bytes(attribute) = attribute else {
            continue;
        };
        if field != 2 {
            continue;
        }
        let (mut key, mut value) = (None, None);
        for (field, part) in Fields(attribute) {
            match (field, part) {
                (1, Field::Bytes(bytes)) => key = Some(bytes),
                (2, Field::Bytes(bytes)) => value = Some(bytes),
                _ => {}
            }
        }
        let (Some(key), Some(value)) = (key, value) else {
            continue;
        };
        match key {
            b"threadlocal.schema_version" => schema = string_value(value),
            b"threadlocal.attribute_key_map" => {
                keys = Fields(value)
                    .filter_map(|(field, part)| match (field, part) {
                        (5, Field::Bytes(array)) => Some(array),
                        _ => None,
                    })
                    .flat_map(|array| {
                        Fields(array).filter_map(|(field, part)| match (field, part) {
                            (1, Field::Bytes(value)) => {
                                Some(string_value(value).unwrap_or_default())
                            }
                            _ => None,
                        })
                    })
                    .take(MAX_KEYS)
                    .collect();
            }
            _ => {}
        }
    }
    (schema, keys)
}

/// An `AnyValue`'s string (field 1), cut to [`MAX_KEY`] bytes.
fn string_value(any: &[u8]) -> Option<String> {
    Fields(any).find_map(|(field, part)| match (field, part) {
        (1, Field::Bytes(text)) => {
            let text = &text[..text.len().min(MAX_KEY)];
            Some(String::from_utf8_lossy(text).into_owned())
        }
        _ => None,
    })
}

/// A protobuf field's value: a varint or fixed number (ignored here), or bytes.
enum Field<'a> {
    Number,
    Bytes(&'a [u8]),
}

/// The fields of a protobuf message, as (number, value), until the first malformed one.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, Field<'a>);

    fn next(&mut self) -> Option<(u64, Field<'a>)> {
        let tag = varint(&mut self.0)?;
        let field = match tag & 7 {
            0 => varint(&mut self.0).map(|_| Field::Number),
            1 => self.bytes(8).map(|_| Field::Number),
            5 => self.bytes(4).map(|_| Field::Number),
            2 => {
                let len = usize::try_from(varint(&mut self.0)?).ok()?;
                self.bytes(len).map(Field::Bytes)
            }
            _ => None,
        };
        if field.is_none() {
            self.0 = &[];
        }
        Some((tag >> 3, field?))
    }
}

impl<'a> Fields<'a> {
    fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let taken = self.0.get(..len)?;
        self.0 = &self.0[len..];
        Some(taken)
    }
}

/// A base-128 varint at the start of `bytes`, which it then skips; at most 10 bytes.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests;
