//! `wprof diff OLD NEW`: per function, how calls, self and inclusive cost changed between two
//! profiles, and with `--threshold PCT` a regression gate for CI: exit code 1 when any
//! function's cost grew past the threshold.
//!
//! Functions are matched by name (the module's, and kind), not by index, so a rebuilt
//! module whose functions moved still compares, and shown as the reports show them
//! (demangled, Go's own names). Cost-mode profiles are the ones to gate on: the same
//! program and input give the same numbers on every run, so any change is a real change.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;

use crate::display::format_amount;
use crate::exit::Failure;
use crate::profile::{FunctionRecord, Profile};
use crate::report::percent;
use crate::report::source::shown_names;

/// Changed functions shown without `--top`: what fits a screen.
const DEFAULT_TOP: usize = 30;

/// The exit code when a function's cost grew past `--threshold`.
pub const REGRESSION: i32 = 1;

/// Compare two profiles of the same program, function by function.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct DiffCommand {
    /// The profile before the change.
    #[arg(value_name = "OLD")]
    old: PathBuf,

    /// The profile after the change.
    #[arg(value_name = "NEW")]
    new: PathBuf,

    /// Fail (exit code 1) when a function's self or inclusive cost grew by more than PCT
    /// percent of its old value; a function that only NEW has (or that cost nothing in
    /// OLD) fails when its inclusive cost is more than PCT percent of OLD's total.
    #[arg(long, value_name = "PCT", value_parser = parse_threshold)]
    threshold: Option<f64>,

    /// With --threshold: gate only the functions whose inclusive cost in NEW is at least PCT
    /// percent of NEW's total, so that small helpers doubling from a few instructions do not
    /// fail the build (they are still listed).
    #[arg(long, value_name = "PCT", value_parser = parse_threshold, default_value_t = 0.0)]
    min_share: f64,

    /// Show at most N functions (the largest changes first), 0 for all of them; regressions
    /// are always listed [default: 30]
    #[arg(long, value_name = "N")]
    top: Option<usize>,

    /// Write the report to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Examples:
  wprof run --mode cost -o old.wprof app.wasm -- input
  # ... change the program ...
  wprof run --mode cost -o new.wprof app.wasm -- input
  wprof diff old.wprof new.wprof --threshold 2
  wprof diff old.wprof new.wprof --threshold 2 --min-share 1

Exit status:
  0 when no function grew past --threshold (always 0 without it);
  1 when at least one did (a regression: the functions are listed under `regressions`);
  2 if a profile cannot be read, or the two profiles count different units";

fn parse_threshold(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("`{s}` is not a percentage of zero or more"))
    }
}

/// One function's numbers in both profiles (zeros where it did not run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// The function's name.
    pub name: String,
    /// Whether it is an import.
    pub import: bool,
    /// (old, new) calls.
    pub calls: (u64, u64),
    /// (old, new) self cost.
    pub self_cost: (u64, u64),
    /// (old, new) inclusive cost.
    pub inclusive: (u64, u64),
}

impl Change {
    /// Growth of `(old, new)` in percent of `old`; `None` when `old` is 0.
    fn growth((old, new): (u64, u64)) -> Option<f64> {
        (old > 0).then(|| (new as f64 - old as f64) * 100.0 / old as f64)
    }

    /// Whether this change is a regression past `threshold` percent (see `--threshold`).
    pub fn regressed(&self, threshold: f64, old_total: u64) -> bool {
        if self.inclusive.0 == 0 && self.self_cost.0 == 0 {
            return self.inclusive.1 > 0 && percent(self.inclusive.1, old_total) > threshold;
        }
        [self.self_cost, self.inclusive]
            .into_iter()
            .any(|pair| Self::growth(pair).is_some_and(|g| g > threshold))
    }

    /// The size of the change, for ordering: inclusive first, then self, then calls.
    fn magnitude(&self) -> (u64, u64, u64) {
        let d = |(a, b): (u64, u64)| a.abs_diff(b);
        (d(self.inclusive), d(self.self_cost), d(self.calls))
    }
}

/// Every function of either profile, matched by name (the module's, as recorded) and kind,
/// and named as the reports show it (the profile's kept symbols: Go's own names, demangled
/// ones; else demangled here), the new profile's name first.
pub fn changes(old: &Profile, new: &Profile) -> Vec<Change> {
    let mut by_name: BTreeMap<(String, bool), Change> = BTreeMap::new();
    let (old_shown, new_shown) = (shown_names(old), shown_names(new));
    let mut add = |f: &FunctionRecord, new_side: bool| {
        let import = f.kind == "import";
        let shown = match new_side {
            true => &new_shown,
            false => &old_shown,
        };
        let c = by_name
            .entry((f.name.clone(), import))
            .or_insert_with(|| Change {
                name: shown.get(&f.id).cloned().unwrap_or_else(|| f.name.clone()),
                import,
                ..Change::default()
            });
        let pick = |pair: &mut (u64, u64), v: u64| {
            if new_side {
                pair.1 += v
            } else {
                pair.0 += v
            }
        };
        pick(&mut c.calls, f.calls);
        pick(&mut c.self_cost, f.self_time);
        pick(&mut c.inclusive, f.inclusive);
    };
    new.functions.iter().for_each(|f| add(f, true));
    old.functions.iter().for_each(|f| add(f, false));
    let mut out: Vec<Change> = by_name.into_values().collect();
    out.sort_by(|a, b| b.magnitude().cmp(&a.magnitude()).then(a.name.cmp(&b.name)));
    out
}

