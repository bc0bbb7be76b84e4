//! The files a region scanner (`record/scanner.rs`) reads at each look at a process, kept
//! open: its memory map, where the fsprof regions are found, and its leader's `stat`, which
//! says whether the leader can still show the memory; and, once per program it runs, its
//! environment (whether it announces its regions). Not here: opening the regions
//! (`region.rs`), when to look (the scanner).

use super::process::{proc_dir, state_from_stat};
use fsprof_shim::abi;
use std::fs;
use std::io;

/// The files a region scanner reads at each look, kept open: opening `/proc/PID/maps` and
/// `/proc/PID/stat` again for every look at a young process (every few milliseconds) cost about a
/// third of the scanner's CPU. A kept `maps` shows the address space it was opened on, which
/// an `exec` replaces (the old one then reads empty): an empty read opens it again.
pub struct ScannedFiles {
    pid: u32,
    maps: Option<fs::File>,
    stat: Option<fs::File>,
    text: String,
    /// Times the maps were opened: once more after each `exec`.
    maps_opened: u32,
}

/// Most bytes of a memory map read (what `/proc` says is the target's word: bounded); a map
/// cut there lists the regions mapped before the cut.
const MAX_MAPS_BYTES: usize = 64 << 20;

impl ScannedFiles {
    /// Nothing opened yet.
    pub fn new(pid: u32) -> ScannedFiles {
        ScannedFiles {
            pid,
            maps: None,
            stat: None,
            text: String::new(),
            maps_opened: 0,
        }
    }

    /// A thread of the process through which its memory can be read (see
    /// [`super::process::memory_thread`]).
    pub fn memory_thread(&mut self, tids: &[u32]) -> u32 {
        let pid = self.pid;
        let stat = &mut self.stat;
        let read = read_kept(stat, || proc_dir(pid).join("stat"), &mut self.text, 4096);
        let leader_running =
            read.is_ok() && !matches!(state_from_stat(&self.text), Some('Z' | 'X' | 'x'));
        if leader_running {
            return pid;
        }
        tids.iter().copied().find(|tid| *tid != pid).unwrap_or(pid)
    }

    /// Start addresses of the fsprof regions mapped (mappings of the right name and size). Reads
    /// the process's maps through one of `tids` if the leader's are empty (a leader that exited
    /// before its other threads has no maps of its own).
    pub fn region_addresses(&mut self, tids: &[u32]) -> io::Result<Vec<u64>> {
        let pid = self.pid;
        let path = || proc_dir(pid).join("maps");
        self.maps_opened += u32::from(self.maps.is_none());
        read_kept(&mut self.maps, path, &mut self.text, MAX_MAPS_BYTES)?;
        if self.text.is_empty() {
            // Opened before an exec (or the leader has exited): opened again.
            self.maps = None;
            self.maps_opened += 1;
            read_kept(&mut self.maps, path, &mut self.text, MAX_MAPS_BYTES)?;
        }
        for tid in tids.iter().filter(|tid| **tid != pid).take(3) {
            if !self.text.is_empty() {
                break;
            }
            let task = proc_dir(pid).join(format!("task/{tid}/maps"));
            self.text = fs::read_to_string(task).unwrap_or_default();
        }
        let wanted = format!("/memfd:{}", abi::REGION_NAME);
        Ok((self.text.lines())
            .filter_map(|line| {
                let mut fields = line.split_ascii_whitespace();
                let range = fields.next()?;
                let path = fields.nth(4)?;
                if path != wanted {
                    return None;
                }
                let (start, end) = range.split_once('-')?;
                let start = u64::from_str_radix(start, 16).ok()?;
                let end = u64::from_str_radix(end, 16).ok()?;
                (end.checked_sub(start)? as usize >= abi::REGION_SIZE).then_some(start)
            })
            .collect())
    }

    /// How many times the memory map was opened (see [`ScannedFiles::region_addresses`]): a
    /// change tells that the process may run another program.
    pub fn maps_opened(&self) -> u32 {
        self.maps_opened
    }

    /// Whether the environment the process's program started with holds `entry` (see
    /// [`environment_holds`]).
    pub fn environment_holds(&self, entry: &str) -> bool {
        environment_holds(self.pid, entry)
    }
}

/// Whether the environment process `pid`'s program started with holds `entry` (`NAME=value`),
/// as far as `MAX_ENVIRONMENT_BYTES`; `false` where it cannot be read.
pub fn environment_holds(pid: u32, entry: &str) -> bool {
    use std::io::Read;
    let Ok(file) = fs::File::open(proc_dir(pid).join("environ")) else {
        return false;
    };
    // Room for a usual environment at once: from nothing, `read_to_end` probed with reads of
    // 32 bytes and up, eight system calls for 4 KiB (once per process a tree's recording
    // follows, and again at its exec).
    let mut bytes = Vec::with_capacity(ENVIRONMENT_READ);
    if file
        .take(MAX_ENVIRONMENT_BYTES)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return false;
    }
    bytes.split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// Most bytes of an environment read (the target's word, bounded).
const MAX_ENVIRONMENT_BYTES: u64 = 4 << 20;
/// Bytes of an environment asked for by the first read.
const ENVIRONMENT_READ: usize = 16 << 10;

/// Reads the whole of the file kept in `file` (opened at `path` first if it is not) into
/// `text`, at most `most` bytes; a failed read closes it, to be opened again next time.
fn read_kept(
    file: &mut Option<fs::File>,
    path: impl FnOnce() -> std::path::PathBuf,
    text: &mut String,
    most: usize,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    text.clear();
    if file.is_none() {
        *file = Some(fs::File::open(path())?);
    }
    let kept = file.as_ref().expect("opened");
    let mut bytes = std::mem::take(text).into_bytes();
    let mut chunk = [0u8; 16 * 1024];
    let read = loop {
        match kept.read_at(&mut chunk, bytes.len() as u64) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                bytes.extend_from_slice(&chunk[..n]);
                if bytes.len() >= most {
                    break Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    if read.is_err() {
        *file = None;
        bytes.clear();
    }
    *text = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The maps kept open show the program a process runs after its `exec`, not the empty map
    /// of the address space the file was opened on.
    #[test]
    fn scanned_files_kept_open_follow_an_exec() {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line; exec sleep 5"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // The child runs the shell once its exe is no longer the test's (between its fork and
        // its exec, its maps are the test's), and `sleep` once that exec is through.
        let test = std::fs::read_link("/proc/self/exe").unwrap();
        let runs = |wanted: &dyn Fn(&std::path::Path) -> bool| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| wanted(&exe)) {
                assert!(std::time::Instant::now() < deadline, "no exec within 5 s");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        runs(&|exe| exe != test);
        let mut files = ScannedFiles::new(pid);
        files.region_addresses(&[pid]).unwrap();
        assert!(!files.text.contains("sleep"), "{}", files.text);
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        runs(&|exe| exe.to_string_lossy().contains("sleep"));
        files.region_addresses(&[pid]).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            files.text.contains("sleep"),
            "after the exec: {:?}",
            files.text
        );
    }
}
