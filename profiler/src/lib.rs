//! fsprof, the feature-specific profiler: the library behind the `fsprof` command.
//!
//! Data flows one way, and the folders follow it: the target's shim writes marks into a
//! shared-memory region; [`record`] (the `run` and `attach` sessions and their sampling loop)
//! copies them, through [`target`] (the process, its memory, regions, modules and strings),
//! together with native stacks from [`native`] (perf, `/proc`, ptrace; unwinding), into a
//! [`profile`] (the saved format); after recording, [`symbolize`] names the addresses; the
//! [`rules`] find the language's and the libraries' features in the named native stacks; the
//! [`analysis`] computes costs per feature and instance; the [`render`]ers print them, fold the
//! stacks and draw flamegraphs. [`cli`] is the command line.

/// A line on stderr, as `eprintln!` writes it, except that a stderr that cannot take it (a
/// closed pipe, a full disk it was sent to) is not a panic: fsprof's files, its exit code and the
/// program's release come first.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod analysis;
pub mod cli;
#[cfg(test)]
mod fuzz;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod native;
pub mod os;
pub mod profile;
pub mod record;
pub mod render;
pub mod rules;
pub mod symbolize;
pub mod target;

use analysis::TimeView;
use anyhow::{Context, Result};
use cli::{DiffFormat, DiffOptions, Format, ReportOptions};
use std::path::{Path, PathBuf};

/// The text report of `profile` in `view`: the feature tables, then the function view.
pub(crate) fn text_report(profile: &profile::Profile, view: TimeView) -> String {
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
    let mut profiles = [
        profile::Profile::load(&paths[0])?,
        profile::Profile::load(&paths[1])?,
    ];
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
    report_profile(profile::Profile::load(path)?, path, options)
}

/// [`report`] of a profile already loaded from `path`.
fn report_profile(
    mut profile: profile::Profile,
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
        os::output::write_named(out, svg.as_bytes())
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
    os::output::write_named(out, &bytes)
        .with_context(|| format!("cannot write {}", out.display()))?;
    say!("fsprof: wrote {}", out.display());
    Ok(Vec::new())
}
