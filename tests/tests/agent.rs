//! The C ABI (`libfsprof_agent.so`, `fsprof.h`): in this process, loaded with `dlopen` and read
//! back from its region, what each call records (kinds, payloads, the caller's exact stack
//! pointer and call site, interning, NULLs, unbalanced unmarks, threads); and end to end, C
//! programs compiled with gcc and profiled by the real `fsprof`, whose shares must match the
//! programs' own timing truth. The native-stack targets (`fsprof-chain`, `tests/c/chain.c`) are
//! only checked to build, run and tell the truth about their shares here; the tests of stack
//! capture that use their chains live with that feature.

use crate::support;

use fsprof_shim::abi::{self, RecordView};
use serde_json::Value;
use std::ffi::{c_char, c_void, CString};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use support::native::*;
use support::*;

type FeatureNew = unsafe extern "C" fn(*const c_char) -> *const c_void;
type Mark = unsafe extern "C" fn(*const c_void, *const c_char);
type Antimark = unsafe extern "C" fn(*const c_void);
type Unmark = unsafe extern "C" fn();

/// The agent's four functions, from the library loaded into this process.
struct Agent {
    feature_new: FeatureNew,
    mark: Mark,
    antimark: Antimark,
    unmark: Unmark,
}

fn agent() -> &'static Agent {
    static AGENT: OnceLock<Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        let path = CString::new(agent_library().to_str().unwrap()).unwrap();
        // SAFETY: loading our own library, whose constructors only set up Rust's runtime state.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {path:?} failed");
        let symbol = |name: &str| {
            let name = CString::new(name).unwrap();
            // SAFETY: a valid handle and name.
            let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
            assert!(!address.is_null(), "{name:?} is not exported");
            address
        };
        // SAFETY: the exported functions have exactly the signatures of fsprof.h.
        unsafe {
            Agent {
                feature_new: std::mem::transmute::<*mut c_void, FeatureNew>(symbol(
                    "fsprof_feature_new",
                )),
                mark: std::mem::transmute::<*mut c_void, Mark>(symbol("fsprof_mark")),
                antimark: std::mem::transmute::<*mut c_void, Antimark>(symbol("fsprof_antimark")),
                unmark: std::mem::transmute::<*mut c_void, Unmark>(symbol("fsprof_unmark")),
            }
        }
    })
}

fn feature(name: &str) -> *const c_void {
    let name = CString::new(name).unwrap();
    // SAFETY: a NUL-terminated string.
    unsafe { (agent().feature_new)(name.as_ptr()) }
}

fn mark(feature: *const c_void, payload: &'static std::ffi::CStr) {
    // SAFETY: a feature from the agent and a static string.
    unsafe { (agent().mark)(feature, payload.as_ptr()) }
}

fn unmark() {
    // SAFETY: no arguments, no preconditions.
    unsafe { (agent().unmark)() }
}

/// The agent's region in this process (this test binary never marks with its own shim copy, so
/// the only region is the agent's), found as the profiler finds it.
fn region() -> *const u8 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| l.contains(&format!("/memfd:{}", abi::REGION_NAME)))
        .expect("the agent created its region");
    let start = line.split('-').next().unwrap();
    usize::from_str_radix(start, 16).unwrap() as *const u8
}

/// The calling thread's logical depth and records, as the profiler would copy them.
fn my_stack() -> (u32, Vec<RecordView>) {
    let region = region();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    // SAFETY: `region` is a live, compatible region of this process, mapped for its lifetime.
    unsafe {
        let header = abi::header_at(region);
        assert!(header.is_compatible());
        // Room for every record first: with the agent preloaded, an allocation during the copy
        // would be a built-in mark moving this very slot.
        let mut records = Vec::with_capacity(abi::MARK_CAPACITY);
        for index in 0..(header.slots_used as usize).min(abi::SLOT_COUNT) {
            if abi::slot_owner(region, index) == tid {
                // Only this thread writes its slot, and it is busy reading: no retry needed.
                let state = abi::copy_slot(region, index, &mut records).unwrap();
                return (state.depth, records);
            }
        }
    }
    (0, Vec::new())
}

