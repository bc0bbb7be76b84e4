//! Flamegraph SVGs of folded stacks, drawn by `inferno`.
//!
//! Mark frames (`[feature] payload`) are filled blue, placeholders (`[stack truncated]`,
//! `[no feature]`, `[no native stack]`) grey, native code with inferno's red-yellow "hot" palette,
//! so the features stand out among the code that ran inside them. Widths are time in
//! microseconds of the profile's time view (the folded counts). The title says which graph it is:
//! the full combined stacks, the features-only ("core samples") graph, or the full graph of a
//! profile recorded without native stacks (marks alone too).
//!
//! A profile without counted time gives a small SVG that says so, never an error. This module
//! draws what [`folded`](super::folded) computed and nothing else: also, for `fsprof diff`, the
//! differential flamegraph of two profiles' folded stacks.

use super::folded::{Folded, FrameKind};
use crate::analysis::TimeView;
use anyhow::{Context, Result};
use inferno::flamegraph::color::{BasicPalette, Color, Palette, PaletteMap};
use inferno::flamegraph::{self, Options};
use std::io::Write;

/// Fill of mark frames.
pub const MARK_COLOR: Color = Color {
    r: 90,
    g: 140,
    b: 235,
};
/// Fill of placeholder frames.
pub const PLACEHOLDER_COLOR: Color = Color {
    r: 185,
    g: 185,
    b: 185,
};

/// `MARK_COLOR` as it appears in the SVG.
pub fn mark_fill() -> String {
    let c = MARK_COLOR;
    format!("rgb({},{},{})", c.r, c.g, c.b)
}

/// The graph's title.
pub fn title(folded: &Folded) -> &'static str {
    if folded.marks_only() {
        "fsprof: feature marks (core samples)"
    } else if folded.has_native() {
        "fsprof: native stacks with feature marks"
    } else {
        "fsprof: feature marks (recorded without native stacks)"
    }
}

fn subtitle(folded: &Folded) -> &'static str {
    match (folded.view(), folded.marks_only()) {
        (TimeView::Active, false) => {
            "width: µs running or waiting for a CPU, plus blocked inside a mark; marks in blue"
        }
        (TimeView::All, false) => "width: µs of all thread time, idle included; marks in blue",
        (TimeView::Active, true) => {
            "width: µs running or waiting for a CPU, plus blocked inside a mark"
        }
        (TimeView::All, true) => "width: µs of all thread time, idle included",
    }
}

/// Writes the flamegraph of `folded` as an SVG.
pub fn render(folded: &Folded, mut out: impl Write) -> Result<()> {
    if folded.lines().is_empty() {
        return write_empty(folded, out);
    }
    let mut palette = PaletteMap::default();
    for (label, kind) in folded.special_frames() {
        let color = match kind {
            FrameKind::Mark => MARK_COLOR,
            FrameKind::Placeholder | FrameKind::Native => PLACEHOLDER_COLOR,
        };
        palette.insert(label, color);
    }
    let mut options = Options::default();
    options.colors = Palette::Basic(BasicPalette::Hot);
    options.deterministic = true;
    options.palette_map = Some(&mut palette);
    options.title = title(folded).to_owned();
    options.subtitle = Some(subtitle(folded).to_owned());
    options.count_name = "µs".to_owned();
    options.name_type = "Frame:".to_owned();
    let mut svg = Vec::new();
    flamegraph::from_lines(
        &mut options,
        folded.lines().iter().map(String::as_str),
        &mut svg,
    )
    .context("drawing the flamegraph")?;
    out.write_all(&svg).context("writing the flamegraph")?;
    Ok(())
}

