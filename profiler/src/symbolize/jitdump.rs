//! Jitdump files (`jit-PID.dump`), the format perf defined for JITs to describe the code they
//! write (node's `--perf-prof`, the JVM's agents, .NET, wasmtime, LuaJIT's patches): a header,
//! then records, of which the code loads (`JIT_CODE_LOAD`: address, size, name, the code) and
//! moves (`JIT_CODE_MOVE`) name code. A JIT maps its dump file when it opens it, so that
//! profilers find it in its memory map; `program/modules.rs` opens it then. Not here: debug
//! line records and unwinding records (V8's names already carry the source place, and JIT code
//! is walked by its frame pointers), the table of names (`jit_code.rs`).
//!
//! The file is the target's: read as untrusted, at most as long as it was when reading began,
//! at most [`MAX_RECORDS`] records and [`MAX_NAME_BYTES`] of names, each cut at [`MAX_NAME`]
//! bytes, the code itself skipped, never read; a record cut short or of an impossible size
//! ends the reading.

use super::jit_code::{cut_name, JitFunction, MAX_NAME};
use std::collections::HashMap;
use std::io::{BufReader, Read, Seek};

/// The magic number, as the writer's byte order gives it.
const MAGIC: u32 = 0x4A69_5444; // "JiTD"
/// Bytes of the file's header as version 1 defines it.
const HEADER: u64 = 40;
/// Bytes of a record's header: id, total size, timestamp.
const RECORD_HEADER: u64 = 16;
/// Bytes of a code load's fields before its name.
const LOAD_FIELDS: u64 = 40;
/// Bytes of a code move's fields.
const MOVE_FIELDS: u64 = 48;
const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
/// Most records read (a large program's JIT writes a few hundred thousand).
const MAX_RECORDS: usize = 1 << 24;
/// Most bytes of names kept from one file.
const MAX_NAME_BYTES: usize = 64 << 20;

/// The functions a jitdump names, in the order written (of two at one address the later is
/// the current one), at most `limit` of them; none when `file` is not a jitdump.
pub fn read(file: &std::fs::File, limit: usize) -> Vec<JitFunction> {
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return Vec::new();
    };
    let mut reader = Reader {
        input: BufReader::new(file),
        at: 0,
        len,
        swap: false,
    };
    if reader.input.rewind().is_err() {
        return Vec::new();
    }
    let mut functions = Vec::new();
    let _ = read_records(&mut reader, limit, &mut functions);
    functions
}

/// Reads records into `functions` until the file, the limit or a record that does not parse
/// ends it (`None`).
fn read_records(reader: &mut Reader, limit: usize, functions: &mut Vec<JitFunction>) -> Option<()> {
    let magic = reader.u32()?;
    reader.swap = match magic {
        MAGIC => false,
        _ if magic.swap_bytes() == MAGIC => true,
        _ => return None,
    };
    let _version = reader.u32()?;
    let header_size = u64::from(reader.u32()?);
    if header_size < HEADER {
        return None;
    }
    reader.skip(header_size - 12)?;
    // The latest function at each start, for moves.
    let mut at: HashMap<u64, usize> = HashMap::new();
    let mut name_bytes = 0usize;
    for _ in 0..MAX_RECORDS {
        if functions.len() >= limit || name_bytes >= MAX_NAME_BYTES {
            break;
        }
        let record_start = reader.at;
        let Some(id) = reader.u32() else {
            break; // the end of the file
        };
        let size = u64::from(reader.u32()?);
        let _timestamp = reader.u64()?;
        let body = size.checked_sub(RECORD_HEADER)?;
        match id {
            CODE_LOAD if body >= LOAD_FIELDS => {
                let _pid_tid = reader.u64()?;
                let _vma = reader.u64()?;
                let start = reader.u64()?;
                let code_size = reader.u64()?;
                let _index = reader.u64()?;
                // The name and its terminating 0 fill what the fields and the code do not.
                let name_len = (body - LOAD_FIELDS).checked_sub(code_size)?;
                let kept = name_len.min(MAX_NAME as u64 + 1);
                let name = reader.bytes(kept as usize)?;
                let name = String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap_or(&[]));
                let end = start.checked_add(code_size).filter(|end| *end > start);
                if let (Some(end), false) = (end, name.is_empty()) {
                    name_bytes += name.len();
                    at.insert(start, functions.len());
                    functions.push(JitFunction {
                        start,
                        end,
                        name: cut_name(&name).to_owned(),
                    });
                }
            }
            CODE_MOVE if body >= MOVE_FIELDS => {
                let _pid_tid = reader.u64()?;
                let _vma = reader.u64()?;
                let old = reader.u64()?;
                let new = reader.u64()?;
                let code_size = reader.u64()?;
                let name = at.get(&old).map(|&i| functions[i].name.clone());
                let end = new.checked_add(code_size).filter(|end| *end > new);
                if let (Some(name), Some(end)) = (name, end) {
                    name_bytes += name.len();
                    at.insert(new, functions.len());
                    functions.push(JitFunction {
                        start: new,
                        end,
                        name,
                    });
                }
            }
            _ => {}
        }
        // Whatever the record holds past what was read: the code, other kinds of record.
        let read = reader.at - record_start;
        reader.skip(size.checked_sub(read)?)?;
    }
    Some(())
}

