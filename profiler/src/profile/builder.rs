//! Building a [`Profile`] while recording: the interned tables and the sample groups, added to
//! one sample at a time and finished (native stacks symbolized, payloads that became equal
//! merged) into the saved form. Not here: the saved format itself (`profile.rs`).

use super::native_table::{self, NativeTable};
use super::*;
use foldhash::{HashMap, HashMapExt};

/// Builds a [`Profile`] while recording: interns names, payloads, stacks and threads.
#[derive(Default)]
pub struct ProfileBuilder {
    features: Vec<String>,
    feature_ids: HashMap<String, u32>,
    payloads: Vec<Payload>,
    payload_ids: HashMap<Payload, u32>,
    stacks: Vec<Stack>,
    stack_ids: HashMap<Stack, u32>,
    threads: Vec<Thread>,
    thread_ids: HashMap<u32, u32>,
    samples: Vec<SampleGroup>,
    sample_ids: HashMap<(u32, u32, Option<u32>, u32), usize>,
    native_stacks: NativeTable,
    images: Vec<Image>,
    later_branches: std::collections::HashSet<LaterBranch>,
}

/// A native stack as recorded, before symbolization: like [`NativeStack`] with addresses instead of
/// frames. Addresses are *lookup* addresses: the instruction pointer for the innermost frame, the
/// return address minus one for callers, so that each points into the call instruction's line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawNativeStack {
    /// Lookup addresses, root first.
    pub addresses: Vec<u64>,
    /// See [`NativeStack::marks_at`].
    pub marks_at: Vec<u32>,
    /// See [`NativeStack::truncated`].
    pub truncated: bool,
    /// See [`NativeStack::marks`].
    pub marks: Option<u32>,
}

/// The profile being built, as [`ProfileBuilder::snapshot`] copied it.
pub struct Snapshot {
    features: Vec<String>,
    payloads: Vec<Payload>,
    stacks: Vec<Stack>,
    threads: Vec<Thread>,
    samples: Vec<SampleGroup>,
    images: Vec<Image>,
    /// The native stacks recorded since the snapshot before.
    pub new_native_stacks: Vec<RawNativeStack>,
}

impl Snapshot {
    /// The profile of this snapshot, whose native stacks are `native` (all so far: those of the
    /// snapshots before, then [`Snapshot::new_native_stacks`]), named by `symbolize`. Payloads
    /// are as recorded (call sites as `0x…`); no later branches.
    pub fn into_profile(
        self,
        meta: Meta,
        native: &[RawNativeStack],
        symbolize: impl Symbolize,
    ) -> Profile {
        let (frames, native_stacks) = name_native_stacks(native.iter().cloned(), symbolize);
        Profile {
            format: FORMAT.to_owned(),
            version: VERSION,
            meta,
            features: self.features,
            payloads: self.payloads,
            stacks: self.stacks,
            threads: self.threads,
            samples: self.samples,
            native_frames: frames,
            native_stacks,
            images: self.images,
            later_branches: Vec::new(),
            modules: Vec::new(),
            processes: Vec::new(),
        }
    }
}

/// What [`ProfileBuilder::finish`] asks of a symbolizer (a function of the address alone gives
/// the frames, and no call's callee).
pub trait Symbolize {
    /// The frames at lookup address `address` (a caller's return address less one), outermost
    /// first.
    fn frames(&mut self, address: u64) -> Vec<NativeFrame>;
    /// The function the call that returns to `return_address` calls (see
    /// [`NativeFrame::calls`]).
    fn calls(&mut self, _return_address: u64) -> Option<crate::profile::Callee> {
        None
    }
}

impl<F: FnMut(u64) -> Vec<NativeFrame>> Symbolize for F {
    fn frames(&mut self, address: u64) -> Vec<NativeFrame> {
        self(address)
    }
}

impl ProfileBuilder {
    /// An empty builder.
    pub fn new() -> ProfileBuilder {
        ProfileBuilder::default()
    }

    /// The id of a feature name.
    pub fn feature(&mut self, name: String) -> u32 {
        intern(&mut self.features, &mut self.feature_ids, name)
    }

    /// The id of a payload.
    pub fn payload(&mut self, payload: Payload) -> u32 {
        intern(&mut self.payloads, &mut self.payload_ids, payload)
    }

    /// Gives payload `id` the display text `text` (a call site named after recording). Payloads
    /// that end up equal are merged when the profile is finished.
    pub fn rename_payload(&mut self, id: u32, text: String) {
        if let Some(payload) = self.payloads.get_mut(id as usize) {
            payload.text = text;
        }
    }

