//! The progress bar of a slow start: instrumenting a large module and compiling it can take
//! minutes the first time, and a terminal that stays silent that long looks hung.
//!
//! The bar is drawn on stderr only when stderr is a terminal and `-q` is off, and only once
//! the start has taken [`SHOW_AFTER`] (or `WPROF_PROGRESS_DELAY_MS`): a start from the cache,
//! which takes milliseconds, draws nothing. It is cleared before the program runs, so the program's own output is
//! never mixed with it.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a start runs before the bar appears.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// [`SHOW_AFTER`], or `WPROF_PROGRESS_DELAY_MS` when it is a number of milliseconds.
fn delay() -> Duration {
    std::env::var("WPROF_PROGRESS_DELAY_MS")
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(SHOW_AFTER, Duration::from_millis)
}

/// A start's progress: steps with a known number of units (functions instrumented) drawn as
/// a bar, steps without (compiling) as a spinner.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    /// Under one lock, so that a bar is never shown after the start is over.
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The start is over.
    over: bool,
    /// The bar was given stderr.
    shown: bool,
}

impl Progress {
    /// A bar on stderr if it is a terminal and not `quiet`; else nothing at all.
    pub fn on_terminal(quiet: bool) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Self::none();
        }
        Self::shown_after(delay())
    }

    /// No bar.
    pub fn none() -> Self {
        Progress {
            bar: None,
            state: Arc::default(),
        }
    }

    fn shown_after(delay: Duration) -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        let state: Arc<Mutex<State>> = Arc::default();
        let (waiting, waiting_state) = (bar.clone(), Arc::clone(&state));
        let thread = std::thread::Builder::new()
            .name("wprof-progress".into())
            .spawn(move || {
                std::thread::sleep(delay);
                let mut state = waiting_state.lock().unwrap_or_else(|e| e.into_inner());
                if !state.over {
                    state.shown = true;
                    waiting.set_draw_target(ProgressDrawTarget::stderr());
                    waiting.enable_steady_tick(Duration::from_millis(120));
                }
            });
        Progress {
            // Without the thread the bar would never show: none at all is the same.
            bar: thread.is_ok().then_some(bar),
            state,
        }
    }

    /// Starts a step: `message`, with `units` to go through (a bar) or an unknown amount of
    /// work (a spinner).
    pub fn step(&self, message: &str, units: Option<u64>) {
        let Some(bar) = &self.bar else { return };
        let template = match units {
            Some(_) => "wprof: {msg} [{bar:30}] {pos}/{len} ({elapsed})",
            None => "wprof: {spinner} {msg} ({elapsed})",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message.to_string());
        bar.set_position(0);
        bar.set_length(units.unwrap_or(0));
    }

    /// `n` more units of the current step done.
    pub fn advance(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    /// The start is over: the bar, if it was shown, disappears.
    pub fn finish(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.over = true;
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Whether a bar would be drawn (stderr a terminal, not quiet, the start slow enough).
    pub fn is_enabled(&self) -> bool {
        self.bar.is_some()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_without_a_terminal_or_when_quiet() {
        // Tests run with stderr captured or piped, never a terminal.
        assert!(!Progress::on_terminal(false).is_enabled() || std::io::stderr().is_terminal());
        assert!(!Progress::on_terminal(true).is_enabled());
        let none = Progress::none();
        none.step("instrumenting", Some(10));
        none.advance(3);
        none.finish();
    }

    #[test]
    fn a_start_that_ends_before_the_delay_never_shows() {
        let progress = Progress::shown_after(Duration::from_millis(200));
        progress.step("instrumenting", Some(4));
        progress.advance(4);
        progress.finish();
        std::thread::sleep(Duration::from_millis(300));
        assert!(!progress.state.lock().unwrap().shown);
        assert!(progress.bar.as_ref().unwrap().is_finished());
    }

    #[test]
    fn a_slow_start_shows_the_bar_until_it_is_over() {
        let progress = Progress::shown_after(Duration::from_millis(20));
        progress.step("compiling", None);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !progress.state.lock().unwrap().shown && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(progress.state.lock().unwrap().shown);
        progress.finish();
        assert!(progress.bar.as_ref().unwrap().is_finished());
    }
}
