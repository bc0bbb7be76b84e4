//! fsprof, the feature-specific profiler: the library behind the `fsprof` command.
//!
//! Data flows one way: the target's shim writes marks into a shared-memory region; the
//! [`sampler`] copies them (through [`region`] and [`remote`]; [`scanner`] finds the regions) together with per-thread clocks from
//! [`target`] into a [`profile`]; the [`analysis`] computes costs per feature and instance; the
//! [`render`]ers print them, fold the stacks and draw flamegraphs. [`session`] wires this into
//! the `run` and `attach` commands; [`agent`] finds the library `run` preloads for the built-in
//! features; [`privilege`] keeps a capable copy of fsprof to what its user may do.

pub mod agent;
pub mod analysis;
pub mod call_sites;
pub mod cli;
pub mod modules;
pub mod names;
pub mod native;
pub mod perf;
pub mod privilege;
pub mod profile;
pub mod region;
pub mod remote;
pub mod render;
pub mod runtime_code;
pub mod sampler;
pub mod scanner;
pub mod session;
pub mod stacks;
pub mod symbols;
pub mod target;
pub mod tracer;
pub mod unwind;

use analysis::TimeView;
use anyhow::Result;
use cli::{Format, ReportOptions};
use std::path::Path;

/// `fsprof report`: renders a saved profile. Returns the text for stdout; with a flamegraph, writes
/// the SVG file and returns nothing to print.
pub fn report(path: &Path, options: &ReportOptions) -> Result<String> {
    let profile = profile::Profile::load(path)?;
    let view = if options.idle || profile.meta.count_idle {
        TimeView::All
    } else {
        TimeView::Active
    };
    if let Some(svg) = &options.flamegraph {
        let folded = render::folded::fold(&profile, view, options.features_only);
        render::flamegraph::write_file(&folded, svg)?;
        eprintln!("fsprof: wrote {}", svg.display());
        return Ok(String::new());
    }
    Ok(match options.format {
        Format::Folded => render::folded::fold(&profile, view, options.features_only).text(),
        Format::Text => {
            let report = analysis::analyse(&profile, view);
            render::text::render(&report, &profile.meta, profile.threads.len())
        }
        Format::Json => {
            let report = analysis::analyse(&profile, view);
            let mut json =
                serde_json::to_string_pretty(&render::json::render(&report, &profile.meta))?;
            json.push('\n');
            json
        }
    })
}
