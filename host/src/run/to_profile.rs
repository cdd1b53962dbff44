//! From a finished run to its [`Profile`]: the collector's totals (picoseconds in time mode,
//! instructions in cost mode) become the profile's records, in nanoseconds or instructions,
//! named after the original module's functions.

use crate::profile::{
    ContextRecord, EdgeRecord, Ending, FunctionInfo, FunctionRecord, InstrumentationStats,
    ModuleRef, OverheadRecord, Profile, FORMAT_VERSION,
};
use crate::run::collector::{Collector, PS_PER_NS, ROOT};

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
    let name_of = |id: u32| {
        functions
            .get(id as usize)
            .map(|f| (f.name.clone(), f.kind.clone()))
            .unwrap_or_else(|| (format!("func[{id}]"), "local".to_string()))
    };
    let ran: Vec<(usize, &crate::run::collector::FunctionTotals)> = collector
        .functions()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.calls > 0)
        .collect();
    let total = clamp(collector.root_inclusive());
    let self_times = to_unit(
        &ran.iter().map(|(_, t)| t.self_time).collect::<Vec<_>>(),
        scale,
        total,
    );
    let records = ran
        .iter()
        .zip(self_times)
        .map(|(&(id, t), self_time)| {
            let (name, kind) = name_of(id as u32);
            FunctionRecord {
                id: id as u32,
                name,
                kind,
                calls: t.calls,
                self_time,
                // A self time rounded up (by one unit, above) stays within its inclusive
                // time, which was rounded down; a larger excess is a real one, left visible.
                inclusive: match clamp(t.inclusive) {
                    inclusive if self_time == inclusive + 1 => self_time,
                    inclusive => inclusive,
                },
                min_self: per_activation.then(|| unscale(t.min_self)),
                max_self: per_activation.then(|| unscale(t.max_self)),
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
        })
        .collect();
    Profile {
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
        total,
        instrumentation: stats,
        excluded_ns: (mode == wprof_agent::ProbeMode::Time)
            .then(|| collector.excluded() / PS_PER_NS),
        probe_overhead: (mode == wprof_agent::ProbeMode::Time
            && collector.overhead() != Default::default())
        .then(|| {
            let o = collector.overhead();
            OverheadRecord {
                inside_ns: o.inside as f64 / PS_PER_NS as f64,
                outside_ns: o.outside as f64 / PS_PER_NS as f64,
            }
        }),
        functions: records,
        edges,
        contexts,
        sampling: ending.sampling,
    }
}

/// Self times in the collector's unit, converted to the profile's (`scale` of them make
/// one) so that their sum is `total` when the exact values add up to it: each is rounded
/// down, then the units lost to rounding go, one each, to the values that lost the most
/// (largest remainders). Negative values (an estimate subtracted too much) become 0.
fn to_unit(values: &[i64], scale: i64, total: u64) -> Vec<u64> {
    let mut out: Vec<u64> = values.iter().map(|&v| (v.max(0) / scale) as u64).collect();
    let exact: i64 = values.iter().map(|&v| v.max(0)).sum();
    let lost = (exact / scale) as u64 - out.iter().sum::<u64>();
    if scale == 1 || lost == 0 || (exact / scale) as u64 != total {
        return out;
    }
    let mut by_remainder: Vec<usize> = (0..values.len()).collect();
    by_remainder.sort_by_key(|&i| (std::cmp::Reverse(values[i].max(0) % scale), i));
    for &i in by_remainder.iter().take(lost as usize) {
        out[i] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_unit;

    #[test]
    fn converted_self_times_add_up_to_the_total() {
        // 3 x 1.6 ns = 4.8 ns: rounded down each is 1 ns (3 ns), the total 4 ns.
        assert_eq!(to_unit(&[1600, 1600, 1600], 1000, 4), vec![2, 1, 1]);
        assert_eq!(to_unit(&[1900, 1100, 2000], 1000, 5), vec![2, 1, 2]);
        // Largest remainder first.
        assert_eq!(to_unit(&[1100, 1900, 1000], 1000, 4), vec![1, 2, 1]);
        // A total that the values do not make (a collector bug) is left visible.
        assert_eq!(to_unit(&[1600, 1600], 1000, 7), vec![1, 1]);
        assert_eq!(to_unit(&[-5000, 2500], 1000, 2), vec![0, 2]);
        assert_eq!(to_unit(&[7, 9], 1, 16), vec![7, 9]);
    }
}
