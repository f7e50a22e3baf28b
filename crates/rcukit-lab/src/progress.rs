//! Progress bars (indicatif), shown only on a terminal.
//!
//! Bars draw on stderr. They are hidden when stdout or stderr is not a terminal (a pipe, a
//! file, CI) or with `--no-progress`, so redirected output holds only the tables.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::borrow::Cow;
use std::io::IsTerminal;

/// Whether and where to draw progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    visible: bool,
}

impl Progress {
    /// Progress bars if `wanted` and both stdout and stderr are terminals.
    pub fn new(wanted: bool) -> Progress {
        let tty = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        Progress {
            visible: wanted && tty,
        }
    }

    /// No progress bars (tests, libraries).
    pub fn hidden() -> Progress {
        Progress { visible: false }
    }

    /// Are bars drawn?
    pub fn visible(&self) -> bool {
        self.visible
    }

    /// A bar for one experiment with `steps` measurement points.
    pub fn task(&self, label: &str, steps: u64) -> Task {
        let bar = if self.visible {
            let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{prefix:>10.bold} [{bar:30}] {pos}/{len} {elapsed:>4} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(label.to_string());
            bar
        } else {
            ProgressBar::hidden()
        };
        Task { bar }
    }
}

/// One experiment's bar.
#[derive(Debug)]
pub struct Task {
    bar: ProgressBar,
}

impl Task {
    /// Say what is being measured now.
    pub fn message(&self, msg: impl Into<Cow<'static, str>>) {
        self.bar.set_message(msg);
    }

    /// One measurement point done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// The experiment is done: remove the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