#[test]
fn features_are_interned_and_null_or_bad_names_are_handled() {
    let _shared = shared();
    let parsing = feature("parsing");
    assert!(!parsing.is_null());
    assert_eq!(feature("parsing"), parsing);
    assert_ne!(feature("lexing"), parsing);
    // SAFETY: NULL is allowed.
    assert!(unsafe { (agent().feature_new)(std::ptr::null()) }.is_null());
    // SAFETY: a NUL-terminated string.
    let lossy = unsafe { (agent().feature_new)(c"bad \xff name".as_ptr()) };
    // SAFETY: the agent returns shim descriptors, whose layout this crate's shim shares.
    let lossy = unsafe { &*(lossy as *const fsprof_shim::Feature) };
    assert_eq!(lossy.name(), "bad \u{FFFD} name");
    // SAFETY: as above.
    let named = unsafe { &*(parsing as *const fsprof_shim::Feature) };
    assert_eq!(named.name(), "parsing");
}

#[test]
fn marks_nest_unmarks_pop_the_innermost_and_never_underflow() {
    let _shared = shared();
    std::thread::spawn(|| {
        let (parsing, lexing) = (feature("parsing"), feature("lexing"));
        unmark(); // before this thread ever marked: nothing to pop
        mark(parsing, c"stmt");
        // SAFETY: a feature from the agent.
        unsafe { (agent().antimark)(parsing) };
        mark(lexing, c"ident");
        let (depth, records) = my_stack();
        assert_eq!(depth, 3);
        let kinds: Vec<u32> = records.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [abi::KIND_NAME, abi::KIND_ANTIMARK, abi::KIND_NAME],
            "{records:?}"
        );
        assert_eq!(records[0].feature, parsing as u64);
        assert_eq!(records[2].feature, lexing as u64);
        assert_eq!(records[0].payload_len, 4);
        assert_eq!(records[2].payload, c"ident".as_ptr() as u64);
        unmark();
        assert_eq!(my_stack().0, 2);
        for _ in 0..5 {
            unmark(); // two real pops, then nothing
        }
        assert_eq!(my_stack().0, 0);
        // NULL features record nothing.
        // SAFETY: NULL is allowed.
        unsafe {
            (agent().mark)(std::ptr::null(), c"x".as_ptr());
            (agent().antimark)(std::ptr::null());
        }
        assert_eq!(my_stack().0, 0);
        // The stack still works after all that.
        mark(parsing, c"again");
        assert_eq!(my_stack().1[0].payload, c"again".as_ptr() as u64);
        unmark();
    })
    .join()
    .unwrap();
}

/// Set in the child that `nested_builtin_calls_leave_the_marks_below_them_alone` starts with the
/// agent preloaded.
const PRELOADED: &str = "FSPROF_TEST_AGENT_PRELOADED";

