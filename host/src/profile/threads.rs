//! A program's threads in one profile. Each thread of a program that spawns threads
//! (wasi-threads) runs in its own instance with its own probes and is profiled as if it
//! were alone; [`merge`] puts those profiles together: the functions and edges of every
//! thread added up, each thread's calling-context tree kept whole with its nodes marked by
//! thread, and one [`ThreadRecord`] per thread. The totals add up as in a one-thread
//! profile: Σ self = total, each figure the sum of the threads' own.

use std::collections::HashMap;

use super::{Profile, ThreadRecord, ThreadsRecord};

/// Merges `others` (each a spawned thread's id and profile) into `first`, the profile of
/// the program's first thread (thread 0). `unfinished` threads were still running when the
/// program ended and are not among `others`.
pub fn merge(first: &mut Profile, others: Vec<(u32, Profile)>, unfinished: u32) {
    let mut threads = vec![record(0, first)];
    for context in &mut first.contexts {
        context.thread = Some(0);
    }
    let mut functions: HashMap<u32, usize> = first
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| (f.id, i))
        .collect();
    let mut edges: HashMap<(Option<u32>, u32, Option<u32>), usize> = first
        .edges
        .iter()
        .enumerate()
        .map(|(i, e)| ((e.caller, e.callee, e.site), i))
        .collect();
    for (id, profile) in others {
        threads.push(record(id, &profile));
        first.total += profile.total;
        if let (Some(mine), Some(theirs)) = (first.excluded_ns.as_mut(), profile.excluded_ns) {
            *mine += theirs;
        }
        for f in profile.functions {
            match functions.get(&f.id) {
                Some(&i) => {
                    let mine = &mut first.functions[i];
                    mine.calls += f.calls;
                    mine.self_time += f.self_time;
                    mine.inclusive += f.inclusive;
                    mine.min_self = both(mine.min_self, f.min_self, u64::min);
                    mine.max_self = both(mine.max_self, f.max_self, u64::max);
                }
                None => {
                    functions.insert(f.id, first.functions.len());
                    first.functions.push(f);
                }
            }
        }
        for e in profile.edges {
            match edges.get(&(e.caller, e.callee, e.site)) {
                Some(&i) => {
                    first.edges[i].calls += e.calls;
                    first.edges[i].inclusive += e.inclusive;
                }
                None => {
                    edges.insert((e.caller, e.callee, e.site), first.edges.len());
                    first.edges.push(e);
                }
            }
        }
        let offset = first.contexts.len() as u32;
        first
            .contexts
            .extend(profile.contexts.into_iter().map(|mut c| {
                c.id += offset;
                c.parent = c.parent.map(|p| p + offset);
                c.thread = Some(id);
                c
            }));
        if let Some(n) = profile.untimed_samples {
            *first.untimed_samples.get_or_insert(0) += n;
        }
        if let Some(t) = profile.ticks {
            let sum = first.ticks.get_or_insert_with(Default::default);
            sum.taken += t.taken;
            sum.placed += t.placed;
            sum.lost += t.lost;
            sum.cost_ns = sum.cost_ns.max(t.cost_ns);
            sum.pauses += t.pauses;
        }
        for name in profile.untimed {
            if !first.untimed.contains(&name) {
                first.untimed.push(name);
            }
        }
    }
    first.functions.sort_by_key(|f| f.id);
    first.threads = Some(ThreadsRecord {
        threads,
        unfinished,
    });
}

/// A thread's record, from its own profile.
fn record(id: u32, profile: &Profile) -> ThreadRecord {
    ThreadRecord {
        id,
        // Its functions' calls: exact in every mode (stack mode's contexts are sampled
        // stacks, whose calls are not counted).
        calls: profile.functions.iter().map(|f| f.calls).sum(),
        total: profile.total,
        wall_time: profile.wall_time,
        unsampled: false,
    }
}

/// Two threads' per-activation extreme of a function: known only if both threads know it.
fn both(a: Option<u64>, b: Option<u64>, pick: fn(u64, u64) -> u64) -> Option<u64> {
    Some(pick(a?, b?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ContextRecord, EdgeRecord, FunctionRecord};

    fn thread_profile(calls: u64, time: u64) -> Profile {
        let mut p = crate::profile::invariants::tests::profile();
        p.total = time;
        p.functions = vec![FunctionRecord {
            id: 3,
            name: "work".into(),
            kind: "local".into(),
            calls,
            self_time: time,
            inclusive: time,
            min_self: Some(time / calls),
            max_self: Some(time / calls),
        }];
        p.edges = vec![EdgeRecord {
            caller: None,
            callee: 3,
            site: None,
            calls,
            inclusive: time,
        }];
        p.contexts = vec![ContextRecord {
            id: 0,
            parent: None,
            function: 3,
            calls,
            self_time: time,
            inclusive: time,
            host: None,
            allocs: None,
            thread: None,
        }];
        p
    }

    #[test]
    fn threads_add_up_and_keep_their_trees() {
        let mut first = thread_profile(1, 100);
        merge(
            &mut first,
            vec![(1, thread_profile(2, 400)), (2, thread_profile(4, 400))],
            1,
        );
        assert_eq!(first.total, 900);
        assert_eq!(first.functions.len(), 1);
        let work = &first.functions[0];
        assert_eq!((work.calls, work.self_time, work.inclusive), (7, 900, 900));
        assert_eq!((work.min_self, work.max_self), (Some(100), Some(200)));
        assert_eq!(first.edges.len(), 1);
        assert_eq!(first.edges[0].calls, 7);
        let threads: Vec<_> = first.contexts.iter().map(|c| (c.id, c.thread)).collect();
        assert_eq!(threads, [(0, Some(0)), (1, Some(1)), (2, Some(2))]);
        let record = first.threads.as_ref().unwrap();
        assert_eq!(record.unfinished, 1);
        let calls: Vec<_> = record.threads.iter().map(|t| (t.id, t.calls)).collect();
        assert_eq!(calls, [(0, 1), (1, 2), (2, 4)]);
        assert_eq!(first.violations(), Vec::<String>::new());
    }
}
