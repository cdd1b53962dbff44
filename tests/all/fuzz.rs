//! Differential testing of the agent on generated modules (the check is
//! [`crate::differential`]): a fixed sequence of seeds, each made into bytes, each bytes a
//! module that must behave the same instrumented in every mode as it does as it is.
//! `WPROF_FUZZ_CASES=N` runs N cases (default 2,000), `WPROF_FUZZ_SEED=S` starts from another
//! seed. The cargo-fuzz targets in `fuzz/` run the same check on coverage-guided bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use wasmtime::Module;

use crate::differential::{observe, Checker, FUEL};

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

#[test]
fn instrumented_modules_behave_as_the_originals() {
    let cases: u64 = std::env::var("WPROF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let seed: u64 = std::env::var("WPROF_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
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
    let next = AtomicU64::new(0);
    let compared = AtomicU64::new(0);
    let skipped = AtomicU64::new(0);
    let refused = Mutex::new(Vec::new());
    let divergences = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let case = next.fetch_add(1, Ordering::Relaxed);
                if case >= cases {
                    break;
                }
                let bytes = bytes_for(seed.wrapping_add(case));
                let pattern = seed.wrapping_add(case).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let label = format!("case {case} (seed {})", seed.wrapping_add(case));
                let report = checker.check(case, &label, &bytes, pattern);
                if report.skipped {
                    skipped.fetch_add(1, Ordering::Relaxed);
                }
                compared.fetch_add(report.compared, Ordering::Relaxed);
                refused.lock().unwrap().extend(report.refused);
                divergences.lock().unwrap().extend(report.divergences);
            });
        }
    });
    let divergences = divergences.into_inner().unwrap();
    let refused = refused.into_inner().unwrap();
    eprintln!(
        "{cases} cases: {} comparisons, {} skipped (invalid or out of fuel), {} refused by the agent",
        compared.load(Ordering::Relaxed),
        skipped.load(Ordering::Relaxed),
        refused.len()
    );
    for r in refused.iter().take(5) {
        eprintln!("  refused: {r}");
    }
    assert!(
        divergences.is_empty(),
        "{} divergences, the first: {}",
        divergences.len(),
        divergences[0]
    );
    assert!(
        compared.load(Ordering::Relaxed) >= cases,
        "too few cases compared"
    );
}
