use super::*;
use crate::symbolize::debug_files::{build_id, build_id_paths, crc32};
use crate::symbolize::demangle::{demangle, MAX_NAME};
use object::{ObjectSegment, SegmentFlags};
use std::fs::File;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A C program with a function inlined into another; `INNER` and `CALL` mark lines.
const INLINE_C: &str = r#"volatile int sink;

static inline __attribute__((always_inline)) int inner(int x) {
sink = x * 3; /* INNER */
sink = sink + x;
return sink;
}

__attribute__((noinline)) int outer(int x) {
int r = inner(x); /* CALL */
return r * 2;
}

int main(int argc, char **argv) {
(void)argv;
return outer(argc);
}
"#;

/// The 1-based line of `INLINE_C` holding `marker`.
fn line_of(marker: &str) -> u32 {
    INLINE_C
        .lines()
        .position(|line| line.contains(marker))
        .unwrap() as u32
        + 1
}

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "fsprof-symbols-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Compiles `source` with `compiler` (`gcc` or `g++`) and `flags` into `dir/name`.
fn compile(dir: &Path, compiler: &str, source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let extension = if compiler == "g++" { "cpp" } else { "c" };
    let source_path = dir.join(format!("{name}.{extension}"));
    std::fs::write(&source_path, source).unwrap();
    let output = dir.join(name);
    run(Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&output)
        .arg(&source_path));
    output
}

/// `(address, size)` of `symbol` (mangled) as `nm` states them.
fn nm(path: &Path, symbol: &str) -> (u64, u64) {
    let output = Command::new("nm").arg("-S").arg(path).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.len() == 4 && fields[3] == symbol)
        .map(|fields| {
            (
                u64::from_str_radix(fields[0], 16).unwrap(),
                u64::from_str_radix(fields[1], 16).unwrap(),
            )
        })
        .unwrap_or_else(|| panic!("{symbol} not in nm's output for {}", path.display()))
}

/// `(p_vaddr, p_offset, p_vaddr + p_memsz)` of the executable segments of `object`, merged.
fn executable_segment(object: &object::File) -> (u64, u64, u64) {
    let mut found: Option<(u64, u64, u64)> = None;
    for segment in object.segments() {
        let SegmentFlags::Elf { p_flags } = segment.flags() else {
            continue;
        };
        if p_flags & object::elf::PF_X == 0 {
            continue;
        }
        let (offset, _) = segment.file_range();
        let end = segment.address() + segment.size();
        found = Some(match found {
            None => (segment.address(), offset, end),
            Some((address, offset, old_end)) => (address, offset, old_end.max(end)),
        });
    }
    found.expect("no executable segment")
}

/// A module for a file not loaded anywhere: bias 0, so lookup addresses are ELF addresses.
fn file_module(path: &Path) -> Module {
    let image = Image::map(&File::open(path).unwrap()).unwrap();
    image_module(path, image)
}

fn image_module(path: &Path, image: Image) -> Module {
    let (start, _, end) = executable_segment(&object::File::parse(&*image).unwrap());
    Module {
        name: path.file_name().unwrap().to_str().unwrap().to_owned(),
        path: path.to_str().unwrap().to_owned(),
        range: start..end,
        bias: 0,
        inode: 0,
        image,
    }
}

/// The executable mapping of the file at `path` in this process, as fsprof would see it.
fn mapped_module(path: &Path) -> Module {
    let image = Image::map(&File::open(path).unwrap()).unwrap();
    let (vaddr, p_offset, _) = executable_segment(&object::File::parse(&*image).unwrap());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !fields[1].contains('x') || Path::new(fields[5]) != path {
            continue;
        }
        let (start, end) = fields[0].split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let offset = u64::from_str_radix(fields[2], 16).unwrap();
        // The mapping's first byte is file offset `offset`, which the ELF places at
        // `vaddr - p_offset + offset`.
        let bias = start.wrapping_sub(vaddr.wrapping_sub(p_offset).wrapping_add(offset));
        return Module {
            name: path.file_name().unwrap().to_str().unwrap().to_owned(),
            path: path.to_str().unwrap().to_owned(),
            range: start..end,
            bias,
            inode: 0,
            image,
        };
    }
    panic!("{} is not mapped executable", path.display());
}

/// A directory with nothing in it, so that tests do not find the machine's debug files.
fn no_debug_dirs() -> Vec<PathBuf> {
    vec![PathBuf::from("/nonexistent/fsprof-debug")]
}

