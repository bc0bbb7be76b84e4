//! A parser with ordered choice, marked with `mark_alternative`, for the backtracking analysis:
//! its input is a stream of tokens of 5 to 10 characters, seven words for every three numbers,
//! and `item` tries its branches in order: `number` (branch 0), then `word` (branch 1). Trying a
//! branch costs `--us-per-char` (400 µs by default) per character: the whole token when it
//! matches, half of it when it fails, and the parser then tries the next branch at the same
//! offset. With `--words-first` the branches are tried the other way round (the fix the
//! backtracking view suggests).
//!
//!   parser SECONDS --truth FILE [--words-first] [--us-per-char N]
//!
//! The truth: the `parse` feature's instances (`item, branch N`: all the time in each branch),
//! and per branch the time wasted in attempts that failed (`extra.wasted item N`) and all its time
//! (`extra.all item N`), as the branches measured themselves. Also the tokens parsed per second
//! (`extra.tokens_per_s`), for the case study's speedup.

use fsprof_shim::Feature;
use fsprof_tests::{spin, Rng, Truth};
use std::time::{Duration, Instant};

static PARSE: Feature = Feature::new("parse");

/// A token of the input: a number or a word, and its length.
#[derive(Clone, Copy, PartialEq)]
enum Token {
    Number(u64),
    Word(u64),
}

/// What each branch (by its place in the order tried) measured: all its time, and the time of
/// its attempts that failed.
#[derive(Default)]
struct Branches {
    all: [Duration; 2],
    wasted: [Duration; 2],
}

/// Tries one branch of `item` at `offset`: matches `token` if it is of the branch's kind (0 a
/// number, 1 a word). Costs `per_char` per character scanned (the whole token when it matches,
/// half of it when it fails).
fn try_branch(
    branches: &mut Branches,
    per_char: Duration,
    (kind, branch): (u32, u32),
    offset: u64,
    token: Token,
) -> bool {
    let (matches, length) = match token {
        Token::Number(length) => (kind == 0, length),
        Token::Word(length) => (kind == 1, length),
    };
    let scanned = if matches { length } else { length.div_ceil(2) };
    let took = {
        let _m = PARSE.mark_alternative("item", branch, offset);
        let start = Instant::now();
        spin(per_char * scanned as u32);
        start.elapsed()
    };
    branches.all[branch as usize] += took;
    if !matches {
        branches.wasted[branch as usize] += took;
    }
    matches
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args[2] != "--truth" {
        eprintln!("usage: parser SECONDS --truth FILE [--words-first]");
        std::process::exit(2);
    }
    let run_for = Duration::from_secs_f64(args[1].parse().expect("SECONDS"));
    let words_first = args[4..].iter().any(|a| a == "--words-first");
    let per_char = args[4..]
        .iter()
        .position(|a| a == "--us-per-char")
        .map_or(400, |at| args[4 + at + 1].parse().expect("--us-per-char N"));
    let per_char = Duration::from_micros(per_char);
    // Branch order: the kinds (0 number, 1 word) in the order tried.
    let order: [u32; 2] = if words_first { [1, 0] } else { [0, 1] };
    let mut rng = Rng::new(11);
    let input: Vec<Token> = (0..10_000)
        .map(|_| {
            let length = 5 + rng.below(6) as u64;
            if rng.below(10) < 3 {
                Token::Number(length)
            } else {
                Token::Word(length)
            }
        })
        .collect();
    let mut branches = Branches::default();
    let start = Instant::now();
    let mut tokens = 0u64;
    let mut offset = 0u64;
    'parse: loop {
        for token in &input {
            if start.elapsed() >= run_for {
                break 'parse;
            }
            for (branch, kind) in order.iter().enumerate() {
                let branch = (*kind, branch as u32);
                if try_branch(&mut branches, per_char, branch, offset, *token) {
                    break;
                }
            }
            offset += match token {
                Token::Number(length) | Token::Word(length) => *length,
            };
            tokens += 1;
        }
    }
    let elapsed = start.elapsed();
    let truth = Truth::default();
    truth.active(elapsed);
    for branch in 0..2 {
        let instance = format!("item, branch {branch}");
        truth.feature("parse", &instance, branches.all[branch]);
        let ms = |time: Duration| time.as_secs_f64() * 1e3;
        truth.extra(&format!("all item {branch}"), ms(branches.all[branch]));
        truth.extra(
            &format!("wasted item {branch}"),
            ms(branches.wasted[branch]),
        );
    }
    truth.extra("tokens_per_s", tokens as f64 / elapsed.as_secs_f64());
    std::fs::write(&args[3], truth.to_json().to_string()).unwrap();
}