/// A built-in call made inside another (`fopen` calling `malloc`, `strdup` calling `malloc`) is
/// not marked, and must leave the marks below it alone. The built-ins only interpose when the
/// agent is preloaded, so this test runs itself again in a child with `LD_PRELOAD`.
#[test]
fn nested_builtin_calls_leave_the_marks_below_them_alone() {
    let _shared = shared();
    if std::env::var_os(PRELOADED).is_some() {
        let outer = feature("outer");
        mark(outer, c"x");
        assert_eq!(my_stack().0, 1);
        // SAFETY: plain libc calls on valid NUL-terminated strings; each result is released.
        unsafe {
            let file = libc::fopen(c"/dev/null".as_ptr(), c"r".as_ptr());
            assert!(!file.is_null());
            assert_eq!(my_stack().0, 1, "after fopen (which calls malloc)");
            let copy = libc::strdup(c"hello".as_ptr());
            libc::free(copy.cast());
            assert_eq!(
                my_stack().0,
                1,
                "after strdup (which calls malloc) and free"
            );
            libc::fclose(file);
            assert_eq!(my_stack().0, 1, "after fclose (which calls free)");
        }
        let (depth, records) = my_stack();
        assert_eq!((depth, records[0].feature), (1, outer as u64));
        unmark();
        assert_eq!(my_stack().0, 0);
        return;
    }
    // The test's path in the suite (`agent::...`), as the harness named this thread.
    let name = std::thread::current().name().unwrap().to_owned();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env("LD_PRELOAD", agent_library())
        .env(PRELOADED, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the preloaded child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Interposed calls take the agent's out-of-line path only to set things up (the thread's slot),
/// never per call, wherever they are called from: after warm-up, a million `strdup`s (`malloc`
/// called from inside libc), stdio output, and allocations and writes made by Rust's standard
/// library add at most a handful of slow-path entries (the agent's debug counter). Runs itself
/// again with the agent preloaded, as the test above does.
#[test]
fn calls_from_anywhere_stay_on_the_fast_path() {
    let _shared = shared();
    const CHILD: &str = "FSPROF_TEST_SLOW_PATH_CHILD";
    if std::env::var_os(CHILD).is_some() {
        // SAFETY: looks up a function of the preloaded agent by its NUL-terminated name.
        let counter =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fsprof_agent_slow_entries".as_ptr()) };
        assert!(!counter.is_null(), "the agent is not preloaded");
        // SAFETY: the agent's `u64 fsprof_agent_slow_entries(void)`.
        let entries: extern "C" fn() -> u64 = unsafe { std::mem::transmute(counter) };
        let mut devnull = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        // SAFETY: plain libc calls on valid NUL-terminated strings; each result is released.
        let work = |rounds: usize, devnull: &mut std::fs::File| unsafe {
            let stream = libc::fopen(c"/dev/null".as_ptr(), c"w".as_ptr());
            for round in 0..rounds {
                let copy = libc::strdup(c"hello, world".as_ptr());
                libc::free(copy.cast());
                if round % 64 == 0 {
                    libc::fputs(c"line\n".as_ptr(), stream);
                    let mut v: Vec<u64> = Vec::with_capacity(16 + round % 7);
                    v.push(round as u64);
                    std::io::Write::write_all(devnull, &v[0].to_le_bytes()).unwrap();
                }
            }
            libc::fclose(stream);
        };
        work(1000, &mut devnull);
        let before = entries();
        work(1_000_000, &mut devnull);
        let added = entries() - before;
        assert!(added <= 4, "{added} slow-path entries in a million calls");
        println!("slow-path entries: {added}");
        return;
    }
    // The test's path in the suite (`agent::...`), as the harness named this thread.
    let name = std::thread::current().name().unwrap().to_owned();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env("LD_PRELOAD", agent_library())
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the preloaded child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Preloading the agent maps no shared library but the agent itself: `cat`, a C program, prints
/// its own memory map with and without it. The agent's unwinder functions forward to the
/// program's own (`agent/src/unwinder.rs`); linked to `libgcc_s.so.1` instead, the agent made
/// every process load it (about 100 µs per start, BENCHMARKS.md).
#[test]
fn preloading_the_agent_maps_no_other_library() {
    let _shared = shared();
    let libraries = |preload: bool| {
        let mut cat = Command::new("cat");
        cat.arg("/proc/self/maps").env_remove("LD_PRELOAD");
        if preload {
            cat.env("LD_PRELOAD", agent_library());
        }
        let out = cat.output().unwrap();
        assert!(out.status.success(), "cat failed: {out:?}");
        let mut paths: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .filter(|path| path.contains(".so"))
            .map(str::to_owned)
            .collect();
        paths.sort();
        paths.dedup();
        paths
    };
    let alone = libraries(false);
    let mut preloaded = libraries(true);
    let agent = agent_library().canonicalize().unwrap();
    let before = preloaded.len();
    preloaded.retain(|path| Path::new(path) != agent);
    assert_eq!(before, preloaded.len() + 1, "the agent is not mapped");
    assert_eq!(
        preloaded, alone,
        "libraries mapped with the agent, and without it"
    );
}

#[test]
fn each_thread_has_its_own_stack() {
    let _shared = shared();
    let threads: Vec<_> = (0..4)
        .map(|n| {
            std::thread::spawn(move || {
                let output = feature("output");
                for _ in 0..=n {
                    mark(output, c"t");
                }
                std::thread::sleep(std::time::Duration::from_millis(20)); // all threads marked
                assert_eq!(my_stack().0, n + 1);
                for _ in 0..=n {
                    unmark();
                }
                assert_eq!(my_stack().0, 0);
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Calls `function(feature, payload)` from assembly, returning the stack pointer at the `call`
/// and the call's return address: what the trampoline must record as `sp` and call site.
#[cfg(target_arch = "x86_64")]
fn call_recording_sp(
    function: *const c_void,
    feature: *const c_void,
    payload: *const c_char,
) -> (u64, u64) {
    let (sp, return_address): (u64, u64);
    // SAFETY: calls a C-ABI function of the agent with valid arguments; r12 and r13 are
    // callee-saved, so they survive the call; the stack is call-aligned on entry to an asm block.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "lea r13, [rip + 2f]",
            "call {function}",
            "2:",
            function = in(reg) function,
            in("rdi") feature,
            in("rsi") payload,
            out("r12") sp,
            out("r13") return_address,
            clobber_abi("C"),
        );
    }
    (sp, return_address)
}

#[cfg(target_arch = "x86_64")]
#[test]
fn marks_record_the_callers_stack_pointer_and_call_site() {
    let _shared = shared();
    std::thread::spawn(|| {
        let output = feature("output");
        let (sp, site) = call_recording_sp(agent().mark as *const c_void, output, c"x".as_ptr());
        let (sp2, site2) =
            call_recording_sp(agent().mark as *const c_void, output, std::ptr::null());
        let (sp3, _) =
            call_recording_sp(agent().antimark as *const c_void, output, std::ptr::null());
        let (depth, records) = my_stack();
        assert_eq!(depth, 3);
        assert_eq!((records[0].kind, records[0].sp), (abi::KIND_NAME, sp));
        assert_eq!(
            (records[1].kind, records[1].sp, records[1].payload),
            (abi::KIND_CALL_SITE, sp2, site2)
        );
        assert_eq!(records[1].payload_len, 0);
        assert_eq!((records[2].kind, records[2].sp), (abi::KIND_ANTIMARK, sp3));
        assert_ne!(site, site2, "two call sites");
        for _ in 0..3 {
            unmark();
        }
    })
    .join()
    .unwrap();
}

/// `fsprof run --rate ACCURACY_RATE -o DIR -- PROGRAM SECS --truth DIR/truth.json` for a program
/// outside this crate.
///
/// With `agent`, `--agent` (else none: the chain targets' truth knows nothing of built-in features).
fn run_program(dir: &Path, program: &Path, secs: f64, agent: bool) -> String {
    let output = Command::new(fsprof())
        .arg("run")
        .args(["--rate", ACCURACY_RATE])
        .args(agent.then_some("--agent"))
        .arg("-o")
        .arg(dir)
        .arg("--")
        .arg(program)
        .arg(secs.to_string())
        .arg("--truth")
        .arg(dir.join("truth.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "fsprof run failed: {stderr}");
    assert!(stderr.contains("exited with code 0"), "{stderr}");
    stderr
}

#[test]
fn c_program_shares_match_its_own_truth() {
    let _serial = serial();
    let build = tempdir();
    let program = build_c_marks(build.path());
    let dir = tempdir();
    run_program(dir.path(), &program.exe, 3.0, true);
    let mut report = report_json(dir.path());
    // The NULL-payload instance is a call site; the program names it "<call site>". The agent
    // is preloaded (and linked): its built-in features must stay out of the program's shares.
    let mut sites = 0;
    let before = report["features"].to_string();
    for feature in report["features"].as_array_mut().unwrap() {
        let name = feature["name"].clone();
        for instance in feature["instances"].as_array_mut().unwrap() {
            let payload = instance["payload"].as_str().unwrap();
            // Symbolized as `worker (…/marks.c:LINE)` (the agent's own call sites in marks.c,
            // built-in output of its truth file, are in `main`).
            if payload.starts_with("worker (") && payload.contains("marks.c:") {
                assert_eq!(name, "output");
                instance["payload"] = Value::from("<call site>");
                sites += 1;
            }
        }
    }
    assert_eq!(
        sites, 1,
        "one call site, the same in both threads: {before}"
    );
    // Names read while the program ran stay known for its last samples, handled after its exit
    // (the region's disappearance once made fsprof forget them: `<unreadable feature at …>`).
    assert!(!before.contains("unreadable"), "{before}");
    assert_shares_match(&report, &truth(dir.path()));
}

/// Checks a native-stack target's truth: its chains, and its shares as fsprof reports them.
fn check_chain_target(dir: &Path, chains: usize) -> Value {
    let truth = truth(dir);
    let listed = truth["chains"].as_array().unwrap();
    assert_eq!(listed.len(), chains, "{truth}");
    for chain in listed {
        assert!(chain["tid"].as_u64().unwrap() > 0);
        assert!(!chain["frames"].as_array().unwrap().is_empty());
        let feature = chain["feature"].as_str().unwrap();
        assert!(truth["features"][feature]["ms"].as_f64().unwrap() > 0.0);
    }
    assert_shares_match(&report_json(dir), &truth);
    truth
}

#[test]
fn rust_chain_target_tells_the_truth() {
    let _serial = serial();
    let dir = tempdir();
    run_program(
        dir.path(),
        Path::new(env!("CARGO_BIN_EXE_fsprof-chain")),
        3.0,
        false,
    );
    #[cfg(target_arch = "x86_64")]
    assert_separate_frames_without_frame_pointer(
        Path::new(env!("CARGO_BIN_EXE_fsprof-chain")),
        &[
            "fsprof_chain::main",
            "fsprof_chain::alpha_outer",
            "fsprof_chain::alpha_middle",
            "fsprof_chain::alpha_inner",
            "fsprof_chain::beta_outer",
            "fsprof_chain::beta_inner",
        ],
    );
    let truth = check_chain_target(dir.path(), 2);
    // Two busy threads, each inside its mark nearly all the time.
    let total = truth["total_ms"].as_f64().unwrap();
    for feature in ["alpha", "beta"] {
        let share = truth["features"][feature]["ms"].as_f64().unwrap() / total;
        assert!((0.45..=0.51).contains(&share), "{feature}: {share}");
    }
}

#[test]
fn c_chain_target_builds_without_frame_pointers_and_tells_the_truth() {
    let _serial = serial();
    let build = tempdir();
    let program = build_c_chain(build.path());
    // Each function of the chain is a frame of its own, in the module the truth says.
    #[cfg(target_arch = "x86_64")]
    {
        assert_separate_frames_without_frame_pointer(
            &program.exe,
            &["main", "c_outer", "c_middle"],
        );
        let leaf = program.lib_dir.join("libleaf.so");
        assert_separate_frames_without_frame_pointer(&leaf, &["leaf_work"]);
    }
    let dir = tempdir();
    run_program(dir.path(), &program.exe, 3.0, false);
    let truth = check_chain_target(dir.path(), 1);
    let share =
        truth["features"]["leaf"]["ms"].as_f64().unwrap() / truth["total_ms"].as_f64().unwrap();
    assert!(share > 0.95, "{share}");
}