fn signed(old: u64, new: u64, unit: &str) -> String {
    if new >= old {
        format!("+{}", format_amount(new - old, unit))
    } else {
        format!("-{}", format_amount(old - new, unit))
    }
}

fn signed_count(old: u64, new: u64) -> String {
    if new >= old {
        format!("+{}", new - old)
    } else {
        format!("-{}", old - new)
    }
}

fn growth_text(pair: (u64, u64)) -> String {
    match Change::growth(pair) {
        Some(g) => format!("{g:+.2}%"),
        None if pair.1 == 0 => "=".to_string(),
        None => "new".to_string(),
    }
}

/// What `wprof diff` shows and gates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gate {
    /// `--threshold`: growth in percent that fails.
    pub threshold: Option<f64>,
    /// `--min-share`: functions under this percent of NEW's total are not gated.
    pub min_share: f64,
    /// `--top`: rows shown.
    pub top: Option<usize>,
}

/// The diff as text, and the regressions past the gate's threshold.
pub fn render(old: &Profile, new: &Profile, gate: Gate) -> (String, Vec<Change>) {
    let Gate {
        threshold,
        min_share,
        top,
    } = gate;
    let unit = &new.unit;
    let all = changes(old, new);
    let regressions: Vec<Change> = match threshold {
        Some(t) => all
            .iter()
            .filter(|c| percent(c.inclusive.1, new.total) >= min_share)
            .filter(|c| c.regressed(t, old.total))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let mut out = String::new();
    let _ = writeln!(out, "wprof diff ({} mode, unit {unit})", new.mode);
    let _ = writeln!(
        out,
        "  old: {} total {}",
        old.module.path,
        format_amount(old.total, unit)
    );
    let _ = writeln!(
        out,
        "  new: {} total {}",
        new.module.path,
        format_amount(new.total, unit)
    );
    let _ = writeln!(
        out,
        "  total: {} ({})",
        signed(old.total, new.total, unit),
        growth_text((old.total, new.total))
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>12} {:>12} {:>9} {:>12} {:>12} {:>9} {:>10} {:>10} {:>9}  function",
        "old self",
        "new self",
        "self Δ%",
        "old incl",
        "new incl",
        "incl Δ%",
        "old calls",
        "new calls",
        "calls Δ"
    );
    let changed: Vec<&Change> = all.iter().filter(|c| c.magnitude() != (0, 0, 0)).collect();
    let limit = match top {
        Some(0) => changed.len(),
        Some(n) => n,
        None => DEFAULT_TOP,
    };
    let (shown, left_out) = changed.split_at(limit.min(changed.len()));
    for c in shown {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>9} {:>12} {:>12} {:>9} {:>10} {:>10} {:>9}  {}{}",
            format_amount(c.self_cost.0, unit),
            format_amount(c.self_cost.1, unit),
            growth_text(c.self_cost),
            format_amount(c.inclusive.0, unit),
            format_amount(c.inclusive.1, unit),
            growth_text(c.inclusive),
            c.calls.0,
            c.calls.1,
            signed_count(c.calls.0, c.calls.1),
            c.name,
            if c.import { " [import]" } else { "" },
        );
    }
    if !left_out.is_empty() {
        let _ = writeln!(
            out,
            "... {} more changed function{}: `--top 0` shows all, `--top N` the first N",
            left_out.len(),
            if left_out.len() == 1 { "" } else { "s" }
        );
    }
    let unchanged = all.len() - changed.len();
    if unchanged > 0 {
        let _ = writeln!(out, "({unchanged} functions unchanged)");
    }
    if let Some(t) = threshold {
        let _ = writeln!(out);
        if regressions.is_empty() {
            let _ = writeln!(out, "no regression past {t}%");
        } else {
            let _ = writeln!(
                out,
                "regressions past {t}%{}: {}",
                if min_share > 0.0 {
                    format!(" (functions with at least {min_share}% of the new total)")
                } else {
                    String::new()
                },
                regressions.len()
            );
            for c in &regressions {
                let _ = writeln!(
                    out,
                    "  {}: self {} ({}), inclusive {} ({})",
                    c.name,
                    signed(c.self_cost.0, c.self_cost.1, unit),
                    growth_text(c.self_cost),
                    signed(c.inclusive.0, c.inclusive.1, unit),
                    growth_text(c.inclusive),
                );
            }
        }
    }
    (out, regressions)
}

