//! `fsprof top`'s table, computed as the report computes it: a thread of its own takes a copy of
//! the profile being built (at most about once a second, and less often when a copy took long),
//! names its native frames (each address once, from the process's modules as its memory map
//! shows them), names the call sites (as the report will), applies the rules (the built-in ones
//! and the user's: `rules::apply`) and runs the feature analysis (`analysis::analyse`). So the
//! live view lists the features found in the stacks, by the report's names and its attribution
//! rule, and neither naming nor parsing ever holds up sampling.
//!
//! Not here: drawing (`top.rs`); JIT code's names (its perf map or jitdump are read after
//! recording only: its frames show as addresses here).

use crate::analysis::{analyse, FeatureReport, TimeView};
use crate::profile::{Callee, Meta, NativeFrame, PayloadKind, ProfileBuilder, RawNativeStack};
use crate::profile::{Snapshot, Symbolize};
use crate::program::modules::{self, Module};
use crate::rules::RuleSet;
use crate::symbolize::symbols::Symbolizer;
use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shortest time between two copies.
const EVERY: Duration = Duration::from_secs(1);
/// A copy and its analysis may take at most this share of the time between two (10: a tenth).
const BACKOFF: u32 = 10;
/// Instances listed under each feature.
pub const INSTANCES: usize = 3;
/// The lowest address beyond x86-64's user space: the interner's stand-ins for calls not
/// resolved yet lie there.
const USER_END: u64 = 1 << 47;
/// Most distinct addresses named (each kept with its frames).
const MAX_NAMED: usize = 1 << 20;

/// One line of the table: a feature, or one of its instances.
#[derive(Clone, Debug, Default)]
pub struct Line {
    pub name: String,
    /// Its share of the time counted since the table before, 0-100.
    pub recent_percent: f64,
    /// Its share of all the time counted, 0-100.
    pub percent: f64,
    /// Its time, ns.
    pub ns: u64,
}

/// The table: each feature, most recent time first, with its top instances.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub features: Vec<(Line, Vec<Line>)>,
}

/// The thread that makes the tables, and the latest it made.
pub struct LiveReport {
    send: Option<SyncSender<Snapshot>>,
    latest: Arc<Mutex<Latest>>,
    /// Native stacks sent so far (the thread keeps them).
    native_sent: usize,
    next_copy: Instant,
}

#[derive(Default)]
struct Latest {
    table: Option<Arc<Table>>,
    /// The thread is working on a copy.
    busy: bool,
    /// How long the last copy took to analyse.
    took: Duration,
}

impl LiveReport {
    /// Starts the thread for process `pid`, with the `rules` the report applies (it ends when
    /// this is dropped). `count_idle`: the table counts all thread time (`--idle`).
    pub fn start(pid: u32, rules: RuleSet, count_idle: bool) -> LiveReport {
        let latest = Arc::new(Mutex::new(Latest::default()));
        let (send, receive) = mpsc::sync_channel(1);
        let shared = Arc::clone(&latest);
        let started = std::thread::Builder::new()
            .name("fsprof-live".to_owned())
            .spawn(move || make_tables(pid, &rules, count_idle, &receive, &shared));
        LiveReport {
            send: started.ok().map(|_| send),
            latest,
            native_sent: 0,
            next_copy: Instant::now(),
        }
    }

    /// Gives the thread a copy of `builder`'s profile if it is idle and one is due.
    pub fn offer(&mut self, builder: &ProfileBuilder) {
        let now = Instant::now();
        let Some(send) = &self.send else {
            return;
        };
        if now < self.next_copy {
            return;
        }
        let took = {
            let mut latest = lock(&self.latest);
            if latest.busy {
                return;
            }
            latest.busy = true;
            latest.took
        };
        let snapshot = builder.snapshot(self.native_sent);
        self.native_sent += snapshot.new_native_stacks.len();
        // The copy is made on the recording thread: it counts with the analysis.
        let copied = now.elapsed();
        self.next_copy = now + EVERY.max((took + copied) * BACKOFF);
        if send.try_send(snapshot).is_err() {
            self.send = None; // the thread is gone
        }
    }

