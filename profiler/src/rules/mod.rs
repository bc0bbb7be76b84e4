//! Feature rules over native stacks: a rule names a feature and the functions that are it
//! ([`Pattern`]). Applied to a profile ([`apply()`]), a rule gives each sample whose native stack
//! holds a matching frame a mark of its feature, whose instance is the program's call site, and
//! an antimark where the program's own code is called back from inside the feature's frames.
//!
//! Rules come from the built-in catalog (`catalog.toml`: the language's and the libraries' own
//! features, on by default), from `--feature NAME=PATTERN[,PATTERN...]` and from rules files
//! (`--rules FILE`, the catalog's format). They are applied after a profile is recorded or
//! loaded, before the analysis: a saved profile holds what was recorded, so every rule works on
//! every saved profile with native stacks. Not here: taking stacks (`record`, `native`),
//! naming frames (`symbolize`), counting time (`analysis`).

mod apply;
mod pattern;
mod source;

pub use apply::apply;
pub use pattern::Pattern;
pub use source::{catalog_text, from_file, from_saved, from_spec, saved};

/// A feature and the functions that are it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The feature's name: a program's mark of the same name is the same feature.
    pub feature: String,
    /// What the feature is, in a few words (the catalog's `about`).
    pub about: Option<String>,
    /// A frame matching any of these is in the feature.
    pub patterns: Vec<Pattern>,
    /// Where the rule came from, for the report's notes: "the catalog", "--feature", a file.
    pub origin: String,
}

/// The rules a report applies, in order (a frame matching several rules is in each feature).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
}

impl RuleSet {
    /// The built-in catalog.
    pub fn catalog() -> RuleSet {
        source::catalog()
    }

    /// No rules at all.
    pub fn none() -> RuleSet {
        RuleSet::default()
    }

    /// Adds `more` after these rules.
    pub fn extend(&mut self, more: RuleSet) {
        self.rules.extend(more.rules);
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}
