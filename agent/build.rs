//! Gives `libfsprof_agent.so` the soname `libfsprof_agent.so`, so that a program linked with it
//! (`-lfsprof_agent`) and run by `fsprof run`, which preloads a copy from another directory, loads
//! one copy, not two: the dynamic loader matches a needed library against the sonames of those
//! already loaded. Two copies would both interpose libc, and count every call twice.
//!
//! With the `fleet` feature, it also exports the shim's fleet symbols from the library (rustc's
//! version script keeps only Rust's own exports, and the shim declares its thread-locals in
//! assembly): by a second version script, written into `OUT_DIR`.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfsprof_agent.so");
        let x86_64 = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
        if x86_64 && std::env::var_os("CARGO_FEATURE_FLEET").is_some() {
            export_fleet_symbols();
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

fn export_fleet_symbols() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let script = out.join("fleet.version-script");
    let symbols: String = [
        "custom_labels_abi_version",
        "custom_labels_current_set",
        "otel_thread_ctx_v1",
    ]
    .iter()
    .map(|symbol| format!("{symbol}; "))
    .collect();
    std::fs::write(&script, format!("{{ global: {symbols}}};\n")).unwrap();
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        script.display()
    );
}
