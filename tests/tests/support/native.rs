//! Helpers for tests of native programs: the built `libfsprof_agent.so` and its header, and the C
//! targets under `tests/c/`, compiled with `gcc` into a test's temporary directory.
//!
//! Each build copies the agent library into that directory and links with an rpath of `$ORIGIN`,
//! so the programs run without `LD_LIBRARY_PATH` and keep working while cargo rebuilds the agent.
//! Nothing here runs or profiles the programs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the parent of this crate).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `libfsprof_agent.so` as this `cargo test` built it. `fsprof-agent` is a dev-dependency of this
/// crate only so that it is built (into `deps/`); `cargo build --workspace` also copies it next
/// to the binaries. The newer of the two wins.
pub fn agent_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let release = exe.parent().and_then(Path::parent).unwrap();
    let candidates = [
        release.join("deps/libfsprof_agent.so"),
        release.join("libfsprof_agent.so"),
    ];
    let modified = |p: &PathBuf| p.metadata().and_then(|m| m.modified()).ok();
    candidates
        .iter()
        .filter(|p| p.exists())
        .max_by_key(|p| modified(p))
        .unwrap_or_else(|| {
            panic!(
                "libfsprof_agent.so is missing from {}: run `cargo test --release --workspace`",
                release.display()
            )
        })
        .clone()
}

/// The directory holding `fsprof.h`.
pub fn agent_include() -> PathBuf {
    workspace().join("agent/include")
}

/// The C sources of the test programs.
pub fn c_sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c")
}

/// Runs gcc with `args` in `dir`, failing the test with gcc's messages if it fails.
fn gcc(dir: &Path, args: &[&str]) {
    compile(
        "gcc",
        "gcc is needed to build the C test programs",
        dir,
        args,
    );
}

