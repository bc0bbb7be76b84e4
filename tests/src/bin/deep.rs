//! Deep recursion, for the tests of whole native stacks: `deep SCENARIO SECONDS --truth FILE`.
//!
//! Each descent recurses to a random depth from 400 to 2,400 frames (each frame holds a
//! 160-byte buffer: about 200 bytes of stack, so up to about 480 KiB), marks `leaf` at the
//! bottom and works there for 0.2 to 1 ms, then returns.
//! * `leaves`: descents one after the other, each leaf's mark with the instance `leaf`;
//! * `roots`: the descents run under `left_root` or `right_root`, which take turns every 20 to
//!   40 ms; each leaf's mark says which (`left`, `right`). A stack completed from the wrong
//!   phase would draw a leaf under the other root;
//! * `tenk`: as `leaves`, 9,000 to 10,000 frames deep (about 2 MiB of stack), at one of five
//!   depths (9,000, 9,250, ... 10,000): a profile keeps at most 16 M native frames
//!   (`profile/native_table.rs`), and a thousand depths times the leaf's few dozen stacks
//!   (clock reads, the loop) outgrew that within two seconds;
//! * `paths`: as a compiler's passes do, each descent goes down another way: 40 to 90 levels,
//!   each one of four functions (`step_a` to `step_d`, frames of 256 to 1,536 bytes: 30 to 80
//!   KiB of stack) chosen at random, so that no earlier stack is this one beyond the top 16 KiB;
//!   the leaf's mark names the two outermost levels (`ab`: `step_a` then `step_b`), which a
//!   stack drawn from the wrong descent would not match.
//!
//! Every scenario runs in a frame of 600 KiB, as rustc's driver does (its `run_compiler`
//! closure holds 527 KiB): a frame that large is unwound by framehop's slower path (its cached
//! rules hold sizes up to 512 KiB), which once went wrong on perf's copies (see `unwind.rs`).
//!
//! The truth: the thread's whole time (it is always busy), and the leaves' time per instance.

use fsprof_shim::Feature;
use fsprof_tests::Truth;
use std::hint::black_box;
use std::time::{Duration, Instant};

static LEAF: Feature = Feature::new("leaf");

/// The depths of `leaves` and `roots`, and of `tenk`.
const DEPTHS: (u32, u32) = (400, 2_400);
const TEN_THOUSAND: (u32, u32) = (9_000, 10_000);
/// `tenk`'s depths step by this much from the first of [`TEN_THOUSAND`].
const TEN_THOUSAND_STEP: u32 = 250;

/// A small random number generator (xorshift), seeded: runs are alike.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn depth(&mut self, (shallowest, deepest): (u32, u32)) -> u32 {
        shallowest + self.below(u64::from(deepest - shallowest) + 1) as u32
    }

    fn work(&mut self) -> Duration {
        Duration::from_micros(200 + self.below(801))
    }
}

fn spin(time: Duration) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        black_box(0);
    }
}

/// Recurses `depth` frames, then marks `leaf` with `side` and works for `work`.
#[inline(never)]
fn descend(depth: u32, work: Duration, truth: &Truth, side: &'static str) -> u64 {
    let mut pad = [depth as u8; 160];
    black_box(&mut pad);
    if depth == 0 {
        let start = Instant::now();
        {
            let _m = LEAF.mark_with(side);
            spin(work);
        }
        truth.feature("leaf", side, start.elapsed());
        return pad[0] as u64;
    }
    let below = descend(depth - 1, work, truth, side);
    black_box(pad[(depth % 160) as usize] as u64 + below)
}

#[inline(never)]
fn left_root(until: Instant, rng: &mut Rng, truth: &Truth) -> u64 {
    let mut sum = black_box(1);
    while Instant::now() < until {
        sum += descend(rng.depth(DEPTHS), rng.work(), truth, "left");
    }
    sum
}

#[inline(never)]
fn right_root(until: Instant, rng: &mut Rng, truth: &Truth) -> u64 {
    let mut sum = black_box(2);
    while Instant::now() < until {
        sum += descend(rng.depth(DEPTHS), rng.work(), truth, "right");
    }
    sum
}