/// Checks that some address in `outer` symbolizes to `outer` with `inner` inlined into it,
/// at the right lines, and that every address in it has `outer` as its physical function.
fn check_inlined(symbolizer: &mut Symbolizer, module: &str, outer: (u64, u64)) {
    let (address, size) = outer;
    let mut seen_inlined = false;
    for lookup in address..address + size {
        let frames = symbolizer.symbolize(lookup);
        assert_eq!(frames[0].function, "outer", "at {lookup:#x}: {frames:?}");
        assert!(!frames[0].inlined);
        assert!(frames.iter().all(|frame| frame.module == module));
        assert!(frames.iter().skip(1).all(|frame| frame.inlined));
        if frames.len() == 2 {
            seen_inlined = true;
            assert!(frames[0].file.as_deref().unwrap().ends_with("inline.c"));
            assert_eq!(frames[0].line, Some(line_of("CALL")), "{frames:?}");
            assert_eq!(frames[1].function, "inner");
            assert!(frames[1].file.as_deref().unwrap().ends_with("inline.c"));
            let line = frames[1].line.unwrap();
            let body = line_of("INNER");
            assert!((body..body + 3).contains(&line), "{frames:?}");
        }
    }
    assert!(seen_inlined, "no address in outer had inner inlined");
}

#[test]
fn dwarf_gives_inlined_frames_and_lines() {
    let dir = temp_dir("dwarf");
    // Plain, and with zlib-compressed debug sections.
    for flags in [&["-g", "-O2"][..], &["-g", "-O2", "-gz"][..]] {
        let program = compile(&dir, "gcc", INLINE_C, "inline", flags);
        let outer = nm(&program, "outer");
        let module = file_module(&program);
        let compressed = object::File::parse(&*module.image)
            .unwrap()
            .section_by_name(".debug_info")
            .unwrap()
            .compressed_data()
            .unwrap()
            .format
            != CompressionFormat::None;
        assert_eq!(compressed, flags.contains(&"-gz"));
        let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
        check_inlined(&mut symbolizer, "inline", outer);
    }
}

#[test]
fn inline_depth_is_capped_keeping_the_outermost() {
    let depth = 100;
    let mut source = String::from("volatile int sink;\n");
    source += &format!(
        "static inline __attribute__((always_inline)) void f{}(int x) {{ sink = x; }}\n",
        depth - 1
    );
    for level in (0..depth - 1).rev() {
        source += &format!(
            "static inline __attribute__((always_inline)) void f{level}(int x) \
             {{ f{}(x + 1); sink = x; }}\n",
            level + 1
        );
    }
    source += "__attribute__((noinline)) int deep(int x) { f0(x); return 0; }\n";
    source += "int main(int argc, char **argv) { (void)argv; return deep(argc); }\n";
    let dir = temp_dir("deep");
    let program = compile(&dir, "gcc", &source, "deep", &["-g", "-O2"]);
    let (address, size) = nm(&program, "deep");
    let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
    let deepest = (address..address + size)
        .map(|lookup| symbolizer.symbolize(lookup))
        .max_by_key(Vec::len)
        .unwrap();
    assert_eq!(deepest.len(), MAX_FRAMES);
    assert_eq!(deepest[0].function, "deep");
    for (level, frame) in deepest.iter().enumerate().skip(1) {
        assert_eq!(frame.function, format!("f{}", level - 1));
    }
}

#[test]
fn symbol_table_without_dwarf() {
    let dir = temp_dir("symtab");
    let program = compile(&dir, "gcc", INLINE_C, "inline", &["-O2"]);
    let (outer, _) = nm(&program, "outer");
    let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
    let frames = symbolizer.symbolize(outer + 1);
    assert_eq!(
        frames,
        vec![frame("outer".into(), None, None, "inline", false)]
    );
}

#[test]
fn stripped_falls_back_to_dynsym_then_the_functions_start() {
    let dir = temp_dir("stripped");
    let source = r#"
__attribute__((noinline, noclone, used)) static int hidden_helper(int x) { return x * 7 + 1; }
int exported_function(int x) { return hidden_helper(x) + 3; }
"#;
    let library = compile(
        &dir,
        "gcc",
        source,
        "libdemo.so",
        &["-O2", "-shared", "-fPIC"],
    );
    let (exported, _) = nm(&library, "exported_function");
    let (hidden, _) = nm(&library, "hidden_helper");
    run(Command::new("strip").arg(&library));
    let module = file_module(&library);
    {
        let object = object::File::parse(&*module.image).unwrap();
        assert!(object.symbol_table().is_none(), "strip left .symtab");
    }
    let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
    assert_eq!(
        symbolizer.symbolize(exported + 1)[0].function,
        "exported_function"
    );
    let frames = symbolizer.symbolize(hidden + 1);
    assert_eq!(
        frames,
        vec![frame(
            // The function's start, from the unwind tables: every address in it gets this name.
            format!("libdemo.so+{hidden:#x}"),
            None,
            None,
            "libdemo.so",
            false
        )]
    );
}

