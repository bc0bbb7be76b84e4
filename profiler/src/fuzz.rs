//! Arbitrary input for the tests of the readers that take bytes from the target or from files
//! (perf records, region slots, strings behind mark addresses, ELF and DWARF): how many cases to
//! run, and random byte strings and mutations of valid inputs. `FSPROF_FUZZ_CASES` scales every
//! harness (a bench run sets it to millions; the suite runs the defaults). Tests only.

/// How many cases a harness runs: `default`, times `FSPROF_FUZZ_CASES / 1000` when that is set
/// (so `FSPROF_FUZZ_CASES=1000000` runs a thousand times the default).
pub fn cases(default: usize) -> usize {
    match std::env::var("FSPROF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(scale) => default.saturating_mul(scale) / 1000,
        None => default,
    }
    .max(1)
}

/// `len` random bytes.
pub fn bytes(rng: &mut fastrand::Rng, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    rng.fill(&mut out);
    out
}

/// `valid` with a few random changes: bytes flipped, and sometimes a random 8-byte word (a length
/// or an address) written somewhere, or the tail cut.
pub fn mutate(rng: &mut fastrand::Rng, valid: &[u8]) -> Vec<u8> {
    let mut out = valid.to_vec();
    if out.is_empty() {
        return out;
    }
    for _ in 0..rng.usize(1..8) {
        let at = rng.usize(..out.len());
        out[at] = rng.u8(..);
    }
    if rng.bool() && out.len() >= 8 {
        let at = rng.usize(..=out.len() - 8);
        let word = match rng.u8(..4) {
            0 => u64::MAX,
            1 => rng.u64(..1 << 20),
            2 => 1 << rng.u32(..64),
            _ => rng.u64(..),
        };
        out[at..at + 8].copy_from_slice(&word.to_ne_bytes());
    }
    if rng.u8(..8) == 0 {
        out.truncate(rng.usize(..=out.len()));
    }
    out
}
