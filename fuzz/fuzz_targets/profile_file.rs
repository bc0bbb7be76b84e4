//! A profile file, loaded and rendered in every format (`fsprof::fuzzing::profile_file`).
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    fsprof::fuzzing::profile_file(bytes);
});
