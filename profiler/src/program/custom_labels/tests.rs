//! The custom-labels reader against label sets laid out by the specification: in this process
//! (the reading rules), and in C programs that publish them from their executable or from a
//! `libcustomlabels*.so` (finding them from outside, by the modules' files and the target's
//! memory).

use super::*;
use crate::program::modules;
use crate::program::remote::Remote;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[repr(C)]
struct Text {
    len: usize,
    buf: *const u8,
}

#[repr(C)]
struct RawLabel {
    key: Text,
    value: Text,
}

#[repr(C)]
struct Set {
    storage: *const RawLabel,
    count: usize,
    capacity: usize,
}

fn text(s: &'static str) -> Text {
    Text {
        len: s.len(),
        buf: s.as_ptr(),
    }
}

fn label(key: &'static str, value: &'static str) -> RawLabel {
    RawLabel {
        key: text(key),
        value: text(value),
    }
}

fn label_of(key: &str, value: &str) -> Label {
    Label {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

/// The rules of reading a set: null keys skipped, the first of a key kept, values cut, counts
/// bounded, no set read as none.
#[test]
fn a_set_is_read_by_the_specifications_rules() {
    let long: &'static str = Box::leak("v".repeat(3 * MAX_TEXT).into_boxed_str());
    let mut storage = vec![
        label("request", "GET /a"),
        RawLabel {
            key: Text {
                len: 3,
                buf: std::ptr::null(),
            },
            value: text("deleted"),
        },
        label("request", "a duplicate"),
        label("tenant", long),
    ];
    let set = Set {
        storage: storage.as_ptr(),
        count: storage.len(),
        capacity: storage.len(),
    };
    // The thread-local: a word holding the set's address, 64 bytes below a "thread pointer".
    let slot: Box<[u64; 16]> = Box::new([0; 16]);
    let slot_address = slot.as_ptr() as u64;
    let labels = CustomLabels { tls_offset: -64 };
    let thread_pointer = slot_address + 64;
    let memory = Remote::new(std::process::id());
    let write = |value: u64| unsafe { *(slot_address as *mut u64) = value };

    write(&set as *const Set as u64);
    let read = labels.read(&memory, thread_pointer);
    assert_eq!(read.len(), 2, "{read:?}");
    assert_eq!(read[0], label_of("request", "GET /a"));
    assert_eq!(read[1].key, "tenant");
    assert_eq!(read[1].value.len(), MAX_TEXT);

    write(0);
    assert!(labels.read(&memory, thread_pointer).is_empty());

    // A count far past the storage: at most MAX_LABELS read, and an unreadable set reads as none.
    storage.truncate(1);
    let lying = Set {
        storage: std::ptr::dangling::<RawLabel>(),
        count: usize::MAX,
        capacity: 0,
    };
    write(&lying as *const Set as u64);
    assert!(labels.read(&memory, thread_pointer).is_empty());
    std::hint::black_box(&set); // read through its address until here
}

/// The labels' C declarations and a program that publishes two labels on its main thread and
/// one on a second thread, prints each thread's thread pointer, and waits for its stdin to close.
const HEADER: &str = r#"
#include <stddef.h>
#include <stdint.h>
typedef struct { size_t len; const unsigned char *buf; } custom_labels_string_t;
typedef struct { custom_labels_string_t key, value; } custom_labels_label_t;
typedef struct { custom_labels_label_t *storage; size_t count; size_t capacity; } custom_labels_labelset_t;
"#;

const ABI: &str = r#"
__attribute__((used, visibility("default"))) uint32_t custom_labels_abi_version = 1;
__attribute__((visibility("default"))) __thread custom_labels_labelset_t *custom_labels_current_set;
/* As the reference library, every access through its own code. */
__attribute__((noinline)) void set_labels(custom_labels_labelset_t *set) { custom_labels_current_set = set; }
"#;

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
void set_labels(custom_labels_labelset_t *set);
#define S(text) { sizeof(text) - 1, (const unsigned char *)(text) }
static void *thread_pointer(void) { void *tp; __asm__("mov %%fs:0, %0" : "=r"(tp)); return tp; }
static custom_labels_label_t main_labels[] = { { S("request"), S("GET /index") }, { S("tenant"), S("acme") } };
static custom_labels_labelset_t main_set = { main_labels, 2, 2 };
static custom_labels_label_t worker_labels[] = { { S("job"), S("compact") } };
static custom_labels_labelset_t worker_set = { worker_labels, 1, 1 };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *worker(void *arg) {
    set_labels(&worker_set);
    printf("worker %p\n", thread_pointer());
    fflush(stdout);
    pthread_mutex_lock(&lock);
    return arg;
}
int main(void) {
    pthread_mutex_lock(&lock);
    set_labels(&main_set);
    printf("main %p\n", thread_pointer());
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    char line[8];
    while (fgets(line, sizeof line, stdin)) {}
    pthread_mutex_unlock(&lock);
    pthread_join(t, 0);
    return 0;
}
"#;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fsprof-labels-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn gcc(dir: &Path, args: &[&str]) {
    let output = Command::new("gcc")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "gcc {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A program that publishes its labels, running until dropped.
struct Publisher {
    child: Child,
    /// Each thread's name ("main", "worker") and thread pointer.
    threads: Vec<(String, u64)>,
}

impl Publisher {
    fn start(program: &Path, library_dir: Option<&Path>) -> Publisher {
        let mut command = Command::new(program);
        if let Some(dir) = library_dir {
            command.env("LD_LIBRARY_PATH", dir);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let threads = (0..2)
            .map(|_| {
                let line = lines.next().unwrap().unwrap();
                let (name, pointer) = line.split_once(' ').unwrap();
                let pointer = u64::from_str_radix(pointer.trim_start_matches("0x"), 16).unwrap();
                (name.to_owned(), pointer)
            })
            .collect();
        Publisher { child, threads }
    }

    fn labels(&self) -> Vec<(String, Vec<Label>)> {
        let pid = self.child.id();
        let maps = modules::read_maps(pid, pid).unwrap();
        let found = modules::modules(pid, &maps, &[]);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let memory = Remote::new(pid);
        let labels =
            CustomLabels::find(&memory, &found, &exe.to_string_lossy()).expect("the ABI is found");
        // This test's own process exports nothing.
        let own = std::fs::read_link("/proc/self/exe").unwrap();
        let this = std::process::id();
        let ours = modules::modules(this, &modules::read_maps(this, this).unwrap(), &[]);
        let none = CustomLabels::find(&Remote::new(this), &ours, &own.to_string_lossy());
        assert_eq!(none, Err(Missing::Absent));
        (self.threads.iter())
            .map(|(name, pointer)| (name.clone(), labels.read(&memory, *pointer)))
            .collect()
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn assert_published(read: &[(String, Vec<Label>)]) {
    assert_eq!(read[0].0, "main");
    assert_eq!(
        read[0].1,
        [
            label_of("request", "GET /index"),
            label_of("tenant", "acme")
        ]
    );
    assert_eq!(read[1].0, "worker");
    assert_eq!(read[1].1, [label_of("job", "compact")]);
}

/// An executable that exports the ABI itself: found by its file and read from outside.
#[test]
fn labels_published_by_an_executable_are_read_from_outside() {
    let dir = temp_dir("exe");
    std::fs::write(dir.join("p.c"), format!("{HEADER}{ABI}{PROGRAM}")).unwrap();
    gcc(&dir, &["-O2", "-rdynamic", "-pthread", "p.c", "-o", "p"]);
    let publisher = Publisher::start(&dir.join("p"), None);
    assert_published(&publisher.labels());
    drop(publisher);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `libcustomlabels*.so` that exports the ABI, built as the reference library is (TLS
/// descriptors), loaded at the program's start: found through the loader's descriptor.
#[test]
fn labels_published_by_the_library_are_read_from_outside() {
    let dir = temp_dir("library");
    std::fs::write(dir.join("l.c"), format!("{HEADER}{ABI}")).unwrap();
    std::fs::write(dir.join("p.c"), format!("{HEADER}{PROGRAM}")).unwrap();
    gcc(
        &dir,
        &[
            "-O2",
            "-fPIC",
            "-shared",
            "-ftls-model=global-dynamic",
            "-mtls-dialect=gnu2",
            "l.c",
            "-o",
            "libcustomlabels.so",
        ],
    );
    gcc(
        &dir,
        &[
            "-O2",
            "-pthread",
            "-mtls-dialect=gnu2",
            "p.c",
            "-L.",
            "-lcustomlabels",
            "-o",
            "p",
        ],
    );
    let publisher = Publisher::start(&dir.join("p"), Some(&dir));
    assert_published(&publisher.labels());
    drop(publisher);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_library_is_known_by_its_file_name() {
    assert!(is_library_name("libcustomlabels.so"));
    assert!(is_library_name("libcustomlabels_rs.so"));
    assert!(!is_library_name("libcustomlabels.so.1"));
    assert!(!is_library_name("libother.so"));
}