impl DiffCommand {
    /// Compares the profiles; returns 1 on a regression past the threshold, else 0.
    pub fn execute(&self) -> Result<i32, Failure> {
        let old = Profile::read(&self.old)?;
        let new = Profile::read(&self.new)?;
        if old.unit != new.unit {
            return Err(Failure::input(format!(
                "{} counts {} ({} mode) but {} counts {} ({} mode): compare profiles of the same mode",
                self.old.display(),
                old.unit,
                old.mode,
                self.new.display(),
                new.unit,
                new.mode
            )));
        }
        let gate = Gate {
            threshold: self.threshold,
            min_share: self.min_share,
            top: self.top,
        };
        let (text, regressions) = render(&old, &new, gate);
        match &self.output {
            Some(path) => std::fs::write(path, &text)
                .with_context(|| format!("failed to write {}", path.display()))?,
            None => {
                let mut stdout = std::io::stdout().lock();
                if let Err(e) = stdout
                    .write_all(text.as_bytes())
                    .and_then(|_| stdout.flush())
                {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        return Err(Failure::input(format!("failed to write the diff: {e}")));
                    }
                }
            }
        }
        Ok(if regressions.is_empty() {
            0
        } else {
            REGRESSION
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_profile;

    fn gate(threshold: f64) -> Gate {
        Gate {
            threshold: Some(threshold),
            ..Gate::default()
        }
    }

    #[test]
    fn min_share_leaves_small_functions_out_of_the_gate() {
        let old = sample_profile();
        let mut new = sample_profile();
        // b (50 of 100) grows by 10%, a (70 of 100 inclusive) does not.
        new.functions[2].self_time = 55;
        new.functions[2].inclusive = 55;
        let g = |min_share| Gate {
            threshold: Some(5.0),
            min_share,
            top: None,
        };
        assert_eq!(render(&old, &new, g(0.0)).1.len(), 1);
        assert_eq!(
            render(&old, &new, g(50.0)).1.len(),
            1,
            "55 is 55% of the new total"
        );
        assert!(render(&old, &new, g(60.0)).1.is_empty());
    }

    #[test]
    fn functions_match_by_the_modules_name_and_show_the_reports_name() {
        let mut old = sample_profile();
        old.functions[1].name = "_Z3addii".into();
        old.functions[2].name = "regexp.__machine_.add".into();
        let mut new = old.clone();
        // The new profile keeps Go's own name of function 2.
        new.symbols = Some(crate::profile::SymbolsRecord {
            module_path: None,
            functions: vec![crate::profile::FunctionSymbol {
                id: new.functions[2].id,
                shown: Some("regexp.(*machine).add".into()),
                file: None,
                line: None,
            }],
        });
        let names: Vec<String> = changes(&old, &new).into_iter().map(|c| c.name).collect();
        assert!(names.contains(&"add(int, int)".to_string()), "{names:?}");
        assert!(
            names.contains(&"regexp.(*machine).add".to_string()),
            "{names:?}"
        );
        // One row each: matched by the recorded names.
        assert_eq!(names.len(), old.functions.len(), "{names:?}");
    }

    #[test]
    fn growth_past_the_threshold_is_a_regression() {
        let old = sample_profile();
        let mut new = sample_profile();
        // a: self 40 -> 50 (+25%), inclusive 70 -> 80 (+14.3%).
        new.functions[1].self_time = 50;
        new.functions[1].inclusive = 80;
        let (text, regressions) = render(&old, &new, gate(20.0));
        assert_eq!(regressions.len(), 1, "{text}");
        assert_eq!(regressions[0].name, "a");
        assert!(text.contains("+25.00%"), "{text}");
        let (_, none) = render(&old, &new, gate(30.0));
        assert!(none.is_empty());
        // Shrinking is never a regression.
        let (_, none) = render(&new, &old, gate(0.0));
        assert!(none.is_empty());
    }

    #[test]
    fn new_functions_count_against_the_old_total() {
        let old = sample_profile();
        let mut new = sample_profile();
        let mut extra = new.functions[0].clone();
        extra.id = 9;
        extra.name = "extra".into();
        extra.inclusive = 6; // 6% of the old total (100)
        extra.self_time = 6;
        new.functions.push(extra);
        assert_eq!(render(&old, &new, gate(5.0)).1.len(), 1);
        assert!(render(&old, &new, gate(7.0)).1.is_empty());
    }

    #[test]
    fn thresholds_parse() {
        assert_eq!(parse_threshold("2.5"), Ok(2.5));
        assert_eq!(parse_threshold("10%"), Ok(10.0));
        assert!(parse_threshold("-1").is_err());
        assert!(parse_threshold("x").is_err());
    }
}
