//! Coverage: the block counters of a module instrumented with
//! [`wprof_agent::ProbePlan::coverage`], read once the program has ended, however it ended.
//! They live in the module's tree memory (see [`wprof_agent::ContextArena::counters`]).

use wasmtime::{Instance, Store};
use wprof_agent::{BlockCount, ContextArena};

use crate::profile::coverage::Coverage;

/// The number of counters of `map`: its blocks that have one.
pub fn counters(map: &Coverage) -> u64 {
    map.functions
        .iter()
        .flat_map(|f| &f.kinds)
        .filter(|&&how| how == BlockCount::Counter)
        .count() as u64
}

/// `map` (the block map the module was instrumented with) with its counts: from
/// `counters` (the module's counters in order: each function's blocks that have one,
/// functions in id order), a block without a counter as the block before it or 0 (see
/// [`BlockCount`]); `None` if the numbers of counters differ.
pub fn assign(mut map: Coverage, counters: &[u64]) -> Option<Coverage> {
    let mut next = counters.iter().copied();
    for f in &mut map.functions {
        let mut counts = Vec::with_capacity(f.kinds.len());
        for &how in &f.kinds {
            let count = match how {
                BlockCount::Counter => next.next()?,
                BlockCount::AsPrevious => counts.last().copied().unwrap_or(0),
                BlockCount::Never => 0,
            };
            counts.push(count);
        }
        f.counts = counts;
    }
    next.next().is_none().then_some(map)
}

/// The counts of the module instance `instance`, which has `functions` functions (its
/// imports included), laid out as `map` says; an error if its tree memory does not hold
/// them.
pub fn read<T>(
    store: &mut Store<T>,
    instance: &Instance,
    functions: u32,
    map: Coverage,
) -> Result<Coverage, String> {
    let memory = instance
        .get_memory(&mut *store, ContextArena::MEMORY)
        .ok_or("the module has no tree memory")?;
    let counts = in_memory(memory.data(&*store), functions, &map)?;
    assign(map, &counts).ok_or_else(|| "the counters do not match the block map".to_string())
}

/// The counters of `map` in `tree`, the tree memory of a module of `functions` functions.
pub fn in_memory(tree: &[u8], functions: u32, map: &Coverage) -> Result<Vec<u64>, String> {
    let total = counters(map) as usize;
    let start = ContextArena::counters(functions) as usize;
    let bytes = tree
        .get(start..start + 8 * total)
        .ok_or_else(|| format!("its {total} counters are not in the tree memory"))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// Coverage: `map` with the counts of the module's block counters; `None` (and a warning)
/// if they cannot be read.
pub(crate) fn read_counts(
    store: &mut Store<crate::run::host_state::HostState>,
    instance: &wasmtime::Instance,
    map: crate::profile::coverage::Coverage,
) -> Option<crate::profile::coverage::Coverage> {
    let functions = store
        .data()
        .collector
        .as_ref()
        .map_or(0, |c| c.functions().len() as u32);
    read(store, instance, functions, map)
        .map_err(|e| crate::say!("wprof: warning: coverage not recorded: {e}"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::coverage::FunctionCoverage;

    #[test]
    fn counters_go_to_the_functions_in_order() {
        use BlockCount::{AsPrevious, Counter, Never};
        let f = |id, kinds: Vec<BlockCount>| FunctionCoverage {
            id,
            name: String::new(),
            body: (0, 100),
            starts: (0..kinds.len() as u32).collect(),
            counts: Vec::new(),
            kinds,
            calls: None,
        };
        let map = Coverage {
            functions: vec![
                f(1, vec![Counter, AsPrevious, Never, Counter]),
                f(4, vec![Counter, Counter, AsPrevious]),
                f(5, vec![Counter]),
            ],
        };
        assert_eq!(counters(&map), 5);
        let read = assign(map.clone(), &[1, 2, 3, 4, 5]).unwrap();
        let counts: Vec<Vec<u64>> = read.functions.iter().map(|f| f.counts.clone()).collect();
        assert_eq!(counts, vec![vec![1, 1, 0, 2], vec![3, 4, 4], vec![5]]);
        assert!(assign(map.clone(), &[1, 2, 3]).is_none());
        assert!(assign(map, &[1, 2, 3, 4, 5, 6]).is_none());
    }
}
