//! For a program's build script (`build.rs`), with the shim as a build dependency: what the
//! linker needs for the `fleet` feature.
//!
//! Not here: anything that runs in the program.

use std::path::PathBuf;

/// The dynamic symbols of the `fleet` feature (see [`crate::fleet`]).
pub const FLEET_SYMBOLS: [&str; 3] = [
    "custom_labels_abi_version",
    "custom_labels_current_set",
    "otel_thread_ctx_v1",
];

/// Exports the `fleet` feature's symbols from the package's executables, as the fleet's
/// profilers need (they look in the dynamic symbol table): writes a dynamic list into
/// `OUT_DIR` and tells cargo to pass it to the linker. Call it from the build script of the
/// package whose binaries link the shim with the `fleet` feature:
///
/// ```text
/// // build.rs, with `fsprof-shim` in [build-dependencies]
/// fn main() {
///     fsprof_shim::build::export_fleet_symbols();
/// }
/// ```
///
/// Nothing on targets other than x86-64 Linux, where the feature publishes nothing.
///
/// # Panics
/// Outside a build script (no `OUT_DIR`), or if the list cannot be written there.
pub fn export_fleet_symbols() {
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") != "linux" || target("CARGO_CFG_TARGET_ARCH") != "x86_64" {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR: call this from build.rs"));
    let list = out.join("fsprof-fleet.dynamic-list");
    let symbols: String = FLEET_SYMBOLS.iter().map(|s| format!("  {s};\n")).collect();
    std::fs::write(&list, format!("{{\n{symbols}}};\n"))
        .unwrap_or_else(|e| panic!("writing {}: {e}", list.display()));
    println!("cargo:rustc-link-arg=-Wl,--dynamic-list={}", list.display());
}
