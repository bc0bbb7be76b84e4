//! The process context (OTEP 4719) that names the keys of the OpenTelemetry records the threads
//! publish: a memfd mapping named `OTEL_CTX` (or, where memfd cannot be had, an anonymous
//! mapping named so), whose 32-byte header (`"OTEL_CTX"`, version 2, payload size, publication
//! time, payload pointer) points to a protobuf `ProcessContext` with two attributes:
//! `threadlocal.schema_version` = `tlsdesc_v1_dev` and `threadlocal.attribute_key_map` =
//! [`fsprof.feature`, `fsprof.instance`] (key index 0 and 1 of every record). Written once per
//! process, when its region is created (a child of `fork`, which does not inherit the mapping,
//! writes its own with its region), its publication time last.
//!
//! Not here: the records (`thread.rs`).

use super::{FEATURE_KEY, INSTANCE_KEY};
use crate::sys::{self, close, ftruncate, madvise, mmap};
use crate::sys::{MADV_DONTFORK, MAP_FAILED, MFD_CLOEXEC, PROT_READ_WRITE};
use core::ptr::null_mut;
use core::sync::atomic::{fence, Ordering::SeqCst};
use std::ffi::{c_int, c_long, c_void};

extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
    fn clock_gettime(clock: c_int, time: *mut [c_long; 2]) -> c_int;
}

const MAP_PRIVATE: c_int = 0x02;
const MAP_ANONYMOUS: c_int = 0x20;
const PR_SET_VMA: c_int = 0x53564d41;
const PR_SET_VMA_ANON_NAME: c_long = 0;
const CLOCK_BOOTTIME: c_int = 7;

/// The mapping's size: the header, then the payload.
const SIZE: usize = 4096;
const HEADER: usize = 32;

/// Publishes the process context (slow path: the process's first mark).
pub(crate) fn publish() {
    let mut payload = [0u8; 256];
    let len = encode(&mut payload);
    // SAFETY: plain syscalls on values owned here; the mapping is written before it is named
    // valid (its time), and never unmapped (readers may look at it at any time).
    unsafe {
        let page = map();
        if page.is_null() {
            return;
        }
        let page = page as *mut u8;
        page.add(HEADER)
            .copy_from_nonoverlapping(payload.as_ptr(), len);
        page.copy_from_nonoverlapping(b"OTEL_CTX".as_ptr(), 8);
        (page.add(8) as *mut u32).write_unaligned(2);
        (page.add(12) as *mut u32).write_unaligned(len as u32);
        (page.add(24) as *mut u64).write_unaligned(page.add(HEADER) as u64);
        fence(SeqCst);
        let mut time = [0 as c_long; 2];
        clock_gettime(CLOCK_BOOTTIME, &mut time);
        let published = (time[0] as u64).wrapping_mul(1_000_000_000) + time[1] as u64;
        core::ptr::write_volatile(page.add(16) as *mut u64, published.max(1));
    }
}

/// A zeroed, writable mapping of [`SIZE`] bytes that children of `fork` do not inherit, named
/// `OTEL_CTX`; null if none could be had.
unsafe fn map() -> *mut c_void {
    let fd = sys::memfd_create(c"OTEL_CTX".as_ptr(), MFD_CLOEXEC);
    let mut page = MAP_FAILED;
    if fd >= 0 {
        if ftruncate(fd, SIZE as i64) == 0 {
            page = mmap(null_mut(), SIZE, PROT_READ_WRITE, MAP_PRIVATE, fd, 0);
        }
        close(fd);
    }
    if page == MAP_FAILED {
        let anonymous = MAP_PRIVATE | MAP_ANONYMOUS;
        page = mmap(null_mut(), SIZE, PROT_READ_WRITE, anonymous, -1, 0);
        if page == MAP_FAILED {
            return null_mut();
        }
        let name = c"OTEL_CTX".as_ptr();
        prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, page, SIZE, name);
    }
    madvise(page, SIZE, MADV_DONTFORK);
    page
}

