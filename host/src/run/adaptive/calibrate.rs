//! Measuring what adaptive mode's timers cost, so the stopwatch can subtract it: the
//! calibration module of [`crate::run::time::calibrate`] (a loop calling an empty function)
//! instrumented for adaptive mode runs with the empty function's timer armed and disarmed,
//! interleaved, several times. The empty function's timed duration is the cost inside an
//! activation; the rest of the armed run's extra time per call is the cost outside it.
//! Medians are used.

use wasmtime::{Engine, Module};
use wprof_agent::{ProbeMode, ProbePlan};

use std::collections::HashMap;

use super::stopwatch::{NodeTimes, TimerCost};
use super::timers::Timers;
use crate::run::inline::tree::InlineTree;
use crate::run::runner;
use crate::run::time::calibrate::{CALIBRATION, REPEATS};
use crate::stats::median;

/// Calls of the empty function per run: fewer than time mode's calibration takes, since a
/// timed figure is kept only for activations ten times the cost or longer (an error of a
/// few nanoseconds moves none by more than a few percent).
pub const CALLS: u32 = 5_000;

/// Measures the timers' cost on `engine`.
pub fn measure(engine: &Engine) -> anyhow::Result<TimerCost> {
    let original = wat::parse_str(CALIBRATION)?;
    let plan = ProbePlan {
        mode: ProbeMode::Adaptive,
        ..ProbePlan::default()
    };
    let instrumented = wprof_agent::instrument(&original, &plan)?;
    let module = Module::new(engine, &instrumented.bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let linker =
        runner::probe_linker(engine, ProbeMode::Adaptive).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Function 0 is the empty `$leaf`, of the module's two.
    let functions = 2;
    let time_run = |armed: bool| -> anyhow::Result<(u64, HashMap<u32, NodeTimes>)> {
        let mut store = runner::bare_store(engine, None);
        let instance = linker
            .instantiate(&mut store, &module)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let tree = runner::attach_stopwatch(&mut store, &instance, TimerCost::default())
            .ok_or_else(|| anyhow::anyhow!("the timers cannot be reached on this host"))?;
        let run = instance
            .get_typed_func::<i32, ()>(&mut store, "run")
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // One call makes the leaf's node; then its timer is armed for the measured calls.
        runner::reset_slot(&mut store, &instance);
        run.call(&mut store, 1)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if armed {
            let leaf = InlineTree::read(&tree, functions)
                .nodes
                .iter()
                .find(|n| n.function == 0)
                .map(|n| n.address)
                .ok_or_else(|| anyhow::anyhow!("the calibration's leaf has no node"))?;
            Timers::new(tree).arm(leaf, CALLS);
        }
        runner::reset_slot(&mut store, &instance);
        let started = std::time::Instant::now();
        run.call(&mut store, CALLS as i32)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let elapsed = started.elapsed().as_nanos() as u64 * crate::run::collector::PS_PER_NS;
        let stopwatch = runner::take_stopwatch(&mut store).expect("attached above");
        Ok((elapsed, stopwatch.finish().0))
    };
    from_runs(time_run)
}

/// What a timer costs, from `time_run(armed)`: a run of [`CALLS`] calls of the calibration's
/// empty function with its timer armed or not, giving its time in picoseconds and what the
/// stopwatch timed. [`REPEATS`] runs each way, interleaved; medians. The empty function's
/// timed duration is the cost inside an activation, the rest of the armed runs' extra time
/// per call the cost outside it.
pub fn from_runs(
    mut time_run: impl FnMut(bool) -> anyhow::Result<(u64, HashMap<u32, NodeTimes>)>,
) -> anyhow::Result<TimerCost> {
    let (mut plain, mut timed, mut inside) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        plain.push(time_run(false)?.0);
        let (t, times) = time_run(true)?;
        timed.push(t);
        let mean = times
            .values()
            .find(|t| t.timed > 0)
            .map(|t| t.total_ps / t.timed)
            .ok_or_else(|| anyhow::anyhow!("no activation was timed"))?;
        inside.push(mean);
    }
    let inside_ps = median(inside);
    let per_call = median(timed).saturating_sub(median(plain)) / u64::from(CALLS);
    Ok(TimerCost {
        inside_ps,
        outside_ps: per_call.saturating_sub(inside_ps),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn calibration_measures_something_plausible() {
        let engine = crate::run::engine::new_engine().unwrap();
        let cost = super::measure(&engine).unwrap();
        // A timer is at least a host call and a clock read, and far below a millisecond.
        assert!(cost.inside_ps + cost.outside_ps > 0, "{cost:?}");
        assert!(cost.inside_ps + cost.outside_ps < 1_000_000_000, "{cost:?}");
    }
}