#[test]
fn cpp_names_are_demangled() {
    let dir = temp_dir("cpp");
    let source = r#"
volatile int sink;
namespace geometry {
__attribute__((noinline)) int area(int w, int h) { return w * h + sink; }
}
int main(int argc, char **) { return geometry::area(argc, argc); }
"#;
    for flags in [&["-O2"][..], &["-O2", "-g"][..]] {
        let program = compile(&dir, "g++", source, "shapes", flags);
        let (area, _) = nm(&program, "_ZN8geometry4areaEii");
        let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
        let frames = symbolizer.symbolize(area + 1);
        assert_eq!(frames[0].function, "geometry::area(int, int)", "{flags:?}");
        assert_eq!(frames[0].file.is_some(), flags.contains(&"-g"));
    }
}

/// `-g -O2` program `dir/inline` split into a stripped file and `dir/inline.debug`.
fn split_debug(dir: &Path, build_id: bool, strip_flag: &str) -> (PathBuf, PathBuf, (u64, u64)) {
    let id_flag = if build_id {
        "-Wl,--build-id"
    } else {
        "-Wl,--build-id=none"
    };
    let program = compile(dir, "gcc", INLINE_C, "inline", &["-g", "-O2", id_flag]);
    let outer = nm(&program, "outer");
    let debug = dir.join("inline.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&program)
        .arg(&debug));
    run(Command::new("strip").arg(strip_flag).arg(&program));
    (program, debug, outer)
}

#[test]
fn debuglink_next_to_the_file_and_under_the_debug_dir() {
    let dir = temp_dir("debuglink");
    let (program, debug, outer) = split_debug(&dir, false, "--strip-debug");
    run(Command::new("objcopy")
        .current_dir(&*dir)
        .arg("--add-gnu-debuglink=inline.debug")
        .arg(&program));

    // Next to the file, even after the file itself was replaced by something else (the
    // image is what counts, not the path).
    let module = file_module(&program);
    let replacement = dir.join("replacement");
    std::fs::write(&replacement, b"not an ELF file").unwrap();
    std::fs::rename(&replacement, &program).unwrap();
    let mut symbolizer =
        Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
    check_inlined(&mut symbolizer, "inline", outer);

    // In .debug/ next to it.
    std::fs::create_dir(dir.join(".debug")).unwrap();
    std::fs::rename(&debug, dir.join(".debug/inline.debug")).unwrap();
    let mut symbolizer =
        Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
    check_inlined(&mut symbolizer, "inline", outer);

    // Under a debug directory, at the file's directory.
    let debug_dir = temp_dir("debuglink-dir");
    let under = debug_dir.join(dir.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&under).unwrap();
    std::fs::rename(dir.join(".debug/inline.debug"), under.join("inline.debug")).unwrap();
    let mut symbolizer =
        Symbolizer::with_debug_dirs(std::slice::from_ref(&module), vec![debug_dir.to_path_buf()]);
    check_inlined(&mut symbolizer, "inline", outer);

    // A debug file with the wrong CRC is not used: the symbol table still names the
    // function, but there are no lines.
    let mut bytes = std::fs::read(under.join("inline.debug")).unwrap();
    bytes.push(0);
    std::fs::write(dir.join("inline.debug"), bytes).unwrap();
    let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
    let frames = symbolizer.symbolize(outer.0 + 1);
    assert_eq!(
        frames,
        vec![frame("outer".into(), None, None, "inline", false)]
    );
}

#[test]
fn debug_file_by_build_id() {
    let dir = temp_dir("build-id");
    let (program, debug, outer) = split_debug(&dir, true, "--strip-all");
    let module = file_module(&program);
    let id = {
        let object = object::File::parse(&*module.image).unwrap();
        assert!(object.symbol_table().is_none(), "strip left .symtab");
        build_id(&object).unwrap().to_vec()
    };
    let debug_dir = temp_dir("build-id-dir");
    let path = build_id_paths(&id, &[debug_dir.to_path_buf()]).remove(0);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::rename(&debug, &path).unwrap();

    // Not found without the debug directory: no symbols at all.
    let mut symbolizer =
        Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
    assert_eq!(
        symbolizer.symbolize(outer.0 + 1)[0].function,
        format!("inline+{:#x}", outer.0)
    );

    let mut symbolizer = Symbolizer::with_debug_dirs(&[module], vec![debug_dir.to_path_buf()]);
    check_inlined(&mut symbolizer, "inline", outer);
}

