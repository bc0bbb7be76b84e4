//! New regions announced by the programs `fsprof run` starts, so that a region scanner
//! (`scanner.rs`) looks at a process's memory map when a region appears there rather than every
//! few milliseconds in case one did: those looks, at every young process of a build, were most of
//! what `fsprof run` cost a `make -j2` (BENCHMARKS.md, issue 39).
//!
//! `fsprof run` binds an abstract Unix datagram socket of a random name and puts the name in the
//! program's environment ([`abi::ANNOUNCE_VARIABLE`]); the shim of any process that inherits it
//! sends a datagram when it creates a region (`shim/src/announce.rs`). A thread here receives
//! them and wakes the scanners of the sending process; a process that announced before a
//! scanner of its registered (it was found a few milliseconds after it started) is remembered,
//! and its scanner woken when it registers. Nothing in a datagram is read: any
//! process on the host may send one, so the only thing trusted is the sender's process id, which
//! the kernel attaches (`SO_PASSCRED`), and all it can do is make the scanner of a process fsprof
//! records (itself) look at its map once more.
//!
//! Not here: which processes are scanned and how often (`scanner.rs`), the shim's side.

use fsprof_shim::abi;
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, UnixAddr};
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// What a datagram from a process wakes: a scanner of that process.
pub trait Wake: Send + Sync {
    /// Looks at the process's map as soon as possible.
    fn wake(&self);
}

/// The socket's name and who waits for announcements from which process: shared by every
/// scanner of a recording.
pub struct Registry {
    /// The socket's abstract name (without the leading NUL).
    name: String,
    waiting: Mutex<Waiting>,
}

/// Who waits for announcements from which process, and the processes that announced before
/// anything of theirs waited (a scanner registers when its process is found, a few
/// milliseconds after it started; see `Scanner::start`).
#[derive(Default)]
struct Waiting {
    wakers: HashMap<u32, Vec<Weak<dyn Wake>>>,
    early: HashSet<u32>,
}

/// Most processes remembered as having announced before a scanner of theirs registered; past
/// it the set starts again (a scanner that waits still looks after a while).
const MAX_EARLY: usize = 4096;

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("name", &self.name)
            .finish()
    }
}

impl Registry {
    /// The environment entry that names the socket (`FSPROF_ANNOUNCE=...`).
    pub fn variable(&self) -> (&'static str, &str) {
        (abi::ANNOUNCE_VARIABLE, &self.name)
    }

    /// Wakes `waker` whenever process `pid` announces a region, as long as it lives, and at
    /// once if it announced one before anything of it registered.
    pub fn register(&self, pid: u32, waker: Weak<dyn Wake>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.wakers.retain(|_, wakers| {
            wakers.retain(|w| w.strong_count() > 0);
            !wakers.is_empty()
        });
        let early = waiting.early.remove(&pid);
        waiting.wakers.entry(pid).or_default().push(waker.clone());
        drop(waiting);
        if let Some(waker) = waker.upgrade().filter(|_| early) {
            waker.wake();
        }
    }

