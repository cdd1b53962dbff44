//! The modes' part for an interpreter's script (see [`crate::languages`]): the interpreter
//! found, the script's lines read where the run's `--dir` mappings put it (to name its
//! functions, and as the file of its sampled lines), and what of its frames could not be
//! read, said.

use std::collections::HashMap;

use super::Job;
use crate::prepare::facts;
use crate::prepare::session::warn;
use crate::run::stacks;
use crate::settings::RunSettings;

/// Finds the interpreter the module is, if it is one whose language's frames the ticks
/// can read, for the run's mode (`job.settings.interpreter`); says so when it is one whose
/// cannot, or was found by its shape rather than a name.
pub(super) fn find_interpreter(job: &mut Job) {
    let loaded = &job.loaded;
    match job
        .timings
        .time("interpreter", || facts::interpreter(loaded))
    {
        Some(Ok(interpreter)) => {
            if let Some(guessed) = &interpreter.guessed {
                warn(format_args!("{} is {guessed}", job.shown));
            }
            job.settings.interpreter = Some(interpreter)
        }
        Some(Err(why)) => unreadable(&job.shown, &why),
        None => {}
    }
}

/// Says that the interpreter `shown` is one whose structures cannot be read (`why`): its
/// own frames are shown.
pub(in crate::commands::run) fn unreadable(shown: &str, why: &str) {
    warn(format_args!(
        "{shown} is {why}: its scripts' frames cannot be read, the interpreter's own are shown"
    ));
}

/// Line `line` (from 1) of the script the program knows as `file`, read from where the
/// run's `--dir` mappings put it on this machine.
pub(in crate::commands::run) fn line(
    settings: &RunSettings,
    file: &str,
    line: i32,
) -> Option<String> {
    let index = usize::try_from(line.checked_sub(1)?).ok()?;
    let text = std::fs::read_to_string(on_host(settings, file)?).ok()?;
    text.lines().nth(index).map(str::to_string)
}

/// Where the script the program knows as `file` is on this machine, through the run's
/// `--dir` mappings (made absolute, so that reports find it from anywhere).
fn on_host(settings: &RunSettings, file: &str) -> Option<std::path::PathBuf> {
    let guest = std::path::Path::new(file);
    let host = settings.dirs.iter().find_map(|dir| {
        let rest = guest.strip_prefix(&dir.guest).ok()?;
        Some(dir.host.join(rest))
    })?;
    std::path::absolute(host).ok()
}

/// The profile's sampled lines with the script's: each line of a script function where
/// ticks found the eval loop running it, its file the script's path on this machine (the
/// program's own where no `--dir` mapping leads there).
pub(in crate::commands::run) fn with_lines(
    lines: Option<crate::profile::LinesRecord>,
    language: &stacks::languages::LanguageSamples,
    settings: &RunSettings,
) -> Option<crate::profile::LinesRecord> {
    if language.lines.is_empty() {
        return lines;
    }
    let mut lines = lines.unwrap_or_default();
    let files: HashMap<u32, String> = language
        .functions
        .iter()
        .zip(&language.ids)
        .map(|(f, &id)| {
            let file = on_host(settings, f.file())
                .map_or_else(|| f.file().to_string(), |p| p.display().to_string());
            (id, file)
        })
        .collect();
    let mut added: Vec<crate::profile::LineTime> = language
        .lines
        .iter()
        .filter_map(|(&(function, line), &ns)| {
            Some(crate::profile::LineTime {
                function,
                file: files.get(&function)?.clone(),
                line: u32::try_from(line).ok()?,
                self_ns: ns,
            })
        })
        .collect();
    added.sort_by_key(|l| (l.function, l.line));
    lines.lines.extend(added);
    Some(lines)
}

/// The script's functions' files (their paths on this machine, as for their lines) and
/// first lines, which the reports show as DWARF's for the module's functions (pprof's
/// functions, callgrind's files).
pub(in crate::commands::run) fn symbols(
    language: &stacks::languages::LanguageSamples,
    settings: &RunSettings,
) -> Vec<crate::profile::FunctionSymbol> {
    language
        .functions
        .iter()
        .zip(&language.ids)
        .map(|(f, &id)| crate::profile::FunctionSymbol {
            id,
            shown: None,
            file: Some(
                on_host(settings, f.file())
                    .map_or_else(|| f.file().to_string(), |p| p.display().to_string()),
            ),
            line: u32::try_from(f.line_defined).ok().filter(|&l| l > 0),
        })
        .collect()
}

/// Says what of an interpreted language's frames could not be read: stacks cut short
/// (deeper than a tick keeps, or a chain being rewritten as it was read), frames of
/// functions that could not be read, runs of frames with no eval loop to stand in.
pub(in crate::commands::run) fn tell(shown: &str, language: &stacks::languages::LanguageSamples) {
    let missed = [
        (
            language.truncated,
            "stacks cut short (their outermost frames left out)",
        ),
        (
            language.unknown,
            "frames of functions that could not be read",
        ),
        (
            language.unplaced_runs,
            "runs of frames with no eval loop to stand in (left out)",
        ),
        (
            language.unaligned,
            "ticks whose frames did not line up with the interpreter's (shown native)",
        ),
    ];
    let said: Vec<String> = missed
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if !said.is_empty() {
        warn(format_args!(
            "{} frames of {}, read at {} ticks: {}",
            language.language,
            shown,
            language.placed,
            said.join(", ")
        ));
    }
}
