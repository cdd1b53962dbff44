//! Coverage-guided differential fuzzing of the agent: each input is the bytes wasm-smith
//! makes a module from; the module must behave the same instrumented in every mode (and
//! with every hook) as it does as it is. The check is the plain test's
//! (`tests/all/differential.rs`, included here by path), so that a crash found here is a
//! failing case there too: its bytes, given to `Checker::check`, reproduce it.

#![no_main]

#[path = "../../tests/all/differential.rs"]
mod differential;
#[path = "../../tests/all/hooks.rs"]
#[allow(dead_code)]
mod hooks;

use std::sync::OnceLock;

static CHECKER: OnceLock<differential::Checker> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let checker = CHECKER.get_or_init(differential::Checker::new);
    // The switches and timers turned between calls come from the input too.
    let pattern = data
        .iter()
        .take(8)
        .fold(0u64, |p, &b| p.rotate_left(8) ^ u64::from(b));
    let report = checker.check(0, "input", data, pattern);
    assert!(
        report.divergences.is_empty(),
        "{} divergences, the first: {}",
        report.divergences.len(),
        report.divergences[0]
    );
});
