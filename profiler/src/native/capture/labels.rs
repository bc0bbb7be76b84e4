//! Which labels a process publishes for perf's program to copy at its samples (or fsprof to
//! read at a ptrace stop, where perf is not used), and naming what was copied: the custom-labels ABI (`program/custom_labels.rs`), else the OpenTelemetry
//! thread context (`program/otel_context.rs`), looked for in the process's modules as they come
//! (a library loaded at start may be mapped after the first read, and relocated later still);
//! an OpenTelemetry record's key indexes named by the process context's key map, read (its
//! memory map with it: the context is often published after the map was read) when a record
//! needs it and again when a record names a key it lacks (the map only grows), at most every
//! [`KEYS_AGAIN`]. Not here: the copy (`native/sampling.rs`), or labels as features.

use crate::native::perf::{LabelFormat, Perf};
use crate::native::stream::CopiedLabels;
use crate::program::custom_labels::{CustomLabels, Label, Missing};
use crate::program::modules::{self, Module};
use crate::program::otel_context::{self, ContextError, KeyMap, OtelContext};
use crate::program::remote::Remote;
use std::time::{Duration, Instant};

/// How often, and how many times, a module that exports labels not readable yet is looked at
/// again (its loader relocates it within milliseconds of mapping it).
const LABELS_AGAIN: (Duration, u32) = (Duration::from_millis(50), 40);
/// The least time between two reads of the process context's key map.
const KEYS_AGAIN: Duration = Duration::from_millis(100);

/// The search for a process's labels: found (and how), or how many modules were looked in,
/// and while a module exports them unreadable yet, when to look again and how many more times.
#[derive(Default)]
pub(super) struct LabelsSearch {
    found: Option<LabelFormat>,
    /// Where the found labels' thread-local lies from a thread's pointer.
    offset: i64,
    modules: usize,
    again: Option<(Instant, u32)>,
    keys: Keys,
    /// Whether an OpenTelemetry record's span id is a label too (`--span-ids`).
    span_ids: bool,
}

/// An OpenTelemetry process's key map as last read, and when to read it again if needed.
#[derive(Default)]
struct Keys {
    map: KeyMap,
    next_read: Option<Instant>,
    /// Why it could not be read, the latest time.
    error: Option<ContextError>,
}

impl LabelsSearch {
    /// A search that has looked nowhere yet; `span_ids`: see [`LabelsSearch::name`].
    pub(super) fn new(span_ids: bool) -> LabelsSearch {
        LabelsSearch {
            span_ids,
            ..LabelsSearch::default()
        }
    }

    /// How the process's labels are read at its samples, if they are.
    pub(super) fn format(&self) -> Option<LabelFormat> {
        self.found
    }

    /// Has `perf`'s program read process `pid`'s labels at each sample once its `modules`
    /// show them (without perf, they are read at each ptrace stop: [`LabelsSearch::read_at_stop`]).
    pub(super) fn look(&mut self, pid: u32, modules: &[Module], perf: Option<&Perf>) {
        let now = Instant::now();
        let again = self.again.is_some_and(|(at, _)| now >= at);
        if self.found.is_some() || (modules.len() == self.modules && !again) {
            return;
        }
        self.modules = modules.len();
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            return;
        };
        let exe = exe.to_string_lossy();
        let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
        let memory = Remote::new(pid);
        let found = match CustomLabels::find(&memory, modules, exe) {
            Ok(labels) => Ok((labels.tls_offset, LabelFormat::CustomLabels)),
            Err(custom) => match OtelContext::find(&memory, modules, exe) {
                Ok(context) => Ok((context.tls_offset, LabelFormat::Otel)),
                Err(Missing::Absent) => Err(custom),
                Err(Missing::NotYet) => Err(Missing::NotYet),
            },
        };
        match found {
            Ok((offset, format)) => {
                if let Some(perf) = perf {
                    perf.lock().read_labels(perf.owner(), offset, format);
                }
                (self.found, self.offset, self.again) = (Some(format), offset, None);
            }
            Err(Missing::NotYet) => {
                let left = self.again.map_or(LABELS_AGAIN.1, |(_, left)| left);
                self.again = (left.checked_sub(1)).map(|left| (now + LABELS_AGAIN.0, left));
            }
            Err(Missing::Absent) => self.again = None,
        }
    }

    /// The labels of a thread stopped by ptrace, whose thread pointer is `tp` and whose memory
    /// is `memory`, read as perf's program copies them at a sample (none where not found).
    pub(super) fn read_at_stop(&self, memory: &Remote, tp: u64) -> Option<CopiedLabels> {
        if tp == 0 {
            return None;
        }
        let tls_offset = self.offset;
        match self.found? {
            LabelFormat::CustomLabels => Some(CopiedLabels::Set(
                CustomLabels { tls_offset }.read(memory, tp),
            )),
            LabelFormat::Otel => Some(CopiedLabels::Otel(
                OtelContext { tls_offset }.read_record(memory, tp),
            )),
        }
    }

    /// The labels perf's program copied at a sample of process `pid`, their keys named; its
    /// memory map, to find the process context, is read through its live thread `via`. With
    /// span ids asked for, an OpenTelemetry record's span id comes first.
    pub(super) fn name(&mut self, copied: CopiedLabels, pid: u32, via: u32) -> Vec<Label> {
        let bytes = match copied {
            CopiedLabels::Set(labels) => return labels,
            CopiedLabels::Otel(bytes) => bytes,
        };
        let mut labels = self.name_record(&bytes, pid, via);
        if let Some(span) = self
            .span_ids
            .then(|| otel_context::span_label(&bytes))
            .flatten()
        {
            labels.insert(0, span);
        }
        labels
    }

    /// The attributes of an OpenTelemetry record, their keys named (see [`LabelsSearch::name`]).
    fn name_record(&mut self, bytes: &[u8], pid: u32, via: u32) -> Vec<Label> {
        let keys = &mut self.keys;
        let read = |keys: &mut Keys| {
            let now = Instant::now();
            if keys.next_read.is_some_and(|at| now < at) {
                return;
            }
            keys.next_read = Some(now + KEYS_AGAIN);
            let read = modules::read_maps(pid, via)
                .map_err(|_| ContextError::Absent)
                .and_then(|maps| otel_context::read_key_map(&Remote::new(pid), &maps));
            match read {
                Ok(map) => (keys.map, keys.error) = (map, None),
                Err(error) => keys.error = Some(error),
            }
        };
        if keys.next_read.is_none() {
            read(keys);
        }
        let (labels, unknown) = otel_context::parse_record(bytes, &keys.map.keys);
        if !unknown {
            return labels;
        }
        read(keys);
        otel_context::parse_record(bytes, &keys.map.keys).0
    }

    /// Why an OpenTelemetry process's records could not be named, for the report.
    pub(super) fn note(&self) -> Option<String> {
        if self.found != Some(LabelFormat::Otel) || self.keys.next_read.is_none() {
            return None;
        }
        match &self.keys.error {
            None if !self.keys.map.keys.is_empty() => None,
            Some(ContextError::Schema(schema)) if !schema.is_empty() => Some(format!(
                "the program publishes an OpenTelemetry thread context of schema {schema:?}, which this fsprof does not read: its labels are left out"
            )),
            _ => Some("the program publishes an OpenTelemetry thread context without a process context that names its keys (OTEP 4719: a mapping named OTEL_CTX with threadlocal.attribute_key_map): its labels are left out".to_owned()),
        }
    }
}