#[inline(never)]
fn rust_symbolization_target(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(31).rotate_left(7)
}

/// Whether `name` has a Rust hash (`::h` and 16 hex digits) in it.
fn has_hash(name: &str) -> bool {
    name.match_indices("::h").any(|(at, _)| {
        let rest = &name.as_bytes()[at + 3..];
        rest.len() >= 16 && rest[..16].iter().all(u8::is_ascii_hexdigit)
    })
}

#[test]
fn rust_names_without_hash() {
    assert_eq!(rust_symbolization_target(1), 31 << 7);
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let module = mapped_module(&exe);
    let address = rust_symbolization_target as *const () as usize as u64 + 1;
    let mut symbolizer =
        Symbolizer::with_debug_dirs(std::slice::from_ref(&module), no_debug_dirs());
    let frames = symbolizer.symbolize(address);
    let function = &frames[0].function;
    assert!(
        function.ends_with("symbols::tests::rust_symbolization_target"),
        "{frames:?}"
    );
    assert!(!has_hash(function), "{frames:?}");
    assert_eq!(frames[0].module, module.name);
    assert!(frames[0]
        .file
        .as_deref()
        .is_some_and(|file| file.ends_with("symbols/tests.rs")));

    // Demangling the symbol table's name directly, too.
    let parsed = Parsed::new(&module, &[], None);
    let raw = parsed
        .symbols
        .lookup(address.wrapping_sub(module.bias))
        .unwrap();
    let raw = std::str::from_utf8(raw).unwrap();
    assert!(raw.starts_with("_ZN") || raw.starts_with("_R"), "{raw}");
    let demangled = demangle(raw, None);
    assert!(
        demangled.ends_with("symbols::tests::rust_symbolization_target"),
        "{demangled}"
    );
    assert!(!has_hash(&demangled));
}

#[test]
fn system_library() {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let libc = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/libc.so"))
        .expect("libc is not mapped");
    let module = mapped_module(Path::new(libc));
    let address = nix::libc::getpid as *const () as usize as u64 + 1;
    assert!(module.range.contains(&address));
    let frames = Symbolizer::new(&[module]).symbolize(address);
    assert!(frames[0].function.contains("getpid"), "{frames:?}");
}

#[test]
fn address_in_no_module() {
    let mut symbolizer = Symbolizer::new(&[]);
    assert_eq!(
        symbolizer.symbolize(0x1234),
        vec![frame("0x1234".into(), None, None, "", false)]
    );
}

#[test]
fn long_names_are_cut() {
    let long = "x".repeat(10_000);
    let name = demangle(&long, None);
    assert_eq!(name.len(), MAX_NAME);
    assert!(name.ends_with('…'));
    // A C++ name whose demangling outgrows the bound: each `S_` repeats the type so far.
    let mangled = format!("_Z1fPFvPA1_iE{}", "S_".repeat(2000));
    let name = demangle(&mangled, None);
    assert!(
        name.starts_with("f(void (*)(int (*) [1])") && name.ends_with('…'),
        "{name}"
    );
    assert!(name.len() <= MAX_NAME);
    // Not UTF-8-splitting.
    let name = demangle(&"é".repeat(5000), None);
    assert!(name.len() <= MAX_NAME && name.ends_with('…'));
}

#[test]
fn crc32_is_zlibs() {
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut bytewise = !0u32;
    for &byte in &bytes {
        bytewise ^= byte as u32;
        for _ in 0..8 {
            bytewise = if bytewise & 1 != 0 {
                0xedb8_8320 ^ (bytewise >> 1)
            } else {
                bytewise >> 1
            };
        }
    }
    assert_eq!(crc32(&bytes), !bytewise);
}

