//! Debug files fetched by build id from debuginfod servers, as gdb, perf and samply fetch them:
//! the servers `DEBUGINFOD_URLS` names (space-separated; Debian, Ubuntu, Fedora and Arch set it),
//! asked in turn for `/buildid/<hex>/debuginfo` once recording has ended (symbolization runs
//! then; never while sampling), the answers kept in a cache private to the user,
//! `$XDG_CACHE_HOME/fsprof/debuginfod/<hex>/debuginfo`. A build id no server has is remembered
//! for `MISSING_FOR` (`missing` beside it), as debuginfod's own client does, so that a second
//! report does not ask again for every library; a server that cannot be reached is not asked again
//! by this fsprof.
//!
//! `DEBUGINFOD_TIMEOUT` (seconds, default `TIMEOUT`) bounds the wait for a server to answer,
//! `DEBUGINFOD_MAXSIZE` (bytes, default `MAX_SIZE`) the size of a file taken; `--offline`
//! asks nothing. A fetch runs on a thread of its own without fsprof's capabilities, as the user
//! who ran it, and writes only into that user's cache (`os/cache.rs` checks whose it is). What a
//! server sends is untrusted: `debug_files.rs` takes a file only if its build id is the module's.
//! Not here: where else debug files are looked for (`debug_files.rs`).

