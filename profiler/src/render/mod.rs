//! Renderers: turn what the analyses computed into text for people (`text`, with the function
//! view's part in `functions` and its notes in `notes`), JSON for programs (`json`), collapsed stacks (`folded`),
//! flamegraph SVGs (`flamegraph`), pprof profiles (`pprof`) and speedscope files (`speedscope`),
//! the last four from the samples' combined stacks (`stacks`), the boundary graph's SVG
//! (`boundary_graph`), and two profiles side by side (`diff`). They format; the numbers come from
//! [`analysis`](crate::analysis) (folded stacks, pprof and speedscope samples only merge and
//! carry the sample groups' weights it gives).

pub mod boundary_graph;
pub mod diff;
pub mod flamegraph;
pub mod folded;
pub mod functions;
pub mod json;
mod notes;
pub mod pprof;
pub mod short_names;
pub mod speedscope;
pub mod stacks;
pub mod text;
