//! Installed the way Rust tools are: `cargo install --path profiler` from a fresh clone of this
//! repository into a temporary root gives a complete fsprof. Nothing else is moved or set: from an
//! unrelated directory, with a fresh cache directory, the installed binary profiles a C program and
//! a Rust program with their built-in features: the C program's from the agent it carries
//! (`--agent`), the Rust program's from its native stacks (the defaults). Also what the installed
//! command offers besides: `fsprof agent`, completions and the manual page.
//!
//! The clone is of the repository's last commit (what a user clones), so changes not committed
//! yet are not what this test installs; where the work tree is that commit (CI's clean clone),
//! the repository itself is the clone.

use crate::support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::native::*;
use support::*;

/// The repository's root (this crate is `tests/` in it).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// A fresh clone of the repository's last commit: the repository itself when its work tree is
/// that commit (nothing modified, nothing untracked but what `.gitignore` names: build outputs
/// and profiles), as on CI, which clones it fresh; else a clone made in `work`. Installed from
/// the repository itself, cargo finds the workspace's own build of fsprof, which a clone's new
/// paths made it build again (over two minutes of CI's testing time on 2 CPUs).
fn fresh_clone(work: &Path) -> PathBuf {
    let status = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(status.status.success(), "git status failed: {status:?}");
    if status.stdout.is_empty() {
        eprintln!("the work tree is the last commit: installed from it");
        return repository();
    }
    let clone = work.join("clone");
    let cloned = Command::new("git")
        .args(["clone", "--quiet"])
        .arg(repository())
        .arg(&clone)
        .status()
        .unwrap();
    assert!(cloned.success(), "git clone failed");
    eprintln!("the work tree has changes of its own: installed from a clone of the last commit");
    clone
}

