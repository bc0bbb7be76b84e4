//! `fsprof top`'s live view: while recording, a full-screen table of the features and their top
//! instances, refreshed every second (like `py-spy top`), drawn with ratatui on stdout's
//! terminal (alternate screen, raw mode). Columns: the share of the last second's counted time,
//! the share of all of it so far, and the time so far. `q`, Esc or Ctrl-C stop recording.
//!
//! It reads the profile being built (`progress.rs`) and restores the terminal when dropped (also
//! when recording fails); it writes no file. Call sites (the built-in features' instances), which
//! the profile names only once recording has ended, are named as they appear by a thread of
//! their own (`call_site_names.rs`), as the report will name them; until then, and for a call
//! not resolved yet, their address shows. The status line of `run` and `attach` is `status.rs`.

use crate::commands::call_site_names::CallSiteNames;
use crate::commands::progress::Progress;
use crate::profile::ProfileBuilder;
use anyhow::{bail, Context, Result};
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{execute, terminal};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Paragraph, Row, Table};
use ratatui::Terminal;
use std::io::{IsTerminal, Stdout};
use std::time::{Duration, Instant};

/// How often the table is redrawn.
const EVERY: Duration = Duration::from_secs(1);
/// How often keys are looked at.
const KEYS_EVERY: Duration = Duration::from_millis(50);
/// Instances listed under each feature.
const INSTANCES: usize = 3;

/// The live view (see the module's documentation).
pub struct Top {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    title: String,
    start: Instant,
    next_draw: Instant,
    next_keys: Instant,
    /// The totals at the previous draw, for the last second's shares.
    previous: Progress,
    /// The call sites' names, as they come.
    names: CallSiteNames,
    restored: bool,
}

impl Top {
    /// Fails unless stdout is a terminal; otherwise takes it over (alternate screen, raw mode).
    /// `title` heads the view (the program and its pid); `pid` is the process recorded.
    pub fn new(title: String, pid: u32) -> Result<Top> {
        if !std::io::stdout().is_terminal() {
            bail!("fsprof top needs a terminal on stdout; to record without one, use fsprof run or fsprof attach");
        }
        terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
        let mut stdout = std::io::stdout();
        let _ = execute!(stdout, terminal::EnterAlternateScreen);
        let terminal = Terminal::new(CrosstermBackend::new(stdout))?;
        let start = Instant::now();
        let mut top = Top {
            terminal,
            title,
            start,
            next_draw: start,
            next_keys: start,
            previous: Progress::default(),
            names: CallSiteNames::start(pid),
            restored: false,
        };
        let _ = top.terminal.hide_cursor();
        let _ = top.terminal.clear();
        Ok(top)
    }

    /// After each tick: looks at the keys, redraws once a second. Returns false when the user
    /// asked to stop.
    pub fn update(&mut self, builder: &ProfileBuilder, threads: usize) -> bool {
        let now = Instant::now();
        if now >= self.next_keys {
            self.next_keys = now + KEYS_EVERY;
            if quit_pressed() {
                return false;
            }
        }
        if now >= self.next_draw {
            self.next_draw = now + EVERY;
            let progress = Progress::of(builder);
            let header = format!(
                "fsprof top: {} · {:.0} s · {} samples · {threads} thread{} · q to quit",
                self.title,
                now.duration_since(self.start).as_secs_f64(),
                progress.samples,
                if threads == 1 { "" } else { "s" }
            );
            let rows = rows(builder, &progress, &self.previous, &self.names);
            let _ = self.terminal.draw(|frame| {
                let [top, rest] = Layout::vertical([Constraint::Length(2), Constraint::Min(1)])
                    .areas(frame.area());
                frame.render_widget(Paragraph::new(header), top);
                let bold = Style::default().add_modifier(Modifier::BOLD);
                let table = Table::new(
                    rows,
                    [
                        Constraint::Length(8),
                        Constraint::Length(8),
                        Constraint::Length(10),
                        Constraint::Min(10),
                    ],
                )
                .header(
                    Row::new(["  now %", "total %", "total s", "feature / instance"]).style(bold),
                );
                frame.render_widget(table, rest);
            });
            self.previous = progress;
        }
        true
    }

    /// Gives the terminal back (normal screen, cooked mode, cursor shown).
    pub fn restore(&mut self) {
        if std::mem::replace(&mut self.restored, true) {
            return;
        }
        let _ = self.terminal.show_cursor();
        let _ = execute!(self.terminal.backend_mut(), terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

impl Drop for Top {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Whether `q`, Esc or Ctrl-C was pressed (keys are read without waiting).
fn quit_pressed() -> bool {
    while event::poll(Duration::ZERO).unwrap_or(false) {
        if let Ok(Event::Key(key)) = event::read() {
            let ctrl_c =
                key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
            if key.kind == KeyEventKind::Press
                && (ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc))
            {
                return true;
            }
        }
    }
    false
}

/// The table's rows: each feature, by its share of the last second (then of all time), and its
/// top instances under it.
fn rows(
    builder: &ProfileBuilder,
    now: &Progress,
    before: &Progress,
    names: &CallSiteNames,
) -> Vec<Row<'static>> {
    let window = now.total_ns.saturating_sub(before.total_ns).max(1) as f64;
    let recent =
        |ns: u64, old: Option<&u64>| ns.saturating_sub(*old.unwrap_or(&0)) as f64 * 100.0 / window;
    let mut features = now.top_features();
    features.sort_by(|a, b| {
        let (ra, rb) = (
            recent(a.1, before.features.get(&a.0)),
            recent(b.1, before.features.get(&b.0)),
        );
        rb.total_cmp(&ra).then(b.1.cmp(&a.1))
    });
    let row = |recent: f64, ns: u64, name: String| {
        Row::new([
            format!("{recent:7.1}"),
            format!("{:7.1}", now.percent(ns)),
            format!("{:9.2}", ns as f64 / 1e9),
            name,
        ])
    };
    let mut rows = Vec::new();
    for (feature, ns) in features {
        let name = crate::profile::clean(builder.feature_name(feature));
        rows.push(row(recent(ns, before.features.get(&feature)), ns, name));
        for (payload, ns) in now.top_instances(feature).into_iter().take(INSTANCES) {
            let text = crate::profile::clean(&names.name(builder.payload_text(payload)));
            let old = before.instances.get(&(feature, payload));
            rows.push(row(recent(ns, old), ns, format!("  {text}")));
        }
    }
    rows
}