    fn announced_by(&self, pid: u32) {
        let wakers: Vec<Arc<dyn Wake>> = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            let wakers: Vec<Arc<dyn Wake>> = waiting
                .wakers
                .get(&pid)
                .into_iter()
                .flatten()
                .filter_map(Weak::upgrade)
                .collect();
            if wakers.is_empty() {
                if waiting.early.len() >= MAX_EARLY {
                    waiting.early.clear();
                }
                waiting.early.insert(pid);
            }
            wakers
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

/// The socket and the thread that receives from it, until dropped.
pub struct Listener {
    registry: Arc<Registry>,
    socket: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Binds a socket of a fresh name and starts receiving; `None` (with the reason) where the
    /// kernel refuses, and then scanners look as often as they would without.
    pub fn start() -> Result<Listener, String> {
        let socket = socket::socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|e| format!("socket: {}", e.desc()))?;
        socket::setsockopt(&socket, sockopt::PassCred, &true)
            .map_err(|e| format!("SO_PASSCRED: {}", e.desc()))?;
        let name = format!("fsprof-{}-{:016x}", std::process::id(), fastrand::u64(..));
        let address = UnixAddr::new_abstract(name.as_bytes())
            .map_err(|e| format!("socket name: {}", e.desc()))?;
        socket::bind(socket.as_raw_fd(), &address).map_err(|e| format!("bind: {}", e.desc()))?;
        let registry = Arc::new(Registry {
            name,
            waiting: Mutex::default(),
        });
        let socket = Arc::new(socket);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("fsprof-announce".to_owned())
            .spawn({
                let (registry, socket, stop) = (registry.clone(), socket.clone(), stop.clone());
                move || {
                    // Normally scheduled, unlike the scanners it wakes: any local process can
                    // send to the socket (its name is listed in /proc/net/unix), and a flood
                    // must not keep a real-time thread busy. A program that loads the CPUs may
                    // delay an announcement by a time slice; the scanners' own looks remain.
                    crate::os::privilege::drop_all();
                    receive(&registry, &socket, &stop);
                }
            })
            .map_err(|e| format!("thread: {e}"))?;
        Ok(Listener {
            registry,
            socket,
            stop,
            thread: Some(thread),
        })
    }

    /// What scanners register with, and what names the socket.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.clone()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the thread's receive, which then returns nothing.
        let _ = socket::shutdown(self.socket.as_raw_fd(), socket::Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Receives datagrams until `stop`, waking the scanners of each sender.
fn receive(registry: &Registry, socket: &OwnedFd, stop: &AtomicBool) {
    let mut buffer = [0u8; 64];
    let mut space = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
    while !stop.load(Ordering::Relaxed) {
        let mut io = [std::io::IoSliceMut::new(&mut buffer)];
        let message = socket::recvmsg::<()>(
            socket.as_raw_fd(),
            &mut io,
            Some(&mut space),
            socket::MsgFlags::empty(),
        );
        let message = match message {
            Ok(message) => message,
            Err(nix::errno::Errno::EINTR) => continue,
            // Scanners then look as often as without announcements.
            Err(_) => return,
        };
        let pid = message
            .cmsgs()
            .ok()
            .into_iter()
            .flatten()
            .find_map(|c| match c {
                socket::ControlMessageOwned::ScmCredentials(credentials) => Some(credentials.pid()),
                _ => None,
            });
        match pid {
            Some(pid) if pid > 0 => registry.announced_by(pid as u32),
            // A receive after the shutdown: nothing, and no sender.
            _ if stop.load(Ordering::Relaxed) => return,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};

    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A datagram wakes what waits for its sender (whatever it says), not what waits for
    /// another process; and the listener stops when dropped.
    #[test]
    fn a_datagram_wakes_the_scanners_of_its_sender_only() {
        let listener = Listener::start().unwrap();
        let registry = listener.registry();
        let (ours, theirs) = (Arc::new(Counted::default()), Arc::new(Counted::default()));
        let (ours_dyn, theirs_dyn): (Arc<dyn Wake>, Arc<dyn Wake>) = (ours.clone(), theirs.clone());
        registry.register(std::process::id(), Arc::downgrade(&ours_dyn));
        registry.register(1, Arc::downgrade(&theirs_dyn));
        let (variable, name) = registry.variable();
        assert_eq!(variable, "FSPROF_ANNOUNCE");
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
        let sender = std::os::unix::net::UnixDatagram::unbound().unwrap();
        // It claims to come from process 1: only the kernel's word counts.
        sender.send_to_addr(b"pid 1", &address).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ours.0.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no wake in 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(theirs.0.load(Ordering::SeqCst), 0);
        drop(listener);
    }

    /// A process that announced before anything of it registered wakes what registers for it,
    /// once; what registers for another process is not woken.
    #[test]
    fn an_announcement_before_the_registration_wakes_at_it() {
        let listener = Listener::start().unwrap();
        let registry = listener.registry();
        registry.announced_by(41);
        let (early, other) = (Arc::new(Counted::default()), Arc::new(Counted::default()));
        let (early_dyn, other_dyn): (Arc<dyn Wake>, Arc<dyn Wake>) = (early.clone(), other.clone());
        registry.register(42, Arc::downgrade(&other_dyn));
        registry.register(41, Arc::downgrade(&early_dyn));
        assert_eq!(early.0.load(Ordering::SeqCst), 1);
        assert_eq!(other.0.load(Ordering::SeqCst), 0);
        // Remembered once: a second registration is not woken by the same announcement.
        registry.register(41, Arc::downgrade(&other_dyn));
        assert_eq!(other.0.load(Ordering::SeqCst), 0);
        registry.announced_by(41);
        assert_eq!(early.0.load(Ordering::SeqCst), 2);
        assert_eq!(other.0.load(Ordering::SeqCst), 1);
    }
}
