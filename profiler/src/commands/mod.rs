//! The commands, from their options to their output: `run` and `attach` (a recording session:
//! the program launched or found, the recording loop given its live view, the profile finished,
//! printed and written: `session.rs`), the live views (`live.rs`: the status line, `fsprof
//! top`), and `report` and `diff` of saved profiles (`report.rs`). Above every stage: it calls
//! them in order; none of them calls it. Not here: parsing the command line (`cli.rs`).

pub mod live;
mod live_report;
pub mod progress;
pub mod report;
pub mod session;
pub mod status;
pub mod top;
pub mod what_if;
