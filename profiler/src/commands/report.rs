//! `fsprof report` and `fsprof diff`: saved profiles read back, the rules they were recorded
//! with and the user's applied, and rendered in the format asked for; also the text report a
//! recording prints. Not here: reading the files (`profile.rs`), the numbers (`analysis/`), the
//! formats (`render/`).

use crate::analysis::{self, TimeView};
use crate::profile::Profile;
use crate::render;
use crate::rules::{self, RuleSet};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Output formats of `fsprof report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The text report.
    Text,
    /// The report as JSON.
    Json,
    /// Collapsed stacks, one line per distinct stack, root first: `frame;frame;... COUNT`, with
    /// COUNT the stack's time in microseconds (rounded; the report's time view, see --idle).
    /// Mark frames read `[feature] payload`.
    Folded,
    /// A gzipped pprof profile (`profile.proto`), for `go tool pprof`, Pyroscope or Parca: the
    /// combined stacks (marks as frames), sample counts and time in ns, and `feature` and
    /// `instance` labels on each sample (`go tool pprof -tagfocus=feature=output FILE`). Binary:
    /// redirect stdout or use --output.
    Pprof,
    /// speedscope's JSON file format (open it at <https://www.speedscope.app>): one profile per
    /// thread, its stacks (marks as frames) weighted by their time in ns.
    Speedscope,
}

/// Output formats of `fsprof diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// A table: per feature and instance, ms and % in A and B, B - A and B/A.
    Text,
    /// JSON: `{"a", "b", "features": [{"name", "a_ms", "b_ms", "a_percent", "b_percent",
    /// "ratio", "instances": [{"payload", ...}]}]}`.
    Json,
}

/// What `fsprof diff` renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffOptions {
    /// Output format.
    pub format: DiffFormat,
    /// Also write the differential flamegraph here.
    pub flamegraph: Option<PathBuf>,
    /// Force the all-time view.
    pub idle: bool,
    /// The feature rules to apply to both profiles' native stacks.
    pub rules: RuleSet,
}

/// What `fsprof report` renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    /// Output format (ignored with `flamegraph`).
    pub format: Format,
    /// Write the format's output to this file instead of stdout.
    pub output: Option<PathBuf>,
    /// Force the all-time view.
    pub idle: bool,
    /// Folded stacks or flamegraph of the marks alone.
    pub features_only: bool,
    /// Write a flamegraph SVG here instead of printing.
    pub flamegraph: Option<PathBuf>,
    /// Write the boundary graph's SVG here instead of printing.
    pub boundaries: Option<PathBuf>,
    /// Only the samples of the thread of this name or id.
    pub thread: Option<String>,
    /// Only the samples of the process of this id or program.
    pub process: Option<String>,
    /// The feature rules to apply to the native stacks.
    pub rules: RuleSet,
}

/// The text report of `profile` in `view`: the feature tables, then the function view.
pub(crate) fn text_report(profile: &Profile, view: TimeView) -> String {
    let report = analysis::analyse(profile, view);
    let functions = analysis::functions(profile, view);
    let threads = analysis::thread_times(profile, view);
    let processes = analysis::process_times(profile, view);
    render::text::render(
        &report,
        &functions,
        (&threads, &processes),
        &profile.meta,
        profile.threads.len(),
    )
}

/// `fsprof diff`: two saved profiles side by side. Returns the bytes for stdout; also writes the
/// differential flamegraph if asked.
pub fn diff(paths: &[PathBuf; 2], options: &DiffOptions) -> Result<Vec<u8>> {
    let mut profiles = [Profile::load(&paths[0])?, Profile::load(&paths[1])?];
    for profile in &mut profiles {
        let mut rules = options.rules.clone();
        rules.extend(rules::from_saved(&profile.meta.rules));
        rules::apply(profile, &rules);
    }
    let view = if options.idle || profiles.iter().any(|p| p.meta.count_idle) {
        TimeView::All
    } else {
        TimeView::Active
    };
    let reports = profiles.each_ref().map(|p| analysis::analyse(p, view));
    let diff = analysis::diff(&reports[0], &reports[1]);
    if let Some(svg) = &options.flamegraph {
        let [a, b] = profiles
            .each_ref()
            .map(|p| render::folded::fold(p, view, false));
        render::flamegraph::write_differential(&a, &b, svg)?;
        say!("fsprof: wrote {}", svg.display());
    }
    let path_texts = paths.each_ref().map(|p| p.display().to_string());
    let sides = || {
        [0, 1].map(|i| render::diff::Side {
            path: &path_texts[i],
            command: &profiles[i].meta.command,
        })
    };
    Ok(match options.format {
        DiffFormat::Text => render::diff::text(&diff, sides(), view.describe()).into_bytes(),
        DiffFormat::Json => {
            let mut json = serde_json::to_string_pretty(&render::diff::json(&diff, sides()))?;
            json.push('\n');
            json.into_bytes()
        }
    })
}

