//! Function names as people read them: Rust's without their hash, C++'s demangled, anything
//! else as it is; every name cut to at most [`MAX_NAME`] bytes, whatever its source.

use addr2line::gimli;
use std::fmt::{self, Write as _};

/// Longest function name or file path returned, in bytes (longer ones end in `…`).
pub(super) const MAX_NAME: usize = 4096;
/// Longest mangled name handed to a demangler.
pub(super) const MAX_MANGLED: usize = 64 * 1024;

/// `raw` demangled (Rust without its hash, C++), or as is; at most [`MAX_NAME`] bytes.
pub(super) fn demangle(raw: &str, language: Option<gimli::DwLang>) -> String {
    let mut out = Bounded::default();
    if raw.len() <= MAX_MANGLED {
        if !is_cpp(language) {
            if let Ok(demangled) = rustc_demangle::try_demangle(raw) {
                // `{:#}` leaves out the hash. An error only means the name was cut.
                let _ = write!(out, "{demangled:#}");
                return out.finish();
            }
        }
        if raw.starts_with("_Z") {
            if let Ok(symbol) = cpp_demangle::Symbol::new(raw.as_bytes()) {
                let options = cpp_demangle::DemangleOptions::default();
                if symbol.structured_demangle(&mut out, &options).is_ok() || out.cut {
                    return out.finish();
                }
            }
        }
    }
    bounded(raw)
}

/// Whether `name` looks like a C++ or Rust linkage name.
pub(super) fn is_mangled(name: &str) -> bool {
    name.starts_with("_Z") || name.starts_with("_R")
}

pub(super) fn is_cpp(language: Option<gimli::DwLang>) -> bool {
    language.is_some_and(|language| {
        [
            gimli::DW_LANG_C_plus_plus,
            gimli::DW_LANG_C_plus_plus_03,
            gimli::DW_LANG_C_plus_plus_11,
            gimli::DW_LANG_C_plus_plus_14,
            gimli::DW_LANG_C_plus_plus_17,
            gimli::DW_LANG_C_plus_plus_20,
        ]
        .contains(&language)
    })
}

/// `text` cut to at most [`MAX_NAME`] bytes.
pub(super) fn bounded(text: &str) -> String {
    let mut out = Bounded::default();
    let _ = out.write_str(text);
    out.finish()
}

/// A string that refuses to grow beyond [`MAX_NAME`] bytes, `…` included.
#[derive(Default)]
struct Bounded {
    text: String,
    cut: bool,
}

impl Bounded {
    fn finish(mut self) -> String {
        if self.cut {
            self.text.push('…');
        }
        self.text
    }
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Err(fmt::Error);
        }
        let room = MAX_NAME - '…'.len_utf8() - self.text.len();
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&s[..end]);
        self.cut = true;
        Err(fmt::Error)
    }
}
