//! Which code is the language runtime's rather than the program's: libc and the other libraries
//! of the C runtime (and its start-up code linked into the executable), the dynamic loader, the agent, Rust's standard library (`std`, `core`,
//! `alloc`, and what of them is inlined or instantiated in the program) and C++'s (`std::`,
//! `__gnu_cxx::`, libstdc++).
//!
//! A built-in feature's instance is the call site in the program's own code: the first frame
//! outside the runtime, going outward from the interposed call (`call_sites.rs`). This module
//! only classifies names and paths; it reads nothing and finds no frames.
//!
//! The rules are textual, and so heuristic at the edges: a module is the runtime's by its file
//! name; a function by its demangled name (for `<T as Trait>::f` and `<T>::f`, by the crate or
//! namespace of `T`, the type the code belongs to) or, when DWARF gives one, by its source file
//! (the Rust toolchain's sources live under `/rustc/<commit>/library/`, its vendored
//! dependencies under `/rust/deps/`). Not handled: other languages' runtimes, a program whose own
//! crate is named `std`, `core` or `alloc`, and a stripped executable (no names: all its code
//! counts as the program's).

/// Whether the module with this path (as `/proc/PID/maps` shows it) is one of the runtime's.
pub fn is_runtime_module(path: &str) -> bool {
    if path == "[vdso]" {
        return true;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split(".so").next().unwrap_or(name);
    name.contains(".so")
        && (matches!(
            stem,
            "libc"
                | "libm"
                | "libpthread"
                | "libdl"
                | "librt"
                | "libresolv"
                | "libstdc++"
                | "libgcc_s"
                | "libc++"
                | "libc++abi"
                | "libfsprof_agent"
        ) || stem.starts_with("ld-linux")
            || stem.starts_with("ld-musl")
            || stem.starts_with("libc.musl")
            || stem == "ld")
}

/// Whether a function of this (demangled) name, from this source file if known, is the
/// runtime's.
pub fn is_runtime_function(name: &str, file: Option<&str>) -> bool {
    if let Some(file) = file {
        if is_runtime_source(file) {
            return true;
        }
    }
    let name = name.trim_start();
    if RUNTIME_SYMBOLS
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || C_RUNTIME_ENTRIES.contains(&name)
    {
        return true;
    }
    match owner(name) {
        Some(owner) => RUNTIME_NAMESPACES.contains(&owner),
        None => false,
    }
}

/// Whether a runtime function (demangled name) waits for another thread to signal it rather
/// than for a lock another thread holds: Rust's condition variables (and so its barriers), its
/// thread parking (and so its channels and `thread::park`), and its `Once` waiting for another
/// thread's initialisation.
pub fn is_wait_primitive(name: &str) -> bool {
    [
        "Condvar",
        "Parker",
        "thread_parking",
        "std::thread::park",
        "Once",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// Whether a source file is the Rust toolchain's (its standard library, or a crate it vendors).
fn is_runtime_source(file: &str) -> bool {
    file.starts_with("/rustc/")
        || file.starts_with("library/")
        || file.contains("/rust/deps/")
        || file.starts_with("/rust/deps/")
}

/// Top-level crates and namespaces of the runtimes.
const RUNTIME_NAMESPACES: [&str; 8] = [
    "std",
    "core",
    "alloc",
    "hashbrown",
    "std_detect",
    "rustc_demangle",
    "__gnu_cxx",
    "__cxxabiv1",
];

/// Names of runtime functions outside any namespace: Rust's allocator shims and entry glue.
const RUNTIME_SYMBOLS: [&str; 5] = ["__rust_", "__rdl_", "__rg_", "__rustc", "__cxa_"];

/// The C runtime's start-up and tear-down code that the linker puts into every executable
/// (crt1.o, crti.o, and glibc before 2.34 its `__libc_csu_*`): never a call site of the
/// program's, though the executable holds it (Rust's start-up reads `/proc/self/maps` from
/// `_start` through glibc and `std` alone).
const C_RUNTIME_ENTRIES: [&str; 5] = [
    "_start",
    "_init",
    "_fini",
    "__libc_csu_init",
    "__libc_csu_fini",
];

/// The crate or namespace a function belongs to: the first path segment of its name, or for
/// `<T as Trait>::f` and `<T>::f` of the type `T` (references, pointers and `dyn` taken off);
/// `std` for slices, arrays, tuples and primitive types, whose impls are the standard
/// library's; `None` for a name outside any namespace (a C function).
fn owner(name: &str) -> Option<&str> {
    let Some(rest) = name.strip_prefix('<') else {
        let head = first_segment(name);
        return (head.len() < name.len() && name[head.len()..].starts_with("::")).then_some(head);
    };
    let mut rest = rest.trim_start();
    loop {
        let stripped = ["&mut ", "&", "*const ", "*mut ", "dyn ", "impl ", "mut "]
            .iter()
            .find_map(|prefix| rest.strip_prefix(prefix));
        match stripped {
            Some(inner) => rest = inner.trim_start(),
            None => break,
        }
    }
    if rest.starts_with('[') || rest.starts_with('(') {
        return Some("std");
    }
    let head = first_segment(rest);
    if rest[head.len()..].starts_with("::") {
        Some(head)
    } else {
        // A primitive (`u8`, `str`) or a type parameter: the standard library's impl.
        Some("std")
    }
}

/// The leading identifier of a path.
fn first_segment(path: &str) -> &str {
    let end = path
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .unwrap_or(path.len());
    &path[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_modules_are_told_by_file_name() {
        for path in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
            "/lib/ld-musl-x86_64.so.1",
            "/work/target/release/libfsprof_agent.so",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
            "[vdso]",
        ] {
            assert!(is_runtime_module(path), "{path}");
        }
        for path in [
            "/usr/bin/rg",
            "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
            "/tmp/libc_helpers",
            "/usr/lib/libcurl.so.4",
        ] {
            assert!(!is_runtime_module(path), "{path}");
        }
    }

    #[test]
    fn rust_standard_library_functions_are_the_runtimes() {
        for name in [
            "std::sys::fd::unix::FileDesc::write",
            "<std::fs::File as std::io::Read>::read",
            "alloc::raw_vec::RawVec<T,A>::grow_one",
            "core::ptr::drop_in_place<mycrate::Thing>",
            "<&mut W as std::io::Write>::write_all",
            "<[u8] as alloc::borrow::ToOwned>::to_owned",
            "<alloc::vec::Vec<u8> as std::io::Write>::write",
            "<u8 as core::fmt::Display>::fmt",
            "__rust_alloc",
            "__rdl_alloc",
            "hashbrown::raw::RawTable<T,A>::reserve_rehash",
            "std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(int const&)",
        ] {
            assert!(is_runtime_function(name, None), "{name}");
        }
        assert!(is_runtime_function(
            "write_all",
            Some("/rustc/17067e9ac6d7e98f18d4a2e2ce4a8e8e6f0b2a1c/library/std/src/io/mod.rs")
        ));
        assert!(is_runtime_function(
            "write_all",
            Some("library/std/src/io/mod.rs")
        ));
    }

    #[test]
    fn condition_variables_and_parking_are_waits_for_other_threads() {
        for name in [
            "<std::sys::sync::condvar::futex::Condvar>::wait_optional_timeout",
            "<std::sys::sync::thread_parking::futex::Parker>::park",
            "std::thread::park",
        ] {
            assert!(is_wait_primitive(name), "{name}");
        }
        for name in [
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended",
            "<std::sys::sync::rwlock::futex::RwLock>::write_contended",
            "std::sys::pal::unix::futex::futex_wait",
        ] {
            assert!(!is_wait_primitive(name), "{name}");
        }
    }

    #[test]
    fn the_c_runtimes_start_up_code_in_the_executable_is_the_runtimes() {
        for name in ["_start", "_init", "__libc_csu_init"] {
            assert!(is_runtime_function(name, None), "{name}");
        }
        assert!(!is_runtime_function("_start_engine", None));
    }

    #[test]
    fn the_programs_own_functions_are_not() {
        for name in [
            "rsio::write_block",
            "main",
            "fill_buffer",
            "grep_searcher::line_buffer::LineBuffer::fill",
            "<grep_searcher::sink::StandardSink as grep_searcher::sink::Sink>::matched",
            "<&mut mycrate::Out as std::io::Write>::write",
            "<mycrate::Parser>::parse",
            "mycrate::main::{{closure}}",
        ] {
            assert!(!is_runtime_function(name, None), "{name}");
            assert!(!is_runtime_function(name, Some("src/main.rs")), "{name}");
        }
    }
}
