//! MiniDebugInfo: the symbol table some distributions (Fedora, RHEL, CentOS) ship inside a
//! stripped file, in its `.gnu_debugdata` section: an xz-compressed ELF file whose `.symtab`
//! names the functions that `.dynsym` does not (made with `nm`, `objcopy --keep-symbols`, `xz`
//! and `objcopy --add-section`). Here it is only decompressed, within a bound, since the
//! section is the target's file and untrusted; reading its symbols is `symbols.rs`'s job.

use crate::program::modules::Image;
use object::{Object, ObjectSection};
use std::io::{self, Write};

/// Most bytes decompressed, whatever the section's size: a symbol table of a few hundred
/// thousand functions is a few tens of MiB.
const MAX_DECOMPRESSED: usize = 256 << 20;

/// The ELF file that `object`'s `.gnu_debugdata` holds, decompressed; `None` when it has none,
/// or when it is not xz or would grow past its bound (64 times the section, plus 16 MiB, at most
/// [`MAX_DECOMPRESSED`]).
pub(super) fn decompressed(object: &object::File) -> Option<Image> {
    let data = object.section_by_name(".gnu_debugdata")?.data().ok()?;
    if data.is_empty() {
        return None;
    }
    let limit = data
        .len()
        .saturating_mul(64)
        .saturating_add(16 << 20)
        .min(MAX_DECOMPRESSED);
    // The decoder holds a whole block in memory before it writes any of it: the sizes the
    // chunks state are added up first, and a stream past the bound is not decoded at all.
    if unpacked_size(data, limit as u64)? > limit as u64 {
        return None;
    }
    let mut out = Bounded {
        bytes: Vec::new(),
        limit,
    };
    lzma_rs::xz_decompress(&mut &*data, &mut out).ok()?;
    Some(Image::from_vec(out.bytes))
}

/// The bytes an xz stream of LZMA2 blocks decodes to, by the sizes its chunks state (the
/// decoder holds each chunk to its size), counted until past `most`; `None` when it is not such
/// a stream. The index at the stream's end is not read: it would only repeat what the blocks say,
/// and could say otherwise.
fn unpacked_size(data: &[u8], most: u64) -> Option<u64> {
    const MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0];
    if !data.starts_with(MAGIC) {
        return None;
    }
    let check = match *data.get(7)? & 0x0f {
        0 => 0,
        1..=3 => 4,
        4..=6 => 8,
        7..=9 => 16,
        10..=12 => 32,
        _ => 64,
    };
    let be16 = |at: usize| -> Option<u64> {
        Some(u64::from(u16::from_be_bytes([
            *data.get(at)?,
            *data.get(at + 1)?,
        ])))
    };
    let (mut at, mut total) = (12usize, 0u64);
    loop {
        let block = at;
        let header = usize::from(*data.get(at)?);
        if header == 0 {
            return Some(total); // the index: no more blocks
        }
        at += (header + 1) * 4;
        // LZMA2 chunks, to the end marker.
        loop {
            let control = *data.get(at)?;
            let (unpacked, skip) = match control {
                0x00 => break,
                0x01 | 0x02 => {
                    let size = be16(at + 1)? + 1;
                    (size, 3 + size as usize)
                }
                0x80..=0xff => {
                    let unpacked = (u64::from(control & 0x1f) << 16) + be16(at + 1)? + 1;
                    let packed = be16(at + 3)? as usize + 1;
                    (unpacked, 5 + usize::from(control >= 0xc0) + packed)
                }
                _ => return None,
            };
            total += unpacked;
            if total > most {
                return Some(total);
            }
            at = at.checked_add(skip)?;
        }
        at += 1; // the end marker
        at = block + (at - block).div_ceil(4) * 4 + check;
    }
}

/// A buffer that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.limit {
            return Err(io::Error::other("MiniDebugInfo past its bound"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// `bytes` compressed by the `xz` command, as distributions make the section.
    fn xz(bytes: &[u8]) -> Vec<u8> {
        xz_with(bytes, &[])
    }

    /// `bytes` compressed by `xz` with `options`.
    fn xz_with(bytes: &[u8], options: &[&str]) -> Vec<u8> {
        let mut child = Command::new("xz")
            .args(["-c", "-T1"])
            .args(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("xz is needed (xz-utils)");
        let mut stdin = child.stdin.take().unwrap();
        let input = bytes.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(output.status.success());
        output.stdout
    }

    /// `/bin/true` with `.gnu_debugdata` = `payload` (by `objcopy`), parsed.
    fn with_section(payload: &[u8]) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!("fsprof-mini-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (data, file) = (dir.join("data"), dir.join("file"));
        std::fs::write(&data, payload).unwrap();
        let status = Command::new("objcopy")
            .arg(format!("--add-section=.gnu_debugdata={}", data.display()))
            .args(["/bin/true".as_ref(), file.as_os_str()])
            .status()
            .expect("objcopy is needed (binutils)");
        assert!(status.success());
        let bytes = std::fs::read(&file).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    }

    fn of(file: &[u8]) -> Option<Image> {
        decompressed(&object::File::parse(file).unwrap())
    }

    #[test]
    fn a_section_is_decompressed_within_its_bound() {
        let small = b"\x7fELF, say".repeat(1000);
        assert_eq!(&*of(&with_section(&xz(&small))).unwrap(), &small[..]);
        // 64 MiB of zeros compress to a few KiB: past 64 times that plus 16 MiB, and found so
        // from the chunks' sizes, before decoding.
        let zeros = vec![0u8; 64 << 20];
        let bomb = xz(&zeros);
        assert!(bomb.len() * 64 + (16 << 20) < zeros.len());
        assert!(unpacked_size(&bomb, 16 << 20).unwrap() > 16 << 20);
        assert_eq!(unpacked_size(&bomb, u64::MAX), Some(64 << 20));
        assert!(of(&with_section(&bomb)).is_none());
        assert!(of(&with_section(b"not xz at all")).is_none());
        // Several blocks, each counted.
        let blocks = xz_with(&small.repeat(300), &["--block-size=4096"]);
        assert_eq!(
            unpacked_size(&blocks, u64::MAX),
            Some(small.len() as u64 * 300)
        );
        assert_eq!(
            &*of(&with_section(&blocks)).unwrap(),
            &small.repeat(300)[..]
        );
    }
}
