//! The function-name patterns of feature rules, and the names they are matched against.
//!
//! A pattern is `[MODULE!]FUNCTION`. FUNCTION is a path (`core::fmt`, `regex::Regex::new`,
//! `std::__detail::_Compiler`) or a C symbol (`printf`), where `*` stands for any run of
//! characters (`::` included); it matches a frame's function when it matches the whole name or
//! its beginning up to a `::` (so `core::fmt` matches `core::fmt::write`). MODULE, when given,
//! is matched the same way against the frame's file name (`libc.so*!write` matches only libc's
//! `write`).
//!
//! Names are compared without what a user need not spell: generic arguments (`Vec<T>::push` is
//! `Vec::push`), Rust's hash suffixes (already gone from profiles), C++ parameter lists, return
//! types and `const`, and references and pointers in `<&T as Trait>`. A trait method `<T as
//! Trait>::f` is `T::f`; it is also `Trait::f` when `T` is not the program's own type, so that
//! `core::fmt` takes in `<i32 as core::fmt::Display>::fmt` but not the program's own `Display`
//! impl, which `format!` calls back (see `apply.rs`). Not here: which frames are the program's
//! (`symbolize::runtime_code`), and what a match does to a sample (`apply.rs`).

use std::fmt;

/// One pattern of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    module: Option<Glob>,
    function: Glob,
    text: String,
}

impl Pattern {
    /// Parses `[MODULE!]FUNCTION`. The error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let text = text.trim();
        // `MODULE!`: a file name, never a path or an operator (`operator!=` is a function).
        let (module, function) = match text.split_once('!') {
            Some((module, function)) if !module.contains("::") && !module.contains("operator") => {
                (Some(module.trim()), function.trim())
            }
            _ => (None, text),
        };
        if text.contains(',') {
            return Err(format!(
                "the pattern {text:?} has a ',': give one function per pattern (in a file, one per string)"
            ));
        }
        if function.is_empty() || function.chars().all(|c| c == '*' || c == ':') {
            return Err(format!(
                "the pattern {text:?} names no function (write a path such as core::fmt, or a C symbol such as printf)"
            ));
        }
        if module.is_some_and(str::is_empty) {
            return Err(format!(
                "the pattern {text:?} has an empty module before '!' (write MODULE!FUNCTION, e.g. libc.so*!write, or the function alone)"
            ));
        }
        if let Some(bad) = without_operators(function)
            .chars()
            .find(|c| "<>()".contains(*c))
        {
            return Err(format!(
                "the pattern {text:?} has {bad:?}: patterns are written without generic arguments or parameters (Vec::push, not Vec<T>::push)"
            ));
        }
        Ok(Pattern {
            module: module.map(Glob::new),
            function: Glob::new(function),
            text: text.to_owned(),
        })
    }

    /// Whether a frame of function `names` (see `FrameNames`) in module file `module` matches.
    pub fn matches(&self, names: &FrameNames, module: &str) -> bool {
        if let Some(glob) = &self.module {
            if !glob.matches(module) {
                return false;
            }
        }
        names
            .candidates()
            .any(|name| self.function.matches_path(name))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `function` without the symbols of C++ operator names (`operator<<`, `operator()`).
fn without_operators(function: &str) -> String {
    let mut out = String::with_capacity(function.len());
    let mut rest = function;
    while let Some(at) = rest.find("operator") {
        out.push_str(&rest[..at + "operator".len()]);
        let after = &rest[at + "operator".len()..];
        let symbols = after
            .find(|c: char| c.is_alphanumeric() || c == '_' || c == ':' || c == ' ')
            .unwrap_or(after.len());
        rest = &after[symbols..];
    }
    out.push_str(rest);
    out
}

/// A `*` glob, with its literal beginning apart (most patterns have one: a quick refusal).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Glob {
    parts: Vec<String>,
    starts_with_star: bool,
    ends_with_star: bool,
}

impl Glob {
    fn new(text: &str) -> Glob {
        Glob {
            parts: text
                .split('*')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            starts_with_star: text.starts_with('*'),
            ends_with_star: text.ends_with('*'),
        }
    }

