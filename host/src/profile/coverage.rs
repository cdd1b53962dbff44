//! Coverage (`wprof run --coverage`): how often each basic block of each probed function
//! ran, and the block map that says where the blocks are. A run's record starts as the
//! block map the instrumented module was made with (every count 0) and is filled from the
//! module's counters when the program ends; records of several runs of one module add up
//! ([`Coverage::merge`]).

use serde::{Deserialize, Serialize};

/// Every probed function's blocks and their counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// In id order.
    pub functions: Vec<FunctionCoverage>,
}

/// One function's basic blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCoverage {
    /// The function's id (its index in the original module).
    pub id: u32,
    /// Its name in the module (the profile lists only functions that ran).
    pub name: String,
    /// Its body's byte range in the original module, `[start, end)`.
    pub body: (u32, u32),
    /// Where each block starts, as an offset from the body's start, increasing; a block
    /// ends where the next starts, the last at the body's end.
    pub starts: Vec<u32>,
    /// How many times each block ran (parallel to `starts`).
    pub counts: Vec<u64>,
    /// How many times the function was called, when the run counted calls (its first
    /// block also runs when a Go goroutine re-enters the function).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    /// While a run fills `counts`: how each block's count is known (which have counters);
    /// not in the profile.
    #[serde(skip)]
    pub kinds: Vec<wprof_agent::BlockCount>,
}

impl FunctionCoverage {
    /// How many times the function was called: the calls counted, else its first block's
    /// count.
    pub fn entries(&self) -> u64 {
        self.calls
            .unwrap_or_else(|| self.counts.first().copied().unwrap_or(0))
    }

    /// Blocks that ran at least once.
    pub fn blocks_hit(&self) -> usize {
        self.counts.iter().filter(|&&c| c > 0).count()
    }

    /// Each block as an absolute byte range of the original module, with its count.
    pub fn ranges(&self) -> impl Iterator<Item = ((u32, u32), u64)> + '_ {
        let (body_start, body_end) = self.body;
        self.starts.iter().enumerate().map(move |(i, &start)| {
            let end = self
                .starts
                .get(i + 1)
                .map_or(body_end, |&next| body_start + next);
            (
                (body_start + start, end),
                self.counts.get(i).copied().unwrap_or(0),
            )
        })
    }
}

impl Coverage {
    /// Each function's calls as the run counted them (`functions`: the profile's, by id;
    /// a Go function's first block also runs at re-entries).
    pub fn set_calls(&mut self, functions: &[super::FunctionRecord]) {
        let calls: std::collections::HashMap<u32, u64> =
            functions.iter().map(|f| (f.id, f.calls)).collect();
        for f in &mut self.functions {
            f.calls = Some(calls.get(&f.id).copied().unwrap_or(0));
        }
    }

    /// Blocks in all, and blocks that ran.
    pub fn blocks(&self) -> (usize, usize) {
        self.functions.iter().fold((0, 0), |(all, hit), f| {
            (all + f.starts.len(), hit + f.blocks_hit())
        })
    }

    /// Adds `other`'s counts to this record's: both must be of the same module (the
    /// same functions with the same blocks, whatever else the runs differed in). A
    /// function only one of them counted is kept as it is.
    pub fn merge(&mut self, other: &Coverage) -> Result<(), String> {
        let mut mine: std::collections::BTreeMap<u32, FunctionCoverage> =
            std::mem::take(&mut self.functions)
                .into_iter()
                .map(|f| (f.id, f))
                .collect();
        for theirs in &other.functions {
            match mine.get_mut(&theirs.id) {
                Some(f) => {
                    if f.body != theirs.body || f.starts != theirs.starts {
                        return Err(format!(
                            "function {} has other blocks in the two runs: not the same module",
                            theirs.id
                        ));
                    }
                    for (mine, theirs) in f.counts.iter_mut().zip(&theirs.counts) {
                        *mine = mine.saturating_add(*theirs);
                    }
                    f.calls = f.calls.zip(theirs.calls).map(|(a, b)| a.saturating_add(b));
                }
                None => {
                    mine.insert(theirs.id, theirs.clone());
                }
            }
        }
        self.functions = mine.into_values().collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(id: u32, counts: Vec<u64>) -> FunctionCoverage {
        FunctionCoverage {
            id,
            name: format!("f{id}"),
            body: (100, 140),
            starts: vec![1, 10, 25][..counts.len()].to_vec(),
            counts,
            kinds: Vec::new(),
            calls: None,
        }
    }

    #[test]
    fn ranges_end_where_the_next_block_starts() {
        let f = function(3, vec![2, 0, 5]);
        let ranges: Vec<_> = f.ranges().collect();
        assert_eq!(
            ranges,
            vec![((101, 110), 2), ((110, 125), 0), ((125, 140), 5)]
        );
        assert_eq!((f.entries(), f.blocks_hit()), (2, 2));
    }

    #[test]
    fn merging_adds_counts_and_refuses_other_modules() {
        let mut a = Coverage {
            functions: vec![function(3, vec![2, 0, 5]), function(5, vec![1, 1])],
        };
        let b = Coverage {
            functions: vec![function(3, vec![1, 4, 0]), function(4, vec![7])],
        };
        a.merge(&b).unwrap();
        let counts: Vec<(u32, Vec<u64>)> = a
            .functions
            .iter()
            .map(|f| (f.id, f.counts.clone()))
            .collect();
        assert_eq!(
            counts,
            vec![(3, vec![3, 4, 5]), (4, vec![7]), (5, vec![1, 1])]
        );
        assert_eq!(a.blocks(), (6, 6));
        let other = Coverage {
            functions: vec![FunctionCoverage {
                starts: vec![1, 11, 25],
                ..function(3, vec![0, 0, 0])
            }],
        };
        assert!(a.merge(&other).is_err());
    }
}
