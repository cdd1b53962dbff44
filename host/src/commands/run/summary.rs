//! The end of `wprof run`: the profile written, and the summary it prints on stderr when the
//! program ends: what ran, how it was prepared, what the mode and the options recorded, and
//! the top of the flat profile.

use crate::prepare::instrument::Prepared;
use crate::profile::Profile;
use crate::report::text;
use crate::settings::RunSettings;
use crate::timings::Timings;

/// One summary line per `--inject`: what was injected, how often, of how many calls.
pub fn injection_lines(injections: &[crate::settings::injection::InjectionRecord]) -> String {
    injections
        .iter()
        .map(|i| {
            let when = match i.call {
                Some(n) => format!("call {n} only"),
                None => "every call".to_owned(),
            };
            format!(
                "wprof: injected {} into {} ({when}): {} of {} calls\n",
                i.action, i.target, i.injected, i.calls
            )
        })
        .collect()
}

/// Encodes and writes a run's profile where the settings say, timed; false (after one
/// warning) when it could not be written.
pub fn write_profile(profile: &Profile, settings: &RunSettings, timings: &mut Timings) -> bool {
    let written = timings
        .time("encode", || profile.encode())
        .and_then(|bytes| {
            timings.time("write", || {
                crate::profile::write_bytes(&bytes, &settings.profile_path)
            })
        });
    match written {
        Ok(()) => true,
        Err(e) => {
            crate::prepare::session::warn(format_args!("{e:#}; no profile written"));
            false
        }
    }
}

/// The end of a run without profiling: its trap as wasmtime reports it, and what
/// `--inject` did; the program's exit code.
pub fn finish_unprofiled(outcome: crate::run::runner::RunOutcome, quiet: bool) -> i32 {
    if let Some((_, report)) = &outcome.trap {
        crate::say!("Error: {report}");
    }
    if !quiet {
        crate::say_text!("{}", injection_lines(&outcome.injections));
    }
    outcome.exit_code
}

/// Prints the summary of a profiled run; `written`: the profile file was written.
pub fn print(
    profile: &Profile,
    module: &[u8],
    prepared: &Prepared,
    settings: &RunSettings,
    written: bool,
) {
    print_with(
        profile,
        Some(module),
        Some(&prepared.stats),
        None,
        settings,
        written,
    );
}

/// Prints the summary of a run in stack mode (nothing instrumented, no call counted).
pub fn print_stacks(profile: &Profile, module: &[u8], settings: &RunSettings, written: bool) {
    print_with(profile, Some(module), None, None, settings, written);
}

/// [`print`] for a component: `modules` are its instrumented core modules' names, `cached`
/// how many of them came whole from the cache.
pub fn print_component(
    profile: &Profile,
    stats: &crate::profile::InstrumentationStats,
    modules: &[String],
    cached: u32,
    settings: &RunSettings,
    written: bool,
) {
    let line = format!(
        "wprof: a component: {} core module{} instrumented ({}), {cached} of them whole from the cache\n",
        modules.len(),
        if modules.len() == 1 { "" } else { "s" },
        modules.join(", ")
    );
    print_with(profile, None, Some(stats), Some(line), settings, written);
}

