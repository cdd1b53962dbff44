//! `--format flamegraph`: an interactive SVG flame graph of the calling-context tree, drawn
//! by inferno from the folded stacks of [`super::folded`] (so recursion is collapsed the
//! same way: one frame per function per stack). Frame widths are self plus descendants'
//! time (or cost); the SVG's own script gives zoom and search in a browser.

use anyhow::Context;

use super::folded;
use crate::profile::Profile;

/// The SVG bytes.
pub fn render(profile: &Profile) -> anyhow::Result<Vec<u8>> {
    let lines = folded::lines(profile);
    anyhow::ensure!(
        !lines.is_empty(),
        "{} has no calling-context tree with any cost to draw",
        profile.module.path
    );
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("wprof: {}", profile.module.path);
    options.subtitle = Some(format!(
        "{} mode, total {} {}{}",
        profile.mode,
        profile.total,
        profile.unit,
        match &profile.trap {
            Some(t) => format!(", trapped: {t}"),
            None => format!(", exit code {}", profile.exit_code),
        }
    ));
    options.count_name = profile.unit.clone();
    options.name_type = "Function:".to_string();
    // Colors from the names, and no randomness: the same profile gives the same file.
    options.hash = true;
    options.deterministic = true;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .context("failed to draw the flame graph")?;
    Ok(svg)
}