    /// Whether the glob matches all of `text`.
    fn matches(&self, text: &str) -> bool {
        let Some((last, _)) = self.parts.split_last() else {
            return self.starts_with_star || text.is_empty(); // `*`, or nothing
        };
        let mut at = 0;
        for (i, part) in self.parts.iter().enumerate() {
            if i == 0 && !self.starts_with_star {
                if !text.starts_with(part.as_str()) {
                    return false;
                }
                at = part.len();
                if self.parts.len() == 1 && !self.ends_with_star {
                    return at == text.len();
                }
            } else if i + 1 == self.parts.len() && !self.ends_with_star {
                // The last part ends the text, after what the others took.
                return text.len() >= at + last.len() && text.ends_with(last.as_str());
            } else {
                // Leftmost: leaves the most room for the parts after it.
                match text[at..].find(part.as_str()) {
                    Some(found) => at += found + part.len(),
                    None => return false,
                }
            }
        }
        true
    }

    /// Whether the glob matches all of `path`, or its beginning up to a `::`.
    fn matches_path(&self, path: &str) -> bool {
        if let Some(first) = self.parts.first().filter(|_| !self.starts_with_star) {
            if !path.starts_with(first.as_str()) {
                return false;
            }
        }
        self.matches(path)
            || path
                .match_indices("::")
                .any(|(end, _)| end > 0 && self.matches(&path[..end]))
    }
}

/// The names a frame's function is matched by: its plain path, and for a trait method of a
/// type that is not the program's own, the trait's path too; for a C symbol, also the public name
/// of the C library's internal aliases (see [`c_alias`]). An inlined function's frame often
/// has its short name alone (`insertion_sort_shift_left<...>`: line tables give no path); when
/// its source file is in Rust's standard library or a crate from Cargo's registry, the module
/// path the file stands for is put before it (`core::slice::sort::shared::smallsort::...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameNames {
    /// The function's path without generics, parameters or return type.
    pub path: String,
    /// `Trait::f` for `<T as Trait>::f`.
    pub trait_path: Option<String>,
    /// A C symbol's public name (see [`c_alias`]).
    pub alias: Option<String>,
}

impl FrameNames {
    /// The names of a demangled function name. `own_type` tells whether a type path is the
    /// program's own (its trait methods are matched by the type alone).
    pub fn new(function: &str, file: Option<&str>, own_type: impl Fn(&str) -> bool) -> FrameNames {
        let mut names = FrameNames::of_name(function, own_type);
        if !names.path.contains("::") {
            if let Some(module) = file.and_then(module_of_file) {
                names.path = format!("{module}::{}", names.path);
            }
        }
        names
    }

    fn of_name(function: &str, own_type: impl Fn(&str) -> bool) -> FrameNames {
        let name = without_clone_suffix(function.trim());
        if let Some((self_type, trait_name, rest)) = split_qualified(name) {
            let self_path = simple_path(&self_type);
            let method = simple_path(rest);
            let join = |head: &str| match method.is_empty() {
                true => head.to_owned(),
                false => format!("{head}::{method}"),
            };
            let trait_path = trait_name
                .filter(|_| !own_type(&self_path))
                .map(|t| join(&simple_path(&t)));
            return FrameNames {
                path: join(&self_path),
                trait_path,
                alias: None,
            };
        }
        let (path, alias) = c_alias(name);
        FrameNames {
            path: simple_path(path),
            trait_path: None,
            alias,
        }
    }

    fn candidates(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.path.as_str())
            .chain(self.trait_path.as_deref())
            .chain(self.alias.as_deref())
    }
}

/// The Rust module path a source file of the standard library (`/rustc/<commit>/library/core/
/// src/slice/sort/stable/mod.rs`: `core::slice::sort::stable`) or of a crate from Cargo's
/// registry (`.../registry/src/<index>/serde_json-1.0.1/src/ser.rs`: `serde_json::ser`) stands
/// for; `None` for other files.
fn module_of_file(file: &str) -> Option<String> {
    let (krate, rest) = if let Some(at) = file.find("library/") {
        let rest = &file[at + "library/".len()..];
        let (krate, rest) = rest.split_once("/src/")?;
        (krate.to_owned(), rest)
    } else {
        let at = file
            .find("/registry/src/")
            .or_else(|| file.find("/git/checkouts/"))?;
        let mut parts = file[at + 1..].splitn(5, '/'); // registry, src, index, crate-version, rest
        let (_, _, _, versioned, rest) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
        let rest = rest.strip_prefix("src/")?;
        // `serde_json-1.0.154`: the name is what comes before the last `-` followed by a digit.
        let cut = versioned
            .rmatch_indices('-')
            .find(|(i, _)| versioned[i + 1..].starts_with(|c: char| c.is_ascii_digit()))?
            .0;
        (versioned[..cut].replace('-', "_"), rest)
    };
    let rest = rest.strip_suffix(".rs")?;
    let mut path = vec![krate];
    for part in rest.split('/') {
        if !matches!(part, "mod" | "lib" | "main") && !part.is_empty() {
            path.push(part.to_owned());
        }
    }
    Some(path.join("::"))
}