    /// The id of a stack.
    pub fn stack(&mut self, stack: Stack) -> u32 {
        intern(&mut self.stacks, &mut self.stack_ids, stack)
    }

    /// The id of thread `tid`; `name` is called the first time it is seen.
    pub fn thread(&mut self, tid: u32, name: impl FnOnce() -> String) -> u32 {
        if let Some(id) = self.thread_ids.get(&tid) {
            return *id;
        }
        let id = self.threads.len() as u32;
        self.threads.push(Thread {
            tid,
            name: name(),
            process: 0,
        });
        self.thread_ids.insert(tid, id);
        id
    }

    /// The mark stack of id `id` (as [`ProfileBuilder::stack`] gave it).
    pub fn stack_by_id(&self, id: u32) -> &Stack {
        &self.stacks[id as usize]
    }

    /// The sample groups so far, with their mark stacks.
    pub fn groups(&self) -> impl Iterator<Item = (&Stack, &SampleGroup)> {
        (self.samples.iter()).map(|group| (&self.stacks[group.stack as usize], group))
    }

    /// The display text of payload `id` (empty if unknown).
    pub fn payload_text(&self, id: u32) -> &str {
        self.payloads
            .get(id as usize)
            .map_or("", |p| p.text.as_str())
    }

    /// The name of feature `id` (empty if unknown).
    pub fn feature_name(&self, id: u32) -> &str {
        self.features.get(id as usize).map_or("", String::as_str)
    }

    /// Adds a later branch (see [`Profile::later_branches`]).
    pub fn later_branch(&mut self, branch: LaterBranch) {
        self.later_branches.insert(branch);
    }

    /// The id of a native stack.
    pub fn native_stack(&mut self, stack: RawNativeStack) -> u32 {
        self.native_stacks.id(stack)
    }

    /// From now on the process runs the program image `name` (the first call names the first
    /// image; each later one follows an `exec`).
    pub fn image(&mut self, name: String) {
        if self.images.len() < u16::MAX as usize {
            self.images.push(Image { name, process: 0 });
        }
    }

    /// Counts `ns` more of a sample group's time as active, at most its time not active yet:
    /// time first added as blocked that turned out to be a wait for a CPU after a wake-up.
    pub fn add_active(&mut self, thread: u32, stack: u32, native: Option<u32>, ns: u64) {
        let image = self.images.len().saturating_sub(1) as u32;
        if let Some(&index) = self.sample_ids.get(&(thread, stack, native, image)) {
            let group = &mut self.samples[index];
            group.active_ns += ns.min(group.wall_ns.saturating_sub(group.active_ns));
        }
    }

    /// Adds a sample of the current image (see [`ProfileBuilder::image`]).
    pub fn add_sample(
        &mut self,
        thread: u32,
        stack: u32,
        native: Option<u32>,
        wall_ns: u64,
        active_ns: u64,
    ) {
        let next = self.samples.len();
        let image = self.images.len().saturating_sub(1) as u32;
        let index = *self
            .sample_ids
            .entry((thread, stack, native, image))
            .or_insert(next);
        if index == next {
            self.samples.push(SampleGroup {
                thread,
                stack,
                native,
                count: 0,
                wall_ns: 0,
                active_ns: 0,
                image,
            });
        }
        let group = &mut self.samples[index];
        group.count += 1;
        group.wall_ns += wall_ns;
        group.active_ns += active_ns.min(wall_ns);
    }

    /// The distinct addresses of all native stacks, for symbolization.
    pub fn native_addresses(&self) -> Vec<u64> {
        let mut addresses = self.native_stacks.addresses().to_vec();
        addresses.sort_unstable();
        addresses
    }

    /// The number of distinct native stacks so far.
    pub fn native_stack_count(&self) -> usize {
        self.native_stacks.len()
    }

    /// The profile so far, for a live view (`commands/live_report.rs`): the tables as they
    /// are, and the native stacks from the `native_from`th on (the caller keeps the earlier
    /// ones). Costs a copy of the tables: asked for at most about once a second.
    pub fn snapshot(&self, native_from: usize) -> Snapshot {
        Snapshot {
            features: self.features.clone(),
            payloads: self.payloads.clone(),
            stacks: self.stacks.clone(),
            threads: self.threads.clone(),
            samples: self.samples.clone(),
            images: self.images.clone(),
            new_native_stacks: self.native_stacks.stacks_from(native_from),
        }
    }

