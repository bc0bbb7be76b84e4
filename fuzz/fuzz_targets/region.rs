//! A target's region read whole: header, slots, histories (`fsprof::fuzzing::region`).
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    fsprof::fuzzing::region(bytes);
});
