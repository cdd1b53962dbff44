//! Arbitrary bytes to the agent, in every mode: it instruments them or refuses them with a
//! typed error, and never panics (a panic is the crash libFuzzer reports). What it accepts
//! must validate.

#![no_main]

use wprof_agent::{ProbeMode, ProbePlan};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for mode in ProbeMode::ALL {
        let plan = ProbePlan {
            mode,
            ..ProbePlan::default()
        };
        if let Ok(instrumented) = wprof_agent::instrument(data, &plan) {
            // Valid input, valid output: bytes the original's validator accepts come out
            // valid.
            let features = wasmparser::WasmFeatures::all();
            if wasmparser::Validator::new_with_features(features)
                .validate_all(data)
                .is_ok()
            {
                if let Err(e) = wasmparser::Validator::new_with_features(features)
                    .validate_all(&instrumented.bytes)
                {
                    panic!("{} mode: a valid module instrumented is not valid: {e}", mode.name());
                }
            }
        }
    }
});
