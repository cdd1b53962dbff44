//! Probe overhead measured in this process: the wall time of `_start` for the original
//! module and for it instrumented in every mode of [`ProbeMode::ALL`], on one engine, runs
//! interleaved, medians. A mode added to the agent appears here (and in the table and the
//! JSON) without any change to the benchmark.

use std::path::{Path, PathBuf};

use serde::Serialize;
use wasmtime::{Engine, Module};
use wprof_agent::{ProbeMode, ProbePlan};

use super::{ExpectedRatio, RatioCheck};
use crate::exit::Failure;
use crate::prepare::instrument::{self, Prepared};
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::run::collector::{Collector, ProbeOverhead};
use crate::run::runner::{self, Stdio};
use crate::settings::RunSettings;
use crate::stats::median;

/// One mode's `_start` time (nanoseconds, median).
#[derive(Debug, Serialize)]
pub struct ModeBench {
    /// The mode's name (`time`, `cost`, ...).
    pub mode: &'static str,
    /// Median `_start` time of the module instrumented for this mode.
    pub instrumented: u64,
    /// `instrumented / original`.
    pub ratio: f64,
}

/// The in-process figures of one module.
#[derive(Debug)]
pub struct Overhead {
    /// Median `_start` time of the original module (what `WPROF=0` runs, on the same path).
    pub original: u64,
    /// One entry per mode, in [`ProbeMode::ALL`] order.
    pub modes: Vec<ModeBench>,
    /// Accuracy checks that apply to this module.
    pub accuracy: Vec<RatioCheck>,
}

pub(super) fn compile(engine: &Engine, bytes: &[u8], what: &Path) -> Result<Module, Failure> {
    Module::new(engine, bytes)
        .map_err(|e| Failure::input(format!("cannot compile {}: {e}", what.display())))
}

fn settings(path: &Path, mode: ProbeMode) -> RunSettings {
    RunSettings {
        incremental: true,
        module: path.to_path_buf(),
        args: Vec::new(),
        dirs: Vec::new(),
        env: Vec::new(),
        profiling: true,
        profile_path: PathBuf::new(),
        cache_dir: None,
        quiet: true,
        mode,
        stacks: false,
        stack_by_default: false,
        subtract_overhead: false,
        call_sites: false,
        coverage: false,
        allocs: false,
        allocators: Default::default(),
        short_max: crate::commands::run::probe_settings::DEFAULT_SHORT_MAX as u32,
        filter: Default::default(),
        live: false,
        off: Vec::new(),
        adaptive: Default::default(),
        sample_period: crate::settings::sample_period::SamplePeriod::default(),
        timings: None,
        injections: Vec::new(),
        serve: None,
        trace: None,
        native: false,
        interpreter: None,
        entry: Default::default(),
    }
}

/// A module instrumented for one mode, compiled.
/// The name `wprof bench` gives sample mode with live probes, every switch off.
pub const LIVE_OFF: &str = "live off";

/// The name of the variant with block counters (sample mode with `--coverage`).
pub const COVERAGE: &str = "coverage";

/// The name of the variant with allocation profiling (sample mode with `--allocs`).
pub const ALLOCS: &str = "allocs";

/// The name of the variant with a call trace (time mode with `--trace`, every call kept).
pub const TRACE: &str = "trace";

/// What a mode is measured with besides its probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// The mode as it is.
    Plain,
    /// Live probes, every switch turned off before the program starts.
    LiveOff,
    /// Block counters (`--coverage`).
    Coverage,
    /// Allocation profiling (`--allocs`), the allocator found by name.
    Allocs,
    /// A call trace (`--trace`) whose ring keeps a million calls.
    Trace,
}

impl Variant {
    /// Its column's name.
    fn name(self, mode: ProbeMode) -> &'static str {
        match self {
            Variant::Plain => mode.name(),
            Variant::LiveOff => LIVE_OFF,
            Variant::Coverage => COVERAGE,
            Variant::Allocs => ALLOCS,
            Variant::Trace => TRACE,
        }
    }
}

struct Instrumented {
    mode: ProbeMode,
    variant: Variant,
    prepared: Prepared,
    module: Module,
    settings: RunSettings,
}

impl Instrumented {
    fn new(
        engine: &Engine,
        loaded: &LoadedModule,
        path: &Path,
        mode: ProbeMode,
        variant: Variant,
    ) -> Result<Self, Failure> {
        let rules = instrument::FunctionRules::all();
        let plan = ProbePlan {
            mode,
            call_sites: false,
            selection: None,
            live: variant == Variant::LiveOff,
            short_max: crate::commands::run::probe_settings::DEFAULT_SHORT_MAX as u32,
            coverage: variant == Variant::Coverage,
            allocators: (variant == Variant::Allocs)
                .then(|| std::sync::Arc::new(rules.allocators.plan())),
            injections: None,
            capture: None,
        };
        let prepared = instrument::prepare(
            loaded,
            path,
            &plan,
            &rules,
            &mut CacheSession::none(),
            &crate::progress::Progress::none(),
        )
        .map_err(|e| {
            Failure::input(format!(
                "cannot instrument {} for {} mode: {e}",
                path.display(),
                mode.name()
            ))
        })?;
        let bytes = prepared
            .bytes(loaded)
            .expect("instrumented in this process: its bytes are in memory");
        let module = compile(engine, bytes, path)?;
        Ok(Self {
            mode,
            variant,
            prepared,
            module,
            settings: settings(path, mode),
        })
    }

