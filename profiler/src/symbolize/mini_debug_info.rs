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
    let mut out = Bounded {
        bytes: Vec::new(),
        limit,
    };
    lzma_rs::xz_decompress(&mut &*data, &mut out).ok()?;
    Some(Image::from_vec(out.bytes))
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
        let mut child = Command::new("xz")
            .args(["-c", "-T1"])
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
        // 64 MiB of zeros compress to a few KiB: past 64 times that plus 16 MiB.
        let zeros = vec![0u8; 64 << 20];
        let bomb = xz(&zeros);
        assert!(bomb.len() * 64 + (16 << 20) < zeros.len());
        assert!(of(&with_section(&bomb)).is_none());
        assert!(of(&with_section(b"not xz at all")).is_none());
    }
}