/// A cursor over a jitdump that never passes the length it had when reading began.
struct Reader<'a> {
    input: BufReader<&'a std::fs::File>,
    at: u64,
    len: u64,
    swap: bool,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Option<Vec<u8>> {
        if self.at.checked_add(n as u64)? > self.len {
            return None;
        }
        let mut bytes = vec![0; n];
        self.input.read_exact(&mut bytes).ok()?;
        self.at += n as u64;
        Some(bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        let value = u32::from_le_bytes(self.bytes(4)?.try_into().ok()?);
        Some(if self.swap { value.swap_bytes() } else { value })
    }

    fn u64(&mut self) -> Option<u64> {
        let value = u64::from_le_bytes(self.bytes(8)?.try_into().ok()?);
        Some(if self.swap { value.swap_bytes() } else { value })
    }

    fn skip(&mut self, n: u64) -> Option<()> {
        let to = self.at.checked_add(n).filter(|to| *to <= self.len)?;
        self.input.seek_relative(i64::try_from(n).ok()?).ok()?;
        self.at = to;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::jit_code::JitCode;
    use std::io::Write;

    /// A jitdump in the writer's byte order (`big`): its header, then `records`.
    fn dump(big: bool, records: &[Vec<u8>]) -> Vec<u8> {
        let word = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut out = Vec::new();
        for v in [MAGIC, 1, HEADER as u32, 62, 0, 1234] {
            out.extend(word(v));
        }
        out.extend([0; 16]); // timestamp, flags
        for record in records {
            out.extend(record);
        }
        out
    }

    fn load(big: bool, start: u64, code: &[u8], name: &str) -> Vec<u8> {
        let (w32, w64) = words(big);
        let size = RECORD_HEADER + LOAD_FIELDS + name.len() as u64 + 1 + code.len() as u64;
        let mut r = [w32(CODE_LOAD), w32(size as u32), w64(7), w32(1), w32(9)].concat();
        for v in [start, start, code.len() as u64, 3] {
            r.extend(w64(v));
        }
        r.extend(name.as_bytes());
        r.push(0);
        r.extend(code);
        r
    }

    fn moved(big: bool, old: u64, new: u64, len: u64) -> Vec<u8> {
        let (w32, w64) = words(big);
        let size = RECORD_HEADER + MOVE_FIELDS;
        let mut r = [w32(CODE_MOVE), w32(size as u32), w64(8), w32(1), w32(9)].concat();
        for v in [new, old, new, len, 3] {
            r.extend(w64(v));
        }
        r
    }

    #[allow(clippy::type_complexity)]
    fn words(big: bool) -> (impl Fn(u32) -> Vec<u8>, impl Fn(u64) -> Vec<u8>) {
        (
            move |v: u32| {
                if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
                .to_vec()
            },
            move |v: u64| {
                if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
                .to_vec()
            },
        )
    }

    fn read_bytes(bytes: &[u8]) -> JitCode {
        let mut file = tempfile();
        file.write_all(bytes).unwrap();
        JitCode::from_functions(read(&file, usize::MAX))
    }

    fn tempfile() -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "fsprof-jitdump-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        file
    }

    #[test]
    fn loads_and_moves_name_code_in_either_byte_order() {
        for big in [false, true] {
            let other = [
                [CODE_LOAD + 2, 16].map(|v| if big { v.to_be() } else { v.to_le() }),
                [0, 0],
            ];
            let other: Vec<u8> = other
                .iter()
                .flatten()
                .flat_map(|v| v.to_ne_bytes())
                .collect();
            let bytes = dump(
                big,
                &[
                    load(big, 0x1000, &[0xc3; 0x40], "JS:*hot /a.js:1:13"),
                    other,
                    load(big, 0x2000, &[], "empty code"),
                    load(big, 0x3000, &[0x90; 0x10], "Builtin:Add"),
                    moved(big, 0x3000, 0x5000, 0x10),
                    load(big, 0x1000, &[0xc3; 0x20], "JS:~later"),
                ],
            );
            let code = read_bytes(&bytes);
            assert_eq!(code.lookup(0x1010), Some("JS:~later"), "big {big}");
            assert_eq!(code.lookup(0x1030), None);
            assert_eq!(code.lookup(0x2000), None);
            assert_eq!(code.lookup(0x300f), Some("Builtin:Add"));
            assert_eq!(code.lookup(0x5008), Some("Builtin:Add"));
            assert_eq!(code.lookup(0x5010), None);
        }
    }

    #[test]
    fn a_dump_cut_short_or_lying_keeps_what_came_before() {
        let good = load(false, 0x1000, &[0; 8], "whole");
        let mut cut = dump(false, &[good.clone(), load(false, 0x2000, &[0; 64], "cut")]);
        cut.truncate(cut.len() - 66); // into the name: its code and its last byte gone
        let code = read_bytes(&cut);
        assert_eq!(code.lookup(0x1000), Some("whole"));
        assert_eq!(code.lookup(0x2000), None);

        // A name longer than the record, a size smaller than a header, a code size past the end.
        let mut lying = load(false, 0x2000, &[0; 8], "liar");
        lying[4..8].copy_from_slice(&20u32.to_le_bytes());
        let mut huge = load(false, 0x3000, &[0; 8], "huge");
        huge[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        for bad in [lying, huge] {
            let code = read_bytes(&dump(false, &[good.clone(), bad]));
            assert_eq!(code.lookup(0x1000), Some("whole"));
            assert_eq!(code.lookup(0x2000), None);
            assert_eq!(code.lookup(0x3000), None);
        }
        assert!(read_bytes(b"not a jitdump at all, just text").is_empty());
    }

    #[test]
    fn a_long_name_is_cut_and_the_next_record_still_read() {
        let long = "n".repeat(3 * MAX_NAME);
        let code = read_bytes(&dump(
            false,
            &[
                load(false, 0x1000, &[0; 8], &long),
                load(false, 0x2000, &[0; 8], "next"),
            ],
        ));
        assert_eq!(code.lookup(0x1000).unwrap().len(), MAX_NAME);
        assert_eq!(code.lookup(0x2000), Some("next"));
    }
}
