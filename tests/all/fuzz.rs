//! Differential testing of the agent on generated modules (the check is
//! [`crate::differential`]): a fixed sequence of seeds, each made into bytes, each bytes a
//! module that must behave the same instrumented in every mode (stack mode's module with its
//! call counters included) as it does as it is.
//! `WPROF_FUZZ_CASES=N` runs N cases (default 2,000), `WPROF_FUZZ_SEED=S` starts from another
//! seed, `WPROF_FUZZ_LOG=FILE` appends the tally to FILE as the run goes (each divergence as
//! it is found), which is how the long runs of docs/fuzzing.md are made. One engine serves
//! every case, on as many threads as the machine has cores. The cargo-fuzz targets in
//! `fuzz/` run the same check on coverage-guided bytes.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wasmtime::Module;

use crate::differential::{observe, CaseReport, Checker, Skip, Threads, FUEL};

/// Deterministic bytes for case `seed` (xorshift).
fn bytes_for(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let len = 512 + (x % 8192) as usize;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// What a run of cases gave.
#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    /// Instrumented runs compared with the original's.
    compared: u64,
    /// Cases that compared nothing, by reason (in [`Skip::ALL`]'s order).
    skipped: [u64; Skip::ALL.len()],
    /// Instrumented runs out of fuel or stack where the original was not.
    inconclusive: u64,
    /// Cases compared whose module has a shared memory, and atomic instructions.
    shared_memory: u64,
    atomics: u64,
    /// Plans the agent refused, each with its error.
    refused: Vec<String>,
    /// Each one a bug.
    divergences: Vec<String>,
}

impl Tally {
    fn add(&mut self, report: CaseReport) {
        self.cases += 1;
        self.compared += report.compared;
        if let Some(skip) = report.skipped {
            self.skipped[Skip::ALL.iter().position(|s| *s == skip).unwrap()] += 1;
        }
        self.inconclusive += report.inconclusive;
        if report.compared > 0 {
            self.shared_memory += u64::from(report.threads.shared_memory);
            self.atomics += u64::from(report.threads.atomics);
        }
        self.refused.extend(report.refused);
        self.divergences.extend(report.divergences);
    }

    /// One line: every count.
    fn line(&self) -> String {
        let mut line = format!(
            "{} cases, {} comparisons, {} divergences, {} refusals, {} instrumented runs \
             inconclusive; {} cases compared with a shared memory, {} with atomics; skipped:",
            self.cases,
            self.compared,
            self.divergences.len(),
            self.refused.len(),
            self.inconclusive,
            self.shared_memory,
            self.atomics
        );
        for (skip, n) in Skip::ALL.iter().zip(self.skipped) {
            write!(line, " {n} {},", skip.name()).unwrap();
        }
        line.pop();
        line
    }
}

/// Reads variable `name` as a number.
fn var(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs the cases of seeds `first..first + cases` on every core, appending progress (every
/// minute), each divergence as it is found, and the tally to `log` if there is one.
fn run(checker: &Checker, first: u64, cases: u64, log: Option<std::fs::File>) -> Tally {
    let start = Instant::now();
    let log = log.map(Mutex::new);
    let note = |text: &str| {
        if let Some(log) = &log {
            let mut log = log.lock().unwrap();
            writeln!(log, "[{:>7.0} s] {text}", start.elapsed().as_secs_f64()).unwrap();
            log.flush().unwrap();
        }
    };
    note(&format!(
        "seeds {first} to {} ({cases} cases)",
        first.wrapping_add(cases).wrapping_sub(1)
    ));
    let next = AtomicU64::new(0);
    let tally = Mutex::new(Tally::default());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let last_note = Mutex::new(Instant::now());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let case = next.fetch_add(1, Ordering::Relaxed);
                if case >= cases {
                    break;
                }
                let seed = first.wrapping_add(case);
                let bytes = bytes_for(seed);
                let pattern = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                // Everything of a case comes from its seed: `WPROF_FUZZ_SEED=S
                // WPROF_FUZZ_CASES=1` runs seed S's case again.
                let label = format!("seed {seed}");
                // A panic of the agent (or of the check) is a finding, not the run's end.
                let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    checker.check(seed, &label, &bytes, pattern)
                }))
                .unwrap_or_else(|_| CaseReport {
                    divergences: vec![format!("{label}: panicked")],
                    ..CaseReport::default()
                });
                for d in &report.divergences {
                    note(&format!("DIVERGENCE {d}"));
                }
                let line = {
                    let mut tally = tally.lock().unwrap();
                    tally.add(report);
                    tally.line()
                };
                let mut last = last_note.lock().unwrap();
                if last.elapsed() >= Duration::from_secs(60) {
                    *last = Instant::now();
                    drop(last);
                    note(&line);
                }
            });
        }
    });
    let tally = tally.into_inner().unwrap();
    let seconds = start.elapsed().as_secs_f64();
    note(&format!(
        "done: {}; {seconds:.0} s, {:.1} cases/s on {threads} threads",
        tally.line(),
        tally.cases as f64 / seconds
    ));
    for r in tally.refused.iter().take(20) {
        note(&format!("refused: {r}"));
    }
    tally
}

#[test]
fn instrumented_modules_behave_as_the_originals() {
    let cases = var("WPROF_FUZZ_CASES").unwrap_or(2_000);
    let seed = var("WPROF_FUZZ_SEED").unwrap_or(1);
    let log = std::env::var_os("WPROF_FUZZ_LOG").map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    });
    let checker = Checker::new();
    let engine = checker.engine();
    // The comparison sees a difference when there is one.
    let one = |n: i32| {
        let wat = format!(
            r#"(module (global (export "g") (mut i32) (i32.const 0))
            (func (export "f") (result i32) (global.set 0 (i32.const {n})) (i32.const {n})))"#
        );
        let m = Module::new(engine, wat::parse_str(&wat).unwrap()).unwrap();
        observe(engine, &m, &["g".into(), "f".into()], FUEL)
    };
    assert_eq!(one(1), one(1));
    assert_ne!(one(1), one(2));
    let tally = run(&checker, seed, cases, log);
    eprintln!("{}", tally.line());
    for r in tally.refused.iter().take(5) {
        eprintln!("  refused: {r}");
    }
    assert!(
        tally.divergences.is_empty(),
        "{} divergences, the first: {}",
        tally.divergences.len(),
        tally.divergences[0]
    );
    assert!(tally.compared >= cases, "too few cases compared");
}

#[test]
fn a_wait_on_a_shared_memory_is_told_from_one_on_an_unshared_memory() {
    let module = |memory: &str| {
        wat::parse_str(format!(
            r#"(module (memory {memory})
            (func (drop (memory.atomic.wait32 (i32.const 0) (i32.const 0) (i64.const -1)))))"#
        ))
        .unwrap()
    };
    let shared = Threads::of(&module("1 1 shared"));
    assert!(shared.shared_memory && shared.atomics && shared.waits_on_shared_memory);
    // A wait on an unshared memory traps: the case runs.
    let unshared = Threads::of(&module("1"));
    assert!(!unshared.shared_memory && unshared.atomics && !unshared.waits_on_shared_memory);
    let plain = Threads::of(&wat::parse_str("(module (memory 1 1 shared))").unwrap());
    assert!(plain.shared_memory && !plain.atomics);
}