/// A tiny xorshift generator, for reproducible garbage.
fn garbage(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Files with damaged DWARF, truncated or garbage: every lookup falls back, none panics.
/// (Calls the parser without `symbolize`'s `catch_unwind`, so that a panic fails the test.)
#[test]
fn hostile_files_do_not_panic() {
    let dir = temp_dir("hostile");
    let program = compile(&dir, "gcc", INLINE_C, "inline", &["-g", "-O2"]);
    let original = std::fs::read(&program).unwrap();
    let base = file_module(&program);
    let sections: Vec<(u64, u64)> = {
        let object = object::File::parse(&*base.image).unwrap();
        object
            .sections()
            .filter(|section| section.name().is_ok_and(|name| name.starts_with(".debug")))
            .filter_map(|section| section.file_range())
            .collect()
    };
    assert!(!sections.is_empty());

    let mut images = Vec::new();
    for seed in 1..=40u64 {
        let mut bytes = original.clone();
        // Garbage over one debug section, or a few bytes flipped in all of them.
        if seed % 2 == 0 {
            let (offset, size) = sections[seed as usize % sections.len()];
            let noise = garbage(seed, size as usize);
            bytes[offset as usize..(offset + size) as usize].copy_from_slice(&noise);
        } else {
            for (offset, size) in &sections {
                for (i, noise) in garbage(seed, 16).chunks(2).enumerate() {
                    let at = offset + (noise[0] as u64 * 7919 + i as u64 * 104_729) % size;
                    bytes[at as usize] ^= noise[1] | 1;
                }
            }
        }
        images.push(bytes);
    }
    images.push(original[..original.len() / 2].to_vec());
    images.push(original[..200].to_vec());
    images.push(garbage(7, original.len()));
    images.push(Vec::new());

    for bytes in images {
        let module = Module {
            image: Image::from_vec(bytes),
            ..base.clone()
        };
        let parsed = Parsed::new(&module, &[], None);
        for address in module.range.clone() {
            let frames = parsed.frames(&module, address);
            assert!(!frames.is_empty());
            assert!(frames.len() <= MAX_FRAMES);
            assert!(frames.iter().all(|frame| frame.module == "inline"
                && !frame.function.is_empty()
                && frame.function.len() <= MAX_NAME));
        }
    }
}

/// Times parsing and lookups over this test binary (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn measure() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let module = mapped_module(&exe);
    let range = module.range.clone();
    let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
    let started = std::time::Instant::now();
    symbolizer.symbolize(rust_symbolization_target as *const () as usize as u64 + 1);
    let first = started.elapsed();
    let step = ((range.end - range.start) / 100_000).max(1);
    let started = std::time::Instant::now();
    let mut count = 0;
    let mut frames = 0;
    for address in range.step_by(step as usize) {
        frames += symbolizer.symbolize(address).len();
        count += 1;
    }
    let rest = started.elapsed();
    println!(
        "first lookup (parse) {first:?}; {count} lookups in {rest:?} ({:?} each, {frames} frames)",
        rest / count
    );
}

/// ELF files with DWARF (plain and compressed), bytes changed at random (headers, section
/// tables, line programs, abbreviations, compressed streams): symbolizing any address in them
/// never panics out of the symbolizer and gives bounded names, each case in bounded time.
#[test]
fn arbitrary_elf_and_dwarf_give_bounded_names_or_fall_back() {
    let dir = temp_dir("fuzz");
    let images: Vec<(Vec<u8>, (u64, u64, u64))> = [&["-g", "-O2"][..], &["-g", "-O2", "-gz"][..]]
        .iter()
        .map(|flags| {
            let program = compile(&dir, "gcc", INLINE_C, "fuzzed", flags);
            let bytes = std::fs::read(&program).unwrap();
            let segment = executable_segment(&object::File::parse(&*bytes).unwrap());
            (bytes, segment)
        })
        .collect();
    let mut rng = fastrand::Rng::with_seed(17);
    let cases = crate::fuzz::cases(300);
    let mut named = 0;
    for case in 0..cases {
        let (valid, (start, _, end)) = &images[case % images.len()];
        let mut bytes = valid.clone();
        // A few changes anywhere, or many in the first pages (the headers and tables).
        for _ in 0..rng.usize(1..16) {
            let at = if rng.bool() {
                rng.usize(..bytes.len())
            } else {
                rng.usize(..bytes.len().min(4096))
            };
            bytes[at] = rng.u8(..);
        }
        if rng.u8(..4) == 0 {
            bytes = crate::fuzz::mutate(&mut rng, &bytes);
        }
        let module = Module {
            name: "fuzzed".to_owned(),
            path: dir.0.join("fuzzed").to_str().unwrap().to_owned(),
            range: *start..*end,
            bias: 0,
            inode: 0,
            image: Image::from_vec(bytes),
        };
        let began = std::time::Instant::now();
        let mut symbolizer = Symbolizer::with_debug_dirs(&[module], no_debug_dirs());
        for _ in 0..4 {
            let address = rng.u64(*start..*end);
            for frame in symbolizer.symbolize(address) {
                named += usize::from(frame.function == "outer" || frame.function == "main");
                assert!(frame.function.len() <= 4096);
                assert!(frame.file.as_ref().is_none_or(|f| f.len() <= 4096));
            }
        }
        assert!(
            began.elapsed() < std::time::Duration::from_secs(5),
            "case {case}"
        );
    }
    assert!(
        named > 0,
        "no function was ever named: the files were not read"
    );
}

