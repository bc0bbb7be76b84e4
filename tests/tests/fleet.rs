//! fsprof's marks published for the fleet's profilers (the shim's `fleet` feature, the agent's
//! FSPROF_FLEET_LABELS=1), read from outside the process by the specifications' layouts, with a
//! reader written here from them (not fsprof's): the custom-labels ABI v1 (the executable's
//! static TLS, a library's TLS descriptor), the OpenTelemetry thread record (OTEP 4947) and the
//! process context that names its keys (OTEP 4719). Symbols, the TLS segment and relocations
//! come from `readelf`, the memory from `process_vm_readv`. The programs step through their
//! marks and say what each step is marked with; each step is read while they wait.

use crate::support::native::{agent_include, c_sources};
use crate::support::programs::{feature, percent};
use crate::support::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

const FEATURE_KEY: &str = "fsprof.feature";
const INSTANCE_KEY: &str = "fsprof.instance";
/// parca-agent's longest value; the shim cuts values to it.
const MAX_VALUE: usize = 53;

/// `readelf ARGS FILE`'s output.
fn readelf(args: &[&str], file: &Path) -> String {
    let output = Command::new("readelf")
        .args(args)
        .arg(file)
        .output()
        .expect("readelf (binutils) is needed");
    assert!(
        output.status.success(),
        "readelf {args:?} {}",
        file.display()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The value and type of the dynamic symbol `name` of `file`.
fn dynamic_symbol(file: &Path, name: &str) -> Option<(u64, String)> {
    readelf(&["-W", "--dyn-syms"], file)
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let symbol = fields.get(7)?.split('@').next()?;
            (symbol == name && fields[6] != "UND").then(|| {
                let value = u64::from_str_radix(fields[1], 16).unwrap();
                (value, fields[3].to_owned())
            })
        })
}

/// Where `file`'s TLS block lies below the thread pointer, were it the executable (x86-64,
/// variant II: the first module's block ends at the thread pointer, aligned).
fn executable_tls_offset(file: &Path) -> u64 {
    let header = readelf(&["-W", "-l"], file);
    let tls = (header.lines())
        .find(|line| line.trim_start().starts_with("TLS "))
        .expect("the executable has a TLS segment");
    let fields: Vec<u64> = (tls.split_whitespace())
        .filter_map(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .collect();
    // Offset, VirtAddr, PhysAddr, FileSiz, MemSiz, Align (the flags are not hex: "R").
    let (vaddr, memsz, align) = (fields[1], fields[4], fields[5].max(1));
    let firstbyte = vaddr.wrapping_neg() & (align - 1);
    (memsz - firstbyte).div_ceil(align) * align + firstbyte
}

/// The offset in `file` of its TLS descriptor for `name` (an `R_X86_64_TLSDESC` relocation).
fn tls_descriptor(file: &Path, name: &str) -> Option<u64> {
    readelf(&["-W", "-r"], file).lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"R_X86_64_TLSDESC") && fields.get(4) == Some(&name))
            .then(|| u64::from_str_radix(fields[0], 16).unwrap())
    })
}

/// Reads `len` bytes of `pid`'s memory at `address`.
fn read(pid: u32, address: u64, len: usize) -> Vec<u8> {
    let mut buffer = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: one local buffer of `len` bytes; the remote side is only read.
    let got = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    assert_eq!(
        got, len as isize,
        "reading {len} bytes at {address:#x} of {pid}"
    );
    buffer
}

fn word(pid: u32, address: u64) -> u64 {
    u64::from_ne_bytes(read(pid, address, 8).try_into().unwrap())
}

/// A string `{len, buf}` of at most 256 bytes.
fn string(pid: u32, len: u64, buf: u64) -> String {
    assert!(len <= 256, "a label of {len} bytes");
    String::from_utf8(read(pid, buf, len as usize)).expect("UTF-8")
}

/// Where a process's published thread-locals lie from a thread pointer.
struct Published {
    pid: u32,
    /// Offsets of `custom_labels_current_set` and `otel_thread_ctx_v1` from the thread pointer.
    labels: i64,
    record: i64,
}

