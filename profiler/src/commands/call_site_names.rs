//! `fsprof top`'s names for call sites while recording. A built-in feature's instance is a call
//! site, kept as its address (`0x7ff4b0a4f86f`) until the profile is finished; `top` asks this
//! module for its name, which a thread of its own finds (the process's memory map read, its
//! modules parsed, the address symbolized as the report will name it: `symbolize::call_sites`),
//! so that neither reading nor parsing ever holds up sampling. A name not found yet reads as the
//! address; a call not resolved to its site yet (a stand-in beyond user space) as `[call site
//! pending]`. Not here: how the report names call sites after recording (`record::interner`).

use crate::program::modules::{self, Module};
use crate::symbolize::symbols::Symbolizer;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Most call sites named (a live view lists a few dozen).
const MAX_NAMES: usize = 4096;
/// The lowest address beyond x86-64's user space: the interner's stand-ins for calls not
/// resolved yet lie there.
const USER_END: u64 = 1 << 47;

/// The names found so far, and the way to ask for more.
pub struct CallSiteNames {
    names: Arc<Mutex<HashMap<u64, String>>>,
    /// Addresses asked for (each once).
    asked: Mutex<HashSet<u64>>,
    ask: Option<Sender<u64>>,
}

impl CallSiteNames {
    /// Starts the naming thread for process `pid` (it ends when this is dropped).
    pub fn start(pid: u32) -> CallSiteNames {
        let names = Arc::new(Mutex::new(HashMap::new()));
        let (ask, asked) = mpsc::channel();
        let found = Arc::clone(&names);
        let started = std::thread::Builder::new()
            .name("fsprof-names".to_owned())
            .spawn(move || name_until_dropped(pid, &asked, &found));
        CallSiteNames {
            names,
            asked: Mutex::default(),
            ask: started.ok().map(|_| ask),
        }
    }

    /// The name to show for a payload whose text is `text`: a call site's (`0x…`) once found,
    /// else `text` itself.
    pub fn name(&self, text: &str) -> String {
        let Some(address) = text
            .strip_prefix("0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        else {
            return text.to_owned();
        };
        if address >= USER_END {
            return "[call site pending]".to_owned();
        }
        if let Some(name) = lock(&self.names).get(&address) {
            return name.clone();
        }
        let mut asked = lock(&self.asked);
        if asked.len() < MAX_NAMES && asked.insert(address) {
            if let Some(ask) = &self.ask {
                let _ = ask.send(address);
            }
        }
        text.to_owned()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The naming thread: names each address asked for, reading `pid`'s memory map again when an
/// address lies outside the modules known, until the asking side is dropped.
fn name_until_dropped(pid: u32, asked: &Receiver<u64>, names: &Mutex<HashMap<u64, String>>) {
    let mut known: Vec<Module> = Vec::new();
    let mut symbolizer = Symbolizer::new(&known);
    while let Ok(address) = asked.recv() {
        if !known.iter().any(|m| m.range.contains(&address)) {
            if let Ok(maps) = modules::read_maps(pid, pid) {
                let loaded = modules::modules(pid, &maps, &known);
                for module in &loaded {
                    if !known.iter().any(|k| k.range.start == module.range.start) {
                        symbolizer.add(module.clone());
                    }
                }
                known = loaded;
            }
        }
        if known.iter().any(|m| m.range.contains(&address)) {
            let name = crate::symbolize::call_sites::name(&mut symbolizer, address);
            lock(names).insert(address, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[inline(never)]
    fn a_function_of_this_test() -> u64 {
        // An address inside this function, as a return address of a call in it would be.
        let here = a_function_of_this_test as *const () as u64;
        std::hint::black_box(here) + 8
    }

    #[test]
    fn a_call_site_of_this_process_is_named_by_its_function() {
        let names = CallSiteNames::start(std::process::id());
        let address = a_function_of_this_test();
        let text = format!("{address:#x}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let name = loop {
            let name = names.name(&text);
            if name != text || Instant::now() > deadline {
                break name;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(name.contains("a_function_of_this_test"), "{name}");
        assert_eq!(names.name("a mark's own instance"), "a mark's own instance");
        assert_eq!(names.name("0x8000000000000000"), "[call site pending]");
    }
}