use crate::os::cache;
use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How long a server may take to answer (name lookup, connection, the response's head).
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a file's download may take in all.
const BODY_TIMEOUT: Duration = Duration::from_secs(600);
/// Largest file taken (a large library's DWARF is a few hundred MiB).
const MAX_SIZE: u64 = 2 << 30;
/// How long a build id that no server had is not asked for again.
const MISSING_FOR: Duration = Duration::from_secs(600);
/// Most servers asked.
const MAX_SERVERS: usize = 16;

/// The debuginfod servers to ask, and which of them could not be reached.
#[derive(Debug)]
pub struct Debuginfod {
    servers: Vec<String>,
    timeout: Duration,
    max_size: u64,
    cache: PathBuf,
    /// Servers that failed to answer (not asked again).
    down: Mutex<HashSet<usize>>,
}

impl Debuginfod {
    /// The servers `DEBUGINFOD_URLS` names, with the user's cache; `None` when it names none or
    /// there is no cache directory.
    pub fn from_env() -> Option<Debuginfod> {
        let number = |name: &str| std::env::var(name).ok()?.trim().parse::<u64>().ok();
        let mut debuginfod = Debuginfod::new(
            &std::env::var("DEBUGINFOD_URLS").ok()?,
            cache::dir().ok()?.join("debuginfod"),
        )?;
        if let Some(seconds) = number("DEBUGINFOD_TIMEOUT").filter(|&s| s > 0) {
            debuginfod.timeout = Duration::from_secs(seconds);
        }
        if let Some(size) = number("DEBUGINFOD_MAXSIZE").filter(|&size| size > 0) {
            debuginfod.max_size = size;
        }
        Some(debuginfod)
    }

    /// The servers `urls` names (space-separated, `http://` or `https://`), with its cache in
    /// `cache`; `None` when it names none.
    fn new(urls: &str, cache: PathBuf) -> Option<Debuginfod> {
        let servers: Vec<String> = (urls.split_ascii_whitespace())
            .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
            .map(|url| url.trim_end_matches('/').to_owned())
            .take(MAX_SERVERS)
            .collect();
        (!servers.is_empty()).then(|| Debuginfod {
            servers,
            timeout: TIMEOUT,
            max_size: MAX_SIZE,
            cache,
            down: Mutex::default(),
        })
    }

    /// The path of the debug file with build id `id` (of module `name`, for the progress line):
    /// from the cache, else fetched into it; `None` when no server has it (or none answered).
    pub fn debuginfo(&self, id: &[u8], name: &str) -> Option<PathBuf> {
        if id.is_empty() || id.len() > 64 {
            return None;
        }
        let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
        let dir = self.cache.join(&hex);
        let file = dir.join("debuginfo");
        // Taken only as a plain file of this user's (not through a link someone placed).
        if cache::check_owned(&file).is_ok()
            && std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file())
        {
            return Some(file);
        }
        let missing = dir.join("missing");
        let recent = |at: SystemTime| at.elapsed().is_ok_and(|age| age < MISSING_FOR);
        if std::fs::metadata(&missing)
            .and_then(|m| m.modified())
            .is_ok_and(recent)
        {
            return None;
        }
        // On a thread of its own, which gives up fsprof's capabilities: the user's own fetch.
        let fetched = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    crate::os::privilege::drop_all();
                    cache::make_private_dir(&dir).ok()?;
                    self.fetch(&hex, name, &file)
                })
                .join()
                .ok()
                .flatten()
        });
        match fetched {
            Some(found) => found.then_some(file),
            None => None,
        }
    }

    /// Asks each server that answers for `hex`'s debug file, into `file`: `Some(true)` when one
    /// had it, `Some(false)` when every server asked said it has none (remembered), `None`
    /// when a server could not be asked.
    fn fetch(&self, hex: &str, name: &str, file: &std::path::Path) -> Option<bool> {
        let agent = |proxy: bool| {
            let mut config = ureq::Agent::config_builder();
            if !proxy {
                config = config.proxy(None);
            }
            config
                .timeout_resolve(Some(self.timeout))
                .timeout_connect(Some(self.timeout))
                .timeout_recv_response(Some(self.timeout))
                .timeout_recv_body(Some(BODY_TIMEOUT))
                .user_agent(concat!("fsprof/", env!("CARGO_PKG_VERSION")))
                .build()
                .new_agent()
        };
        // A proxy (from the environment) cannot reach this machine's own servers.
        let (proxied, direct) = (agent(true), agent(false));
        let mut unanswered = false;
        for (index, server) in self.servers.iter().enumerate() {
            if self.lock_down().contains(&index) {
                unanswered = true;
                continue;
            }
            let progress = std::io::stderr().is_terminal();
            if progress {
                eprint!(
                    "\r\x1b[Kfsprof: fetching the debug file of {} from {}",
                    crate::profile::clean(name),
                    crate::profile::clean(host(server))
                );
            }
            let url = format!("{server}/buildid/{hex}/debuginfo");
            let agent = if is_loopback(server) {
                &direct
            } else {
                &proxied
            };
            let result = agent.get(&url).call();
            let outcome = match result {
                Ok(mut response) => {
                    let mut body = (response.body_mut().with_config())
                        .limit(self.max_size)
                        .reader();
                    let written = cache::write_atomically_from(file, &mut body, 0o600).is_ok();
                    // Cut short (too large, too slow, a full disk): not an answer that it has none.
                    unanswered |= !written;
                    written
                }
                Err(ureq::Error::StatusCode(404)) => false,
                Err(_) => {
                    self.lock_down().insert(index);
                    unanswered = true;
                    false
                }
            };
            if progress {
                eprint!("\r\x1b[K");
            }
            if outcome {
                return Some(true);
            }
        }
        if unanswered {
            return None;
        }
        let _ = cache::write_atomically(&file.with_file_name("missing"), b"", 0o600);
        Some(false)
    }

    fn lock_down(&self) -> std::sync::MutexGuard<'_, HashSet<usize>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The host (and port) of URL `server`, without its scheme, credentials or path.
