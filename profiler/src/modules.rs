//! The executables and libraries mapped into the target: where each is loaded, its load bias, and
//! its bytes, kept open so that symbolization after recording still works when the target has
//! exited or the file was deleted or replaced.
//!
//! Read from `/proc/<pid>/maps`; a file is opened through `/proc/<pid>/map_files/` (the very file
//! that is mapped, even if deleted) and mapped read-only into fsprof. The bias comes from the
//! file's `PT_LOAD` segments, not from `start - offset`. The vdso is copied from the target's
//! memory. Unwinding (`unwind.rs`) and symbolization (`symbols.rs`) both use these.

use std::ops::{Deref, Range};
use std::sync::Arc;

/// A module mapped into the target.
#[derive(Clone)]
pub struct Module {
    /// File name for display (`libc.so.6`), or `[vdso]`.
    pub name: String,
    /// Path as the target's `/proc/<pid>/maps` shows it (without ` (deleted)`), used to find
    /// separate debug files next to it; may no longer exist.
    pub path: String,
    /// Addresses of its executable mappings in the target (AVMAs).
    pub range: Range<u64>,
    /// Load bias: an address in the target minus the address the ELF file states (SVMA).
    pub bias: u64,
    /// The file's bytes.
    pub image: Image,
}

/// A module's bytes: a read-only mapping of its file, or a copy (the vdso).
#[derive(Clone)]
pub struct Image(Arc<ImageBytes>);

enum ImageBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Image {
    /// An image of `bytes` (for tests, and for the vdso's copy).
    pub fn from_vec(bytes: Vec<u8>) -> Image {
        Image(Arc::new(ImageBytes::Owned(bytes)))
    }

    /// An image of a file, mapped read-only.
    pub fn map(file: &std::fs::File) -> std::io::Result<Image> {
        // SAFETY: a read-only private mapping. The file may change under us only if someone
        // rewrites the executable in place (not the usual replace-by-rename); parsing treats the
        // bytes as untrusted anyway.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Image(Arc::new(ImageBytes::Mapped(map))))
    }
}

impl Deref for Image {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            ImageBytes::Mapped(map) => map,
            ImageBytes::Owned(bytes) => bytes,
        }
    }
}
