//! The target's memory map as fsprof last read it (`/proc/PID/maps`), read again when an
//! address or a stack falls outside it, at most every [`MAPS_REFRESH`] (at once for an
//! instruction in no executable mapping known: a library just loaded), with the modules mapped
//! (handed to the unwinder) and every module seen during the session, for symbolization after
//! recording. Where the kernel answers `PROCMAP_QUERY` (Linux 6.11), a read asks for the
//! executable mappings only (a fifth of a compiler's), and for the mapping that holds a stack
//! fsprof copies when one falls outside those held; elsewhere, and for the ptrace backend (whose
//! late stops copy stacks without a read), the whole map is read. A read waits for the target's
//! memory map's lock (see `off_thread.rs`), and so may opening a module (through
//! `/proc/PID/map_files`): both are done by the worker where there is one, and callers refresh
//! only where they must. Not here: unwinding (`unwind.rs`), naming (`symbolize/`).

use crate::native::off_thread::{self, OffThread};
use crate::native::unwind::Unwinder;
use crate::program::modules::{self, JitDump, Mapping, Module};
use std::time::{Duration, Instant};

/// Most of a stack copied per sample, from the stack pointer up: deeper stacks are cut (and marked
/// as such). Only the part in use is copied (from the stack pointer to the mapping's end), so a
/// shallow stack costs what it did; 8 MiB is a main thread's usual whole stack (a 40,000-frame
/// recursion of 200-byte frames).
pub const MAX_STACK_COPY: usize = 8 * 1024 * 1024;

/// Longest interval between two reads of the memory map while addresses fall outside it. The
/// interval starts at 1 ms and doubles while reads find nothing new: a program starting up maps
/// its libraries within milliseconds, a program that jumps to code without a file (a JIT) must
/// not make fsprof read its map at every sample.
pub const MAPS_REFRESH: Duration = Duration::from_millis(100);

/// A read of the memory map, the modules in it and the jitdump files newly mapped.
type ReadMap = std::io::Result<(Read, Vec<Module>, Vec<JitDump>)>;

/// What a read of the memory map found.
enum Read {
    /// The whole map (`/proc/PID/maps`).
    Whole(Vec<Mapping>),
    /// The executable mappings, whether a stack's mapping was asked for, and the mapping that
    /// holds it, if found (`PROCMAP_QUERY`).
    Code(Vec<Mapping>, bool, Option<Mapping>),
}

/// Most mappings held for stacks where they are looked up one at a time: more, and those held
/// are forgotten (and looked up again as needed).
const MOST_STACKS: usize = 4096;

/// The memory map of process `pid`, and the modules seen in it.
pub struct MemoryMap {
    pid: u32,
    /// The whole map as last read, or, where mappings are looked up one at a time, those that
    /// held the stacks fsprof copied: for the stacks it copies.
    maps: Vec<Mapping>,
    /// The kernel answered `PROCMAP_QUERY`.
    queried: bool,
    /// When a stack's mapping was last asked for and not found: asked again only after an
    /// interval, as the whole map is (a stack pointer outside every mapping would otherwise
    /// cost a read at each of its samples).
    stack_missed: Option<Instant>,
    /// When a read for an instruction found no executable mapping holding it: read for one
    /// again only after an interval.
    code_missed: Option<Instant>,
    /// Always read whole (`PROCMAP_QUERY` is not asked).
    whole: bool,
    /// The executable mappings as last read, whole or not.
    code: Vec<Mapping>,
    /// Every module loaded during the session (modules unloaded since included).
    seen: Vec<Module>,
    /// Every jitdump file mapped during the session, opened when first seen.
    jit_dumps: Vec<JitDump>,
    /// The jitdump files tried (by device and inode), opened or not: each is tried once.
    jit_dumps_tried: Vec<(u64, u64)>,
    next_refresh: Instant,
    refresh_interval: Duration,
}

impl MemoryMap {
    /// Not read yet; read whole at each read if `whole`.
    pub fn new(pid: u32, whole: bool) -> MemoryMap {
        MemoryMap {
            pid,
            maps: Vec::new(),
            queried: false,
            stack_missed: None,
            code_missed: None,
            whole,
            code: Vec::new(),
            seen: Vec::new(),
            jit_dumps: Vec::new(),
            jit_dumps_tried: Vec::new(),
            next_refresh: Instant::now(),
            refresh_interval: Duration::from_millis(1),
        }
    }

