//! A Rust program with known output, allocation and wait behaviour and no marks of its own, for
//! the end-to-end test of the agent's built-in features (the Rust twin of `tests/c/builtins.c`).
//!
//! `builtins SECONDS --truth FILE`: for SECONDS, one thread runs a random mix of `write_all` of
//! 1 MiB to a temporary file (`write`: output), zeroed vectors of 256 KiB made and dropped
//! (`calloc` and `free`: allocation), `Condvar::wait_timeout` of 100–400 µs that nobody
//! notifies (a futex wait through `syscall`, in `Condvar`: waiting, not locks), and unmarked
//! spinning; it times each and writes the truth as JSON (`{"total_ms": T, "features":
//! {"output": {"ms": M, "instances": {}}, ...}, "sites": {"output": [LINE], ...}}`), the loop's
//! wall time being the total (the thread never blocks outside those), with the lines of this
//! file that make each feature's calls (through the standard library, which the built-in
//! instances must see through).

use std::io::{Seek, Write};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The lines of this file that make each feature's calls.
#[derive(Default)]
struct Sites {
    output: u32,
    allocation: [u32; 2],
    waiting: u32,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert!(
        args.len() == 4 && args[2] == "--truth",
        "usage: builtins SECONDS --truth FILE"
    );
    let run_for = Duration::from_secs_f64(args[1].parse().expect("seconds"));
    let mut rng = fsprof_tests::Rng::new(11);
    let path = std::env::temp_dir().join(format!("fsprof-builtins-rs-{}", std::process::id()));
    let mut file = std::fs::File::create(&path).expect("temporary file");
    let _ = std::fs::remove_file(&path);
    let chunk = vec![b'x'; 1 << 20];
    let (mutex, condvar) = (Mutex::new(()), Condvar::new());
    let (mut output, mut allocation, mut waiting) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut sites = Sites::default();
    let start = Instant::now();
    while start.elapsed() < run_for {
        match rng.below(4) {
            0 => {
                let t0 = Instant::now();
                let line = line!() + 1;
                file.write_all(&chunk).expect("write");
                sites.output = line;
                output += t0.elapsed();
                file.rewind().expect("rewind");
            }
            1 => {
                for _ in 0..8 {
                    let t0 = Instant::now();
                    let line = line!() + 1;
                    let zeroed = std::hint::black_box(vec![0u8; 256 * 1024]);
                    let t1 = Instant::now();
                    sites.allocation = [line, line!() + 1];
                    drop(zeroed);
                    allocation += t1 - t0 + t1.elapsed();
                }
            }
            2 => {
                let guard = mutex.lock().expect("lock");
                let wait = rng.micros(100, 400);
                let t0 = Instant::now();
                let line = line!() + 1;
                let _unused = condvar.wait_timeout(guard, wait).expect("wait");
                sites.waiting = line;
                waiting += t0.elapsed();
            }
            _ => fsprof_tests::spin(rng.micros(200, 800)),
        }
    }
    let total = start.elapsed();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let truth = serde_json::json!({
        "total_ms": ms(total),
        "features": {
            "output": {"ms": ms(output), "instances": {}},
            "allocation": {"ms": ms(allocation), "instances": {}},
            "waiting": {"ms": ms(waiting), "instances": {}},
        },
        "sites": {
            "output": [sites.output],
            "allocation": sites.allocation,
            "waiting": [sites.waiting],
        },
    });
    std::fs::write(&args[3], truth.to_string()).expect("truth file");
}