/// A C symbol as glibc's debugging information names it (`__GI___libc_write`: `__GI_` marks the
/// library's hidden alias of `__libc_write`) without that mark, and the public function it is
/// one of the names of, where that differs: without its leading underscores and `libc_`
/// (`__libc_write`: `write`; `___pthread_cond_timedwait64`: `pthread_cond_timedwait64`;
/// `__fprintf`: `fprintf`). Which alias a symbol table or its debugging information gives a
/// function depends on the library's build (one host's `write` is another's `__GI___libc_write`),
/// so that rules can name the function a program calls. Anything else (a path, a C++ name) as it
/// is.
fn c_alias(name: &str) -> (&str, Option<String>) {
    let c_symbol = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !c_symbol {
        return (name, None);
    }
    let name = name.strip_prefix("__GI_").unwrap_or(name);
    let bare = name.trim_start_matches('_');
    let public = bare.strip_prefix("libc_").unwrap_or(bare);
    let alias = (!public.is_empty() && public != name).then(|| public.to_owned());
    (name, alias)
}

/// `name` without GCC's ` [clone .isra.0]` and similar suffixes.
fn without_clone_suffix(name: &str) -> &str {
    match name.find(" [clone ") {
        Some(at) => name[..at].trim_end(),
        None => name,
    }
}

/// For `<T as Trait>::rest` (or `<T>::rest`): `T`, `Trait` and `rest`.
fn split_qualified(name: &str) -> Option<(String, Option<String>, &str)> {
    let inner_start = name.strip_prefix('<')?;
    let close = matching_close(name, 0)?;
    let inner = &inner_start[..close - 1];
    let rest = name[close + 1..].trim_start_matches(':');
    let (self_type, trait_name) = match split_top_level(inner, " as ") {
        Some((t, tr)) => (t, Some(tr.trim().to_owned())),
        None => (inner, None),
    };
    Some((strip_indirection(self_type).to_owned(), trait_name, rest))
}