/// A stub of the linkage table has no symbol, in any debug file: it is named as such, and the
/// module is not reported as lacking symbols (a test once failed on a sample in `.plt`).
#[test]
fn plt_stubs_are_named_and_are_not_missing_symbols() {
    let dir = temp_dir("plt");
    let source = "#include <stdio.h>\nint main(void) { puts(\"x\"); return 0; }\n";
    let program = compile(&dir, "gcc", source, "plt", &["-O2", "-Wl,-z,lazy"]);
    let plt = {
        let image = std::fs::read(&program).unwrap();
        let object = object::File::parse(&*image).unwrap();
        let section = object.section_by_name(".plt").expect("a .plt section");
        section.address()
    };
    let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
    assert_eq!(symbolizer.symbolize(plt + 4)[0].function, "[PLT of plt]");
    assert_eq!(symbolizer.missing_symbols(), None);
}

/// The C runtime's `__do_global_dtors_aux` has no size in the symbol table (nor DWARF, in a
/// program built without `-g`): an address inside it is named by it, as the nearest symbol
/// below, and not reported missing (a sample at a program's exit once was, `module+0x1366`).
#[test]
fn a_function_symbol_without_a_size_names_the_addresses_after_it() {
    let dir = temp_dir("sizeless");
    let source = "int main(void) { return 0; }\n";
    let program = compile(&dir, "gcc", source, "sizeless", &["-O2"]);
    let start = {
        let image = std::fs::read(&program).unwrap();
        let object = object::File::parse(&*image).unwrap();
        let symbol = (object.symbols()).find(|s| s.name() == Ok("__do_global_dtors_aux"));
        match symbol {
            Some(symbol) if symbol.size() == 0 => symbol.address(),
            _ => return eprintln!("skipped: no sizeless __do_global_dtors_aux in this C runtime"),
        }
    };
    let mut symbolizer = Symbolizer::with_debug_dirs(&[file_module(&program)], no_debug_dirs());
    assert_eq!(
        symbolizer.symbolize(start + 4)[0].function,
        "__do_global_dtors_aux"
    );
    assert_eq!(symbolizer.missing_symbols(), None);
}

/// Two stripped copies of one program, one where the system keeps its files: both are listed as
/// missing symbols, the system's as such, with the directories looked in.
#[test]
fn modules_without_symbols_are_listed_the_systems_apart() {
    let dir = temp_dir("unnamed-note");
    let source = "__attribute__((noinline)) int f(int x) { return x * 3; }\nint main(int c, char **v) { return f(c); }\n";
    let program = compile(&dir, "gcc", source, "stripped", &["-O2", "-s"]);
    let own = file_module(&program);
    let mut system = file_module(&program);
    system.name = "systool".to_owned();
    system.path = "/usr/bin/systool".to_owned();
    let size = own.range.end - own.range.start;
    system.range = own.range.end + 0x10_0000..own.range.end + 0x10_0000 + size;
    system.bias = system.range.start - own.range.start;
    let at = own.range.start + 4;
    let mut symbolizer = Symbolizer::with_debug_dirs(&[own, system], no_debug_dirs());
    assert!(symbolizer.symbolize(at)[0]
        .function
        .starts_with("stripped+0x"));
    let shifted = at + 0x10_0000 + size;
    assert!(symbolizer.symbolize(shifted)[0]
        .function
        .starts_with("systool+0x"));
    let missing = symbolizer.missing_symbols().unwrap();
    let listed: Vec<(&str, bool)> = (missing.modules.iter())
        .map(|m| (m.name.as_str(), m.system))
        .collect();
    assert_eq!(listed, [("stripped", false), ("systool", true)]);
    assert!(missing.modules[0].first.starts_with("stripped+0x"));
    assert_eq!(missing.debug_dirs, ["/nonexistent/fsprof-debug"]);
    assert!(!missing.debuginfod);
}
