//! Labels a program publishes by the custom-labels ABI v1 (polarsignals/custom-labels, which
//! parca-agent reads): the executable, or a library named `libcustomlabels*.so` loaded at its
//! start, exports `custom_labels_abi_version` (a `u32`, 1) and the thread-local
//! `custom_labels_current_set`, a pointer to the thread's label set `{storage, count,
//! capacity}`, whose `count` labels are `{{len, buf} key, {len, buf} value}` (x86-64: 8-byte
//! fields). A label whose key is null is skipped; of two with one key, the first counts.
//!
//! Here: finding the ABI in a process's modules, and where its thread-local lies from a thread's
//! thread pointer (its `fs` base; `thread_local.rs`). And reading one thread's labels from outside, as untrusted input: at
//! most [`MAX_LABELS`] labels, keys and values cut to [`MAX_TEXT`] bytes. Not here: getting a
//! thread's thread pointer, or turning labels into features.

use crate::program::modules::Module;
use crate::program::remote::Memory;
use crate::program::thread_local::{read_u64, Exports};

/// The symbol whose value is the ABI's version.
const VERSION_SYMBOL: &[u8] = b"custom_labels_abi_version";
/// The thread-local pointer to the current label set.
const SET_SYMBOL: &[u8] = b"custom_labels_current_set";
/// The version read here.
const VERSION: u32 = 1;
/// Most labels read from one set.
pub const MAX_LABELS: usize = 16;
/// Longest key or value kept, in bytes.
pub const MAX_TEXT: usize = 256;
/// Bytes of one label: two `{len, buf}` strings.
const LABEL_BYTES: usize = 32;

/// A process's custom labels: where its current set's pointer lies from a thread's pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CustomLabels {
    /// The pointer's address minus the thread pointer (negative: static TLS lies below it).
    pub tls_offset: i64,
}

/// Why [`CustomLabels::find`] found no labels to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No module exports the ABI.
    Absent,
    /// A module exports it, but its version or its thread-local's place cannot be read yet
    /// (the loader relocates a library after mapping it): to be looked for again.
    NotYet,
}

/// One label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub key: String,
    pub value: String,
}

impl CustomLabels {
    /// The ABI in `modules` of the process whose memory is `memory`, if the executable
    /// (`executable`: its path) or a `libcustomlabels*.so` exports it at version 1; else
    /// whether a module exports its symbols though they cannot be read yet ([`Missing`]).
    pub fn find(
        memory: &impl Memory,
        modules: &[Module],
        executable: &str,
    ) -> Result<CustomLabels, Missing> {
        let mut missing = Missing::Absent;
        for module in modules {
            let library = is_library_name(&module.name);
            if !library && module.path != executable {
                continue;
            }
            let Some(exports) = Exports::of(&module.image) else {
                continue;
            };
            let (Some(version), Some(set)) = (
                exports.object(VERSION_SYMBOL),
                exports.thread_local(SET_SYMBOL),
            ) else {
                continue;
            };
            // Exported: a loader that has not relocated it yet, or a version not known here.
            missing = Missing::NotYet;
            if read_u32(memory, module.bias.wrapping_add(version)) != Some(VERSION) {
                continue;
            }
            if let Some(tls_offset) = set.offset(memory, module, !library) {
                return Ok(CustomLabels { tls_offset });
            }
        }
        Err(missing)
    }

    /// The labels of the thread whose thread pointer is `thread_pointer`, in the set's order,
    /// null keys skipped, the first of each key kept; none when it has no set or the set
    /// cannot be read.
    pub fn read(&self, memory: &impl Memory, thread_pointer: u64) -> Vec<Label> {
        self.try_read(memory, thread_pointer).unwrap_or_default()
    }

    fn try_read(&self, memory: &impl Memory, thread_pointer: u64) -> Option<Vec<Label>> {
        let set = read_u64(memory, thread_pointer.wrapping_add_signed(self.tls_offset))?;
        Some(read_set(memory, set))
    }
}

/// The labels of the label set at `set` (0: none), as [`CustomLabels::read`] reads them; none
/// when it cannot be read.
pub fn read_set(memory: &impl Memory, set: u64) -> Vec<Label> {
    try_read_set(memory, set).unwrap_or_default()
}

fn try_read_set(memory: &impl Memory, set: u64) -> Option<Vec<Label>> {
    if set == 0 {
        return Some(Vec::new());
    }
    let mut header = [0u8; 16];
    memory.read(set, &mut header).ok()?;
    let storage = u64::from_ne_bytes(header[..8].try_into().ok()?);
    let count = u64::from_ne_bytes(header[8..].try_into().ok()?).min(MAX_LABELS as u64);
    let mut raw = vec![0u8; count as usize * LABEL_BYTES];
    if count > 0 {
        memory.read(storage, &mut raw).ok()?;
    }
    let mut labels: Vec<Label> = Vec::new();
    for label in raw.chunks_exact(LABEL_BYTES) {
        let word = |at: usize| u64::from_ne_bytes(label[at..at + 8].try_into().unwrap());
        let (key_len, key_buf, value_len, value_buf) = (word(0), word(8), word(16), word(24));
        if key_buf == 0 {
            continue;
        }
        let key = read_text(memory, key_buf, key_len)?;
        if labels.iter().any(|l| l.key == key) {
            continue;
        }
        let value = match value_buf {
            0 => String::new(),
            _ => read_text(memory, value_buf, value_len)?,
        };
        labels.push(Label { key, value });
    }
    Some(labels)
}

/// Whether a module's file name is the ABI's library's: `libcustomlabels*.so`.
fn is_library_name(name: &str) -> bool {
    name.starts_with("libcustomlabels") && name.ends_with(".so")
}

fn read_u32(memory: &impl Memory, address: u64) -> Option<u32> {
    let mut bytes = [0u8; 4];
    memory.read(address, &mut bytes).ok()?;
    Some(u32::from_ne_bytes(bytes))
}

/// `len` bytes at `address` as text, cut to [`MAX_TEXT`] (invalid UTF-8 replaced).
fn read_text(memory: &impl Memory, address: u64, len: u64) -> Option<String> {
    let mut bytes = vec![0u8; len.min(MAX_TEXT as u64) as usize];
    memory.read(address, &mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests;
