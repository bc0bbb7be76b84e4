//! Call-site instances (marks whose payload is a return address: the agent's built-in features
//! and `fsprof_mark(feature, NULL)`): the modules they lie in, kept while the target lives, and
//! their names, `function (file:line)`, found after recording with the symbolizer.
//!
//! Works without native stacks too (`--no-native`): the memory map is read, and the modules
//! opened through `/proc/PID/map_files`, when a call site falls outside the modules known so far
//! (at most every [`REFRESH`]), so a library loaded late (a Python extension) is found while it is
//! mapped. Also tells whether a feature descriptor lies in the agent library (a built-in
//! feature). Nothing here runs in the sampling loop except for addresses seen for the first time.

use crate::modules::{self, Mapping, Module};
use crate::symbols::Symbolizer;
use std::time::{Duration, Instant};

/// Least time between two reads of the memory map for call sites.
pub const REFRESH: Duration = Duration::from_millis(10);

/// The call sites of a recording and the modules they lie in.
#[derive(Default)]
pub struct CallSites {
    /// (payload id, return address).
    sites: Vec<(u32, u64)>,
    /// Names of the call sites of a program image replaced since (by `exec`).
    named: Vec<(u32, String)>,
    modules: Vec<Module>,
    maps: Vec<Mapping>,
    last_read: Option<Instant>,
    /// Some call site lies outside the modules known: the map is read again when next allowed.
    uncovered: bool,
}

impl CallSites {
    /// Nothing recorded yet.
    pub fn new() -> CallSites {
        CallSites::default()
    }

    /// Records that payload `id` is the call site `address` of process `pid` (read through
    /// thread `via`), loading the module it lies in if it is new.
    pub fn add(&mut self, pid: u32, via: u32, id: u32, address: u64) {
        self.sites.push((id, address));
        if !self.covered(address) {
            self.uncovered = true;
            self.settle(pid, || via);
        }
    }

    /// Reads the memory map again if a call site was left outside the known modules because the
    /// previous read was too recent (several new call sites can come within one sample's
    /// stacks); cheap when there is none. Called at every tick; `via` names a live thread of
    /// `pid` to read the map through.
    pub fn settle(&mut self, pid: u32, via: impl FnOnce() -> u32) {
        if !self.uncovered {
            return;
        }
        if self.refresh(pid, via(), false) {
            // Read after the site was seen: whatever is still outside is outside every module.
            self.uncovered = false;
        }
    }

    fn covered(&self, address: u64) -> bool {
        self.modules.iter().any(|m| m.range.contains(&address))
    }

    /// Reads the memory map (unless read less than [`REFRESH`] ago and not `force`) and loads
    /// the modules not known yet; whether it was read.
    fn refresh(&mut self, pid: u32, via: u32, force: bool) -> bool {
        let now = Instant::now();
        if !force && self.last_read.is_some_and(|last| now < last + REFRESH) {
            return false;
        }
        self.last_read = Some(now);
        let Ok(maps) = modules::read_maps(pid, via) else {
            return false;
        };
        for module in modules::modules(pid, &maps, &self.modules) {
            let known = self
                .modules
                .iter()
                .any(|m| m.range.start == module.range.start && m.path == module.path);
            if !known {
                self.modules.push(module);
            }
        }
        self.maps = maps;
        true
    }

    /// Whether `address` (a feature descriptor) lies in a mapping of the agent library, i.e. is
    /// one of its built-in features.
    pub fn in_agent(&mut self, pid: u32, via: u32, address: u64) -> bool {
        let find = |maps: &[Mapping]| {
            maps.iter()
                .find(|m| m.range.contains(&address))
                .map(|m| crate::agent::is_agent_path(&m.path))
        };
        if let Some(found) = find(&self.maps) {
            return found;
        }
        self.refresh(pid, via, true);
        find(&self.maps).unwrap_or(false)
    }

    /// The display name of each call site: (payload id, `function (file:line)`), or the
    /// function alone, or `module+0xoffset`, or `0x…` outside every module.
    pub fn names(&self) -> Vec<(u32, String)> {
        let mut symbolizer = Symbolizer::new(&self.modules);
        let current = self
            .sites
            .iter()
            .map(|(id, address)| (*id, name(&mut symbolizer, *address)));
        self.named.iter().cloned().chain(current).collect()
    }

    /// The program replaced its image (`exec`): its call sites are named now, while their
    /// modules are the ones known, and the memory map is forgotten (the same addresses may
    /// now hold other code, and the agent's features other addresses).
    pub fn forget_image(&mut self) {
        if !self.sites.is_empty() {
            self.named = self.names();
        }
        self.sites.clear();
        self.modules.clear();
        self.maps.clear();
        self.last_read = None;
        self.uncovered = false;
    }
}

/// The name of the call whose return address is `address`: the innermost function at the call
/// instruction (`address - 1`), inlined or not, with its line.
fn name(symbolizer: &mut Symbolizer, address: u64) -> String {
    if address == 0 {
        return "[unknown call site]".to_owned();
    }
    let frames = symbolizer.symbolize(address - 1);
    let Some(frame) = frames.last() else {
        return format!("{address:#x}");
    };
    let function = crate::names::clean(&frame.function);
    match (&frame.file, frame.line) {
        (Some(file), Some(line)) => {
            format!(
                "{function} ({}:{line})",
                crate::names::clean(short_path(file))
            )
        }
        (Some(file), None) => format!("{function} ({})", crate::names::clean(short_path(file))),
        _ => function,
    }
}

/// Rust's standard library paths without their `/rustc/<commit>/` prefix.
fn short_path(file: &str) -> &str {
    if let Some(rest) = file.strip_prefix("/rustc/") {
        if let Some((_, path)) = rest.split_once('/') {
            return path;
        }
    }
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_call_site_in_this_test_binary_with_its_line() {
        let pid = std::process::id();
        let mut sites = CallSites::new();
        // An address inside this function: a call site as good as any.
        let address =
            names_a_call_site_in_this_test_binary_with_its_line as fn() as usize as u64 + 8;
        sites.add(pid, pid, 0, address);
        sites.add(pid, pid, 1, 0);
        sites.add(pid, pid, 2, 8);
        let names = sites.names();
        let (function, place) = names[0].1.split_once(" (").unwrap();
        assert!(
            function.ends_with("names_a_call_site_in_this_test_binary_with_its_line")
                && place.contains("src/call_sites.rs:"),
            "{names:?}"
        );
        assert_eq!(names[1].1, "[unknown call site]");
        assert_eq!(names[2].1, "0x7");
        assert_eq!(
            short_path("/rustc/abc123/library/std/src/io.rs"),
            "library/std/src/io.rs"
        );
        assert_eq!(short_path("src/main.rs"), "src/main.rs");
    }

    #[test]
    fn descriptors_outside_the_agent_are_not_built_in() {
        let pid = std::process::id();
        static F: fsprof_shim::Feature = fsprof_shim::Feature::new("x");
        let mut sites = CallSites::new();
        assert!(!sites.in_agent(pid, pid, &F as *const _ as u64));
        assert!(!sites.in_agent(pid, pid, 8));
    }
}
