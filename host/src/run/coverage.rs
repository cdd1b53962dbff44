//! Coverage: the block counters of a module instrumented with
//! [`wprof_agent::ProbePlan::coverage`], read once the program has ended. They live in
//! globals (see [`wprof_agent::ContextArena::COVERAGE_DUMP`]): the module's dump functions
//! copy them into its tree memory, past everything the program used, and the counts are
//! read from there.

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

/// The counts of the module instance `instance`, laid out as `map` says; `None` (with a
/// reason) if its dump functions or memory are not what the map says.
pub fn read<T>(
    store: &mut Store<T>,
    instance: &Instance,
    map: Coverage,
) -> Result<Coverage, String> {
    let total = counters(&map);
    let memory = instance
        .get_memory(&mut *store, ContextArena::MEMORY)
        .ok_or("the module has no tree memory")?;
    // Past everything in use, 8-aligned (a memory's size is a whole number of pages).
    let to = memory.data_size(&*store) as u64;
    let pages = (8 * total).div_ceil(65536);
    if to + 8 * total > u64::from(u32::MAX) {
        return Err("no room for the counters in the tree memory".into());
    }
    memory
        .grow(&mut *store, pages)
        .map_err(|e| format!("cannot grow the tree memory: {e}"))?;
    let chunks = total.div_ceil(u64::from(ContextArena::CHUNK));
    for chunk in 0..chunks {
        let name = format!("{}{chunk}", ContextArena::COVERAGE_DUMP);
        let dump = instance
            .get_typed_func::<i32, ()>(&mut *store, &name)
            .map_err(|e| format!("{name}: {e}"))?;
        dump.call(&mut *store, to as i32)
            .map_err(|e| format!("{name}: {e}"))?;
    }
    let data = memory.data(&*store);
    let counters: Vec<u64> = data[to as usize..(to + 8 * total) as usize]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    assign(map, &counters).ok_or_else(|| "the counters do not match the block map".to_string())
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
