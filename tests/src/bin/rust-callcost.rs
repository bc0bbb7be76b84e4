//! What an interposer (`LD_PRELOAD=libfsprof_agent.so`) adds to the libc calls Rust's standard
//! library makes, for tests/benches/agent-overhead.sh: tests/c/callcost.c's method, with the
//! standard library as the caller.
//!
//! For each case, batches through the standard library (which calls the definition the program
//! binds to: the interposer's when one is preloaded) alternate with batches calling libc's own
//! definition (`dlsym` on libc) directly; each round's difference is paired. Without a preload
//! the difference is the standard library's own work around the call, so the script subtracts
//! the median difference of runs without a preload from that of runs with one. Prints, like
//! callcost.c, one line per case: `case libc-ns bound-ns added-ns q25 q75`.
//!
//! Cases: `Box` of 32 bytes made and dropped (`malloc` and `free`), a 1-byte `write` to
//! /dev/null through `std::fs::File`, and `Condvar::notify_one` with no waiter (a futex wake
//! through `syscall`, as std makes it).

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

const ROUNDS: usize = 400;

fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[(q * (sorted.len() - 1) as f64) as usize]
}

/// Runs `calls` iterations of `body(false)` (libc directly) and `body(true)` (through std) per
/// round, in alternating order, and prints the case's line.
fn case(label: &str, calls: usize, mut body: impl FnMut(bool)) {
    let mut times = [vec![0.0; ROUNDS], vec![0.0; ROUNDS]];
    let mut added = vec![0.0; ROUNDS];
    for round in 0..ROUNDS {
        for k in 0..2 {
            let which = (k + round) % 2;
            let start = Instant::now();
            for _ in 0..calls {
                body(which == 1);
            }
            times[which][round] = start.elapsed().as_nanos() as f64 / calls as f64;
        }
        added[round] = times[1][round] - times[0][round];
    }
    println!(
        "{label:<12} {:8.2} {:8.2} {:+7.2} {:+7.2} {:+7.2}",
        quantile(&times[0], 0.5),
        quantile(&times[1], 0.5),
        quantile(&added, 0.5),
        quantile(&added, 0.25),
        quantile(&added, 0.75)
    );
}

/// libc's own definition of `name`.
fn libc_definition(name: &std::ffi::CStr) -> usize {
    // SAFETY: dlopen with RTLD_NOLOAD of a library the process has loaded; dlsym of a name.
    let address = unsafe {
        let handle = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!handle.is_null(), "libc.so.6 is not loaded");
        libc::dlsym(handle, name.as_ptr())
    };
    assert!(!address.is_null(), "no {name:?} in libc");
    address as usize
}

fn main() {
    type Malloc = unsafe extern "C" fn(usize) -> *mut libc::c_void;
    type Free = unsafe extern "C" fn(*mut libc::c_void);
    type WriteFn = unsafe extern "C" fn(i32, *const libc::c_void, usize) -> isize;
    type Syscall = unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;
    // SAFETY: each address is libc's definition of the function of that type.
    let (malloc, free, write, syscall) = unsafe {
        (
            std::mem::transmute::<usize, Malloc>(libc_definition(c"malloc")),
            std::mem::transmute::<usize, Free>(libc_definition(c"free")),
            std::mem::transmute::<usize, WriteFn>(libc_definition(c"write")),
            std::mem::transmute::<usize, Syscall>(libc_definition(c"syscall")),
        )
    };
    case("rust-alloc", 100_000, |std| {
        if std {
            drop(black_box(Box::new([0u8; 32])));
        } else {
            // SAFETY: a malloc'd pointer freed once.
            unsafe { free(black_box(malloc(32))) };
        }
    });
    let mut file = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    case("rust-write", 5000, |std| {
        if std {
            assert_eq!(file.write(b"x").unwrap(), 1);
        } else {
            // SAFETY: writes one byte from a static to an open descriptor.
            assert_eq!(unsafe { write(fd, b"x".as_ptr().cast(), 1) }, 1);
        }
    });
    let condvar = std::sync::Condvar::new();
    let word = 0u32;
    case("rust-futex", 5000, |std| {
        if std {
            condvar.notify_one();
        } else {
            // SAFETY: a private futex wake of a word nobody waits on.
            let woken = unsafe {
                syscall(
                    libc::SYS_futex,
                    &word as *const u32,
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                )
            };
            assert_eq!(woken, 0);
        }
    });
}
