//! The status line while recording: once a second, on stderr when it is a terminal, how long
//! fsprof has recorded, its samples and threads, and the features with the most time so far
//! (`fsprof: 12 s · 3021 samples · 4 threads · output 54% · parsing 21%`), cleared when
//! recording stops. Nothing when stderr is not a terminal, with `FSPROF_NO_STATUS=1`, or when
//! the caller says not (`run` of a program whose output goes to the terminal: the line would
//! be drawn over it).
//!
//! It reads the profile being built (`progress.rs`); it does not change it. `top.rs` is the
//! full-screen view of the same (`fsprof top`).

use crate::commands::progress::Progress;
use crate::profile::ProfileBuilder;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_secs(1);
/// Features named on the line.
const TOP: usize = 3;

/// The status line (see the module's documentation).
pub struct Status {
    enabled: bool,
    start: Instant,
    next: Instant,
    shown: bool,
}

impl Status {
    /// A status line for a recording starting now; enabled if `wanted` and stderr is a
    /// terminal.
    pub fn new(wanted: bool) -> Status {
        let start = Instant::now();
        Status {
            enabled: wanted
                && std::io::stderr().is_terminal()
                && std::env::var_os("FSPROF_NO_STATUS").is_none_or(|v| v != "1"),
            start,
            next: start + EVERY,
            shown: false,
        }
    }

    /// Redraws the line if a second has passed since it was last drawn.
    pub fn update(&mut self, builder: &ProfileBuilder, threads: usize) {
        let now = Instant::now();
        if !self.enabled || now < self.next {
            return;
        }
        self.next = now + EVERY;
        let width = terminal_width().saturating_sub(1);
        let line = line(builder, threads, now.duration_since(self.start), width);
        let line: String = line.chars().take(width).collect();
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[2K{line}");
        let _ = stderr.flush();
        self.shown = true;
    }

    /// Clears the line, if drawn.
    pub fn clear(&mut self) {
        if self.shown {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
            self.shown = false;
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The line's text, features named while they fit in `width` columns.
fn line(builder: &ProfileBuilder, threads: usize, elapsed: Duration, width: usize) -> String {
    let progress = Progress::of(builder);
    let mut line = format!(
        "fsprof: {:.0} s · {} samples · {threads} thread{}",
        elapsed.as_secs_f64(),
        progress.samples,
        if threads == 1 { "" } else { "s" }
    );
    for (feature, ns) in progress.top_features().into_iter().take(TOP) {
        let name = crate::profile::clean(builder.feature_name(feature));
        let part = format!(" · {name} {:.0}%", progress.percent(ns));
        if line.chars().count() + part.chars().count() > width {
            break;
        }
        line += &part;
    }
    line
}

/// The terminal's width in columns (80 if unknown).
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize; on failure it is left zeroed.
    let mut size: nix::libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { nix::libc::ioctl(2, nix::libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        size.ws_col as usize
    } else {
        80
    }
}