    /// The latest table, if one was made.
    pub fn table(&self) -> Option<Arc<Table>> {
        lock(&self.latest).table.clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The thread: a table for each copy received, until the sending side is dropped.
fn make_tables(
    pid: u32,
    rules: &RuleSet,
    count_idle: bool,
    receive: &Receiver<Snapshot>,
    latest: &Mutex<Latest>,
) {
    let mut names = Names::new(pid);
    let mut native: Vec<RawNativeStack> = Vec::new();
    let mut before = Totals::default();
    let view = if count_idle {
        TimeView::All
    } else {
        TimeView::Active
    };
    while let Ok(mut snapshot) = receive.recv() {
        let started = Instant::now();
        native.append(&mut snapshot.new_native_stacks);
        names.maps_read = false;
        names.cover(native.iter().flat_map(|stack| &stack.addresses));
        let meta = Meta {
            count_idle,
            ..Meta::default()
        };
        let mut profile = snapshot.into_profile(meta, &native, &mut names);
        for payload in &mut profile.payloads {
            if payload.kind == PayloadKind::CallSite {
                payload.text = names.call_site(&payload.text);
            }
        }
        profile.modules = names.symbolizer.modules_used();
        crate::rules::apply(&mut profile, rules);
        let report = analyse(&profile, view);
        let table = Arc::new(table(&report, &before));
        before = Totals::of(&report);
        let mut latest = lock(latest);
        latest.table = Some(table);
        latest.busy = false;
        latest.took = started.elapsed();
    }
}

/// Every feature's and instance's time in a report (by name, as the report gives them), for
/// the recent shares of the next.
#[derive(Default)]
struct Totals {
    total_ns: u64,
    features: HashMap<String, u64>,
    instances: HashMap<(String, String), u64>,
}

impl Totals {
    fn of(report: &FeatureReport) -> Totals {
        let mut totals = Totals {
            total_ns: report.total_ns,
            ..Totals::default()
        };
        for feature in &report.features {
            totals.features.insert(feature.name.clone(), feature.ns);
            for instance in &feature.instances {
                let key = (feature.name.clone(), instance.payload.clone());
                totals.instances.insert(key, instance.ns);
            }
        }
        totals
    }
}

/// The table of `report`, its recent shares against the totals `before`.
fn table(report: &FeatureReport, before: &Totals) -> Table {
    let window = report.total_ns.saturating_sub(before.total_ns).max(1) as f64;
    let line = |name: &str, ns: u64, old: u64| Line {
        name: crate::profile::clean(name),
        recent_percent: ns.saturating_sub(old) as f64 * 100.0 / window,
        percent: report.percent(ns),
        ns,
    };
    let mut features: Vec<(Line, Vec<Line>)> = (report.features.iter())
        .filter(|feature| feature.ns > 0)
        .map(|feature| {
            let instances = (feature.instances.iter().take(INSTANCES))
                .map(|instance| {
                    let key = (feature.name.clone(), instance.payload.clone());
                    let old = before.instances.get(&key).copied().unwrap_or(0);
                    line(&instance.payload, instance.ns, old)
                })
                .collect();
            let old = before.features.get(&feature.name).copied().unwrap_or(0);
            (line(&feature.name, feature.ns, old), instances)
        })
        .collect();
    features.sort_by(|(a, _), (b, _)| {
        (b.recent_percent.total_cmp(&a.recent_percent)).then(b.ns.cmp(&a.ns))
    });
    Table { features }
}

/// The names of the process's addresses, each found once.
struct Names {
    pid: u32,
    /// The memory map was read for this copy already (a read takes the target's memory map's
    /// lock: once a copy at most).
    maps_read: bool,
    symbolizer: Symbolizer,
    modules: Vec<Module>,
    frames: HashMap<u64, Vec<NativeFrame>>,
    calls: HashMap<u64, Option<Callee>>,
    call_sites: HashMap<u64, String>,
}

impl Names {
    fn new(pid: u32) -> Names {
        Names {
            pid,
            maps_read: false,
            symbolizer: Symbolizer::new(&[]),
            modules: Vec::new(),
            frames: HashMap::new(),
            calls: HashMap::new(),
            call_sites: HashMap::new(),
        }
    }

    /// Reads the memory map again (once) if an address not named yet lies outside the modules
    /// known, and adds the modules it finds.
    fn cover<'a>(&mut self, addresses: impl Iterator<Item = &'a u64>) {
        let mut outside = false;
        for address in addresses {
            if !self.frames.contains_key(address) && !self.covered(*address) {
                outside = true;
                break;
            }
        }
        if !outside || std::mem::replace(&mut self.maps_read, true) {
            return;
        }
        let Ok(maps) = modules::read_maps(self.pid, self.pid) else {
            return;
        };
        for module in modules::modules(self.pid, &maps, &self.modules) {
            let known = (self.modules.iter())
                .any(|m| m.range.start == module.range.start && m.path == module.path);
            if !known {
                self.symbolizer.add(module.clone());
                self.modules.push(module);
            }
        }
    }

    fn covered(&self, address: u64) -> bool {
        self.modules.iter().any(|m| m.range.contains(&address))
    }

    /// The display text of a call site whose text is `text` (`0x…` as recorded).
    fn call_site(&mut self, text: &str) -> String {
        let Some(address) = text
            .strip_prefix("0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        else {
            return text.to_owned();
        };
        if address >= USER_END {
            return "[call site pending]".to_owned();
        }
        if !self.covered(address) {
            self.cover(std::iter::once(&address));
        }
        if let Some(name) = self.call_sites.get(&address) {
            return name.clone();
        }
        if !self.covered(address) {
            return text.to_owned();
        }
        let name = crate::symbolize::call_sites::name(&mut self.symbolizer, address);
        if self.call_sites.len() < MAX_NAMED {
            self.call_sites.insert(address, name.clone());
        }
        name
    }
}

impl Symbolize for &mut Names {
    fn frames(&mut self, address: u64) -> Vec<NativeFrame> {
        if let Some(frames) = self.frames.get(&address) {
            return frames.clone();
        }
        let frames = self.symbolizer.symbolize(address);
        // An address outside every module now may be in one mapped later: named again then.
        if self.frames.len() < MAX_NAMED && self.covered(address) {
            self.frames.insert(address, frames.clone());
        }
        frames
    }

    fn calls(&mut self, return_address: u64) -> Option<Callee> {
        if let Some(callee) = self.calls.get(&return_address) {
            return callee.clone();
        }
        let callee = self.symbolizer.calls(return_address);
        if self.calls.len() < MAX_NAMED && self.covered(return_address) {
            self.calls.insert(return_address, callee.clone());
        }
        callee
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_of_this_test() -> u64 {
        // An address inside this function, as a return address of a call in it would be.
        let here = a_function_of_this_test as *const () as u64;
        std::hint::black_box(here) + 8
    }

    #[test]
    fn a_call_site_of_this_process_is_named_by_its_function() {
        let mut names = Names::new(std::process::id());
        let address = a_function_of_this_test();
        let name = names.call_site(&format!("{address:#x}"));
        assert!(name.contains("a_function_of_this_test"), "{name}");
        assert_eq!(names.call_site("a mark's own name"), "a mark's own name");
        assert_eq!(names.call_site("0x8000000000000000"), "[call site pending]");
    }
}