fn print_with(
    profile: &Profile,
    module: Option<&[u8]>,
    stats: Option<&crate::profile::InstrumentationStats>,
    component: Option<String>,
    settings: &RunSettings,
    written: bool,
) {
    // Time mode's `memory.atomic.wait` is the threads' waits, not a function.
    let (waits, functions): (Vec<_>, Vec<_>) = profile
        .functions
        .iter()
        .partition(|f| f.kind == crate::run::to_profile::WAIT_KIND);
    let calls: u64 = functions.iter().map(|f| f.calls).sum();
    let waits: u64 = waits.iter().map(|f| f.calls).sum();
    let mut took = crate::display::format_amount(profile.total, &profile.unit);
    // A sampled run shorter than the period may end before any tick: it had time, only
    // none was sampled.
    if let (0, Some(_), Some(wall)) = (
        profile.total,
        &profile.sampling,
        profile.wall_time.filter(|&w| w > 0),
    ) {
        took = format!(
            "{} (no sample fell in it: shorter than the sampling period)",
            crate::display::format_ns(wall)
        );
    }
    // With every live switch off nothing is sampled: the profiled time alone would read as
    // if the program took none.
    if let Some(off) = profile
        .sampling
        .as_ref()
        .map(|s| s.off_ns)
        .filter(|&n| n > 0)
    {
        took = format!(
            "{took} profiled (and {} more with every live switch off, not sampled)",
            crate::display::format_ns(off)
        );
    }
    let mut out = String::new();
    out.push_str(&format!(
        "\nwprof: {} {} in {took}; {}, {} functions ran{}\n",
        profile.module.path,
        match &profile.trap {
            Some(t) => format!("trapped ({t})"),
            None => format!("exited with code {}", profile.exit_code),
        },
        match stats.is_some() || profile.counts_calls() {
            true => format!("{calls} calls"),
            false => "calls not counted".to_string(),
        },
        functions.len(),
        match waits {
            0 => String::new(),
            1 => ", 1 wait".to_string(),
            n => format!(", {n} waits"),
        },
    ));
    if let Some(stats) = stats {
        out.push_str(&format!(
            "wprof: {} functions: {} instrumented now, {} from the cache{}\n",
            stats.functions_total,
            stats.functions_instrumented,
            stats.functions_from_cache,
            if stats.module_from_cache {
                " (whole module cached)"
            } else {
                ""
            }
        ));
    }
    if let Some(line) = component {
        out.push_str(&line);
    }
    if let Some(threads) = &profile.threads {
        out.push_str("wprof: ");
        out.push_str(&crate::report::text::threads_summary(
            threads,
            &profile.unit,
            profile.counts_calls(),
        ));
    }
    match &profile.sampling {
        Some(s) if stats.is_none() => out.push_str(&format!(
            "wprof: stack mode, {}: call stacks sampled every {}: {} ticks{}\n",
            match (profile.counts_calls(), profile.counts_edge_calls()) {
                (true, true) => "calls counted per caller",
                (true, false) => "calls counted at each function's entry",
                _ => "no probes",
            },
            crate::report::text::period_shown(s),
            s.answered,
            crate::report::text::stack_walk_notes(s),
        )),
        Some(s) => out.push_str(&format!(
            "wprof: time sampled every {}: {} ticks located by program counter, {} readings; {} in wprof's probes left out\n",
            crate::report::text::period_shown(s),
            s.answered,
            s.readings,
            crate::display::format_ns(s.probe_ns)
        )),
        None => {}
    }
    if let Some(note) = text::few_samples_note(profile) {
        out.push_str(&format!("wprof: note: {note}\n"));
    }
    out.push_str(&injection_lines(&profile.injections));
    if let Some(line) = crate::report::host_time::summary_line(profile) {
        out.push_str(&format!("wprof: {line}\n"));
    }
    if let Some(line) = crate::report::allocations::summary_line(profile) {
        out.push_str(&format!("wprof: {line}\n"));
    }
    if let Some(coverage) = &profile.coverage {
        out.push_str(&format!(
            "wprof: {} (`wprof report --format coverage` lists them; `--format lcov` for genhtml)\n",
            crate::report::coverage::summary(coverage)
        ));
    }
    if let Some(line) = text::untimed_summary(profile) {
        out.push_str(&format!("wprof: {line}\n"));
    }
    if let Some(o) = &profile.probe_overhead {
        out.push_str(&format!("wprof: {}\n", text::overhead_summary(o)));
    }
    if let Some(line) = text::cpu_wait_summary(profile) {
        out.push_str(&format!("wprof: note: {line}\n"));
    }
    if let Some(live) = &profile.live {
        for line in text::live_summary(live).lines() {
            out.push_str("wprof: ");
            out.push_str(line.trim_start());
            out.push('\n');
        }
    }
    if let Some(adaptive) = &profile.adaptive {
        out.push_str(&format!(
            "wprof: {} (`wprof report` shows them)\n",
            crate::report::hot_paths::summary(adaptive)
        ));
    }
    // The names the reports show: Go's own, or demangled.
    let mut top: Vec<_> = text::by_self_time(profile)
        .into_iter()
        .take(10)
        .cloned()
        .collect();
    // A component has no Go module: its names are demangled.
    crate::report::source::rename(&mut top, module.unwrap_or_default());
    let top: Vec<_> = top.iter().collect();
    for line in text::flat_table(profile, &top).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if written {
        let shown = settings.profile_path.display();
        // A profile with sampled lines: where to read them.
        let lines = match profile.lines.as_ref().is_some_and(|l| !l.lines.is_empty()) {
            true => format!(", time per source line: `wprof annotate {shown}`"),
            false => String::new(),
        };
        out.push_str(&format!(
            "wprof: profile written to {shown} (see `wprof report {shown}`{lines})\n"
        ));
    }
    crate::say_text!("{out}");
}