/// `fsprof report`: renders a saved profile. Returns the bytes for stdout; with a flamegraph, the
/// boundary graph or `--output`, writes the file and returns nothing to print.
pub fn report(path: &Path, options: &ReportOptions) -> Result<Vec<u8>> {
    report_profile(Profile::load(path)?, path, options)
}

/// [`report`] of a profile already loaded from `path`.
pub(crate) fn report_profile(
    mut profile: Profile,
    path: &Path,
    options: &ReportOptions,
) -> Result<Vec<u8>> {
    let mut rules = options.rules.clone();
    rules.extend(rules::from_saved(&profile.meta.rules));
    rules::apply(&mut profile, &rules);
    if let Some(which) = &options.process {
        analysis::keep_process(&mut profile, which).map_err(anyhow::Error::msg)?;
    }
    if let Some(which) = &options.thread {
        analysis::keep_thread(&mut profile, which).map_err(anyhow::Error::msg)?;
    }
    let view = if options.idle || profile.meta.count_idle {
        TimeView::All
    } else {
        TimeView::Active
    };
    if let Some(out) = &options.boundaries {
        let Some(svg) = render::boundary_graph::svg(&analysis::analyse(&profile, view)) else {
            anyhow::bail!(
                "{} has no boundary checks (marks made with mark_boundary or fsprof_mark_boundary): there is no graph to draw",
                path.display()
            );
        };
        crate::os::output::write_named(out, svg.as_bytes())
            .with_context(|| format!("cannot write {}", out.display()))?;
        say!("fsprof: wrote {}", out.display());
        return Ok(Vec::new());
    }
    if let Some(svg) = &options.flamegraph {
        let folded = render::folded::fold(&profile, view, options.features_only);
        render::flamegraph::write_file(&folded, svg)?;
        say!("fsprof: wrote {}", svg.display());
        return Ok(Vec::new());
    }
    let bytes = match options.format {
        Format::Folded => render::folded::fold(&profile, view, options.features_only)
            .text()
            .into_bytes(),
        Format::Text => text_report(&profile, view).into_bytes(),
        Format::Pprof => render::pprof::encode(&profile, view),
        Format::Speedscope => {
            let mut json = serde_json::to_string(&render::speedscope::render(&profile, view))?;
            json.push('\n');
            json.into_bytes()
        }
        Format::Json => {
            let report = analysis::analyse(&profile, view);
            let mut value = render::json::render(&report, &profile.meta);
            value["functions"] = render::functions::json(&analysis::functions(&profile, view));
            value["threads"] = analysis::thread_times(&profile, view)
                .iter()
                .map(|t| {
                    serde_json::json!({"name": t.name, "tid": t.tid, "ms": t.ns as f64 / 1e6,
                                       "percent": report.percent(t.ns)})
                })
                .collect();
            value["processes"] = analysis::process_times(&profile, view)
                .iter()
                .map(|p| {
                    serde_json::json!({"pid": p.pid, "parent": p.parent, "command": p.command,
                                       "ms": p.ns as f64 / 1e6, "percent": report.percent(p.ns)})
                })
                .collect();
            let mut json = serde_json::to_string_pretty(&value)?;
            json.push('\n');
            json.into_bytes()
        }
    };
    let Some(out) = &options.output else {
        return Ok(bytes);
    };
    crate::os::output::write_named(out, &bytes)
        .with_context(|| format!("cannot write {}", out.display()))?;
    say!("fsprof: wrote {}", out.display());
    Ok(Vec::new())
}