    /// Reads the map again (through thread `via`), unless it was read less than an interval
    /// ago, and gives `unwinder` the modules mapped now. `stack`: the stack pointer of a stack
    /// fsprof copies, whose mapping must be known. Where the kernel can be asked
    /// (`PROCMAP_QUERY`), only the executable mappings are read, and the mapping that holds
    /// `stack` (a stack is then looked up whatever the interval); elsewhere the whole map. By
    /// `worker` if given (see `off_thread.rs`): a map it read too late for an earlier call is
    /// taken now, and one it is still reading leaves the map as it was.
    pub fn refresh(
        &mut self,
        via: u32,
        unwinder: &mut Unwinder,
        worker: Option<&mut OffThread>,
        stack: Option<u64>,
    ) {
        self.read_again(via, unwinder, worker, stack, false);
    }

    /// [`MemoryMap::refresh`] for an instruction at `ip` that no module known holds. Where no
    /// executable mapping known holds it either (a library loaded since the last read, rather
    /// than code a JIT wrote into a mapping known), the map is read whatever the interval
    /// (unless such a read found nothing there within the last [`MAPS_REFRESH`]), and the
    /// worker is waited for up to [`off_thread::CODE_WAIT`], a read it was still making
    /// included, and then asked again if that read came too early to show it: without the
    /// library's unwind tables the stack through it cannot be unwound, only guessed.
    pub fn refresh_for_code(
        &mut self,
        via: u32,
        unwinder: &mut Unwinder,
        mut worker: Option<&mut OffThread>,
        ip: u64,
    ) {
        let now = Instant::now();
        let missed = (self.code_missed).is_some_and(|missed| now < missed + MAPS_REFRESH);
        if self.code_holds(ip) || missed {
            self.read_again(via, unwinder, worker, None, false);
            return;
        }
        if let Some(late) =
            (worker.as_deref_mut()).and_then(|w| w.late_within(off_thread::CODE_WAIT))
        {
            self.apply(late, unwinder, now);
        }
        let read = !self.code_holds(ip) && self.read_again(via, unwinder, worker, None, true);
        if read && !self.code_holds(ip) {
            self.code_missed = Some(now);
        }
    }

    /// Whether an executable mapping known (a module's, or one without a file) holds `ip`.
    pub fn code_holds(&self, ip: u64) -> bool {
        self.code.iter().any(|m| m.range.contains(&ip))
    }

    /// [`MemoryMap::refresh`]; for code (see [`MemoryMap::refresh_for_code`]) if `for_code`:
    /// whatever the interval, waiting up to [`off_thread::CODE_WAIT`]. Whether a read was
    /// taken in.
    fn read_again(
        &mut self,
        via: u32,
        unwinder: &mut Unwinder,
        worker: Option<&mut OffThread>,
        stack: Option<u64>,
        for_code: bool,
    ) -> bool {
        let now = Instant::now();
        // A stack's mapping is looked up at once where that is cheap, and the first whole
        // read is not put off either: the map held has no stack yet.
        let cheap =
            self.queried && (self.stack_missed).is_none_or(|missed| now >= missed + MAPS_REFRESH);
        let urgent =
            for_code || stack.is_some() && (cheap || (!self.queried && self.maps.is_empty()));
        if now < self.next_refresh && !urgent {
            return false;
        }
        let (pid, known) = (self.pid, unwinder.modules().to_vec());
        let known_dumps = self.jit_dumps_tried.clone();
        let whole = self.whole;
        let read = move || {
            let code = match whole {
                true => None,
                false => modules::read_code_maps(pid, via, stack)?,
            };
            let read = match code {
                Some((code, held)) => Read::Code(code, stack.is_some(), held),
                None => Read::Whole(modules::read_maps(pid, via)?),
            };
            let code = match &read {
                Read::Code(code, ..) | Read::Whole(code) => code,
            };
            let loaded = modules::modules(pid, code, &known);
            let dumps = modules::jit_dumps(pid, code, &known_dumps);
            Ok::<_, std::io::Error>((read, loaded, dumps))
        };
        let wait = match for_code {
            true => off_thread::CODE_WAIT,
            false => off_thread::WAIT,
        };
        let read = match worker {
            Some(worker) => match worker.late::<ReadMap>() {
                Some(late) => late,
                None => match worker.run(read, wait) {
                    Some(read) => read,
                    None => return false, // taken at a later call, once read
                },
            },
            None => read(),
        };
        self.apply(read, unwinder, now);
        true
    }

