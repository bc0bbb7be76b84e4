//! The target's memory map as fsprof last read it (`/proc/PID/maps`), read again when an
//! address or a stack falls outside it, at most every [`MAPS_REFRESH`], with the modules mapped
//! (handed to the unwinder) and every module seen during the session, for symbolization after
//! recording. A read waits for the target's memory map's lock (see `stack_reader.rs`): callers
//! read it only where they must. Not here: unwinding (`unwind.rs`), naming (`symbolize/`).

use crate::native::capture::MAX_STACK_COPY;
use crate::native::off_thread::{self, OffThread};
use crate::native::unwind::Unwinder;
use crate::target::modules::{self, Mapping, Module};
use std::time::{Duration, Instant};

/// Longest interval between two reads of the memory map while addresses fall outside it. The
/// interval starts at 1 ms and doubles while reads find nothing new: a program starting up maps
/// its libraries within milliseconds, a program that jumps to code without a file (a JIT) must
/// not make fsprof read its map at every sample.
pub const MAPS_REFRESH: Duration = Duration::from_millis(100);

/// The memory map of process `pid`, and the modules seen in it.
pub struct MemoryMap {
    pid: u32,
    maps: Vec<Mapping>,
    /// Every module loaded during the session (modules unloaded since included).
    seen: Vec<Module>,
    next_refresh: Instant,
    refresh_interval: Duration,
}

impl MemoryMap {
    /// Not read yet.
    pub fn new(pid: u32) -> MemoryMap {
        MemoryMap {
            pid,
            maps: Vec::new(),
            seen: Vec::new(),
            next_refresh: Instant::now(),
            refresh_interval: Duration::from_millis(1),
        }
    }

    /// Reads the map again (through thread `via`; by `worker` if given, see `off_thread.rs`:
    /// left as it was if the worker did not read it in time), unless it was read less than an
    /// interval ago, and gives `unwinder` the modules mapped now.
    pub fn refresh(&mut self, via: u32, unwinder: &mut Unwinder, worker: Option<&mut OffThread>) {
        let now = Instant::now();
        if now < self.next_refresh {
            return;
        }
        let pid = self.pid;
        let read = move || modules::read_maps(pid, via);
        let read = match worker {
            Some(worker) => match worker.run(read, off_thread::WAIT) {
                Some(read) => read,
                None => return, // asked again at the next refresh
            },
            None => read(),
        };
        let Ok(maps) = read else {
            self.next_refresh = now + MAPS_REFRESH;
            return;
        };
        self.refresh_interval = if maps == self.maps {
            (self.refresh_interval * 2).min(MAPS_REFRESH)
        } else {
            Duration::from_millis(1)
        };
        self.next_refresh = now + self.refresh_interval;
        let loaded = modules::modules(self.pid, &maps, unwinder.modules());
        for module in &loaded {
            let known = self
                .seen
                .iter()
                .any(|m| m.range.start == module.range.start && m.path == module.path);
            if !known {
                self.seen.push(module.clone());
            }
        }
        unwinder.set_modules(loaded);
        self.maps = maps;
    }

    /// Whether a mapping known holds `address`.
    pub fn holds(&self, address: u64) -> bool {
        self.maps.iter().any(|m| m.range.contains(&address))
    }

    /// The end of the mapping that holds `sp` (a thread's stack), 0 if none.
    pub fn stack_top(&self, sp: u64) -> u64 {
        (self.maps.iter())
            .find(|m| m.range.contains(&sp))
            .map_or(0, |m| m.range.end)
    }

    /// Bytes of stack from `sp` to the end of its mapping (at most [`MAX_STACK_COPY`]; 64 KiB
    /// where no mapping is known to hold it).
    pub fn stack_len(&self, sp: u64) -> usize {
        let end = match self.stack_top(sp) {
            0 => sp.saturating_add(64 * 1024),
            top => top,
        };
        (end.saturating_sub(sp) as usize).min(MAX_STACK_COPY)
    }

    /// Every module seen during the session.
    pub fn into_modules(self) -> Vec<Module> {
        self.seen
    }
}
