//! Where rules come from: the built-in catalog (`catalog.toml`), a rules file in the same
//! format (`--rules FILE`), and `--feature NAME=PATTERN[,PATTERN...]` on the command line.
//!
//! The format, a TOML array of tables, one per feature:
//!
//! ```toml
//! [[feature]]
//! name = "regex-compile"                    # the feature's name
//! about = "compiling regular expressions"   # optional: what `fsprof rules` says of it
//! functions = ["regex::*Regex::new", "regex::*RegexBuilder::build"]
//! ```
//!
//! Several tables may name one feature: their functions add up. Not here: what a pattern
//! matches (`pattern.rs`).

use super::{Pattern, Rule, RuleSet};
use serde::Deserialize;
use std::path::Path;

/// The catalog's text, as `fsprof rules` prints it.
pub fn catalog_text() -> &'static str {
    include_str!("catalog.toml")
}

/// The built-in catalog (a test checks that it parses).
pub(super) fn catalog() -> RuleSet {
    parse_toml(catalog_text(), CATALOG).unwrap_or_default()
}

/// The rules of a rules file. The error names the file and what is wrong.
pub fn from_file(path: &Path) -> Result<RuleSet, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the rules file {}: {e}", path.display()))?;
    parse_toml(&text, &path.display().to_string())
        .map_err(|e| format!("the rules file {}: {e}", path.display()))
}

/// The rule of `--feature NAME=PATTERN[,PATTERN...]`.
pub fn from_spec(spec: &str) -> Result<Rule, String> {
    let Some((name, patterns)) = spec.split_once('=') else {
        return Err(format!(
            "--feature {spec:?}: write NAME=PATTERN[,PATTERN...], e.g. --feature json=serde_json,simd_json"
        ));
    };
    let feature = check_name(name.trim()).map_err(|e| format!("--feature {spec:?}: {e}"))?;
    let patterns = patterns
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(Pattern::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--feature {spec:?}: {e}"))?;
    if patterns.is_empty() {
        return Err(format!(
            "--feature {spec:?} names no function after '=' (e.g. --feature json=serde_json)"
        ));
    }
    Ok(Rule {
        feature,
        about: None,
        patterns,
        origin: "--feature".to_owned(),
    })
}

/// The rules of `rules` that are not the catalog's, as `--feature` specs, for the profile's
/// meta (see [`from_saved`]).
pub fn saved(rules: &RuleSet) -> Vec<String> {
    (rules.rules.iter())
        .filter(|rule| rule.origin != CATALOG)
        .map(|rule| {
            let patterns: Vec<String> = rule.patterns.iter().map(|p| p.to_string()).collect();
            format!("{}={}", rule.feature, patterns.join(","))
        })
        .collect()
}

/// The rules a profile was recorded with ([`saved`]); those that no longer parse are skipped.
pub fn from_saved(specs: &[String]) -> RuleSet {
    let rules = (specs.iter())
        .filter_map(|spec| from_spec(spec).ok())
        .map(|rule| Rule {
            origin: "the recording's rules".to_owned(),
            ..rule
        })
        .collect();
    RuleSet { rules }
}

/// The catalog's rules' origin.
const CATALOG: &str = "the catalog";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    feature: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    about: Option<String>,
    functions: Vec<String>,
}

fn parse_toml(text: &str, origin: &str) -> Result<RuleSet, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    if file.feature.is_empty() {
        return Err("it has no [[feature]] table (see `fsprof rules` for the format)".to_owned());
    }
    let mut rules = Vec::with_capacity(file.feature.len());
    for entry in file.feature {
        let feature = check_name(entry.name.trim())?;
        let patterns = (entry.functions.iter())
            .map(|p| Pattern::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("feature {feature:?}: {e}"))?;
        if patterns.is_empty() {
            return Err(format!("feature {feature:?} has no functions"));
        }
        rules.push(Rule {
            feature,
            about: entry.about,
            patterns,
            origin: origin.to_owned(),
        });
    }
    Ok(RuleSet { rules })
}

/// A feature name as given, if it is one: printable, not empty, not too long.
fn check_name(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("the feature has no name".to_owned());
    }
    if name.len() > 100 || name.chars().any(|c| c.is_control() || c == '=') {
        return Err(format!(
            "the feature name {name:?} is too long, or has '=' or control characters"
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_parses_and_names_the_agents_features() {
        let catalog = parse_toml(catalog_text(), "the catalog").unwrap();
        let names: Vec<&str> = catalog.rules.iter().map(|r| r.feature.as_str()).collect();
        for name in [
            "output",
            "input",
            "allocation",
            "locks",
            "waiting",
            "sleep",
            "poll",
            "process",
            "files",
            "formatting",
            "sorting",
            "regex-compile",
            "regex-match",
            "serialization",
        ] {
            assert!(names.contains(&name), "{name} missing from the catalog");
        }
    }

    /// The features a libc function of that name falls in, by the catalog.
    fn catalog_features_of(function: &str) -> Vec<String> {
        let names = crate::rules::pattern::FrameNames::new(function, None, |_| false);
        let catalog = parse_toml(catalog_text(), "the catalog").unwrap();
        (catalog.rules.iter())
            .filter(|rule| rule.patterns.iter().any(|p| p.matches(&names, "libc.so.6")))
            .map(|rule| rule.feature.clone())
            .collect()
    }

    /// A glob's tail takes only the names it is for: `creat*` took glibc's `create_thread`, so a
    /// program preempted in `pthread_create` counted that wait as `files`.
    #[test]
    fn the_catalogs_globs_take_no_unrelated_libc_function() {
        for (function, feature) in [
            ("creat", "files"),
            ("creat64", "files"),
            ("getc", "input"),
            ("getchar_unlocked", "input"),
            ("fstatat64", "files"),
        ] {
            assert_eq!(catalog_features_of(function), vec![feature], "{function}");
        }
        for function in [
            "create_thread",
            "clone3",
            "start_thread",
            "getcwd",
            "getcontext",
        ] {
            assert!(catalog_features_of(function).is_empty(), "{function}");
        }
    }

    #[test]
    fn specs_give_a_rule_or_say_what_is_wrong() {
        let rule = from_spec("json=serde_json, simd_json").unwrap();
        assert_eq!(rule.feature, "json");
        assert_eq!(rule.patterns.len(), 2);
        for bad in ["json", "=serde_json", "json=", "json=Vec<T>"] {
            assert!(from_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn files_with_unknown_keys_or_no_functions_are_refused() {
        assert!(parse_toml("[[feature]]\nname = \"a\"\nfunction = [\"x\"]\n", "f").is_err());
        assert!(parse_toml("[[feature]]\nname = \"a\"\nfunctions = []\n", "f").is_err());
        assert!(parse_toml("", "f").is_err());
        let ok = parse_toml("[[feature]]\nname = \"a\"\nfunctions = [\"x::y\"]\n", "f").unwrap();
        assert_eq!(ok.rules[0].origin, "f");
    }
}
