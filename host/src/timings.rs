//! wprof's own phases and how long each took: what `wprof run --timings` prints and
//! `WPROF_LOG=info` logs, so that the time wprof adds around the program is never invisible.
//! Work done on a thread of its own while the program ran (see
//! `commands::run::modes::groundwork`) is listed apart: it adds to no phase, and the phase
//! that waits for it shows only the wait.

use std::time::{Duration, Instant};

/// How `--timings` prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for people.
    #[value(alias = "1", alias = "true", alias = "on")]
    Text,
    /// One JSON line: `{"phases":[{"name":..,"ns":..},..],"own_ns":..}`.
    Json,
}

/// The phases of one run, in the order they happened.
#[derive(Debug, Default, Clone)]
pub struct Timings {
    phases: Vec<(&'static str, Duration)>,
    /// Work done beside the program, on a thread of its own, in the order it was recorded.
    beside: Vec<(&'static str, Duration)>,
}

/// The phase that is the program itself: everything else is wprof's own time.
pub const PROGRAM: &str = "run";

impl Timings {
    /// No phase yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` as phase `name`.
    pub fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = f();
        self.record(name, started.elapsed());
        result
    }

    /// Records that phase `name` took `took` (added to the phase if it ran before).
    pub fn record(&mut self, name: &'static str, took: Duration) {
        tracing::info!(phase = name, ms = took.as_secs_f64() * 1e3, "phase done");
        match self.phases.iter_mut().find(|(n, _)| *n == name) {
            Some((_, d)) => *d += took,
            None => self.phases.push((name, took)),
        }
    }

    /// Records that work `name` took `took` on a thread of its own while the program ran:
    /// shown apart, and not part of [`Timings::own`].
    pub fn record_beside(&mut self, name: &'static str, took: Duration) {
        tracing::info!(
            work = name,
            ms = took.as_secs_f64() * 1e3,
            "done beside the run"
        );
        self.beside.push((name, took));
    }

    /// The work done beside the program, in order.
    pub fn beside(&self) -> &[(&'static str, Duration)] {
        &self.beside
    }

    /// Appends the phases of `other`.
    pub fn extend(&mut self, other: &Timings) {
        for (name, took) in &other.phases {
            self.phases.push((name, *took));
        }
        self.beside.extend_from_slice(&other.beside);
    }

    /// The phases, in order.
    pub fn phases(&self) -> &[(&'static str, Duration)] {
        &self.phases
    }

    /// How long phase `name` took, if it ran.
    pub fn get(&self, name: &str) -> Option<Duration> {
        self.phases.iter().find(|(n, _)| *n == name).map(|p| p.1)
    }

    /// The sum of every phase but the program's.
    pub fn own(&self) -> Duration {
        self.phases
            .iter()
            .filter(|(n, _)| *n != PROGRAM)
            .map(|p| p.1)
            .sum()
    }

    /// One line of JSON: every phase in nanoseconds, and wprof's own time.
    pub fn to_json(&self) -> String {
        let phases: Vec<_> = self
            .phases
            .iter()
            .map(|(name, took)| serde_json::json!({"name": name, "ns": took.as_nanos() as u64}))
            .collect();
        let beside: Vec<_> = self
            .beside
            .iter()
            .map(|(name, took)| serde_json::json!({"name": name, "ns": took.as_nanos() as u64}))
            .collect();
        serde_json::json!({"phases": phases, "own_ns": self.own().as_nanos() as u64, "beside": beside})
            .to_string()
    }

    /// A table for stderr: one line per phase with its share, then wprof's own time.
    pub fn render(&self) -> String {
        let total: Duration = self.phases.iter().map(|p| p.1).sum();
        let share = |d: Duration| 100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-9);
        let mut out = String::from("wprof: timings (wall clock)\n");
        for (name, took) in &self.phases {
            out.push_str(&format!(
                "wprof:   {name:<12} {:>10}  {:>5.1}%\n",
                crate::display::format_ns(took.as_nanos() as u64),
                share(*took)
            ));
        }
        out.push_str(&format!(
            "wprof:   {:<12} {:>10}  {:>5.1}%  (every phase but `{PROGRAM}`)\n",
            "wprof's own",
            crate::display::format_ns(self.own().as_nanos() as u64),
            share(self.own())
        ));
        if !self.beside.is_empty() {
            out.push_str("wprof: beside the program (a thread of wprof's own, while it ran)\n");
            for (name, took) in &self.beside {
                out.push_str(&format!(
                    "wprof:   {name:<12} {:>10}\n",
                    crate::display::format_ns(took.as_nanos() as u64)
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_own_time_leaves_out_the_program() {
        let mut t = Timings::new();
        t.record("load", Duration::from_millis(3));
        t.record(PROGRAM, Duration::from_millis(100));
        t.record("write", Duration::from_millis(2));
        t.record("load", Duration::from_millis(1));
        assert_eq!(t.get("load"), Some(Duration::from_millis(4)));
        assert_eq!(t.own(), Duration::from_millis(6));
        assert_eq!(t.time("encode", || 7), 7);
        let names: Vec<_> = t.phases().iter().map(|p| p.0).collect();
        assert_eq!(names, ["load", PROGRAM, "write", "encode"]);
        let table = t.render();
        assert!(
            table.contains("load") && table.contains("wprof's own"),
            "{table}"
        );
        assert!(
            table.contains("94.3%") || table.contains("94.2%"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
        assert_eq!(json["phases"][0]["name"], "load");
        assert_eq!(json["phases"][0]["ns"], 4_000_000);
        assert!(json["own_ns"].as_u64().unwrap() >= 6_000_000);
        assert_eq!(json["beside"], serde_json::json!([]));
    }

    #[test]
    fn work_beside_the_program_is_shown_apart_and_not_in_wprofs_own_time() {
        let mut t = Timings::new();
        t.record(PROGRAM, Duration::from_millis(100));
        t.record("dwarf", Duration::from_micros(10));
        t.record_beside("dwarf", Duration::from_millis(5));
        assert_eq!(t.own(), Duration::from_micros(10));
        let table = t.render();
        let apart = table.split("beside the program").nth(1).expect(&table);
        assert!(
            apart.contains("dwarf") && apart.contains("5.00 ms"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
        assert_eq!(json["beside"][0]["name"], "dwarf");
        assert_eq!(json["beside"][0]["ns"], 5_000_000);
    }
}
