//! Builds the agent (`libfsprof_agent.so`, from `../agent`) for `fsprof` to carry inside its own
//! executable, so that one `cargo install` gives a complete profiler: `fsprof run` writes the
//! library to the user's cache directory the first time it needs it (`src/record/agent.rs`).
//!
//! The agent is built by a second cargo, in its own target directory under `OUT_DIR` (the outer
//! cargo holds the lock of the usual one), always in the release profile (it runs inside the
//! profiled program), with its debug information stripped (its symbols stay: the profiler names
//! the agent's frames). Its sources must be beside this crate, as they are in the repository and in
//! a `cargo install --git` or `--path` checkout.
//!
//! Not here: finding, writing or checking the library at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let agent_dir = manifest_dir.join("../agent");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    for watched in [
        "../agent/src",
        "../agent/build.rs",
        "../agent/Cargo.toml",
        "../shim/src",
    ] {
        println!("cargo:rerun-if-changed={watched}");
    }
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let library = out_dir.join("libfsprof_agent.so");
    if target_os != "linux" || !agent_dir.join("Cargo.toml").is_file() {
        // Nothing to carry: `fsprof run` then says the agent is missing (FSPROF_AGENT still works).
        std::fs::write(&library, b"").unwrap();
        if target_os == "linux" {
            println!(
                "cargo:warning=the agent's sources are not beside the profiler ({}): fsprof is built without its built-in features",
                agent_dir.display()
            );
        }
        return;
    }
    let target_dir = out_dir.join("agent-target");
    // The agent's `fleet` feature needs rustc's own linker (see agent/Cargo.toml): without it,
    // the agent is built without (FSPROF_FLEET_LABELS then publishes nothing).
    let built = build_agent(&agent_dir, &target_dir, &["--features", "fleet"]).unwrap_or_else(|| {
        println!(
            "cargo:warning=the agent could not be built with its `fleet` feature (GNU ld?): built without, FSPROF_FLEET_LABELS=1 will publish nothing"
        );
        build_agent(&agent_dir, &target_dir, &[]).unwrap_or_else(|| {
            panic!(
                "building the agent (cargo build --release --manifest-path {}) failed",
                agent_dir.join("Cargo.toml").display()
            )
        })
    });
    std::fs::copy(&built, &library)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), library.display()));
}

/// Runs `cargo build --release` of the agent (with `options` besides) into `target_dir` and
/// returns the library it made, or `None` if the build failed.
fn build_agent(agent_dir: &Path, target_dir: &Path, options: &[&str]) -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = std::env::var("TARGET").unwrap();
    let status = Command::new(cargo)
        .arg("build")
        .arg("--release")
        .arg("--lib")
        .args(options)
        .arg("--manifest-path")
        .arg(agent_dir.join("Cargo.toml"))
        .arg("--target")
        .arg(&target)
        .arg("--target-dir")
        .arg(target_dir)
        // Strip debug information only: the symbol table names the agent's frames in reports.
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        // `cargo clippy` and `cargo check` of the profiler must not lint or check the agent
        // instead of building it.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .status()
        .unwrap_or_else(|e| panic!("running cargo to build the agent: {e}"));
    status
        .success()
        .then(|| target_dir.join(target).join("release/libfsprof_agent.so"))
}