    /// Runs `_start` with a fresh collector; returns the collector and the wall time.
    fn run(&self, engine: &Engine, overhead: ProbeOverhead) -> Result<(Collector, u64), Failure> {
        let mut collector = Collector::new(self.prepared.functions.len()).with_overhead(overhead);
        if self.variant == Variant::Trace {
            collector = collector.with_trace(crate::run::collector::Tracer::new(
                crate::commands::run::trace::DEFAULT_BUFFER as usize,
                u32::MAX,
                None,
            ));
        }
        let mut probes =
            runner::Probes::new(collector, self.mode, self.prepared.probe_code.clone(), None);
        if self.variant == Variant::LiveOff {
            let functions = &self.prepared.functions;
            probes = probes.with_live(runner::Live {
                names: functions.iter().map(|f| f.name.clone()).collect(),
                switchable: functions.iter().map(|f| f.kind == "local").collect(),
                start: Box::new(|board| {
                    let all: Vec<u32> = (0..board.functions()).collect();
                    board.turn(&all, false, "*", "start");
                    Box::new(())
                }),
            });
        }
        let blocks = self.prepared.blocks.clone();
        if let Some(map) = blocks.filter(|_| self.variant == Variant::Coverage) {
            probes = probes.with_coverage(map);
        }
        if self.variant == Variant::Allocs {
            probes = probes.with_allocators(self.prepared.allocators.clone());
        }
        let outcome = runner::run(
            engine,
            &self.module,
            &self.settings,
            Stdio::Discard,
            Some(probes),
        )?;
        let collector = outcome
            .collector
            .expect("instrumented runs have a collector");
        Ok((collector, outcome.wall_time))
    }
}

/// Measures `_start` of the original and of every mode, `runs` times each, interleaved.
pub fn measure(
    engine: &Engine,
    loaded: &LoadedModule,
    path: &Path,
    runs: u32,
    checks: &[ExpectedRatio],
    overhead: ProbeOverhead,
) -> Result<Overhead, Failure> {
    let original_module = compile(engine, &loaded.bytes, path)?;
    let plain = settings(path, ProbeMode::Time);
    // Every mode, then sample mode with every switch off, with block counters, and with
    // allocation profiling, and time mode with a call trace.
    let instrumented = ProbeMode::ALL
        .iter()
        .map(|&mode| (mode, Variant::Plain))
        .chain(
            [Variant::LiveOff, Variant::Coverage, Variant::Allocs].map(|v| (ProbeMode::Sample, v)),
        )
        .chain([(ProbeMode::Time, Variant::Trace)])
        .map(|(mode, variant)| Instrumented::new(engine, loaded, path, mode, variant))
        .collect::<Result<Vec<_>, _>>()?;

    let mut original = Vec::new();
    let mut per_mode = vec![Vec::new(); instrumented.len()];
    for _ in 0..runs {
        let o = runner::run(engine, &original_module, &plain, Stdio::Discard, None)?;
        original.push(o.wall_time);
        for (times, m) in per_mode.iter_mut().zip(&instrumented) {
            times.push(m.run(engine, ProbeOverhead::default())?.1);
        }
    }
    let original = median(original);
    let modes = instrumented
        .iter()
        .zip(per_mode)
        .map(|(m, times)| {
            let t = median(times);
            ModeBench {
                mode: m.variant.name(m.mode),
                instrumented: t,
                ratio: t as f64 / original.max(1) as f64,
            }
        })
        .collect();

    let timed = instrumented
        .iter()
        .find(|m| m.mode == ProbeMode::Time && m.variant == Variant::Plain)
        .expect("ProbeMode::ALL has the time mode");
    let accuracy = accuracy(engine, timed, runs, checks, overhead)?;
    Ok(Overhead {
        original,
        modes,
        accuracy,
    })
}

/// The self-time ratios of `checks` in time mode, raw and with `overhead` subtracted.
fn accuracy(
    engine: &Engine,
    timed: &Instrumented,
    runs: u32,
    checks: &[ExpectedRatio],
    overhead: ProbeOverhead,
) -> Result<Vec<RatioCheck>, Failure> {
    let id_of = |name: &str| {
        timed
            .prepared
            .functions
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.id)
    };
    let mut out = Vec::new();
    for check in checks {
        let (Some(num), Some(den)) = (id_of(&check.numerator), id_of(&check.denominator)) else {
            continue;
        };
        let mut measured = [Vec::new(), Vec::new()];
        for _ in 0..runs {
            for (i, o) in [ProbeOverhead::default(), overhead].into_iter().enumerate() {
                let (f, _) = timed.run(engine, o)?;
                let t = |id: u32| f.functions()[id as usize].self_time.max(1) as f64;
                measured[i].push(t(num) / t(den));
            }
        }
        let [raw, subtracted] = measured.map(median);
        out.push(RatioCheck {
            functions: format!("{}/{}", check.numerator, check.denominator),
            expected: check.ratio,
            raw,
            raw_error: (raw - check.ratio).abs() / check.ratio,
            subtracted,
            subtracted_error: (subtracted - check.ratio).abs() / check.ratio,
        });
    }
    Ok(out)
}