/// Runs `body` in a frame of 600 KiB.
#[inline(never)]
fn in_a_large_frame(body: impl FnOnce() -> u64) -> u64 {
    let mut large = [0u8; 600 * 1024];
    black_box(&mut large);
    let result = body();
    black_box(&large);
    result + u64::from(large[7])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: deep (leaves|roots|tenk|paths) SECONDS --truth FILE";
    let scenario = args.next().expect(usage);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).expect(usage);
    let truth_path = match (args.next().as_deref(), args.next()) {
        (Some("--truth"), Some(path)) => path,
        _ => panic!("{usage}"),
    };
    let truth = Truth::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let sum = in_a_large_frame(|| run(&scenario, end, &mut rng, &truth));
    black_box(sum);
    truth.active(start.elapsed());
    let tmp = format!("{truth_path}.tmp");
    std::fs::write(&tmp, truth.to_json().to_string()).unwrap();
    std::fs::rename(tmp, truth_path).unwrap();
}

/// Runs `scenario` until `end`.
fn run(scenario: &str, end: Instant, rng: &mut Rng, truth: &Truth) -> u64 {
    let mut sum = 0;
    match scenario {
        "leaves" | "tenk" => {
            let depth = |rng: &mut Rng| match scenario {
                "tenk" => {
                    let (shallowest, deepest) = TEN_THOUSAND;
                    let steps = (deepest - shallowest) / TEN_THOUSAND_STEP;
                    shallowest + TEN_THOUSAND_STEP * rng.below(u64::from(steps) + 1) as u32
                }
                _ => rng.depth(DEPTHS),
            };
            while Instant::now() < end {
                sum += descend(depth(rng), rng.work(), truth, "leaf");
            }
        }
        "roots" => {
            let mut left = true;
            while Instant::now() < end {
                let phase = Duration::from_millis(20 + rng.below(21));
                let until = (Instant::now() + phase).min(end);
                sum += if left {
                    left_root(until, rng, truth)
                } else {
                    right_root(until, rng, truth)
                };
                left = !left;
            }
        }
        "paths" => {
            while Instant::now() < end {
                let levels = 40 + rng.below(51) as u32;
                let outer = [rng.below(4) as usize, rng.below(4) as usize];
                let leaf = Leaf {
                    work: rng.work(),
                    name: PATHS[outer[0] * 4 + outer[1]],
                    outer,
                    levels,
                    truth,
                };
                sum += go(levels, rng, &leaf);
            }
        }
        _ => panic!("unknown scenario {scenario}"),
    }
    sum
}

/// `paths`: the leaf's mark, by the two outermost levels' functions.
const PATHS: [&str; 16] = [
    "aa", "ab", "ac", "ad", "ba", "bb", "bc", "bd", "ca", "cb", "cc", "cd", "da", "db", "dc", "dd",
];

/// A descent of `paths`: its depth, its two outermost levels, its leaf's work and mark.
struct Leaf<'a> {
    work: Duration,
    name: &'static str,
    outer: [usize; 2],
    levels: u32,
    truth: &'a Truth,
}

/// The next level down (`depth` levels left): at the two outermost, the descent's own
/// functions; below, one at random; at the bottom, the leaf.
#[inline(always)]
fn go(depth: u32, rng: &mut Rng, leaf: &Leaf) -> u64 {
    if depth == 0 {
        let start = Instant::now();
        {
            let _m = LEAF.mark_with(leaf.name);
            spin(leaf.work);
        }
        leaf.truth.feature("leaf", leaf.name, start.elapsed());
        return 1;
    }
    let level = (leaf.levels - depth) as usize;
    let choice = match level {
        0 | 1 => leaf.outer[level],
        _ => rng.below(4) as usize,
    };
    match choice {
        0 => step_a(depth - 1, rng, leaf),
        1 => step_b(depth - 1, rng, leaf),
        2 => step_c(depth - 1, rng, leaf),
        _ => step_d(depth - 1, rng, leaf),
    }
}

macro_rules! step {
    ($name:ident, $bytes:expr) => {
        #[inline(never)]
        fn $name(depth: u32, rng: &mut Rng, leaf: &Leaf) -> u64 {
            let mut pad = [depth as u8; $bytes];
            black_box(&mut pad);
            let below = go(depth, rng, leaf);
            black_box(pad[(depth as usize) % $bytes] as u64 + below)
        }
    };
}

step!(step_a, 256);
step!(step_b, 640);
step!(step_c, 1024);
step!(step_d, 1536);
