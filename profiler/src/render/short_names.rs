//! Function names shortened for the text report: long template and generic argument lists and
//! long parameter lists elided (`hash_table<…>::find_slot(…)` for a C++ name of 1,500
//! characters), so that a line of the report reads as one. Only the text report shortens: JSON, folded stacks, pprof and speedscope
//! keep every name whole, and the flamegraphs show it on hover. Operators whose names hold angle
//! brackets (`operator<<`, `operator->`, `operator<=>`) are kept as they are; an argument list
//! cut short (names are cut at 4 KiB) is elided to its end.

use std::borrow::Cow;

/// Argument lists this long or shorter are kept (`Vec<u8>`, `std::vector<int>`): eliding them
/// saves nothing and hides what a reader would want.
const KEPT: usize = 12;
/// Parameter lists this long or shorter are kept (`(tree_node*, copy_body_data*)`): they tell
/// overloads apart.
const PARAMETERS_KEPT: usize = 40;

/// `name` with each template or generic argument list longer than `KEPT` characters written
/// `<…>`, and each parameter list longer than `PARAMETERS_KEPT` `(…)`.
pub fn elide_arguments(name: &str) -> Cow<'_, str> {
    if !name.contains('<') && !name.contains('(') {
        return Cow::Borrowed(name);
    }
    let bytes = name.as_bytes();
    let mut out = String::with_capacity(name.len().min(256));
    let mut at = 0;
    while at < bytes.len() {
        if let Some(operator) = operator_at(name, at) {
            out.push_str(operator);
            at += operator.len();
            continue;
        }
        // A parameter list; an argument list, which opens after a name (`vec<`, `Vec<`,
        // `>::f<`), not at a name's start (Rust's `<T as Trait>::f`, whose `<` qualifies the
        // whole path).
        let (end, brackets, kept) = match bytes[at] {
            b'(' => (closing_parenthesis(bytes, at), ['(', ')'], PARAMETERS_KEPT),
            b'<' if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || matches!(bytes[at - 1], b'_' | b'>')) =>
            {
                (closing(name, at), ['<', '>'], KEPT)
            }
            _ => {
                let c = name[at..].chars().next().unwrap_or('?');
                out.push(c);
                at += c.len_utf8();
                continue;
            }
        };
        let inside = &name[at + 1..end.min(name.len())];
        if inside.len() <= kept {
            // Short: kept, its own nested lists too.
            out.push(brackets[0]);
            out.push_str(&elide_arguments(inside));
            if end < name.len() {
                out.push(brackets[1]);
            }
        } else {
            out.push(brackets[0]);
            out.push('…');
            out.push(brackets[1]);
        }
        at = end.saturating_add(1);
    }
    Cow::Owned(out)
}

/// An instance's text as the text report shows it: where it names functions (a call site,
/// `function (file:line)` or `caller > function`, the built-in features' instances) each is
/// shortened by [`elide_arguments`] and the place is kept; any other text (a program's own
/// instance: a query, a path, a rule) is left whole.
pub fn elide_instance(text: &str) -> Cow<'_, str> {
    let (prefix, rest) = match text.strip_prefix('[').and_then(|t| t.split_once("] ")) {
        Some((tag, rest)) => (&text[..tag.len() + 3], rest),
        None => ("", text),
    };
    // The place: ` (file:line)` at the end, with no bracket in it.
    let (functions, place) = match rest.rsplit_once(" (") {
        Some((head, tail))
            if tail.ends_with(')')
                && !tail[..tail.len() - 1].contains(['(', ')'])
                && tail.contains(['/', '.', ':']) =>
        {
            (head, &rest[head.len()..])
        }
        _ => (rest, ""),
    };
    let parts: Vec<&str> = functions.split(" > ").collect();
    if !parts.iter().all(|part| is_function_name(part)) {
        return Cow::Borrowed(text);
    }
    let parts: Vec<Cow<str>> = parts.into_iter().map(elide_arguments).collect();
    Cow::Owned(format!("{prefix}{}{place}", parts.join(" > ")))
}

/// Whether `text` reads as one function's name: no space outside its brackets (a C++ name's
/// spaces are in its argument and parameter lists, but for `(anonymous namespace)`).
fn is_function_name(text: &str) -> bool {
    let mut depth = 0i32;
    for byte in text.bytes() {
        match byte {
            b'(' | b'<' | b'[' | b'{' => depth += 1,
            b')' | b'>' | b']' | b'}' => depth -= 1,
            b' ' if depth <= 0 => return false,
            _ => {}
        }
    }
    !text.is_empty()
}

/// The operator name starting at byte `at` of `name` whose symbol holds angle brackets, if one
/// does (`operator<<=`, `operator->*`...).
fn operator_at(name: &str, at: usize) -> Option<&str> {
    // Bytes, not characters: `at` may lie inside a character (the scans go byte by byte).
    let rest = name.as_bytes().get(at..)?.strip_prefix(b"operator")?;
    let symbol = [
        "<=>", "<<=", ">>=", "->*", "<<", ">>", "<=", ">=", "->", "<", ">",
    ]
    .into_iter()
    .find(|symbol| rest.starts_with(symbol.as_bytes()))?;
    // What matched is ASCII, so `at` starts a character and so does the end.
    name.get(at..at + "operator".len() + symbol.len())
}

/// The byte index of the `)` closing the `(` at byte `open`, or `bytes.len()` if it is not
/// closed.
fn closing_parenthesis(bytes: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (at, byte) in bytes.iter().enumerate().skip(open) {
        match byte {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return at;
                }
            }
            _ => {}
        }
    }
    bytes.len()
}

