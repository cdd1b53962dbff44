//! From a finished run to its [`Profile`]: the collector's totals (picoseconds in time mode,
//! instructions in cost mode) become the profile's records, in nanoseconds or instructions,
//! named after the original module's functions.

use crate::profile::{
    ContextRecord, EdgeRecord, Ending, FunctionInfo, FunctionRecord, InstrumentationStats,
    ModuleRef, OverheadRecord, Profile, TicksRecord, FORMAT_VERSION,
};
use crate::run::collector::{Collector, PS_PER_NS, ROOT};

/// The name time mode's profiles give the time threads wait in `memory.atomic.wait32` and
/// `wait64`, a callee of the function waiting.
pub const WAIT_NAME: &str = "memory.atomic.wait";
/// Its kind.
pub const WAIT_KIND: &str = "wait";

/// Builds the profile of a finished run (all frames closed) from its collector and what
/// the preparation recorded of the module.
pub fn profile_of_run(
    module: ModuleRef,
    functions: &[FunctionInfo],
    stats: InstrumentationStats,
    mode: wprof_agent::ProbeMode,
    collector: &Collector,
    ending: Ending,
) -> Profile {
    let cost = mode == wprof_agent::ProbeMode::Cost;
    // Only time mode sees activations one by one.
    let per_activation = !mode.counts_inline();
    // The collector counts picoseconds in time mode; profiles show nanoseconds.
    let scale = if cost { 1 } else { PS_PER_NS as i64 };
    let clamp = |v: i64| (v / scale).max(0) as u64;
    let unscale = |v: u64| v / scale as u64;
    let name_of = |id: u32| match functions.get(id as usize) {
        Some(f) => (f.name.clone(), f.kind.clone()),
        // Time mode: the waits of every function (see `ProbeLog::function`).
        None if id as usize == functions.len() => (WAIT_NAME.to_string(), WAIT_KIND.to_string()),
        None => (format!("func[{id}]"), "local".to_string()),
    };
    // A window of a running program has functions that ran without being called in it;
    // those on a context's path stay, so that every context names a function the profile
    // has (a window with no sample in it gives its callers no time).
    let mut in_context = vec![false; collector.functions().len()];
    for n in collector.contexts().nodes().iter().skip(1) {
        if let Some(seen) = in_context.get_mut(n.function as usize) {
            *seen = true;
        }
    }
    let records = collector
        .functions()
        .iter()
        .enumerate()
        .filter(|(id, t)| t.calls > 0 || t.inclusive != 0 || in_context[*id])
        .map(|(id, t)| {
            let (name, kind) = name_of(id as u32);
            FunctionRecord {
                id: id as u32,
                name,
                kind,
                calls: t.calls,
                self_time: clamp(t.self_time),
                inclusive: clamp(t.inclusive),
                // A function counted but not timed has no activation of its own.
                min_self: (per_activation && t.untimed_calls == 0).then(|| unscale(t.min_self)),
                max_self: (per_activation && t.untimed_calls == 0).then(|| unscale(t.max_self)),
            }
        })
        .collect();
    let edges = collector
        .edges()
        .iter()
        .map(|e| EdgeRecord {
            caller: (e.caller != ROOT).then_some(e.caller),
            callee: e.callee,
            site: e.site,
            calls: e.calls,
            inclusive: clamp(e.inclusive),
        })
        .collect();
    // Node 0 is the root; its children are the outermost functions.
    let contexts = collector
        .contexts()
        .nodes()
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, n)| ContextRecord {
            id: i as u32 - 1,
            parent: (n.parent != 0).then(|| n.parent - 1),
            function: n.function,
            calls: n.calls,
            self_time: clamp(n.self_time),
            inclusive: clamp(n.inclusive),
            host: collector.host_at(i as u32),
            allocs: collector.allocs_at(i as u32),
            thread: None,
        })
        .collect();
    let unprobed = functions
        .iter()
        .filter(|f| f.kind == "excluded")
        .map(|f| f.name.clone())
        .collect();
    let untimed: Vec<String> = collector
        .functions()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.untimed_calls > 0)
        .map(|(id, _)| name_of(id as u32).0)
        .collect();
    let sampled = collector.sampled();
    let untimed_samples = (!untimed.is_empty() && sampled.moved_ps > 0).then_some(sampled.placed);
    let ticks = (sampled.ticks + sampled.lost > 0).then_some(TicksRecord {
        taken: sampled.ticks,
        placed: sampled.placed,
        lost: sampled.lost,
        cost_ns: sampled.cost_ps / 1000,
        pauses: sampled.pauses,
    });
    Profile {
        unprobed,
        untimed,
        untimed_samples,
        ticks,
        format_version: FORMAT_VERSION,
        tool: format!("wprof {}", env!("CARGO_PKG_VERSION")),
        module,
        mode: mode.name().to_string(),
        unit: if cost { "instructions" } else { "ns" }.to_string(),
        exit_code: ending.exit_code,
        outcome: if ending.trap.is_some() {
            "trap"
        } else {
            "exit"
        }
        .to_string(),
        trap: ending.trap,
        wall_time: (!cost).then_some(ending.wall_time),
        total: clamp(collector.root_inclusive()),
        instrumentation: stats,
        excluded_ns: (mode == wprof_agent::ProbeMode::Time)
            .then(|| collector.excluded() / PS_PER_NS),
        cpu_wait_ns: None,
        probe_overhead: (mode == wprof_agent::ProbeMode::Time
            && collector.overhead() != Default::default())
        .then(|| {
            let o = collector.overhead();
            OverheadRecord {
                inside_ns: o.inside as f64 / PS_PER_NS as f64,
                outside_ns: o.outside as f64 / PS_PER_NS as f64,
                called_ns: o.called as f64 / PS_PER_NS as f64,
            }
        }),
        functions: records,
        edges,
        contexts,
        sampling: ending.sampling,
        live: None,
        adaptive: None,
        injections: Vec::new(),
        coverage: None,
        host_calls: Vec::new(),
        allocations: None,
        threads: None,
        symbols: None,
        lines: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_on_a_contexts_path_is_in_the_profile_without_calls_or_time() {
        // A window's replay: `main` (1) was entered before the window (no calls in it) and
        // nothing was sampled, but `work` (2) was called under it.
        let mut collector = Collector::new(3);
        collector.enter_counted_at(1, 0, 0);
        collector.enter_counted_at(2, 5, 0);
        collector.exit_at(2, 0);
        collector.exit_at(1, 0);
        collector.finish_at(0);
        let profile = profile_of_run(
            ModuleRef {
                path: "m.wasm".to_string(),
                blake3: String::new(),
            },
            &[],
            InstrumentationStats::default(),
            wprof_agent::ProbeMode::Sample,
            &collector,
            Ending {
                exit_code: 0,
                trap: None,
                wall_time: 0,
                sampling: None,
            },
        );
        let ids: Vec<u32> = profile.functions.iter().map(|f| f.id).collect();
        assert_eq!(ids, [1, 2]);
        for c in &profile.contexts {
            assert!(ids.contains(&c.function), "{c:?}");
        }
    }
}