fn host(server: &str) -> &str {
    let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// Whether URL `server` names this machine (`127.0.0.1`, `localhost`, `[::1]`, with any port).
fn is_loopback(server: &str) -> bool {
    let host = host(server);
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    matches!(name, "127.0.0.1" | "localhost" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A server on 127.0.0.1 that answers every request with `status` and `body`, counting them.
    fn server(status: &'static str, body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&asked);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                count.fetch_add(1, Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let mut stream = &stream;
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body);
            }
        });
        (url, asked)
    }

    /// A cache directory of the test's own, removed when dropped.
    struct Cache(PathBuf);

    impl Drop for Cache {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl Cache {
        fn new() -> Cache {
            let dir = std::env::temp_dir().join(format!(
                "fsprof-debuginfod-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            Cache(dir)
        }

        fn path(&self) -> PathBuf {
            self.0.join("fsprof").join("debuginfod")
        }
    }

    #[test]
    fn only_http_and_https_servers_are_asked() {
        let urls = " https://a.example/  ftp://b.example http://c.example:8002 file:///x ";
        let cache = Cache::new();
        let debuginfod = Debuginfod::new(urls, cache.path()).unwrap();
        assert_eq!(
            debuginfod.servers,
            ["https://a.example", "http://c.example:8002"]
        );
        assert!(Debuginfod::new("  ", cache.path()).is_none());
        assert!(Debuginfod::new("ftp://b.example", cache.path()).is_none());
    }

    #[test]
    fn a_file_is_fetched_once_then_taken_from_the_cache() {
        let (url, asked) = server("200 OK", b"the debug file");
        let cache = Cache::new();
        let debuginfod = Debuginfod::new(&url, cache.path()).unwrap();
        let path = debuginfod.debuginfo(&[0xab, 0x01], "libx.so").unwrap();
        assert!(path.ends_with("ab01/debuginfo"));
        assert_eq!(std::fs::read(&path).unwrap(), b"the debug file");
        assert_eq!(debuginfod.debuginfo(&[0xab, 0x01], "libx.so"), Some(path));
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_build_id_no_server_has_is_not_asked_for_again_soon() {
        let (url, asked) = server("404 Not Found", b"");
        let cache = Cache::new();
        let debuginfod = Debuginfod::new(&url, cache.path()).unwrap();
        assert_eq!(debuginfod.debuginfo(&[0xcd], "liby.so"), None);
        assert_eq!(debuginfod.debuginfo(&[0xcd], "liby.so"), None);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        assert!(debuginfod.cache.join("cd/missing").is_file());
    }

    #[test]
    fn a_server_that_does_not_answer_is_not_asked_again() {
        // A port nothing listens on: refused at once.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (url, asked) = server("200 OK", b"from the second");
        let urls = format!("http://127.0.0.1:{port} {url}");
        let cache = Cache::new();
        let debuginfod = Debuginfod::new(&urls, cache.path()).unwrap();
        assert!(debuginfod.debuginfo(&[1], "a").is_some());
        assert!(debuginfod.lock_down().contains(&0));
        assert!(debuginfod.debuginfo(&[2], "b").is_some());
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_server_is_local_by_its_host_alone() {
        for local in [
            "http://127.0.0.1:8002",
            "http://localhost/x",
            "http://[::1]:80/",
            "http://u:p@localhost:1",
        ] {
            assert!(is_loopback(local), "{local}");
        }
        for remote in [
            "https://localhost:1@evil.example",
            "https://debuginfod.debian.net",
            "http://127.0.0.1.example",
        ] {
            assert!(!is_loopback(remote), "{remote}");
        }
        assert_eq!(
            host("https://user:secret@debuginfod.example:8002/path"),
            "debuginfod.example:8002"
        );
    }

    #[test]
    fn a_file_past_the_size_bound_is_not_kept() {
        let (url, _) = server("200 OK", b"twelve bytes");
        let cache = Cache::new();
        let mut debuginfod = Debuginfod::new(&url, cache.path()).unwrap();
        debuginfod.max_size = 4;
        assert_eq!(debuginfod.debuginfo(&[7], "big"), None);
        assert!(!debuginfod.cache.join("07/debuginfo").exists());
        // Not taken for an answer that no server has it.
        assert!(!debuginfod.cache.join("07/missing").exists());
    }
}
