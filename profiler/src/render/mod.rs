//! Renderers: turn what the analyses computed into text for people (`text`, with the function
//! view's part in `functions`), JSON for programs (`json`), collapsed stacks (`folded`) and
//! flamegraph SVGs (`flamegraph`), the last two from the samples' combined stacks (`stacks`), and
//! the boundary graph's SVG (`boundary_graph`). They format; the numbers come from
//! [`analysis`](crate::analysis) (folded stacks only merge and add the sample groups' weights it
//! gives).

pub mod boundary_graph;
pub mod flamegraph;
pub mod folded;
pub mod functions;
pub mod json;
pub mod stacks;
pub mod text;