/// `cargo install --locked --offline --path CLONE/profiler --root ROOT`; returns ROOT/bin/fsprof.
/// From the repository itself, into the workspace's own target directory; from a clone, into
/// one kept under it (so that later runs build only what changed).
fn install(clone: &Path, root: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = match clone == repository() {
        true => repository().join("target"),
        false => repository().join("target/install-test"),
    };
    seed(&target_dir);
    let output = Command::new(cargo)
        .args(["install", "--locked", "--offline", "--quiet", "--path"])
        .arg(clone.join("profiler"))
        .arg("--root")
        .arg(root)
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        // What cargo sets for this test's process and not for the workspace's build, which
        // build scripts watch (ring's, CARGO_MANIFEST_DIR): left, it made cargo build ring and
        // all above it again, fsprof included.
        .env_clear()
        .envs(std::env::vars_os().filter(|(name, _)| !set_for_the_test(name)))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo install failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let fsprof = root.join("bin/fsprof");
    let installed: Vec<_> = std::fs::read_dir(root.join("bin"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(installed, ["fsprof"], "installed beside it: {installed:?}");
    fsprof
}

/// Whether cargo set the variable `name` for this test's process (its package's manifest and
/// metadata), not for the workspace's build.
fn set_for_the_test(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with("CARGO_PKG_")
        || [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_BIN_NAME",
            "CARGO_RUSTC_CURRENT_DIR",
        ]
        .contains(&name.as_ref())
}

/// Starts a new install's target directory from the workspace's release build, when there is
/// one: the crates.io dependencies built for the suite (their libraries, build scripts' outputs
/// and fingerprints, copied with their times) are the ones the install needs, and cargo builds
/// only this repository's crates again (the clone's paths are new to it). On a new machine the
/// install otherwise built every dependency a second time: 4 to 5 minutes of CI on 2 CPUs.
/// Nothing here is shared with the workspace's build: copies, not links (cargo rewrites a
/// fingerprint it finds stale in place).
fn seed(target_dir: &Path) {
    let built = repository().join("target/release");
    let release = target_dir.join("release");
    if release == built {
        return;
    }
    // (`the_shim_packages_for_crates_io` may have made the directory, not its release build.)
    if release.join(".fingerprint").exists() || !built.join(".fingerprint").is_dir() {
        return;
    }
    std::fs::create_dir_all(release.join("deps")).unwrap();
    let libraries: Vec<PathBuf> = std::fs::read_dir(built.join("deps"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| (path.file_name().unwrap().to_string_lossy()).starts_with("lib"))
        .collect();
    for (from, to) in [
        (
            vec![built.join(".fingerprint"), built.join("build")],
            release.clone(),
        ),
        (libraries, release.join("deps")),
    ] {
        let copied = Command::new("cp")
            .arg("-a")
            .args(&from)
            .arg(&to)
            .status()
            .unwrap();
        assert!(
            copied.success(),
            "copying {} files into {}",
            from.len(),
            to.display()
        );
    }
}

/// Runs the installed `fsprof run [agent] -o out -- program args` in `cwd`, with `cache` as its
/// cache directory and no `FSPROF_AGENT`; returns the JSON report.
fn profile(
    fsprof: &Path,
    cwd: &Path,
    cache: &Path,
    agent: bool,
    program: &[&std::ffi::OsStr],
) -> Value {
    let output = Command::new(fsprof)
        .current_dir(cwd)
        .arg("run")
        .args(agent.then_some("--agent"))
        .args(["--rate", ACCURACY_RATE, "-o", "out", "--"])
        .args(program)
        .env_remove("FSPROF_AGENT")
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fsprof run failed: {stderr}");
    assert!(!stderr.contains("no built-in features"), "{stderr}");
    let report = Command::new(fsprof)
        .current_dir(cwd)
        .args(["report", "out", "--format", "json"])
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    serde_json::from_slice(&report.stdout).unwrap()
}

/// The built-in features the report gives time to.
fn builtins_with_time(report: &Value) -> Vec<String> {
    let builtins = ["output", "allocation", "locks", "input", "sleep"];
    report["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|feature| builtins.contains(&feature["name"].as_str().unwrap()))
        .filter(|feature| feature["ms"].as_f64().unwrap() > 0.0)
        .map(|feature| feature["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_installed_fsprof_profiles_programs_elsewhere_with_their_builtin_features() {
    let _serial = serial();
    let work = tempdir();
    let root = work.path().join("root");
    let fsprof = install(&fresh_clone(work.path()), &root);
    let cache = work.path().join("cache");
    let elsewhere = work.path().join("elsewhere");

    // A C program, built from this repository's sources but run from elsewhere.
    std::fs::create_dir_all(elsewhere.join("c")).unwrap();
    let c_program = build_c_program(&elsewhere.join("c"), "builtins");
    let truth = elsewhere.join("c/truth.json");
    let report = profile(
        &fsprof,
        &elsewhere.join("c"),
        &cache,
        true,
        &[
            c_program.as_os_str(),
            "2".as_ref(),
            "--truth".as_ref(),
            truth.as_os_str(),
        ],
    );
    let found = builtins_with_time(&report);
    assert!(
        found.contains(&"output".to_owned()) && found.contains(&"allocation".to_owned()),
        "built-in features of the C program: {found:?}"
    );

    // A Rust program.
    std::fs::create_dir_all(elsewhere.join("rust")).unwrap();
    let truth = elsewhere.join("rust/truth.json");
    let report = profile(
        &fsprof,
        &elsewhere.join("rust"),
        &cache,
        false,
        &[
            env!("CARGO_BIN_EXE_builtins").as_ref(),
            "2".as_ref(),
            "--truth".as_ref(),
            truth.as_os_str(),
        ],
    );
    let found = builtins_with_time(&report);
    assert!(
        found.contains(&"output".to_owned()),
        "built-in features of the Rust program: {found:?}"
    );

    // The agent it preloaded for the C program: its cached copy, private to this user.
    let agent = Command::new(&fsprof)
        .arg("agent")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(agent.status.success(), "{agent:?}");
    let agent = PathBuf::from(String::from_utf8(agent.stdout).unwrap().trim());
    assert!(
        agent.starts_with(cache.join("fsprof")),
        "{}",
        agent.display()
    );
    assert!(agent.is_file());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(agent.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{}", agent.display());

    // Completions and the manual page.
    let text = |args: &[&str]| {
        let output = Command::new(&fsprof).args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let bash = text(&["completions", "bash"]);
    assert!(
        bash.contains("--agent") && bash.contains("attach"),
        "{bash}"
    );
    let page = text(&["manpage"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH fsprof"),
        "{page}"
    );
    assert!(
        page.contains("attach") && page.contains("\\-\\-rate"),
        "{page}"
    );
}

/// The shim is ready for crates.io: `cargo package` (which builds the packaged crate alone, as a
/// user's build would) passes, the package holds its README and license files, and its
/// documentation builds without warnings.
#[test]
fn the_shim_packages_for_crates_io() {
    let _serial = serial();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = repository().join("target/install-test");
    let output = Command::new(&cargo)
        .current_dir(repository())
        .args(["package", "--offline", "--allow-dirty", "-p", "fsprof-shim"])
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        // What cargo sets for this test's process and not for the workspace's build, which
        // build scripts watch (ring's, CARGO_MANIFEST_DIR): left, it made cargo build ring and
        // all above it again, fsprof included.
        .env_clear()
        .envs(std::env::vars_os().filter(|(name, _)| !set_for_the_test(name)))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo package failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Its documentation builds without a warning (as docs.rs would build it).
    let doc = Command::new(&cargo)
        .current_dir(repository())
        .args(["doc", "--offline", "--no-deps", "-p", "fsprof-shim"])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTDOCFLAGS", "-D warnings")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        // What cargo sets for this test's process and not for the workspace's build, which
        // build scripts watch (ring's, CARGO_MANIFEST_DIR): left, it made cargo build ring and
        // all above it again, fsprof included.
        .env_clear()
        .envs(std::env::vars_os().filter(|(name, _)| !set_for_the_test(name)))
        .output()
        .unwrap();
    assert!(
        doc.status.success(),
        "cargo doc failed: {}",
        String::from_utf8_lossy(&doc.stderr)
    );
    let list = Command::new(&cargo)
        .current_dir(repository())
        .args([
            "package",
            "--offline",
            "--allow-dirty",
            "--list",
            "-p",
            "fsprof-shim",
        ])
        .output()
        .unwrap();
    let files = String::from_utf8(list.stdout).unwrap();
    for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "src/lib.rs"] {
        assert!(
            files.lines().any(|line| line == file),
            "{file} not packaged: {files}"
        );
    }
}
