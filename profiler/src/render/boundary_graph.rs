//! The boundary graph as an SVG picture (`boundaries.svg` in the output directory): for each
//! feature that marks checks between components, the components as nodes and one arrow per edge,
//! labelled with the time of its checks (and its share of the report's total) and its most
//! expensive values, the arrow's width growing with its cost.
//!
//! Laid out by Graphviz's `dot` when it is installed (a real graph layout); otherwise drawn here,
//! the components on a circle, which stays readable for the handful of components such a graph
//! usually has. Every name comes from the target: it is escaped for DOT and for XML.
//!
//! Not here: the numbers (`analysis/boundaries.rs`).

use crate::analysis::{Edge, FeatureReport};
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// Values listed on an edge's label.
const LABEL_VALUES: usize = 3;

/// The picture of every feature's boundaries in `report`; `None` when no feature has any.
pub fn svg(report: &FeatureReport) -> Option<String> {
    let graphs: Vec<(&str, &[Edge])> = report
        .features
        .iter()
        .filter(|f| !f.structure.boundaries.is_empty())
        .map(|f| (f.name.as_str(), f.structure.boundaries.as_slice()))
        .collect();
    if graphs.is_empty() {
        return None;
    }
    let label = |edge: &Edge| {
        let mut text = format!(
            "{:.1} ms ({:.1}%)",
            edge.ns as f64 / 1e6,
            report.percent(edge.ns)
        );
        for (value, ns) in edge.values.iter().take(LABEL_VALUES) {
            let _ = write!(text, "\n{value}: {:.1} ms", *ns as f64 / 1e6);
        }
        text
    };
    Some(with_dot(&graphs, &label).unwrap_or_else(|| drawn(&graphs, &label, report.total_ns)))
}

