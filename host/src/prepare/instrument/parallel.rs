//! Instrumenting the bodies the cache lacks on every core, a thread taking every n-th
//! function, with the first error or agent panic in function order reported as if they
//! had been instrumented one after another.

use wprof_agent::{InstrumentedBody, Instrumenter};

use crate::progress::Progress;

/// Instruments the defined functions whose body `cached` lacks, in order, on every core:
/// the agent works on one function at a time and shares nothing between them. A panic
/// in the agent (caught: the caller runs the program as it is) or an error is the first
/// one in function order, as if they had been instrumented one after another.
pub(super) fn instrument_missing(
    instrumenter: &Instrumenter<'_>,
    summaries: &[wprof_agent::FunctionSummary],
    cached: &[Option<InstrumentedBody>],
    progress: &Progress,
) -> Result<Vec<InstrumentedBody>, wprof_agent::AgentError> {
    let missing: Vec<u32> = (0..cached.len() as u32)
        .filter(|&d| cached[d as usize].is_none())
        .collect();
    let imported = instrumenter.imported_function_count() as usize;
    let one = |defined: u32| -> Result<InstrumentedBody, wprof_agent::AgentError> {
        let name = &summaries[imported + defined as usize].name;
        // The panic hook is the caller's (silent inside its `guard::quietly`): a worker
        // thread must not swap it.
        let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::prepare::guard::test_panic(name);
            instrumenter.instrument_function(defined)
        }))
        .map_err(|payload| wprof_agent::AgentError::Panicked {
            function: name.clone(),
            message: crate::prepare::guard::message(payload.as_ref()),
        })?;
        progress.advance(1);
        body
    };
    // A thread per core, for enough work to pay for one (about 100 functions each).
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(missing.len().div_ceil(100))
        .max(1);
    if threads == 1 {
        return missing.into_iter().map(one).collect();
    }
    // Thread `t` takes every `threads`-th function from the `t`-th: big and small
    // functions spread evenly.
    let mut done: Vec<Vec<Result<InstrumentedBody, wprof_agent::AgentError>>> =
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let missing = &missing;
                    let one = &one;
                    scope.spawn(move || {
                        missing
                            .iter()
                            .skip(t)
                            .step_by(threads)
                            .map(|&d| one(d))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect()
        });
    let mut results = Vec::with_capacity(missing.len());
    let mut iters: Vec<_> = done.iter_mut().map(|d| d.drain(..)).collect();
    for i in 0..missing.len() {
        match iters[i % threads].next() {
            Some(r) => results.push(r?),
            // A worker that died without a result: only a panic outside the agent.
            None => {
                return Err(wprof_agent::AgentError::Panicked {
                    function: summaries[imported + missing[i] as usize].name.clone(),
                    message: "an instrumenting thread stopped".to_string(),
                })
            }
        }
    }
    Ok(results)
}
