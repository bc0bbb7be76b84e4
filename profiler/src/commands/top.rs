//! `fsprof top`'s live view: while recording, a full-screen table of the features and their top
//! instances, refreshed every second (like `py-spy top`), drawn with ratatui on stdout's
//! terminal (alternate screen, raw mode). Columns: the share of the counted time since the table
//! before, the share of all of it so far, and the time so far. `q`, Esc or Ctrl-C stop recording.
//!
//! The table is the report's, computed on a thread of its own from a copy of the profile being
//! built (`live_report.rs`): the same features (the program's marks, the agent's, those the rules
//! find in the native stacks), the same names, the same attribution. It restores the terminal
//! when dropped (also when recording fails); it writes no file. The status line of `run` and
//! `attach` is `status.rs`.

use crate::commands::live_report::{LiveReport, Table as Lines};
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

/// The live view (see the module's documentation).
pub struct Top {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    title: String,
    start: Instant,
    next_draw: Instant,
    next_keys: Instant,
    /// The table, made as the report is.
    live: LiveReport,
    restored: bool,
}

impl Top {
    /// Fails unless stdout is a terminal; otherwise takes it over (alternate screen, raw mode).
    /// `title` heads the view (the program and its pid); `pid` is the process recorded, `rules`
    /// those the report applies; `count_idle`: all thread time counts (`--idle`).
    pub fn new(
        title: String,
        pid: u32,
        rules: crate::rules::RuleSet,
        count_idle: bool,
    ) -> Result<Top> {
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
            live: LiveReport::start(pid, rules, count_idle),
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
            self.live.offer(builder);
            let header = format!(
                "fsprof top: {} · {:.0} s · {} samples · {threads} thread{} · q to quit",
                self.title,
                now.duration_since(self.start).as_secs_f64(),
                Progress::of(builder).samples,
                if threads == 1 { "" } else { "s" }
            );
            let rows = match self.live.table() {
                Some(table) => rows(&table),
                None => vec![Row::new(["", "", "", "(naming the first stacks…)"])],
            };
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

/// The table's rows: each feature, by its share of the last table's time (then of all time),
/// and its top instances under it.
fn rows(table: &Lines) -> Vec<Row<'static>> {
    let row = |line: &crate::commands::live_report::Line, indent: &str| {
        Row::new([
            format!("{:7.1}", line.recent_percent),
            format!("{:7.1}", line.percent),
            format!("{:9.2}", line.ns as f64 / 1e9),
            format!("{indent}{}", line.name),
        ])
    };
    let mut rows = Vec::new();
    for (feature, instances) in &table.features {
        rows.push(row(feature, ""));
        rows.extend(instances.iter().map(|instance| row(instance, "  ")));
    }
    rows
}