/// Runs `compiler` with `args` in `dir`, failing the test with its messages if it fails, or
/// with `missing` if it cannot be run.
fn compile(compiler: &str, missing: &str, dir: &Path, args: &[&str]) {
    let output = Command::new(compiler)
        .current_dir(dir)
        .args(args)
        .output()
        .expect(missing);
    assert!(
        output.status.success(),
        "{compiler} {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Copies the agent library into `dir` (for `-L` and the `$ORIGIN` rpath).
fn copy_agent(dir: &Path) {
    std::fs::copy(agent_library(), dir.join("libfsprof_agent.so")).unwrap();
}

/// A compiled C program and the directory of the shared libraries it needs (its own).
pub struct CProgram {
    pub exe: PathBuf,
    pub lib_dir: PathBuf,
}

/// Compiles `tests/c/marks.c` (the C ABI target) into `dir`.
pub fn build_c_marks(dir: &Path) -> CProgram {
    build_c_with_agent(dir, "marks")
}

/// Compiles `tests/c/NAME.c`, a program that marks through the agent's C ABI, into `dir/NAME`.
pub fn build_c_with_agent(dir: &Path, name: &str) -> CProgram {
    CProgram {
        exe: build_c_program_with(dir, name, &["-lfsprof_agent"]),
        lib_dir: dir.to_path_buf(),
    }
}

/// Compiles the native-stack target `tests/c/chain.c` and its library `tests/c/libleaf.c` into
/// `dir`: `dir/chain` and `dir/libleaf.so`, without frame pointers, with DWARF (`-g`).
pub fn build_c_chain(dir: &Path) -> CProgram {
    copy_agent(dir);
    let sources = c_sources();
    let include = agent_include();
    let common = ["-O2", "-g", "-fomit-frame-pointer", "-Wall", "-Werror"];
    let leaf = sources.join("libleaf.c");
    let mut args = common.to_vec();
    args.extend([
        "-fPIC",
        "-shared",
        "-I",
        include.to_str().unwrap(),
        leaf.to_str().unwrap(),
        "-o",
        "libleaf.so",
        "-L.",
        "-lfsprof_agent",
        "-Wl,-rpath,$ORIGIN",
    ]);
    gcc(dir, &args);
    let chain = sources.join("chain.c");
    let mut args = common.to_vec();
    args.extend([
        chain.to_str().unwrap(),
        "-o",
        "chain",
        "-L.",
        "-lleaf",
        "-Wl,-rpath,$ORIGIN",
    ]);
    gcc(dir, &args);
    CProgram {
        exe: dir.join("chain"),
        lib_dir: dir.to_path_buf(),
    }
}

/// The disassembly (Intel syntax, demangled) of each function of `file` whose name is in
/// `functions`, by name; a function missing from the symbol table is missing from the map.
pub fn disassemble(file: &Path, functions: &[&str]) -> std::collections::HashMap<String, String> {
    let output = Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn", "-M", "intel"])
        .arg(file)
        .output()
        .expect("objdump (binutils) is needed to inspect the test programs");
    assert!(output.status.success(), "objdump {} failed", file.display());
    let text = String::from_utf8_lossy(&output.stdout);
    let mut bodies = std::collections::HashMap::new();
    for block in text.split("\n\n") {
        let Some((header, body)) = block.split_once(">:\n") else {
            continue;
        };
        let Some((_, name)) = header.rsplit_once(" <") else {
            continue;
        };
        if functions.contains(&name) {
            bodies.insert(name.to_owned(), body.to_owned());
        }
    }
    bodies
}

/// Asserts that each of `functions` is a function of its own in `file` and does not set up a
/// frame pointer (`mov rbp, rsp`), so that unwinding through it needs its CFI. x86-64 only.
pub fn assert_separate_frames_without_frame_pointer(file: &Path, functions: &[&str]) {
    let bodies = disassemble(file, functions);
    for function in functions {
        let body = bodies
            .get(*function)
            .unwrap_or_else(|| panic!("{function} is not a function of {}", file.display()));
        assert!(
            !body.contains("mov    rbp,rsp"),
            "{function} sets up a frame pointer:\n{body}"
        );
    }
}

/// Compiles `tests/c/NAME.c` (a program with no marks of its own, for the agent's built-in
/// features) into `dir/NAME`, with DWARF so that its call sites get names and lines.
pub fn build_c_program(dir: &Path, name: &str) -> PathBuf {
    build_plain_c_program(dir, name, &[])
}

/// [`build_c_program`] with its symbols exported (`-rdynamic`): a program that publishes a
/// thread-local for outside readers, as the custom-labels ABI asks.
pub fn build_exporting_c_program(dir: &Path, name: &str) -> PathBuf {
    build_plain_c_program(dir, name, &["-rdynamic"])
}

/// [`build_c_program`], linked statically: the C library inside the executable.
pub fn build_static_c_program(dir: &Path, name: &str) -> PathBuf {
    build_plain_c_program(dir, name, &["-static"])
}

/// Compiles `tests/c/NAME.cpp` (C++17, no marks of its own) into `dir/NAME` with `g++ -O2 -g`,
/// `tests/c` on the include path (`clock.h`).
pub fn build_cpp_program(dir: &Path, name: &str) -> PathBuf {
    let (source, include) = (c_sources().join(format!("{name}.cpp")), c_sources());
    let args = ["-O2", "-g", "-std=c++17", "-Wall", "-Werror", "-I"];
    let paths = [
        include.to_str().unwrap(),
        source.to_str().unwrap(),
        "-o",
        name,
    ];
    let missing = "g++ is needed to build the C++ test program";
    compile("g++", missing, dir, &[&args[..], &paths[..]].concat());
    dir.join(name)
}

/// [`build_c_program`] with `musl-gcc` (Debian's musl-tools; `.ci/run` installs it): linked
/// dynamically against musl's `libc.so`, which has no unwind tables to speak of and no symbol
/// table, only its exports.
pub fn build_musl_c_program(dir: &Path, name: &str) -> PathBuf {
    let source = c_sources().join(format!("{name}.c"));
    let args = ["-O2", "-g", "-Wall", "-Werror", "-pthread"];
    let paths = [source.to_str().unwrap(), "-o", name];
    let missing = "musl-gcc is needed to build the musl test program: apt-get install musl-tools";
    compile("musl-gcc", missing, dir, &[&args[..], &paths[..]].concat());
    dir.join(name)
}

fn build_plain_c_program(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let source = c_sources().join(format!("{name}.c"));
    let mut args = vec![
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-pthread",
        source.to_str().unwrap(),
        "-o",
        name,
    ];
    args.extend(extra);
    gcc(dir, &args);
    dir.join(name)
}

/// Compiles `tests/c/NAME.c` into `dir/NAME` with `extra` arguments after the source (libraries
/// to link, say), the agent's header and `tests/c` on the include path, a copy of the agent in
/// `dir` to link with (`-lfsprof_agent`) and an rpath of `$ORIGIN`.
pub fn build_c_program_with(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    copy_agent(dir);
    let source = c_sources().join(format!("{name}.c"));
    let include = agent_include();
    let sources = c_sources();
    let mut args = vec![
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-pthread",
        "-I",
        include.to_str().unwrap(),
        "-I",
        sources.to_str().unwrap(),
        source.to_str().unwrap(),
        "-o",
        name,
        "-L.",
        "-Wl,-rpath,$ORIGIN",
    ];
    args.extend(extra);
    gcc(dir, &args);
    dir.join(name)
}

/// Compiles `tests/c/libNAME.c` into the shared library `dir/libNAME.so`.
pub fn build_c_library(dir: &Path, name: &str) -> PathBuf {
    let source = c_sources().join(format!("lib{name}.c"));
    let output = format!("lib{name}.so");
    gcc(
        dir,
        &[
            "-O2",
            "-g",
            "-Wall",
            "-Werror",
            "-fPIC",
            "-shared",
            "-pthread",
            source.to_str().unwrap(),
            "-o",
            &output,
        ],
    );
    dir.join(output)
}

/// Compiles a small statically linked C program into `dir/static`; `None` when this system
/// cannot link statically (no `libc.a`).
pub fn build_c_static(dir: &Path) -> Option<PathBuf> {
    std::fs::write(
        dir.join("static.c"),
        "#include <stdio.h>\nint main(void) { puts(\"static\"); return 0; }\n",
    )
    .unwrap();
    let status = Command::new("gcc")
        .current_dir(dir)
        .args(["-static", "-O2", "static.c", "-o", "static"])
        .output()
        .ok()?
        .status;
    status.success().then(|| dir.join("static"))
}

/// Whether `--backend perf` works here. As root it must (these tests run as root in CI); for
/// other users the kernel may refuse, and the perf variants are skipped with a message.
pub fn perf_backend_available() -> bool {
    let output = std::process::Command::new(super::fsprof())
        .args(["run", "--backend", "perf", "-o"])
        .arg(super::tempdir().path().join("probe"))
        .args(["--", "true"])
        .output()
        .unwrap();
    if output.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&output.stderr);
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert!(!root, "--backend perf fails as root: {why}");
    eprintln!("skipped: --backend perf is not available to this user: {why}");
    false
}
