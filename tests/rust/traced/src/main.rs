//! traced: a Rust program with no fsprof shim that publishes an OpenTelemetry thread context
//! with Datadog's `libdd-otel-thread-ctx` crate (OTEP 4947, as the OpenTelemetry eBPF
//! profiler reads it), updating its thread's record in place as the crate's simplest pattern
//! does: `http.route=GET /a` with `tenant=acme`, `http.route=GET /b`, and none (the record
//! detached), each timed by the program by its work (CPU time and waits for a CPU). The crate
//! writes the local root span id first in every record (key index 0, as libdatadog does); the
//! keys are named by the process context (OTEP 4719), which the program publishes here as the
//! specification's reference writer does (an SDK's job: the crate does not).
//!
//!   traced SECONDS --truth FILE
//!
//! The truth, as `tests/c/labels.c` writes it: total_ms, and per key its time and per value
//! its time.

use libdd_otel_thread_ctx::linux::ThreadContext;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The keys, by index: the crate's local root span id first.
const KEYS: [&str; 3] = ["datadog.local_root_span_id", "http.route", "tenant"];

/// The calling thread's CPU time plus its waits for a CPU (`/proc/thread-self/schedstat`'s
/// second number), as `tests/rust/labelled` measures it.
fn work() -> Duration {
    let mut cpu = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut cpu) };
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let waiting = (text.split_whitespace().nth(1)).and_then(|n| n.parse().ok());
    Duration::new(cpu.tv_sec as u64, cpu.tv_nsec as u32) + Duration::from_nanos(waiting.unwrap_or(0))
}

/// Busy for `time`; returns the work it took ([`work`]).
fn busy(time: Duration) -> Duration {
    let (start, before) = (Instant::now(), work());
    let mut x = 1u64;
    while start.elapsed() < time {
        for i in 0..1000 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
    }
    black_box(x);
    work().saturating_sub(before)
}

/// Protobuf: field `field`, length-delimited, holding `inner`.
fn field(field: u8, inner: &[u8]) -> Vec<u8> {
    let mut out = vec![field << 3 | 2];
    let mut len = inner.len();
    while len >= 0x80 {
        out.push(len as u8 | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(inner);
    out
}

/// A `KeyValue` attribute of a `ProcessContext` (field 2) whose `AnyValue` is `value`.
fn attribute(key: &str, value: &[u8]) -> Vec<u8> {
    field(2, &[field(1, key.as_bytes()), field(2, value)].concat())
}

/// Publishes the process context (OTEP 4719): a memfd mapping named OTEL_CTX whose 32-byte
/// header points to the payload, its time written last.
fn publish_process_context() {
    let string = |text: &str| field(1, text.as_bytes());
    let names: Vec<u8> = KEYS.iter().flat_map(|k| field(1, &string(k))).collect();
    let payload = [
        field(1, &field(1, &[field(1, b"service.name"), field(2, &string("traced"))].concat())),
        attribute("threadlocal.schema_version", &string("tlsdesc_v1_dev")),
        attribute("threadlocal.attribute_key_map", &field(5, &names)),
    ]
    .concat()
    .leak();
    // SAFETY: plain system calls on memory this function maps and owns from now on.
    unsafe {
        let fd = libc::memfd_create(c"OTEL_CTX".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0 && libc::ftruncate(fd, 4096) == 0, "memfd_create");
        let header = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            fd,
            0,
        ) as *mut u8;
        assert!(header != libc::MAP_FAILED as *mut u8, "mmap");
        libc::close(fd);
        libc::madvise(header.cast(), 4096, libc::MADV_DONTFORK);
        let mut bytes = b"OTEL_CTX".to_vec();
        bytes.extend(2u32.to_ne_bytes());
        bytes.extend((payload.len() as u32).to_ne_bytes());
        bytes.extend(0u64.to_ne_bytes());
        bytes.extend((payload.as_ptr() as u64).to_ne_bytes());
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), header, bytes.len());
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now);
        let published = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
        std::ptr::write_volatile(header.add(16).cast::<u64>(), published);
        libc::prctl(0x5356_4d41, 0, header, 4096, c"OTEL_CTX".as_ptr());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 || args[2] != "--truth" {
        eprintln!("usage: traced SECONDS --truth FILE");
        std::process::exit(2);
    }
    let seconds: f64 = args[1].parse().expect("SECONDS");
    publish_process_context();
    let (a_root, b_root) = ([0x0a; 8], [0x0b; 8]);
    let (mut a, mut b, mut none) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (start, before) = (Instant::now(), work());
    let mut span = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        span += 1;
        let trace = [(span % 251) as u8; 16];
        let attrs: &[(u8, &str)] = &[(1, "GET /a"), (2, "acme")];
        ThreadContext::update(trace, span.to_be_bytes(), 1, a_root, attrs);
        a += busy(Duration::from_millis(3));
        ThreadContext::update(trace, span.to_be_bytes(), 1, b_root, &[(1, "GET /b")]);
        b += busy(Duration::from_millis(1));
        drop(ThreadContext::detach());
        none += busy(Duration::from_millis(1));
    }
    let total = work().saturating_sub(before);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let truth = serde_json::json!({
        "total_ms": ms(total),
        "features": {
            "http.route": {"ms": ms(a + b), "instances": {"GET /a": ms(a), "GET /b": ms(b)}},
            "tenant": {"ms": ms(a), "instances": {"acme": ms(a)}},
            "datadog.local_root_span_id": {"ms": ms(a + b), "instances": {
                "0a0a0a0a0a0a0a0a": ms(a), "0b0b0b0b0b0b0b0b": ms(b)}},
        },
        "extra": {"unlabelled_ms": ms(none)},
    });
    std::fs::write(&args[3], truth.to_string()).expect("truth");
}