/// The index of the `>` closing the `<` at `open` (nested brackets counted).
fn matching_close(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices().skip_while(|(i, _)| *i < open) {
        match c {
            '<' => depth += 1,
            '>' if i > 0 && text.as_bytes()[i - 1] == b'-' => {} // `->` in a fn type
            '>' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` split at the first `sep` outside brackets.
fn split_top_level<'a>(text: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth -= 1,
            _ if depth == 0 && text[i..].starts_with(sep) => {
                return Some((&text[..i], &text[i + sep.len()..]));
            }
            _ => {}
        }
    }
    None
}

/// A type without leading references, pointers and `dyn`; slices and arrays as `slice`.
fn strip_indirection(mut text: &str) -> &str {
    loop {
        text = text.trim_start();
        let next = ["&mut ", "&", "*const ", "*mut ", "dyn ", "impl ", "mut "]
            .iter()
            .find_map(|prefix| text.strip_prefix(prefix));
        match next {
            Some(inner) => text = inner,
            None => break,
        }
    }
    if text.starts_with('[') {
        "slice"
    } else {
        text
    }
}

/// A function or type name as a plain path: generic arguments, parameter lists, brace groups'
/// contents after their first word (`{lambda(int)#1}` is `{lambda}`), a C++ return type and
/// qualifiers dropped, `::` runs collapsed.
fn simple_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut angle = 0u32; // depth of the generic arguments being dropped
    let mut brace = 0u32; // depth of `{...}`
    let mut brace_word = false; // in the first word of the innermost brace group
    let mut skip_to = 0; // a parameter list being dropped ends before this
    for (i, c) in name.char_indices() {
        if i < skip_to {
            continue;
        }
        let before = &name[..i];
        let operator = before.ends_with("operator");
        if angle > 0 {
            match c {
                '<' => angle += 1,
                '>' if !before.ends_with('-') => angle -= 1,
                _ => {}
            }
            continue;
        }
        match c {
            '<' if !operator && !before.ends_with("operator<") => angle = 1,
            '{' => {
                brace += 1;
                brace_word = true;
                out.push('{');
            }
            '}' if brace > 0 => {
                brace -= 1;
                brace_word = false;
                out.push('}');
            }
            _ if brace > 0 => {
                if brace_word && (c.is_alphanumeric() || c == '_') {
                    out.push(c);
                } else {
                    brace_word = false;
                }
            }
            '(' if !operator => {
                // A parameter list: the end of the name, unless a path goes on after it
                // (a function-local name). A Go method's receiver (`os.(*File).Sync`) is its
                // type's name: `os.File.Sync`.
                match closing_paren(name, i) {
                    Some(end) if name[end + 1..].trim_start().starts_with("::") => {
                        skip_to = end + 1
                    }
                    Some(end) if before.ends_with('.') && name[end + 1..].starts_with('.') => {
                        out.push_str(name[i + 1..end].trim_start_matches('*'));
                        skip_to = end + 1;
                    }
                    _ => break,
                }
            }
            _ => out.push(c),
        }
    }
    let mut path = out.trim();
    // A C++ return type (`void std::__sort`): the last word, `operator ...` kept whole.
    if let Some(op) = path.find("operator") {
        path = &path[path[..op].rfind(' ').map_or(0, |s| s + 1)..];
    } else if let Some(space) = path.rfind(' ') {
        path = &path[space + 1..];
    }
    let mut path = path.to_owned();
    while path.contains("::::") {
        path = path.replace("::::", "::");
    }
    path.trim_matches(':').to_owned()
}

/// The index of the `)` closing the `(` at `open`.
fn closing_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0u32;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(function: &str) -> FrameNames {
        FrameNames::new(function, None, |path| path.starts_with("myprog"))
    }

    #[test]
    fn the_c_librarys_internal_aliases_match_the_functions_programs_call() {
        let write = Pattern::parse("libc.so*!write").unwrap();
        let libc = "libc.so.6";
        for name in ["write", "__write", "__libc_write", "__GI___libc_write"] {
            assert!(write.matches(&names(name), libc), "{name}");
        }
        assert!(!write.matches(&names("__GI___libc_write"), "prog"));
        assert!(!write.matches(&names("writev"), libc));
        let wait = Pattern::parse("libc.so*!pthread_cond_timedwait*").unwrap();
        assert!(wait.matches(&names("___pthread_cond_timedwait64"), libc));
        let fflush = Pattern::parse("libc.so*!_IO_fflush").unwrap();
        assert!(fflush.matches(&names("__GI__IO_fflush"), libc));
        // Paths and C++ names are left alone.
        assert_eq!(names("__gnu_cxx::__verbose_terminate_handler").alias, None);
        assert_eq!(names("malloc").alias, None);
    }

    #[test]
    fn short_inlined_names_get_the_module_their_file_stands_for() {
        let std = "/rustc/abc123/library/core/src/slice/sort/shared/smallsort.rs";
        let names = FrameNames::new("insertion_sort_shift_left<u64, F>", Some(std), |_| false);
        assert_eq!(
            names.path,
            "core::slice::sort::shared::smallsort::insertion_sort_shift_left"
        );
        let crate_file = "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde_json-1.0.154/src/ser.rs";
        let names = FrameNames::new("serialize_value<W>", Some(crate_file), |_| false);
        assert_eq!(names.path, "serde_json::ser::serialize_value");
        let short = FrameNames::new(
            "c_unicode_class",
            Some("regex-automata-0.4.19/src/nfa/thompson/compiler.rs"),
            |_| false,
        );
        assert_eq!(short.path, "c_unicode_class"); // a shortened path: not known
        let own = FrameNames::new("helper", Some("src/main.rs"), |_| false);
        assert_eq!(own.path, "helper");
        let full = FrameNames::new("core::fmt::write", Some(std), |_| false);
        assert_eq!(full.path, "core::fmt::write");
    }

    fn hit(pattern: &str, function: &str) -> bool {
        Pattern::parse(pattern)
            .unwrap()
            .matches(&names(function), "prog")
    }

    #[test]
    fn names_lose_generics_parameters_and_return_types() {
        let path = |f: &str| names(f).path;
        assert_eq!(path("alloc::vec::Vec<T,A>::push"), "alloc::vec::Vec::push");
        assert_eq!(
            path("alloc::slice::<impl [T]>::sort_by"),
            "alloc::slice::sort_by"
        );
        assert_eq!(
            path("void std::__introsort_loop<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, long>(int*, int*, long)"),
            "std::__introsort_loop"
        );
        assert_eq!(path("operator new(unsigned long)"), "operator new");
        assert_eq!(path("printf"), "printf");
        assert_eq!(
            path("std::locale::locale() [clone .cold]"),
            "std::locale::locale"
        );
        assert_eq!(
            path("main::{lambda(int, int)#1}::operator()(int, int) const"),
            "main::{lambda}::operator()"
        );
        assert_eq!(
            path("myprog::main::{{closure}}"),
            "myprog::main::{{closure}}"
        );
        // Go: a method's receiver is its type's name.
        assert_eq!(path("os.(*File).Sync"), "os.File.Sync");
        assert_eq!(
            path("encoding/json.(*encodeState).marshal"),
            "encoding/json.encodeState.marshal"
        );
        assert_eq!(path("sort.IntSlice.Less"), "sort.IntSlice.Less");
        assert_eq!(path("main.main.func2"), "main.main.func2");
        assert!(hit("internal/poll.FD.Write", "internal/poll.(*FD).Write"));
        assert!(!hit(
            "internal/poll.FD.Write",
            "internal/poll.(*FD).WriteMsg"
        ));
    }

    #[test]
    fn trait_methods_match_by_type_and_by_trait_unless_the_type_is_the_programs() {
        let std_impl = names("<i32 as core::fmt::Display>::fmt");
        assert_eq!(std_impl.path, "i32::fmt");
        assert_eq!(
            std_impl.trait_path.as_deref(),
            Some("core::fmt::Display::fmt")
        );
        let own = names("<myprog::Point as core::fmt::Display>::fmt");
        assert_eq!(own.path, "myprog::Point::fmt");
        assert_eq!(own.trait_path, None);
        let slice = names("<[T]>::sort_by");
        assert_eq!(slice.path, "slice::sort_by");
        let reference = names("<&mut W as core::fmt::Write>::write_str");
        assert_eq!(reference.path, "W::write_str");
    }

    #[test]
    fn patterns_match_a_name_or_the_paths_below_it() {
        assert!(hit("core::fmt", "core::fmt::write"));
        assert!(hit("core::fmt", "core::fmt::Formatter::pad_integral"));
        assert!(!hit("core::fmt", "core::fmtx::write"));
        assert!(hit("core::fmt", "<u64 as core::fmt::Display>::fmt"));
        assert!(!hit(
            "core::fmt",
            "<myprog::Point as core::fmt::Display>::fmt"
        ));
        assert!(hit(
            "regex::*Regex::new",
            "regex::regex::string::Regex::new"
        ));
        assert!(!hit(
            "regex::*Regex::new",
            "regex::regex::string::Regex::new_many"
        ));
        assert!(hit("*::sort_by", "alloc::slice::<impl [T]>::sort_by"));
        assert!(hit("__vfprintf*", "__vfprintf_internal"));
        assert!(hit("printf", "printf"));
        assert!(!hit("printf", "snprintf"));
        assert!(hit("*printf", "snprintf"));
        assert!(hit("serde_json", "serde_json::ser::to_string"));
        assert!(hit("std::*basic_regex::basic_regex", "std::__cxx11::basic_regex<char, std::__cxx11::regex_traits<char> >::basic_regex(char const*, std::regex_constants::syntax_option_type)"));
        assert!(hit(
            "hashbrown::raw::*reserve_rehash*",
            "hashbrown::raw::RawTable<T,A>::reserve_rehash"
        ));
    }

    #[test]
    fn modules_restrict_a_pattern() {
        let p = Pattern::parse("libc.so*!write").unwrap();
        assert!(p.matches(&names("write"), "libc.so.6"));
        assert!(!p.matches(&names("write"), "libfsprof_agent.so"));
        assert!(!p.matches(&names("fwrite"), "libc.so.6"));
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        for bad in ["", "*", "::", "!write", "Vec<T>::push", "f(int)"] {
            let error = Pattern::parse(bad).unwrap_err();
            assert!(error.contains("pattern"), "{bad}: {error}");
        }
    }
}
