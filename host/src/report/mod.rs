//! Reports: a profile rendered for people (`text`) or tools (`json`). One file per format.

pub mod json;
pub mod text;

use crate::profile::Profile;

/// The report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Flat profile sorted by self time, then callers and callees of each function.
    Text,
    /// The profile's stable JSON schema.
    Json,
}

/// Renders `profile` in `format`.
pub fn render(profile: &Profile, format: Format, options: &TextOptions) -> String {
    match format {
        Format::Text => text::render(profile, options),
        Format::Json => json::render(profile),
    }
}

/// Options of the text report.
#[derive(Debug, Clone)]
pub struct TextOptions {
    /// Show at most this many functions in the flat profile (all if `None`).
    pub top: Option<usize>,
}

/// A duration in the profile's unit (ns), for people: `812 ns`, `3.41 µs`, `12.0 ms`, `2.31 s`.
pub fn format_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} µs", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// An amount in a profile's unit, for people: durations for `ns`, plain counts otherwise.
pub fn format_amount(amount: u64, unit: &str) -> String {
    if unit == "ns" {
        format_ns(amount)
    } else {
        amount.to_string()
    }
}

/// `part` as a percentage of `whole`.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(format_ns(812), "812 ns");
        assert_eq!(format_ns(3_410), "3.41 µs");
        assert_eq!(format_ns(12_000_000), "12.00 ms");
        assert_eq!(format_ns(2_310_000_000), "2.31 s");
        assert_eq!(percent(1, 0), 0.0);
    }
}