/// The picture laid out by `dot -Tsvg`, if it is installed and succeeds.
fn with_dot(graphs: &[(&str, &[Edge])], label: &dyn Fn(&Edge) -> String) -> Option<String> {
    let quote = |text: &str| {
        let escaped: String = text
            .chars()
            .flat_map(|c| match c {
                '"' => vec!['\\', '"'],
                '\\' => vec!['\\', '\\'],
                '\n' => vec!['\\', 'n'],
                c if c.is_control() => vec!['\u{FFFD}'],
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    };
    let width = stroke_widths(graphs);
    let mut dot = String::from("digraph boundaries {\n  rankdir=TB;\n  node [shape=box, style=rounded, fontname=\"sans-serif\"];\n  edge [fontname=\"sans-serif\", fontsize=10, fontcolor=\"#003366\", color=\"#55667788\"];\n");
    for (index, (feature, edges)) in graphs.iter().enumerate() {
        let _ = writeln!(
            dot,
            "  subgraph cluster_{index} {{\n    label={};",
            quote(feature)
        );
        for edge in *edges {
            let node = |name: &str| quote(&format!("{index}:{name}"));
            let _ = writeln!(
                dot,
                "    {} [label={}];\n    {} [label={}];\n    {} -> {} [label={}, penwidth={:.1}];",
                node(&edge.from),
                quote(&edge.from),
                node(&edge.to),
                quote(&edge.to),
                node(&edge.from),
                node(&edge.to),
                quote(&label(edge)),
                width(edge, 5.0)
            );
        }
        dot.push_str("  }\n");
    }
    dot.push_str("}\n");
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(dot.as_bytes()).ok()?;
    let output = child.wait_with_output().ok()?;
    let svg = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && svg.contains("<svg")).then_some(svg)
}

/// The picture drawn here: per feature, its components on a circle and straight arrows.
fn drawn(graphs: &[(&str, &[Edge])], label: &dyn Fn(&Edge) -> String, total_ns: u64) -> String {
    const SIZE: f64 = 640.0;
    const RADIUS: f64 = 220.0;
    let width = stroke_widths(graphs);
    let height = SIZE * graphs.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{SIZE}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerUnits=\"userSpaceOnUse\" markerWidth=\"14\" markerHeight=\"14\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#567\"/></marker></defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (index, (feature, edges)) in graphs.iter().enumerate() {
        let top = SIZE * index as f64;
        let mut nodes: Vec<&str> = Vec::new();
        for edge in *edges {
            for name in [edge.from.as_str(), edge.to.as_str()] {
                if !nodes.contains(&name) {
                    nodes.push(name);
                }
            }
        }
        let place = |name: &str| {
            let at = nodes.iter().position(|n| *n == name).unwrap_or(0) as f64;
            let angle =
                std::f64::consts::TAU * at / nodes.len() as f64 - std::f64::consts::FRAC_PI_2;
            (
                SIZE / 2.0 + RADIUS * angle.cos(),
                top + SIZE / 2.0 + RADIUS * angle.sin(),
            )
        };
        let _ = writeln!(
            svg,
            "<text x=\"10\" y=\"{:.0}\" font-size=\"16\">{} (boundaries: {:.1}% of the time)</text>",
            top + 24.0,
            xml(feature),
            edges.iter().map(|e| e.ns).sum::<u64>() as f64 * 100.0 / total_ns.max(1) as f64
        );
        for edge in *edges {
            let ((x1, y1), (x2, y2)) = (place(&edge.from), place(&edge.to));
            // Stop short of the boxes, so that the arrowhead shows.
            let (dx, dy) = (x2 - x1, y2 - y1);
            let length = (dx * dx + dy * dy).sqrt().max(1.0);
            let (ux, uy) = (dx / length, dy / length);
            let width = width(edge, 8.0);
            let _ = writeln!(
                svg,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#89a\" stroke-width=\"{width:.1}\" marker-end=\"url(#arrow)\"/>",
                x1 + ux * 40.0,
                y1 + uy * 20.0,
                x2 - ux * 40.0,
                y2 - uy * 20.0
            );
            // Beside the arrow's middle, on a white outline: to its side for a steep arrow,
            // under it for a flat one.
            let (mx, my) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
            let (lx, ly, anchor) = match uy {
                uy if uy > 0.3 => (mx + 12.0, my, "start"),
                uy if uy < -0.3 => (mx - 12.0, my, "end"),
                _ => (mx, my + 22.0, "middle"),
            };
            for (line, text) in label(edge).lines().enumerate() {
                let _ = writeln!(
                    svg,
                    "<text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" fill=\"#036\" stroke=\"white\" stroke-width=\"4\" paint-order=\"stroke\">{}</text>",
                    ly - 6.0 + 14.0 * line as f64,
                    xml(text)
                );
            }
        }
        for name in &nodes {
            let (x, y) = place(name);
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"80\" height=\"40\" rx=\"8\" fill=\"#eef\" stroke=\"#336\"/>\n<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                x - 40.0,
                y - 20.0,
                y + 4.0,
                xml(name)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// An edge's stroke width, 1 for no time up to `max` for the most expensive edge of all graphs.
fn stroke_widths(graphs: &[(&str, &[Edge])]) -> impl Fn(&Edge, f64) -> f64 {
    let widest = graphs
        .iter()
        .flat_map(|(_, edges)| edges.iter().map(|e| e.ns))
        .max()
        .unwrap_or(1)
        .max(1);
    move |edge, max| 1.0 + (max - 1.0) * edge.ns as f64 / widest as f64
}

/// `text` escaped for XML, control characters replaced.
fn xml(text: &str) -> String {
    crate::profile::clean(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: &str, to: &str, ms: u64) -> Edge {
        Edge {
            from: from.into(),
            to: to.into(),
            ns: ms * 1_000_000,
            values: vec![("positive?".into(), ms * 1_000_000)],
        }
    }

    #[test]
    fn the_drawn_picture_names_every_component_and_escapes_them() {
        let edges = [
            edge("client", "matrix", 30),
            edge("<matrix>", "vector\"&", 10),
        ];
        let graphs: [(&str, &[Edge]); 1] = [("contracts", &edges)];
        let label = |e: &Edge| format!("{} ms", e.ns / 1_000_000);
        let svg = drawn(&graphs, &label, 100_000_000);
        for text in [
            "client",
            "matrix",
            "&lt;matrix&gt;",
            "vector&quot;&amp;",
            "30 ms",
            "contracts",
        ] {
            assert!(svg.contains(text), "{text} missing: {svg}");
        }
        assert_eq!(svg.matches("<line").count(), 2);
        assert!(!svg.contains("<matrix>"));
    }
}
