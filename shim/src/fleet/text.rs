//! The text of a published instance: what fsprof's report calls it (`file:line:column`, a
//! name, `choice, branch N`, `value (from -> to)`), in at most [`MAX_VALUE`] bytes, cut at a
//! character boundary: a location keeps the end of its file's path, the others their start.
//!
//! Not here: where the text goes (`thread.rs`).

use super::thread::Shown;
use super::MAX_VALUE;
use crate::abi;

/// Size of the buffer an instance's text is written in.
pub(crate) const CAPACITY: usize = 64;

/// The longest start of `bytes` of at most `max` bytes that ends at a character boundary (a
/// byte that is not a UTF-8 continuation byte follows it, or nothing does).
pub(crate) fn cut(bytes: &[u8], max: usize) -> &[u8] {
    if bytes.len() <= max {
        return bytes;
    }
    let mut end = max;
    while end > 0 && is_continuation(bytes[end]) {
        end -= 1;
    }
    &bytes[..end]
}

/// The longest end of `bytes` of at most `max` bytes that starts at a character boundary.
fn cut_start(bytes: &[u8], max: usize) -> &[u8] {
    let mut start = bytes.len().saturating_sub(max);
    while start < bytes.len() && is_continuation(bytes[start]) {
        start += 1;
    }
    &bytes[start..]
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xc0 == 0x80
}

/// A buffer filled up to [`MAX_VALUE`] bytes; what does not fit is dropped, at a character
/// boundary.
struct Writer<'a> {
    out: &'a mut [u8; CAPACITY],
    len: usize,
    full: bool,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        if self.full {
            return;
        }
        let room = MAX_VALUE - self.len;
        let taken = cut(bytes, room);
        self.out[self.len..self.len + taken.len()].copy_from_slice(taken);
        self.len += taken.len();
        self.full = taken.len() < bytes.len();
    }

    fn number(&mut self, mut value: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        // Whole or not at all: a number cut short would be another number.
        if self.len + (digits.len() - at) > MAX_VALUE {
            self.full = true;
            return;
        }
        self.bytes(&digits[at..]);
    }
}

/// A string of the marking program: `len` bytes at `address`, of which at most `max` are looked
/// at (from its start).
///
/// # Safety
/// The string is alive and unchanged while it is marked (the shim's contract).
pub(crate) unsafe fn string<'a>(address: u64, len: u64, max: usize) -> &'a [u8] {
    if address == 0 {
        return &[];
    }
    core::slice::from_raw_parts(address as *const u8, (len as usize).min(max))
}

/// Writes `mark`'s instance text into `out`; returns its length (at most [`MAX_VALUE`]).
///
/// # Safety
/// `mark` is a record of the calling thread's stack (its strings alive: see [`string`]).
pub(crate) unsafe fn instance(out: &mut [u8; CAPACITY], mark: &Shown) -> usize {
    let mut writer = Writer {
        out,
        len: 0,
        full: false,
    };
    // More than fits is read, so that a cut is seen as one.
    let start = MAX_VALUE + 4;
    let (payload, len) = mark.payload();
    let (position, extra) = (mark.position(), mark.extra());
    match mark.kind() {
        abi::KIND_LOCATION => {
            let mut suffix = [0u8; CAPACITY];
            let mut tail = Writer {
                out: &mut suffix,
                len: 0,
                full: false,
            };
            tail.bytes(b":");
            tail.number(position >> 32);
            tail.bytes(b":");
            tail.number(position & u64::from(u32::MAX));
            let suffix_len = tail.len;
            let file = string(payload, len, usize::MAX);
            writer.bytes(cut_start(file, MAX_VALUE - suffix_len));
            writer.bytes(&suffix[..suffix_len]);
        }
        abi::KIND_ALTERNATIVE => {
            writer.bytes(string(payload, len, start));
            writer.bytes(b", branch ");
            writer.number(extra[0].min(u64::from(u32::MAX)));
        }
        abi::KIND_BOUNDARY => {
            let lengths = extra[1];
            writer.bytes(string(payload, len, start));
            writer.bytes(b" (");
            writer.bytes(string(position, lengths >> 32, start));
            writer.bytes(b" -> ");
            writer.bytes(string(extra[0], lengths & u64::from(u32::MAX), start));
            writer.bytes(b")");
        }
        _ => writer.bytes(string(payload, len, start)),
    }
    writer.len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(mark: Shown) -> String {
        let mut out = [0u8; CAPACITY];
        // SAFETY: the strings of the marks below are literals.
        let len = unsafe { instance(&mut out, &mark) };
        String::from_utf8(out[..len].to_vec()).unwrap()
    }

    fn mark(kind: u32, payload: &'static str, position: u64, extra: [u64; 2]) -> Shown {
        let (address, len) = (payload.as_ptr() as u64, payload.len() as u64);
        Shown::new(1, kind, address, len, position, extra)
    }

    #[test]
    fn instances_read_as_the_report_names_them() {
        let location = mark(abi::KIND_LOCATION, "src/main.rs", 12 << 32 | 5, [0; 2]);
        assert_eq!(text(location), "src/main.rs:12:5");
        assert_eq!(text(mark(abi::KIND_NAME, "GET /a", 0, [0; 2])), "GET /a");
        let alternative = mark(abi::KIND_ALTERNATIVE, "item", 9, [3, 0]);
        assert_eq!(text(alternative), "item, branch 3");
        let (from, to) = ("client", "matrix");
        let lengths = (from.len() as u64) << 32 | to.len() as u64;
        let extra = [to.as_ptr() as u64, lengths];
        let boundary = mark(abi::KIND_BOUNDARY, "positive?", from.as_ptr() as u64, extra);
        assert_eq!(text(boundary), "positive? (client -> matrix)");
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        let path =
            "/home/user/.cargo/registry/src/index/some-crate-1.2.3/src/deeply/nested/módulo.rs";
        let location = text(mark(abi::KIND_LOCATION, path, 1234 << 32 | 56, [0; 2]));
        assert!(location.len() <= MAX_VALUE, "{location}");
        assert!(
            location.ends_with("/nested/módulo.rs:1234:56"),
            "{location}"
        );
        // 52 ASCII bytes, then a two-byte character that would end at 54: left out whole.
        let name: &'static str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaé and more";
        assert_eq!(text(mark(abi::KIND_NAME, name, 0, [0; 2])), &name[..52]);
        assert_eq!(cut_start("éé".as_bytes(), 3), "é".as_bytes());
        // A number fits whole or not at all.
        let choice: &'static str = "cccccccccccccccccccccccccccccccccccccccccc"; // 42 bytes
        let alternative = text(mark(abi::KIND_ALTERNATIVE, choice, 0, [123, 0]));
        assert_eq!(alternative, format!("{choice}, branch "));
        assert_eq!(cut("ab".as_bytes(), 5), b"ab");
    }
}
