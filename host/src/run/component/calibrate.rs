//! Measuring what time mode's probes cost in a component, where they reach the host
//! through the component model's lowered calls (dearer than a core module's host calls).
//!
//! The same measurement as [`crate::run::time::calibrate`]'s: its calibration module (a loop
//! calling an empty function), here wrapped in a component that exports its `run`, runs
//! as it is and instrumented (the component rewritten as a profiled run's is, its probes
//! linked as a run links them), interleaved, several times; medians.

use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};
use wprof_agent::{ProbeMode, ProbePlan};

use crate::components::rewrite::{rewrite, Replacement};
use std::collections::HashMap;

use crate::run::adaptive::calibrate::CALLS as CALLS_TIMED;
use crate::run::adaptive::stopwatch::{NodeTimes, TimerCost};
use crate::run::collector::{Collector, ProbeOverhead};
use crate::run::component::probes::define_probes;
use crate::run::component::state::{ComponentState, ModuleProbes};
use crate::run::time::calibrate::{repeat, Run, CALIBRATION, CALLS};
use crate::run::time::probe_log::ProbeLog;

/// The calibration module in a component exporting `run: func(n: u32)`.
fn wrapper(module: &[u8]) -> Vec<u8> {
    use wasm_encoder::{
        Alias, CanonicalFunctionSection, Component, ComponentAliasSection, ComponentExportKind,
        ComponentExportSection, ComponentTypeSection, ComponentValType, ExportKind,
        InstanceSection, ModuleArg, PrimitiveValType, RawSection,
    };
    let mut component = Component::new();
    component.section(&RawSection {
        id: wasm_encoder::ComponentSectionId::CoreModule as u8,
        data: module,
    });
    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    component.section(&instances);
    let mut aliases = ComponentAliasSection::new();
    aliases.alias(Alias::CoreInstanceExport {
        instance: 0,
        kind: ExportKind::Func,
        name: "run",
    });
    component.section(&aliases);
    let mut types = ComponentTypeSection::new();
    types
        .function()
        .params([("n", ComponentValType::Primitive(PrimitiveValType::U32))])
        .result(None);
    component.section(&types);
    let mut lifted = CanonicalFunctionSection::new();
    lifted.lift(0, 0, []);
    component.section(&lifted);
    let mut exports = ComponentExportSection::new();
    exports.export("run", ComponentExportKind::Func, 0, None);
    component.section(&exports);
    component.finish()
}