    /// Takes in a read of the map asked for at `now`, and gives `unwinder` its modules.
    fn apply(&mut self, read: ReadMap, unwinder: &mut Unwinder, now: Instant) {
        let Ok((read, loaded, dumps)) = read else {
            self.next_refresh = now + MAPS_REFRESH;
            return;
        };
        let code: Vec<Mapping> = match read {
            Read::Whole(maps) => {
                let code = maps.iter().filter(|m| m.execute).cloned().collect();
                self.maps = maps;
                code
            }
            Read::Code(code, asked, held) => {
                self.queried = true;
                match held {
                    Some(held) => self.hold(held),
                    None if asked => self.stack_missed = Some(now),
                    None => {}
                }
                code
            }
        };
        self.refresh_interval = if code == self.code {
            (self.refresh_interval * 2).min(MAPS_REFRESH)
        } else {
            Duration::from_millis(1)
        };
        self.next_refresh = now + self.refresh_interval;
        for module in &loaded {
            let known = self
                .seen
                .iter()
                .any(|m| m.range.start == module.range.start && m.path == module.path);
            if !known {
                self.seen.push(module.clone());
            }
        }
        for dump in dumps {
            if !self.jit_dumps.iter().any(|known| known.id() == dump.id()) {
                self.jit_dumps.push(dump);
            }
        }
        for id in modules::jit_dump_ids(&code) {
            if !self.jit_dumps_tried.contains(&id) && self.jit_dumps_tried.len() < 64 {
                self.jit_dumps_tried.push(id);
            }
        }
        unwinder.set_modules(loaded);
        self.code = code;
    }

    /// Holds `mapping`, looked up for a stack, in place of those it overlaps (unmapped since).
    fn hold(&mut self, mapping: Mapping) {
        if self.maps.len() >= MOST_STACKS {
            self.maps.clear();
        }
        let range = mapping.range.clone();
        self.maps
            .retain(|m| m.range.end <= range.start || m.range.start >= range.end);
        self.maps.push(mapping);
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

    /// Every module seen during the session, and the jitdump files it mapped.
    pub fn into_modules(self) -> (Vec<Module>, Vec<JitDump>) {
        (self.seen, self.jit_dumps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_looked_up_at_once_and_one_not_found_waits_an_interval() {
        let pid = std::process::id();
        let tid = nix::unistd::gettid().as_raw() as u32;
        let mut unwinder = Unwinder::new();
        let mut maps = MemoryMap::new(pid, false);
        maps.refresh(tid, &mut unwinder, None, None);
        if !maps.queried {
            eprintln!("skipped: this kernel has no PROCMAP_QUERY (Linux 6.11)");
            return;
        }
        assert!(!unwinder.modules().is_empty());
        // Within the interval, a stack's mapping is still asked for.
        let on_stack = &pid as *const u32 as u64;
        assert!(!maps.holds(on_stack));
        maps.refresh(tid, &mut unwinder, None, Some(on_stack));
        assert!(maps.holds(on_stack));
        assert!(maps.stack_top(on_stack) > on_stack);
        // An address in no mapping is asked for once; the next stack waits for the interval.
        maps.refresh(tid, &mut unwinder, None, Some(0x1000));
        assert!(maps.stack_missed.is_some());
        // Mapped (the heap), and not held: not asked for within the interval after the miss.
        let boxed = Box::new(7u64);
        let other = &*boxed as *const u64 as u64;
        assert!(!maps.holds(other));
        maps.refresh(tid, &mut unwinder, None, Some(other));
        assert!(
            !maps.holds(other),
            "looked up within the interval after a miss"
        );
    }

    #[test]
    fn code_mapped_since_the_last_read_is_read_for_at_once_and_code_nowhere_waits() {
        use nix::libc::{mmap, munmap, MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE};
        use nix::libc::{PROT_EXEC, PROT_READ};
        let pid = std::process::id();
        let tid = nix::unistd::gettid().as_raw() as u32;
        let mut unwinder = Unwinder::new();
        let mut maps = MemoryMap::new(pid, false);
        maps.refresh(tid, &mut unwinder, None, None);
        // Executable memory mapped after the read (as a library's code is).
        let (flags, prot) = (MAP_PRIVATE | MAP_ANONYMOUS, PROT_READ | PROT_EXEC);
        // SAFETY: a fresh private mapping, unmapped below and never touched.
        let page = unsafe { mmap(std::ptr::null_mut(), 4096, prot, flags, -1, 0) };
        assert_ne!(page, MAP_FAILED);
        let ip = page as u64 + 16;
        maps.refresh(tid, &mut unwinder, None, None);
        assert!(!maps.code_holds(ip), "read again within the interval");
        maps.refresh_for_code(tid, &mut unwinder, None, ip);
        assert!(maps.code_holds(ip), "not read for the instruction");
        // An instruction in no mapping: read for once, then not within the interval.
        maps.refresh_for_code(tid, &mut unwinder, None, 0x1000);
        let missed = maps.code_missed.expect("a read found no code there");
        maps.refresh_for_code(tid, &mut unwinder, None, 0x1000);
        assert_eq!(maps.code_missed, Some(missed), "read again at once");
        // SAFETY: mapped above, not used since.
        assert_eq!(unsafe { munmap(page, 4096) }, 0);
    }
}
