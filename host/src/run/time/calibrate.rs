//! Measuring what the time-mode probes cost, so the collector can subtract it.
//!
//! At start-up, a calibration module — a loop calling an empty function N times — runs
//! original and instrumented on the same engine, several times, interleaved. The empty
//! function's measured self time per call is the overhead *inside* an activation; the rest
//! of the instrumented run's extra time per call is the overhead *outside* it, which the
//! caller's clock sees. Medians are used. See [`crate::run::collector::ProbeOverhead`].
//!
//! # Accuracy
//!
//! The estimate is as good as the machine is steady during the ~10 ms it takes; on a
//! loaded machine it can be off by a few nanoseconds per call either way, and frames never
//! go below zero.

use wasmtime::{Engine, Module};
use wprof_agent::{ProbeMode, ProbePlan};

use crate::run::collector::{Collector, ProbeOverhead, PS_PER_NS};
use crate::run::runner;
use crate::stats::median;

pub(crate) const CALIBRATION: &str = r#"(module
  (func $leaf)
  (func (export "run") (param $n i32)
    (loop $again
      call $leaf
      local.get $n
      i32.const 1
      i32.sub
      local.tee $n
      br_if $again)))"#;

pub(crate) const CALLS: u32 = 20_000;
pub(crate) const REPEATS: usize = 7;

/// Measures the time-mode probe overhead on `engine`, in picoseconds, for probes placed
/// as with `call_sites` (a call-site probe adds to every call's overhead); with
/// `counts_short`, also the cost of a call to a function counted, not timed (the empty
/// function is one: see [`ProbePlan::short_max`]).
pub fn measure(
    engine: &Engine,
    call_sites: bool,
    counts_short: bool,
) -> anyhow::Result<ProbeOverhead> {
    let original = wat::parse_str(CALIBRATION)?;
    let compile = |short_max: u32| -> anyhow::Result<Module> {
        let instrumented = wprof_agent::instrument(
            &original,
            &ProbePlan {
                mode: ProbeMode::Time,
                call_sites,
                selection: None,
                live: false,
                short_max,
                coverage: false,
                allocators: None,
                injections: None,
                capture: None,
            },
        )?;
        Module::new(engine, &instrumented.bytes).map_err(|e| anyhow::anyhow!("{e}"))
    };
    let instrumented = compile(0)?;
    let counted = counts_short.then(|| compile(u32::MAX)).transpose()?;
    let original = Module::new(engine, &original).map_err(|e| anyhow::anyhow!("{e}"))?;
    let plain_linker = wasmtime::Linker::new(engine);
    let probe_linker =
        runner::probe_linker(engine, ProbeMode::Time).map_err(|e| anyhow::anyhow!("{e}"))?;

    let time_run = |linker: &wasmtime::Linker<runner::HostState>,
                    module: &Module,
                    collector: Option<Collector>|
     -> anyhow::Result<(u64, Option<Collector>)> {
        let mut store = runner::bare_store(engine, collector);
        let instance = linker
            .instantiate(&mut store, module)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let run = instance
            .get_typed_func::<i32, ()>(&mut store, "run")
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = std::time::Instant::now();
        run.call(&mut store, CALLS as i32)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let elapsed = started.elapsed().as_nanos() as u64;
        Ok((elapsed, runner::take_collector(store)))
    };

    repeat(counted.is_some(), |run| match run {
        Run::Plain => time_run(&plain_linker, &original, None),
        Run::Counted => time_run(
            &probe_linker,
            counted
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("no counted build"))?,
            Some(Collector::new(2)),
        ),
        Run::Probed => time_run(&probe_linker, &instrumented, Some(Collector::new(2))),
    })
}

/// Which build of the calibration program a run times.
pub(crate) enum Run {
    /// The original.
    Plain,
    /// Instrumented with short functions counted, not timed.
    Counted,
    /// Instrumented with every function timed; the run gives back its collector.
    Probed,
}

/// Times the calibration [`REPEATS`] times, each time every build in turn (`Counted` only
/// with `counted`), `run` timing one run of a build in nanoseconds, and derives the probes'
/// overhead from the medians.
pub(crate) fn repeat(
    counted: bool,
    mut run: impl FnMut(Run) -> anyhow::Result<(u64, Option<Collector>)>,
) -> anyhow::Result<ProbeOverhead> {
    let (mut plain, mut probed, mut inside) = (Vec::new(), Vec::new(), Vec::new());
    let mut called = Vec::new();
    for _ in 0..REPEATS {
        plain.push(run(Run::Plain)?.0);
        if counted {
            called.push(run(Run::Counted)?.0);
        }
        let (t, collector) = run(Run::Probed)?;
        probed.push(t);
        let collector = collector.ok_or_else(|| anyhow::anyhow!("no collector came back"))?;
        // Function 0 is $leaf; the collector counts picoseconds.
        inside.push(collector.functions()[0].self_time.max(0) as u64 / u64::from(CALLS));
    }
    Ok(overhead(plain, probed, inside, called))
}

/// The overhead from the calibration's runs (nanoseconds each): plain, probed, the empty
/// function's measured self time per call (picoseconds), and with short functions counted.
fn overhead(
    plain: Vec<u64>,
    probed: Vec<u64>,
    inside: Vec<u64>,
    called: Vec<u64>,
) -> ProbeOverhead {
    let inside = median(inside);
    let plain = median(plain);
    let per_call =
        |runs: Vec<u64>| median(runs).saturating_sub(plain) * PS_PER_NS / u64::from(CALLS);
    let probed = per_call(probed);
    ProbeOverhead {
        inside,
        outside: probed.saturating_sub(inside),
        called: if called.is_empty() {
            0
        } else {
            per_call(called)
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn calibration_measures_something_plausible() {
        let engine = crate::run::engine::new_engine().unwrap();
        let o = super::measure(&engine, false, true).unwrap();
        // A probe is at least a host call and a clock read, and far below a millisecond.
        assert!(o.inside + o.outside > 0, "{o:?}");
        assert!(o.inside + o.outside < 1_000_000_000, "{o:?}");
        // A counted call is a host call without a clock read: something, and far below
        // a millisecond.
        assert!(o.called > 0 && o.called < 1_000_000_000, "{o:?}");
        assert_eq!(super::measure(&engine, false, false).unwrap().called, 0);
    }
}