    /// The finished profile. `symbolize` gives the frames at each address of
    /// [`ProfileBuilder::native_addresses`], outermost first (more than one when functions were
    /// inlined there; at least one), and what the calls of callers call.
    pub fn finish(self, mut meta: Meta, symbolize: impl Symbolize) -> Profile {
        if self.native_stacks.cut > 0 {
            meta.notes.push(format!(
                "{} native stacks were cut to their innermost {} frames: the profile keeps at most {} M frames of native stacks in all",
                self.native_stacks.cut,
                native_table::CUT_TO,
                native_table::FRAME_BUDGET >> 20
            ));
        }
        let (frames, native_stacks) =
            name_native_stacks(self.native_stacks.into_stacks(), symbolize);
        // Renamed payloads may have become equal (two calls on one line): keep the first.
        let mut first: HashMap<&Payload, u32> = HashMap::new();
        let remap: Vec<u32> = (0..self.payloads.len() as u32)
            .map(|id| *first.entry(&self.payloads[id as usize]).or_insert(id))
            .collect();
        let mut stacks = self.stacks;
        let mut later_branches: Vec<LaterBranch> = (self.later_branches.into_iter())
            .map(|b| LaterBranch {
                payload: remap[b.payload as usize],
                ..b
            })
            .collect();
        later_branches.sort_unstable_by_key(|b| (b.feature, b.payload));
        later_branches.dedup();
        if remap.iter().enumerate().any(|(id, to)| id as u32 != *to) {
            for stack in &mut stacks {
                for frame in &mut stack.frames {
                    if let Some(payload) = &mut frame.payload {
                        *payload = remap[*payload as usize];
                    }
                }
            }
        }
        Profile {
            format: FORMAT.to_owned(),
            version: VERSION,
            meta,
            features: self.features,
            payloads: self.payloads,
            stacks,
            threads: self.threads,
            samples: self.samples,
            native_frames: frames,
            native_stacks,
            images: self.images,
            later_branches,
            modules: Vec::new(),
            processes: Vec::new(),
        }
    }
}

/// The native stacks `raw`, their addresses named by `symbolize` (each once), and the table of
/// the frames they name.
fn name_native_stacks(
    raw: impl IntoIterator<Item = RawNativeStack>,
    mut symbolize: impl Symbolize,
) -> (Vec<NativeFrame>, Vec<NativeStack>) {
    let mut frames = Vec::new();
    let mut frame_ids = HashMap::new();
    // By address, and whether it is a caller's (a return address less one) or the
    // innermost frame's.
    let mut expanded: HashMap<(u64, bool), Vec<u32>> = HashMap::new();
    let mut native_stacks = Vec::new();
    for raw in raw {
        let mut stack = NativeStack {
            frames: Vec::with_capacity(raw.addresses.len()),
            marks_at: Vec::with_capacity(raw.marks_at.len()),
            truncated: raw.truncated,
            marks: raw.marks,
        };
        // A mark pushed by a physical frame goes right after that frame's own function, before
        // the functions inlined into it at the current address (they run inside it: black_box,
        // an iterator's next). A mark pushed by an inlined helper is thus drawn one level
        // too shallow; nothing in a sample tells which inlined function pushed it.
        let mut marks = raw.marks_at.iter().peekable();
        while marks.next_if(|at| **at == 0).is_some() {
            stack.marks_at.push(0);
        }
        for (index, address) in raw.addresses.iter().enumerate() {
            let before = stack.frames.len() as u32;
            let caller = index + 1 < raw.addresses.len();
            let ids = expanded.entry((*address, caller)).or_insert_with(|| {
                let mut symbolized = symbolize.frames(*address);
                if symbolized.is_empty() {
                    symbolized.push(NativeFrame {
                        function: format!("{address:#x}"),
                        file: None,
                        line: None,
                        module: String::new(),
                        inlined: false,
                        calls: None,
                    });
                }
                if caller {
                    let calls = symbolize.calls(address.wrapping_add(1));
                    if let Some(innermost) = symbolized.last_mut() {
                        innermost.calls = calls;
                    }
                }
                symbolized
                    .into_iter()
                    .map(|frame| intern(&mut frames, &mut frame_ids, frame))
                    .collect()
            });
            stack.frames.extend_from_slice(ids);
            while marks.next_if(|at| **at as usize <= index + 1).is_some() {
                stack.marks_at.push(before + 1);
            }
        }
        for _ in marks {
            stack.marks_at.push(stack.frames.len() as u32);
        }
        native_stacks.push(stack);
    }
    (frames, native_stacks)
}

fn intern<T: Clone + Eq + std::hash::Hash>(
    table: &mut Vec<T>,
    ids: &mut HashMap<T, u32>,
    value: T,
) -> u32 {
    if let Some(id) = ids.get(&value) {
        return *id;
    }
    let id = table.len() as u32;
    table.push(value.clone());
    ids.insert(value, id);
    id
}