/// The byte index of the `>` closing the `<` at byte `open` of `name`, or `name.len()` if it is
/// not closed.
fn closing(name: &str, open: usize) -> usize {
    let bytes = name.as_bytes();
    let mut depth = 0usize;
    let mut at = open;
    while at < bytes.len() {
        if let Some(operator) = operator_at(name, at) {
            at += operator.len();
            continue;
        }
        match bytes[at] {
            b'<' => depth += 1,
            // `->` in a function pointer type is no bracket.
            b'>' if at > 0 && bytes[at - 1] == b'-' => {}
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    return at;
                }
            }
            _ => {}
        }
        at += 1;
    }
    name.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_argument_lists_are_elided_and_short_ones_kept() {
        let long = "hash_table<hash_map<tree_node*, tree_node*, simple_hashmap_traits<default_hash_traits<tree_node*>, tree_node*> >::hash_entry, false, xcallocator>::find_slot_with_hash(tree_node* const&, unsigned int, insert_option)";
        assert_eq!(
            elide_arguments(long),
            "hash_table<…>::find_slot_with_hash(…)"
        );
        assert_eq!(
            elide_arguments("remap_type(tree_node*, copy_body_data*)"),
            "remap_type(tree_node*, copy_body_data*)"
        );
        assert_eq!(
            elide_arguments("walk_tree_1(tree_node**, tree_node* (*)(tree_node**, int*, void*), void*, hash_set<tree_node*, false, default_hash_traits<tree_node*> >*)"),
            "walk_tree_1(…)"
        );
        assert_eq!(
            elide_arguments("(anonymous namespace)::f<int>(int)"),
            "(anonymous namespace)::f<int>(int)"
        );
        assert_eq!(
            elide_arguments("std::vector<int>::push_back(int&&)"),
            "std::vector<int>::push_back(int&&)"
        );
        assert_eq!(
            elide_arguments("<alloc::vec::Vec<T> as core::clone::Clone>::clone"),
            "<alloc::vec::Vec<T> as core::clone::Clone>::clone"
        );
        assert_eq!(
            elide_arguments("core::ptr::drop_in_place<std::collections::HashMap<u32, String>>"),
            "core::ptr::drop_in_place<…>"
        );
        assert_eq!(
            elide_arguments("walk_tree_1(tree_node**)"),
            "walk_tree_1(tree_node**)"
        );
    }

    #[test]
    fn operators_with_angle_brackets_are_not_brackets() {
        assert_eq!(
            elide_arguments("std::ostream::operator<<(int)"),
            "std::ostream::operator<<(int)"
        );
        assert_eq!(
            elide_arguments("std::basic_ostream<char, std::char_traits<char> >& std::operator<< <std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, char const*)"),
            "std::basic_ostream<…>& std::operator<< <std::char_traits<char> >(…)"
        );
        assert_eq!(
            elide_arguments("std::ostream::operator<<(std::basic_ostream<char>& (*)(std::basic_ostream<char>&))"),
            "std::ostream::operator<<(…)"
        );
        assert_eq!(
            elide_arguments("Foo::operator->() const"),
            "Foo::operator->() const"
        );
        assert_eq!(
            elide_arguments("f<void (*)(int) -> int, somewhat_long_argument>(x)"),
            "f<…>(x)"
        );
    }

    #[test]
    fn an_instance_keeps_its_place_and_a_programs_own_text() {
        assert_eq!(
            elide_instance(
                "myprog::log (/a/very/long/path/to/the/sources/of/myprog/src/log.rs:30)"
            ),
            "myprog::log (/a/very/long/path/to/the/sources/of/myprog/src/log.rs:30)"
        );
        assert_eq!(
            elide_instance("walk_tree_1(tree_node**, tree_node* (*)(tree_node**, int*, void*), void*) (tree.cc:12)"),
            "walk_tree_1(…) (tree.cc:12)"
        );
        assert_eq!(
            elide_instance("duplicate_eh_regions(function*, eh_region_d*, int, tree_node* (*)(tree_node*, void*), void*)"),
            "duplicate_eh_regions(…)"
        );
        assert_eq!(
            elide_instance("calculate_dominance_info(cdi_direction) > cc1plus+0x9b2ca0"),
            "calculate_dominance_info(cdi_direction) > cc1plus+0x9b2ca0"
        );
        assert_eq!(
            elide_instance("[call site not found] std::map<std::basic_string<char>, int>::find(x)"),
            "[call site not found] std::map<…>::find(x)"
        );
        let query = "SELECT a, b FROM t WHERE (a > 1) AND vec<abcdefghijklmnop> (x.sql:3)";
        assert_eq!(elide_instance(query), query);
        assert_eq!(elide_instance("rule-a"), "rule-a");
        assert_eq!(elide_instance(""), "");
    }

    #[test]
    fn a_list_cut_short_is_elided_to_its_end() {
        assert_eq!(
            elide_arguments("std::map<std::basic_string<char, std::char_tr"),
            "std::map<…>"
        );
        assert_eq!(elide_arguments("a<b"), "a<b");
        assert_eq!(elide_arguments("é<ü>"), "é<ü>");
        // A scan inside a list meets characters of several bytes.
        assert_eq!(elide_arguments("Vec<é>::new"), "Vec<é>::new");
        assert_eq!(elide_arguments("f<\u{FFFD}>"), "f<\u{FFFD}>");
        assert_eq!(
            elide_arguments("a<ééééééééééééééééé, operator<<>(x)"),
            "a<…>(x)"
        );
    }
}
