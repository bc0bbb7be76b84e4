//! Gives `libfsprof_agent.so` the soname `libfsprof_agent.so`, so that a program linked with it
//! (`-lfsprof_agent`) and run by `fsprof run`, which preloads a copy from another directory, loads
//! one copy, not two: the dynamic loader matches a needed library against the sonames of those
//! already loaded. Two copies would both interpose libc, and count every call twice.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfsprof_agent.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