/// A protobuf writer into a fixed buffer (the payload is small and known: see [`encode`]).
struct Proto<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Proto<'_> {
    fn byte(&mut self, byte: u8) {
        if let Some(place) = self.out.get_mut(self.len) {
            *place = byte;
        }
        self.len += 1;
    }

    /// Field `field`, length-delimited, holding `data`.
    fn field(&mut self, field: u8, data: &[u8]) {
        self.byte(field << 3 | 2);
        let mut n = data.len();
        while n >= 0x80 {
            self.byte(n as u8 | 0x80);
            n >>= 7;
        }
        self.byte(n as u8);
        for &byte in data {
            self.byte(byte);
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.out[..self.len.min(self.out.len())]
    }
}

/// A `KeyValue` of `key` and the `AnyValue` `value`, as attribute field 2 of `out`.
fn attribute(out: &mut Proto, key: &str, value: &[u8]) {
    let mut buffer = [0u8; 128];
    let mut pair = Proto {
        out: &mut buffer,
        len: 0,
    };
    pair.field(1, key.as_bytes());
    pair.field(2, value);
    out.field(2, pair.bytes());
}

/// An `AnyValue` holding `text` (its field 1).
fn string_value<'a>(buffer: &'a mut [u8; 64], text: &str) -> &'a [u8] {
    let mut any = Proto {
        out: buffer,
        len: 0,
    };
    any.field(1, text.as_bytes());
    let len = any.len;
    &buffer[..len]
}

/// The `ProcessContext` payload into `out`; its length.
fn encode(out: &mut [u8; 256]) -> usize {
    let mut context = Proto { out, len: 0 };
    let mut buffer = [0u8; 64];
    attribute(
        &mut context,
        "threadlocal.schema_version",
        string_value(&mut buffer, "tlsdesc_v1_dev"),
    );
    let mut values = [0u8; 64];
    let mut list = Proto {
        out: &mut values,
        len: 0,
    };
    for key in [FEATURE_KEY, INSTANCE_KEY] {
        list.field(1, string_value(&mut buffer, key));
    }
    let mut array = [0u8; 96];
    let mut any = Proto {
        out: &mut array,
        len: 0,
    };
    any.field(5, list.bytes());
    attribute(&mut context, "threadlocal.attribute_key_map", any.bytes());
    assert!(context.len <= 256, "the process context fits its buffer");
    context.len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_the_protobuf_the_specification_names() {
        let mut out = [0u8; 256];
        let len = encode(&mut out);
        let payload = &out[..len];
        // KeyValue{key: "threadlocal.schema_version", value: AnyValue{string: "tlsdesc_v1_dev"}}
        let mut expected = vec![0x12, 2 + 26 + 2 + 16, 0x0a, 26];
        expected.extend_from_slice(b"threadlocal.schema_version");
        expected.extend_from_slice(&[0x12, 16, 0x0a, 14]);
        expected.extend_from_slice(b"tlsdesc_v1_dev");
        assert_eq!(&payload[..expected.len()], &expected[..]);
        let rest = &payload[expected.len()..];
        let key = b"threadlocal.attribute_key_map";
        // KeyValue{key, value: AnyValue{array: ArrayValue{values: [AnyValue{string}, ...]}}}
        let values: Vec<u8> = [FEATURE_KEY, INSTANCE_KEY]
            .iter()
            .flat_map(|k| {
                let mut v = vec![0x0a, k.len() as u8 + 2, 0x0a, k.len() as u8];
                v.extend_from_slice(k.as_bytes());
                v
            })
            .collect();
        let mut any = vec![0x2a, values.len() as u8];
        any.extend_from_slice(&values);
        let mut pair = vec![0x0a, key.len() as u8];
        pair.extend_from_slice(key);
        pair.extend_from_slice(&[0x12, any.len() as u8]);
        pair.extend_from_slice(&any);
        let mut attribute = vec![0x12, pair.len() as u8];
        attribute.extend_from_slice(&pair);
        assert_eq!(rest, &attribute[..]);
    }
}
