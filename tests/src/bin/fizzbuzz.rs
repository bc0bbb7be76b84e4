//! The bundled demo: FizzBuzz with feature marks, as in the paper's first example.
//!
//! `fizzbuzz [N]` prints FizzBuzz for 0..N (default 10,000,000, as in the paper) to stdout through a deliberately
//! unbuffered writer, so output is expensive. Two features are marked: `output` (each call site is an
//! instance) and `formatting` (turning numbers into text). Run it under fsprof:
//!
//! ```text
//! fsprof run -- target/release/fizzbuzz > /dev/null
//! ```

use fsprof_shim::Feature;
use std::fmt::Write as _;
use std::io::Write;

static OUTPUT: Feature = Feature::new("output");
static FORMATTING: Feature = Feature::new("formatting");

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    // Unbuffered on purpose: every line is a write(2), the cost the profile should show.
    let mut out = std::io::stdout().lock();
    let mut line = String::new();
    for i in 0..n {
        if i % 15 == 0 {
            let _m = OUTPUT.mark();
            let _ = out.write_all(b"FizzBuzz\n");
        } else if i % 5 == 0 {
            let _m = OUTPUT.mark();
            let _ = out.write_all(b"Buzz\n");
        } else if i % 3 == 0 {
            let _m = OUTPUT.mark();
            let _ = out.write_all(b"Fizz\n");
        } else {
            line.clear();
            FORMATTING
                .scope(|| writeln!(line, "{i}"))
                .expect("formatting into a String");
            let _m = OUTPUT.mark();
            let _ = out.write_all(line.as_bytes());
        }
    }
}