impl Published {
    /// In `exe`, the executable: static offsets.
    fn in_executable(pid: u32, exe: &Path) -> Published {
        let offset = executable_tls_offset(exe) as i64;
        let symbol = |name| {
            let (value, kind) = dynamic_symbol(exe, name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(kind, "TLS", "{name}");
            value as i64 - offset
        };
        let (version, kind) = dynamic_symbol(exe, "custom_labels_abi_version").unwrap();
        assert_eq!(kind, "OBJECT");
        let base = module_base(pid, exe);
        let version = u32::from_ne_bytes(read(pid, base + version, 4).try_into().unwrap());
        assert_eq!(version, 1, "custom_labels_abi_version");
        Published {
            pid,
            labels: symbol("custom_labels_current_set"),
            record: symbol("otel_thread_ctx_v1"),
        }
    }

    /// In `library`, loaded at the start: the offsets its resolved TLS descriptors hold.
    fn in_library(pid: u32, library: &Path) -> Published {
        let base = module_base(pid, library);
        let descriptor = |name| {
            let at = tls_descriptor(library, name).unwrap_or_else(|| {
                panic!("{} has no TLS descriptor of {name}: built without the agent's fleet feature (GNU ld: see the build's warning)?", library.display())
            });
            // {resolver, argument}: a static TLS block's argument is its offset.
            word(pid, base + at + 8) as i64
        };
        Published {
            pid,
            labels: descriptor("custom_labels_current_set"),
            record: descriptor("otel_thread_ctx_v1"),
        }
    }

    /// The thread's custom labels (null keys skipped, the first of a key kept); `None` where its
    /// pointer is null.
    fn labels(&self, thread_pointer: u64) -> Option<Vec<(String, String)>> {
        let set = word(self.pid, thread_pointer.wrapping_add_signed(self.labels));
        if set == 0 {
            return None;
        }
        let words = read(self.pid, set, 24);
        let at = |i: usize| u64::from_ne_bytes(words[i * 8..i * 8 + 8].try_into().unwrap());
        let (storage, count) = (at(0), at(1));
        assert!(count <= 16, "{count} labels");
        let mut labels: Vec<(String, String)> = Vec::new();
        for index in 0..count {
            let label = read(self.pid, storage + index * 32, 32);
            let field = |i: usize| u64::from_ne_bytes(label[i * 8..i * 8 + 8].try_into().unwrap());
            if field(1) == 0
                || labels
                    .iter()
                    .any(|(k, _)| *k == string(self.pid, field(0), field(1)))
            {
                continue;
            }
            labels.push((
                string(self.pid, field(0), field(1)),
                string(self.pid, field(2), field(3)),
            ));
        }
        Some(labels)
    }

    /// The thread's OpenTelemetry record: `valid`, and its attributes `{key index, value}`;
    /// `None` where its pointer is null.
    fn record(&self, thread_pointer: u64) -> Option<(u8, Vec<(u8, String)>)> {
        let record = word(self.pid, thread_pointer.wrapping_add_signed(self.record));
        if record == 0 {
            return None;
        }
        let header = read(self.pid, record, 28);
        let size = u16::from_ne_bytes([header[26], header[27]]) as usize;
        assert!(size <= 612, "{size} bytes of attributes");
        let bytes = read(self.pid, record + 28, size);
        let mut attributes = Vec::new();
        let mut at = 0;
        while at + 2 <= bytes.len() {
            let (key, len) = (bytes[at], bytes[at + 1] as usize);
            let value = bytes
                .get(at + 2..at + 2 + len)
                .expect("an attribute within the record");
            attributes.push((key, String::from_utf8(value.to_vec()).unwrap()));
            at += 2 + len;
        }
        Some((header[24], attributes))
    }
}

/// Where `file` is loaded in `pid` (its mapping at file offset 0).
fn module_base(pid: u32, file: &Path) -> u64 {
    let file = std::fs::canonicalize(file).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = Path::new(fields.get(5)?);
            (path == file && fields[2] == "00000000")
                .then(|| u64::from_str_radix(fields[0].split('-').next().unwrap(), 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{} is not mapped in {pid}", file.display()))
}

/// A protobuf message's fields: number and value (varints as their 8 bytes, little-endian).
fn fields(mut bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let (byte, rest) = bytes.split_first().expect("a varint");
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let tag = varint(&mut bytes);
        let value = match tag & 7 {
            0 => varint(&mut bytes).to_le_bytes().to_vec(),
            2 => {
                let len = varint(&mut bytes) as usize;
                let (value, rest) = bytes.split_at(len);
                bytes = rest;
                value.to_vec()
            }
            other => panic!("wire type {other}"),
        };
        out.push((tag >> 3, value));
    }
    out
}

/// The process context's `threadlocal.*` attributes, by the specification: the mapping named
/// `OTEL_CTX`, its header (signature, version 2, payload size, a non-zero time, payload
/// pointer), its `ProcessContext` payload's attributes (field 2: key 1, `AnyValue` 2).
fn process_context(pid: u32) -> Vec<(String, Vec<String>)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = (maps.lines())
        .find(|line| line.contains("/memfd:OTEL_CTX") || line.contains("[anon:OTEL_CTX]"))
        .expect("a mapping named OTEL_CTX");
    let start = u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
    let header = read(pid, start, 32);
    assert_eq!(&header[..8], b"OTEL_CTX");
    assert_eq!(u32::from_ne_bytes(header[8..12].try_into().unwrap()), 2);
    let size = u32::from_ne_bytes(header[12..16].try_into().unwrap()) as usize;
    assert_ne!(u64::from_ne_bytes(header[16..24].try_into().unwrap()), 0);
    let payload = read(
        pid,
        u64::from_ne_bytes(header[24..32].try_into().unwrap()),
        size,
    );
    let text = |any: &[u8]| -> Vec<String> {
        fields(any)
            .into_iter()
            .flat_map(|(number, value)| match number {
                1 => vec![String::from_utf8(value).unwrap()],
                5 => fields(&value)
                    .into_iter()
                    .flat_map(|(_, any)| fields(&any))
                    .map(|(_, s)| String::from_utf8(s).unwrap())
                    .collect(),
                _ => vec![],
            })
            .collect()
    };
    fields(&payload)
        .into_iter()
        .filter(|(number, _)| *number == 2)
        .map(|(_, pair)| {
            let pair = fields(&pair);
            let key = String::from_utf8(pair[0].1.clone()).unwrap();
            (key, text(&pair[1].1))
        })
        .collect()
}

/// The longest start of `text` of at most [`MAX_VALUE`] bytes that ends between characters.
fn cut(text: &str) -> &str {
    let mut end = text.len().min(MAX_VALUE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What a thread marked `feature`/`instance` (`-`: nothing) must publish, in both formats.
fn assert_shows(published: &Published, thread_pointer: u64, feature: &str, instance: &str) {
    let labels = published.labels(thread_pointer);
    let record = published.record(thread_pointer);
    let step = format!("{feature} / {instance}");
    if feature == "-" {
        // Nothing: no pointer yet (a thread that never marked), or nothing behind it.
        assert!(
            labels.as_ref().is_none_or(|l| l.is_empty()),
            "{step}: {labels:?}"
        );
        assert!(
            record.as_ref().is_none_or(|(valid, _)| *valid == 0),
            "{step}: {record:?}"
        );
        return;
    }
    let labels = labels.expect("a label set");
    let (valid, attributes) = record.expect("a record");
    let expected = [(FEATURE_KEY, cut(feature)), (INSTANCE_KEY, cut(instance))];
    let expected: Vec<(String, String)> = (expected.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(labels, expected, "{step}");
    assert_eq!(valid, 1, "{step}");
    let values: Vec<(u8, String)> = (expected.iter().enumerate())
        .map(|(index, (_, value))| (index as u8, value.clone()))
        .collect();
    assert_eq!(attributes, values, "{step}");
}

/// A stepping program's output lines, with a deadline per line.
struct Steps {
    lines: Receiver<String>,
    input: ChildStdin,
}

impl Steps {
    fn new(child: &mut Guarded) -> Steps {
        let stdout = child.0.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let input = child.0.stdin.take().unwrap();
        Steps { lines, input }
    }

    fn line(&self) -> Option<String> {
        self.lines.recv_timeout(Duration::from_secs(20)).ok()
    }

    /// `thread NAME TID POINTER`: the name and the thread pointer.
    fn thread(&self) -> (String, u64) {
        let line = self.line().expect("a thread line");
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[0], "thread", "{line}");
        let pointer = u64::from_str_radix(fields[3].trim_start_matches("0x"), 16).unwrap();
        (fields[1].to_owned(), pointer)
    }

    /// The next step's feature and instance, `None` at the end.
    fn step(&self) -> Option<(String, String)> {
        let line = self.line()?;
        let rest = line
            .strip_prefix("step ")
            .unwrap_or_else(|| panic!("{line}"));
        let (feature, instance) = rest.split_once('\t').unwrap();
        Some((feature.to_owned(), instance.to_owned()))
    }

    fn next(&mut self) {
        let _ = self.input.write_all(b"next\n");
    }
}

fn spawn(command: &mut Command) -> Guarded {
    Guarded(
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Checks every step of a stepping program, and the process context; the number of steps.
fn check_steps(child: &mut Guarded, published: impl Fn(u32) -> Published, threads: usize) -> usize {
    let mut steps = Steps::new(child);
    let pointers: Vec<(String, u64)> = (0..threads).map(|_| steps.thread()).collect();
    let pid = child.pid();
    let mut count = 0;
    while let Some((feature, instance)) = steps.step() {
        let published = published(pid);
        assert_shows(&published, pointers[0].1, &feature, &instance);
        if let Some((name, pointer)) = pointers.get(1) {
            assert_eq!(name, "worker");
            assert_shows(&published, *pointer, "worker", "compact");
        }
        if count == 0 {
            let context = process_context(pid);
            let schema = (
                "threadlocal.schema_version".to_owned(),
                vec!["tlsdesc_v1_dev".to_owned()],
            );
            let keys = [FEATURE_KEY, INSTANCE_KEY].map(String::from).to_vec();
            let map = ("threadlocal.attribute_key_map".to_owned(), keys);
            assert_eq!(context, [schema, map]);
        }
        count += 1;
        steps.next();
    }
    assert!(child.wait_with_deadline(Duration::from_secs(20)).success());
    count
}

/// A Rust program built with the shim's `fleet` feature: each step's innermost mark that
/// counts (antimarks passed over, a location, an alternative, a boundary, a name cut to 53
/// bytes at a character boundary) is what both formats show, a worker thread its own mark.
#[test]
fn a_rust_programs_marks_are_published_in_the_fleets_formats() {
    let exe = build_apart("published", "the shim's fleet feature");
    let mut child = spawn(&mut Command::new(&exe));
    let steps = check_steps(&mut child, |pid| Published::in_executable(pid, &exe), 2);
    assert_eq!(steps, 10);
}

/// Stopped at random instants while it marks without pause (six marks in turn, more than a
/// thread keeps written, every other one nested), the program shows in each format either
/// nothing or one whole mark: never a label of one mark beside one of another, never a record
/// being written. (About half the instants show a mark: the marks are empty, so the changes
/// take much of the time; at least a fifth must, or the test saw nothing.)
#[test]
fn what_a_marking_thread_publishes_is_whole_at_any_instant() {
    let exe = build_apart("published", "the shim's fleet feature");
    let mut child = spawn(Command::new(&exe).args(["cycle", "20"]));
    let steps = Steps::new(&mut child);
    let (_, pointer) = steps.thread();
    let pid = child.pid();
    let published = Published::in_executable(pid, &exe);
    let known: Vec<(String, String)> = (0..6).map(|k| (format!("f{k}"), format!("i{k}"))).collect();
    let whole =
        |feature: &str, instance: &str| known.iter().any(|(f, i)| f == feature && i == instance);
    let (mut shown, mut snapshots) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    while snapshots < 400 && std::time::Instant::now() < deadline {
        // SAFETY: signals to the test's own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let stopped = std::time::Instant::now() + Duration::from_secs(5);
        while state_and_tracer(pid).0 != 'T' {
            assert!(
                std::time::Instant::now() < stopped,
                "the program did not stop"
            );
            std::thread::yield_now();
        }
        let labels = published.labels(pointer).unwrap_or_default();
        let record = published.record(pointer);
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        snapshots += 1;
        match labels.as_slice() {
            [] => {}
            [(fk, f), (ik, i)] if fk == FEATURE_KEY && ik == INSTANCE_KEY && whole(f, i) => {
                shown += 1
            }
            other => panic!("a label set of no one mark: {other:?}"),
        }
        match record {
            None => {}
            Some((1, attributes)) => match attributes.as_slice() {
                [(0, f), (1, i)] if whole(f, i) => {}
                other => panic!("a record of no one mark: {other:?}"),
            },
            Some((valid, attributes)) => {
                panic!("a record shown not valid ({valid}): {attributes:?}")
            }
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    eprintln!("{shown} of {snapshots} snapshots showed a mark");
    assert!(
        snapshots >= 100 && shown * 5 >= snapshots,
        "{shown} of {snapshots} showed a mark"
    );
}

/// fsprof profiling a program that publishes its marks counts them once: from its region, not
/// again from the labels (no feature named by a published key), within 2.5 points of the
/// program's own timing.
#[test]
fn fsprof_counts_a_publishing_programs_marks_once() {
    let _serial = serial();
    let exe = build_apart("published", "the shim's fleet feature");
    let dir = tempdir();
    let output = Command::new(fsprof())
        .args(["run", "--rate", ACCURACY_RATE, "-o"])
        .arg(dir.path().join("out"))
        .arg("--")
        .arg(&exe)
        .args(["spin", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let truth: Vec<f64> = (stdout.lines())
        .find_map(|line| line.strip_prefix("truth "))
        .expect("the program's truth")
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let report = report_json(&dir.path().join("out"));
    for key in [FEATURE_KEY, INSTANCE_KEY] {
        assert!(
            feature(&report, key).is_none(),
            "{key}: {}",
            report["features"]
        );
    }
    let expected = truth[0] * 100.0 / truth[1];
    let parsing = percent(&report, "parsing");
    assert!(
        (parsing - expected).abs() <= 2.5,
        "parsing {parsing:.2}% against {expected:.2}% measured"
    );
}

/// The agent `fsprof run --agent` preloads publishes a C program's marks with
/// FSPROF_FLEET_LABELS=1, through TLS descriptors in the library (a call-site mark leaves the
/// mark around it shown); without the variable, nothing is published.
#[test]
fn the_agent_publishes_a_c_programs_marks_when_asked() {
    let dir = tempdir();
    let agent = fsprof_agent();
    let exe = dir.path().join("fleet");
    let source = c_sources().join("fleet.c");
    let include = format!("-I{}", agent_include().display());
    let link = format!("-L{}", agent.parent().unwrap().display());
    let built = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", &include])
        .arg(&source)
        .args([&link, "-lfsprof_agent", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut child = spawn(
        Command::new(&exe)
            .env("LD_PRELOAD", &agent)
            .env("LD_LIBRARY_PATH", agent.parent().unwrap())
            .env("FSPROF_FLEET_LABELS", "1"),
    );
    let steps = check_steps(&mut child, |pid| Published::in_library(pid, &agent), 1);
    assert_eq!(steps, 9);

    let mut quiet = spawn(
        Command::new(&exe)
            .env("LD_PRELOAD", &agent)
            .env("LD_LIBRARY_PATH", agent.parent().unwrap()),
    );
    let mut steps = Steps::new(&mut quiet);
    let (_, pointer) = steps.thread();
    let published = Published::in_library(quiet.pid(), &agent);
    let mut count = 0;
    while let Some((feature, _)) = steps.step() {
        assert_eq!(published.labels(pointer), None, "{feature}");
        assert_eq!(published.record(pointer), None, "{feature}");
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", quiet.pid())).unwrap();
        assert!(!maps.contains("OTEL_CTX"), "{feature}");
        count += 1;
        steps.next();
    }
    assert_eq!(count, 9);
}

/// The agent fsprof carries (`fsprof agent`), built with its `fleet` feature.
fn fsprof_agent() -> PathBuf {
    let output = Command::new(fsprof()).arg("agent").output().unwrap();
    assert!(output.status.success());
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}
