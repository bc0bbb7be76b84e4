//! Interning what marks point to: each feature descriptor and payload address read from the
//! target becomes a name or an instance in the profile once, read then and cached; built-in
//! features (descriptors in the agent) are told apart from the program's own; call-site
//! instances (the agent's, `fsprof_mark(feature, NULL)`) are resolved to the program's call site
//! and kept for naming after recording. A corrupt region cannot make this grow without bound:
//! past `MAX_DISTINCT` addresses further ones are lumped together. It remembers where the
//! alternatives it interned were, for the later branches that tell they failed. It does not
//! decide what a sample is: the sampler hands it the records of one mark stack at a time.

use crate::profile::PayloadKind;
use crate::profile::{Frame, Payload, ProfileBuilder};
use crate::program::names;
use crate::program::remote::Remote;
use crate::program::static_data::WithModules;
use crate::symbolize::call_sites::{CallSites, Callers};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use fsprof_shim::abi::{self, RecordView};
use std::cell::Cell;

/// Distinct feature or payload addresses resolved before further ones are lumped together: a
/// corrupt region must not make fsprof read and keep unbounded numbers of strings.
const MAX_DISTINCT: usize = 100_000;

/// Descriptors of built-in features remembered (the agent has a handful).
const MAX_BUILTIN_DESCRIPTORS: usize = 64;

/// The target as the interner reads it: its process id, a live thread whose memory map can be
/// read, and its memory.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The process.
    pub pid: u32,
    /// A live thread of it (see `process::memory_thread`).
    pub via: u32,
    /// Its memory.
    pub remote: &'a Remote,
}

/// What tells two payloads apart in the records: kind, address, length, position and (for the
/// kinds that write them) the extra words.
type PayloadKey = (u32, u64, u32, u64, [u64; 2]);

/// What tells an alternative's place apart: feature, choice (address and length), offset.
type AlternativePlace = (u64, u64, u32, u64);

/// What marks point to, interned.
pub struct Interner {
    feature_ids: HashMap<u64, u32>,
    /// The places of the alternatives interned (see [`Interner::sampled_place`]).
    alternatives: HashSet<AlternativePlace>,
    payload_ids: HashMap<PayloadKey, Option<u32>>,
    /// Names of features whose descriptors are the agent's (built in), in order of discovery.
    builtin_features: Vec<String>,
    /// Addresses of those descriptors.
    builtin_descriptors: Vec<u64>,
    /// Call-site instances and their modules, named after recording.
    call_sites: CallSites,
    /// Reads of module files left, for strings the target's memory no longer has.
    file_reads: Cell<u32>,
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            feature_ids: HashMap::new(),
            alternatives: HashSet::new(),
            payload_ids: HashMap::new(),
            builtin_features: Vec::new(),
            builtin_descriptors: Vec::new(),
            call_sites: CallSites::default(),
            file_reads: WithModules::budget(),
        }
    }
}

impl Interner {
    /// Keeps what is known of the target's modules current (see [`CallSites::settle`]).
    pub fn settle(&mut self, pid: u32, via: impl FnOnce() -> u32) {
        self.call_sites.settle(pid, via);
    }

    /// Forgets cached strings: after an `exec` the same addresses may hold other strings.
    pub fn forget(&mut self) {
        self.feature_ids.clear();
        self.alternatives.clear();
        self.payload_ids.clear();
        self.builtin_descriptors.clear();
        self.call_sites.forget_image();
    }

    /// The profile's frames for `records` (one mark stack, in its order).
    pub fn frames(
        &mut self,
        target: Target<'_>,
        builder: &mut ProfileBuilder,
        records: &[RecordView],
    ) -> Vec<Frame> {
        for record in records {
            if record.kind == abi::KIND_ALTERNATIVE && self.alternatives.len() < MAX_DISTINCT {
                self.alternatives.insert(place(record));
            }
        }
        records
            .iter()
            .map(|record| Frame {
                feature: self.feature_id(target, builder, record.feature),
                payload: self.payload_id(target, builder, record),
                builtin: self.builtin_descriptors.contains(&record.feature),
            })
            .collect()
    }