/// The calibration module instrumented for `plan` in its component (see [`wrapper`]),
/// rewritten as a run's component is, compiled, with what the run knows of the module.
fn calibration_component(
    engine: &Engine,
    plan: &ProbePlan,
) -> anyhow::Result<(Component, ModuleProbes)> {
    let original = wat::parse_str(CALIBRATION)?;
    let instrumented = wprof_agent::instrument(&original, plan)?;
    let probes =
        crate::components::probe_imports(&instrumented.bytes).map_err(anyhow::Error::msg)?;
    let wrapped = wrapper(&original);
    let layout = crate::components::ComponentLayout::read(&wrapped).map_err(anyhow::Error::msg)?;
    let bytes = rewrite(
        &wrapped,
        &layout.components,
        &[Replacement {
            component: 0,
            module_index: 0,
            bytes: instrumented.bytes,
            probes: probes.clone(),
        }],
    )
    .map_err(anyhow::Error::msg)?;
    let component = Component::new(engine, bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let module = ModuleProbes {
        offset: 0,
        // No imports of its own, two functions.
        indices: wprof_agent::FunctionIndices {
            imports: 0,
            functions: 2,
            mode: plan.mode,
            live: plan.live,
        },
        position: 0,
        probe_code: None,
        imports: probes,
        coverage: None,
        allocators: Vec::new(),
        interpreter: None,
    };
    Ok((component, module))
}

/// Measures time mode's probe overhead in a component on `engine`, in picoseconds (see
/// [`crate::run::time::calibrate::measure`] for `call_sites` and `counts_short`).
pub fn measure(
    engine: &Engine,
    call_sites: bool,
    counts_short: bool,
) -> anyhow::Result<ProbeOverhead> {
    let original = wat::parse_str(CALIBRATION)?;
    let build = |short_max: u32| -> anyhow::Result<(Component, ModuleProbes)> {
        calibration_component(
            engine,
            &ProbePlan {
                mode: ProbeMode::Time,
                call_sites,
                short_max,
                ..ProbePlan::default()
            },
        )
    };
    let (instrumented, module) = build(0)?;
    let counted = counts_short.then(|| build(u32::MAX)).transpose()?;
    let original =
        Component::new(engine, wrapper(&original)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let plain_linker = Linker::new(engine);
    let mut probe_linker = Linker::new(engine);
    define_probes(&mut probe_linker, 0, &module).map_err(|e| anyhow::anyhow!("{e}"))?;

    let time_run = |linker: &Linker<ComponentState>,
                    component: &Component,
                    collector: Option<Collector>|
     -> anyhow::Result<(u64, Option<Collector>)> {
        let mut store = Store::new(engine, ComponentState::bare(collector.map(ProbeLog::start)));
        let instance = linker
            .instantiate(&mut store, component)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let run = instance
            .get_typed_func::<(u32,), ()>(&mut store, "run")
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = std::time::Instant::now();
        run.call(&mut store, (CALLS,))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let elapsed = started.elapsed().as_nanos() as u64;
        let collector = store.data_mut().take_log().map(|log| log.finish().0);
        Ok((elapsed, collector))
    };

    repeat(counted.is_some(), |run| match run {
        Run::Plain => time_run(&plain_linker, &original, None),
        Run::Counted => time_run(
            &probe_linker,
            &counted
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("no counted build"))?
                .0,
            Some(Collector::new(2)),
        ),
        Run::Probed => time_run(&probe_linker, &instrumented, Some(Collector::new(2))),
    })
}

/// Measures what adaptive mode's timers cost in a component on `engine`, an engine whose
/// memories wprof makes (see [`crate::run::component::memory::engine`]): the same
/// measurement as [`crate::run::adaptive::calibrate::measure`]'s (the calibration module's
/// empty function timed at every call, against the same component with no timer armed),
/// through the component's lowered calls, instrumented as a profiled run instruments a
/// component's modules.
pub fn measure_timers(engine: &Engine) -> anyhow::Result<TimerCost> {
    use crate::run::adaptive::timers::Timers;
    let (component, module) = calibration_component(
        engine,
        &ProbePlan {
            mode: ProbeMode::Adaptive,
            // As a component's modules are (see `crate::commands::run::component`).
            live: true,
            ..ProbePlan::default()
        },
    )?;
    let functions = module.indices.functions;
    let mut linker = Linker::new(engine);
    define_probes(&mut linker, 0, &module).map_err(|e| anyhow::anyhow!("{e}"))?;
    let time_run = |armed: bool| -> anyhow::Result<(u64, HashMap<u32, NodeTimes>)> {
        let mut store = Store::new(engine, ComponentState::bare(None));
        let (instance, made) =
            crate::run::component::memory::record(|| linker.instantiate(&mut store, &component));
        let instance = instance.map_err(|e| anyhow::anyhow!("{e}"))?;
        // The tree memory is the last the module makes (the agent appends it).
        let memory = made
            .last()
            .ok_or_else(|| anyhow::anyhow!("the calibration's tree memory was not made"))?;
        // SAFETY: the memory never moves and lives as long as the store, which outlives
        // every use of the tree here.
        let tree = unsafe { memory.live_tree() };
        store.data_mut().attach_stopwatch(tree);
        let run = instance
            .get_typed_func::<(u32,), ()>(&mut store, "run")
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // One call makes the leaf's node; then its timer is armed for the measured calls.
        run.call(&mut store, (1,))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if armed {
            let size = memory.size.load(std::sync::atomic::Ordering::Acquire);
            // SAFETY: `size` bytes from the base are accessible; nothing runs meanwhile.
            let bytes = unsafe { std::slice::from_raw_parts(memory.base as *const u8, size) };
            let leaf = crate::run::inline::tree::InlineTree::read(bytes, functions)
                .nodes
                .iter()
                .find(|n| n.function == 0)
                .map(|n| n.address)
                .ok_or_else(|| anyhow::anyhow!("the calibration's leaf has no node"))?;
            Timers::new(tree).arm(leaf, CALLS_TIMED);
        }
        let started = std::time::Instant::now();
        run.call(&mut store, (CALLS_TIMED,))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let elapsed = started.elapsed().as_nanos() as u64 * crate::run::collector::PS_PER_NS;
        let stopwatch = store.data_mut().take_stopwatch().expect("attached above");
        Ok((elapsed, stopwatch.finish().0))
    };
    crate::run::adaptive::calibrate::from_runs(time_run)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_components_probes_are_measured_and_cost_more_than_nothing() {
        let engine = crate::run::engine::new_engine().unwrap();
        let o = super::measure(&engine, false, true).unwrap();
        assert!(o.inside + o.outside > 0, "{o:?}");
        assert!(o.inside + o.outside < 1_000_000_000, "{o:?}");
        assert!(o.called > 0 && o.called < 1_000_000_000, "{o:?}");
    }

    #[test]
    fn a_components_timers_are_measured_and_cost_more_than_nothing() {
        let engine = crate::run::component::memory::engine().unwrap();
        let cost = super::measure_timers(&engine).unwrap();
        assert!(cost.inside_ps + cost.outside_ps > 0, "{cost:?}");
        assert!(cost.inside_ps + cost.outside_ps < 1_000_000_000, "{cost:?}");
    }
}