/// Renders the SVG into a file.
pub fn write_file(folded: &Folded, path: &std::path::Path) -> Result<()> {
    let svg = svg(folded)?;
    crate::os::output::write_named(path, &svg)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The flamegraph SVG of `folded`.
pub fn svg(folded: &Folded) -> Result<Vec<u8>> {
    let mut svg = Vec::new();
    render(folded, &mut svg)?;
    Ok(svg)
}

/// Writes the differential flamegraph of `a` and `b` (`fsprof diff --flamegraph`): B's stacks
/// with B's widths, each frame coloured by how its time changed from A (red: grew, blue:
/// shrank), A's counts scaled to B's total first, so that a frame keeping its share stays white.
pub fn write_differential(a: &Folded, b: &Folded, path: &std::path::Path) -> Result<()> {
    let (before, after) = (a.text(), b.text());
    let mut lines = Vec::new();
    let normalize = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    inferno::differential::from_readers(normalize, before.as_bytes(), after.as_bytes(), &mut lines)
        .context("comparing the folded stacks")?;
    let lines = String::from_utf8_lossy(&lines);
    let mut options = Options::default();
    options.deterministic = true;
    options.title = "fsprof diff: B's stacks, coloured by their change from A".to_owned();
    options.subtitle =
        Some("width: µs in B; red grew, blue shrank (A scaled to B's total)".to_owned());
    options.count_name = "µs".to_owned();
    options.name_type = "Frame:".to_owned();
    let mut svg = Vec::new();
    if lines.trim().is_empty() {
        write_empty(b, &mut svg)?;
    } else {
        flamegraph::from_lines(&mut options, lines.lines(), &mut svg)
            .context("drawing the differential flamegraph")?;
    }
    crate::os::output::write_named(path, &svg)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// An SVG with the title and a line saying there is nothing to draw.
fn write_empty(folded: &Folded, mut out: impl Write) -> Result<()> {
    write!(
        out,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="110" viewBox="0 0 1200 110" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="1200" height="110" fill="rgb(248,248,248)"/>
<text x="600" y="30" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>
<text x="600" y="70" text-anchor="middle" font-family="Verdana" font-size="13">No samples: the profile has no counted time, so there is nothing to draw.</text>
</svg>
"#,
        title(folded)
    )
    .context("writing the flamegraph")
}

#[cfg(test)]
mod tests {
    use super::super::folded::fold;
    use super::*;
    use crate::profile::fixtures::{build, S};

    fn svg(folded: &Folded) -> String {
        let mut out = Vec::new();
        render(folded, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn profile() -> crate::profile::Profile {
        build(&[
            S {
                marks: vec![("output", Some("src/main.rs:57:27"))],
                native: Some((vec![1, 2, 3], vec![2], false)),
                tid: 1,
                wall_us: 3000,
                active_us: 3000,
            },
            S {
                marks: vec![],
                native: Some((vec![1, 4], vec![], true)),
                tid: 1,
                wall_us: 1000,
                active_us: 1000,
            },
        ])
    }

    #[test]
    fn mark_frames_are_drawn_in_their_own_colour() {
        let p = profile();
        let full = svg(&fold(&p, TimeView::Active, false));
        assert!(
            full.contains("fsprof: native stacks with feature marks"),
            "{full}"
        );
        assert!(full.contains("[output] src/main.rs:57:27"));
        let fill = format!("fill=\"{}\"", mark_fill());
        // The mark's rectangle is the element right after its title.
        let at = full.find("<title>[output] src/main.rs:57:27").unwrap();
        let rect = &full[at..full[at..].find("/>").unwrap() + at];
        assert!(rect.contains(&fill), "{rect}");
        assert_eq!(full.matches(&fill).count(), 1);
        // Native frames are not blue; the truncation placeholder is grey.
        let at = full.find("<title>f3 ").unwrap();
        let rect = &full[at..full[at..].find("/>").unwrap() + at];
        assert!(!rect.contains(&fill), "{rect}");
        assert!(full.contains("fill=\"rgb(185,185,185)\""));
        assert!(full.contains("µs"));

        let marks = svg(&fold(&p, TimeView::Active, true));
        assert!(marks.contains("fsprof: feature marks (core samples)"));
        assert!(marks.contains(&fill));
        assert!(marks.contains("[no feature]"));
    }

    #[test]
    fn no_samples_give_an_svg_that_says_so() {
        let marks = fold(
            &build(&[S {
                marks: vec![("f", Some("p"))],
                native: None,
                tid: 1,
                wall_us: 5,
                active_us: 5,
            }]),
            TimeView::Active,
            false,
        );
        assert!(svg(&marks).contains("fsprof: feature marks (recorded without native stacks)"));
        for samples in [
            vec![],
            vec![S {
                marks: vec![],
                native: None,
                tid: 1,
                wall_us: 0,
                active_us: 0,
            }],
        ] {
            let empty = svg(&fold(&build(&samples), TimeView::Active, false));
            assert!(empty.starts_with("<?xml"));
            assert!(empty.contains("<svg") && empty.trim_end().ends_with("</svg>"));
            assert!(empty.contains("No samples"));
        }
    }
}