    /// Whether an alternative was interned (a sample saw it) at the place of `record` (its
    /// feature, choice and offset), whatever its branch.
    pub fn sampled_place(&self, record: &RecordView) -> bool {
        record.kind == abi::KIND_ALTERNATIVE && self.alternatives.contains(&place(record))
    }

    /// Replaces the payload of each call-site mark of `records` by the program's call site,
    /// found with `callers`, and a `locks` wait of the runtime's condition variables or parking
    /// by `waiting` (see `call_sites.rs`).
    pub fn resolve_sites(
        &mut self,
        target: Target<'_>,
        records: &mut [RecordView],
        callers: &mut Callers<'_>,
    ) {
        let (process, remote) = ((target.pid, target.via), target.remote);
        for record in records.iter_mut() {
            if record.kind == abi::KIND_CALL_SITE {
                let ret = record.payload;
                record.payload = self.call_sites.resolve(process, remote, record, callers);
                let waiting = self
                    .call_sites
                    .waiting_instead(process, remote, record.feature, ret);
                if let Some(waiting) = waiting {
                    record.feature = waiting;
                }
                // The frame pointer served: instances are told apart by call site alone.
                (record.line, record.column) = (0, 0);
            }
        }
    }

    /// Names the call-site instances in `builder` (after recording) and returns the names of
    /// the built-in features seen.
    pub fn finish(mut self, builder: &mut ProfileBuilder) -> Vec<String> {
        for (id, name) in self.call_sites.names() {
            builder.rename_payload(id, name);
        }
        self.builtin_features
    }

    /// The target's memory, or its modules' static data where it can no longer be read: a
    /// sample the kernel copied just before the program exited is handled after.
    fn memory<'a>(&'a self, target: Target<'a>) -> WithModules<'a> {
        let (maps, modules) = self.call_sites.known();
        WithModules {
            remote: target.remote,
            maps,
            modules,
            budget: &self.file_reads,
        }
    }

    fn feature_id(
        &mut self,
        target: Target<'_>,
        builder: &mut ProfileBuilder,
        address: u64,
    ) -> u32 {
        if let Some(id) = self.feature_ids.get(&address) {
            return *id;
        }
        let name = if self.feature_ids.len() < MAX_DISTINCT {
            names::feature_name(&self.memory(target), address)
        } else {
            "<too many distinct features>".to_owned()
        };
        if self.feature_ids.len() < MAX_DISTINCT
            && self.builtin_descriptors.len() < MAX_BUILTIN_DESCRIPTORS
            && self.call_sites.in_agent(target.pid, target.via, address)
        {
            self.builtin_descriptors.push(address);
            if !self.builtin_features.contains(&name) {
                self.builtin_features.push(name.clone());
            }
        }
        let id = builder.feature(name);
        self.feature_ids.insert(address, id);
        id
    }

    fn payload_id(
        &mut self,
        target: Target<'_>,
        builder: &mut ProfileBuilder,
        record: &RecordView,
    ) -> Option<u32> {
        let key = (
            record.kind,
            record.payload,
            record.payload_len,
            record.position,
            // Only these kinds write them; others leave an earlier mark's words there.
            match record.kind {
                abi::KIND_ALTERNATIVE | abi::KIND_BOUNDARY => record.extra,
                _ => [0, 0],
            },
        );
        if let Some(id) = self.payload_ids.get(&key) {
            return *id;
        }
        if self.payload_ids.len() >= MAX_DISTINCT {
            let text = "<too many distinct instances>".to_owned();
            return Some(builder.payload(Payload {
                kind: PayloadKind::Name,
                text,
                detail: None,
            }));
        }
        let id = names::payload(&self.memory(target), record).map(|p| builder.payload(p));
        if let (Some(id), abi::KIND_CALL_SITE) = (id, record.kind) {
            self.call_sites
                .add(target.pid, target.via, id, record.payload);
        }
        self.payload_ids.insert(key, id);
        id
    }
}

fn place(record: &RecordView) -> AlternativePlace {
    (
        record.feature,
        record.payload,
        record.payload_len,
        record.position,
    )
}
