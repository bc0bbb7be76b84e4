//! fsprof, the feature-specific profiler: the library behind the `fsprof` command.
//!
//! Data flows one way: the target's shim writes marks into a shared-memory region; the
//! [`sampler`] copies them (through [`region`] and [`remote`]) together with per-thread clocks from
//! [`target`] into a [`profile`]; the [`analysis`] computes costs per feature and instance; the
//! [`render`]ers print them. [`session`] wires this into the `run` and `attach` commands.

pub mod analysis;
pub mod cli;
pub mod modules;
pub mod names;
pub mod profile;
pub mod region;
pub mod remote;
pub mod render;
pub mod sampler;
pub mod session;
pub mod stacks;
pub mod symbols;
pub mod target;

use analysis::TimeView;
use anyhow::Result;
use cli::Format;
use std::path::Path;

/// `fsprof report`: renders a saved profile.
pub fn report(path: &Path, format: Format, idle: bool) -> Result<String> {
    let profile = profile::Profile::load(path)?;
    let view = if idle || profile.meta.count_idle {
        TimeView::All
    } else {
        TimeView::Active
    };
    let report = analysis::analyse(&profile, view);
    Ok(match format {
        Format::Text => render::text::render(&report, &profile.meta, profile.threads.len()),
        Format::Json => {
            let mut json =
                serde_json::to_string_pretty(&render::json::render(&report, &profile.meta))?;
            json.push('\n');
            json
        }
    })
}
