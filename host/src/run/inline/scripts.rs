//! Sample and adaptive mode in an interpreter (see [`crate::languages`]): its language's
//! frames at each tick, placed in the calling contexts of the module's tree, as stack mode
//! places them in its stacks (see [`crate::run::stacks::languages`]).
//!
//! The probed module keeps the eval loop's state at each of its entries (a
//! [`wprof_agent::StateCapture`]), from where the signal handler walks the language's
//! stack at each tick of the program's first thread. The sampler resolves each tick's
//! frames to the script's functions while the program's memory is there ([`ScriptTicks`])
//! and keeps one id per distinct stack of them: the reading's time goes to its context as
//! before, and also, per language stack, to [`crate::run::inline::sampler::Samples::scripted`].
//!
//! Once the tree is read, each context's time with language frames is taken from the
//! context and replayed on its path with the frames put in place of the eval loop's (see
//! [`crate::run::inline::replay`]): the script's functions get that time and no calls (the
//! module counts native calls only), and the native tree keeps every call it counted, with
//! the time no language frame claimed.
//!
//! Every thread of a threaded program walks its own interpreter's frames (each thread's
//! instance keeps its own eval loop's state); the threads' functions share one numbering
//! ([`SharedScripts`]), so that a function the threads all ran is one function of the
//! profile, as in stack mode.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::languages::ScriptFunction;
use crate::run::code::map::Running;
use crate::run::interrupt::language::LanguageWalk;
use crate::run::interrupt::Target;
use crate::run::stacks::languages::{LanguageReader, LanguageSamples, LANGUAGE_FUNCTION};

/// The time and number of the ticks of one reading (or context) and language stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scripted {
    /// Picoseconds.
    pub ps: u64,
    /// Ticks.
    pub ticks: u64,
}

impl Scripted {
    /// One tick's `ps` picoseconds.
    pub fn tick(ps: u64) -> Self {
        Scripted { ps, ticks: 1 }
    }

    /// Adds `other`.
    pub fn add(&mut self, other: Scripted) {
        self.ps += other.ps;
        self.ticks += other.ticks;
    }
}

/// A tick's language frames, resolved (see [`LanguageReader::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScriptStack {
    /// The frames, innermost first, each function's address replaced by its id.
    pub frames: Vec<u64>,
    /// The walk did not reach the stack's base.
    pub truncated: bool,
    /// The line of the script the innermost frame was at, when the tick found the eval
    /// loop running.
    pub line: Option<i32>,
}

/// The language stacks a thread's ticks walked, and what was learnt of its functions.
#[derive(Debug, Clone, Default)]
pub struct ScriptStacks {
    /// By id - 1.
    pub stacks: Vec<ScriptStack>,
    /// The functions, by index, and what could not be read.
    pub samples: LanguageSamples,
}

/// The sampler's side: each tick's language frames to the id of their stack.
#[derive(Debug)]
pub struct ScriptTicks {
    reader: LanguageReader,
    /// The eval loop (whose running makes a tick's line the script's).
    eval: u32,
    /// Each stack seen, and its id.
    interned: HashMap<ScriptStack, u32>,
    /// The frames read last (kept to reuse its allocation).
    frames: Vec<u64>,
}

impl ScriptTicks {
    /// The sampler's side of the walk `walk`.
    pub fn new(walk: &'static LanguageWalk) -> Self {
        ScriptTicks {
            reader: LanguageReader::new(walk),
            eval: walk.interpreter().eval,
            interned: HashMap::new(),
            frames: Vec::new(),
        }
    }

    /// The id of the language stack tick `tick` of `target` walked, `running` what its
    /// program counter says ran; 0 if it walked none.
    pub fn stack_at(&mut self, target: Target, tick: u64, running: Running) -> u32 {
        let Some(truncated) = target.language_at(tick, &mut self.frames) else {
            return 0;
        };
        if self.frames.is_empty() && !truncated {
            return 0;
        }
        let frames = self.reader.resolve(&self.frames);
        let line = match (running, self.frames.first()) {
            (Running::Function(f), Some(&innermost)) if f == self.eval => {
                self.reader.line(innermost)
            }
            _ => None,
        };
        let stack = ScriptStack {
            frames,
            truncated,
            line,
        };
        let next = self.interned.len() as u32 + 1;
        *self.interned.entry(stack).or_insert(next)
    }

    /// What the ticks walked.
    pub fn finish(self) -> ScriptStacks {
        let mut stacks: Vec<(ScriptStack, u32)> = self.interned.into_iter().collect();
        stacks.sort_unstable_by_key(|&(_, id)| id);
        ScriptStacks {
            stacks: stacks.into_iter().map(|(stack, _)| stack).collect(),
            samples: self.reader.finish(),
        }
    }
}

/// The script functions of a run's threads in one numbering, and what the threads learnt
/// of them added up: each thread's replay gives its functions their index here, so that
/// the threads' collectors agree on their ids.
#[derive(Debug, Default)]
pub struct SharedScripts(Mutex<Learnt>);

/// What [`SharedScripts`] holds.
#[derive(Debug, Default)]
struct Learnt {
    /// The threads' samples added up, their functions in the shared numbering; `None`
    /// until a thread adds its own.
    total: Option<LanguageSamples>,
    /// Each function's index in `total`.
    index: HashMap<ScriptFunction, u32>,
}

impl SharedScripts {
    /// Adds what one thread learnt (`own`, by its own indices): the shared index of each
    /// of its functions, by its own index.
    pub fn add(&self, own: LanguageSamples) -> Vec<u32> {
        let mut learnt = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Learnt { total, index } = &mut *learnt;
        let total = total.get_or_insert_with(|| LanguageSamples {
            language: own.language.clone(),
            ..LanguageSamples::default()
        });
        total.add_tallies(&own);
        let map: Vec<u32> = own
            .functions
            .into_iter()
            .map(|f| {
                *index.entry(f).or_insert_with_key(|f| {
                    total.functions.push(f.clone());
                    total.functions.len() as u32 - 1
                })
            })
            .collect();
        let shared = |f: u32| match f & LANGUAGE_FUNCTION != 0 {
            true => map
                .get((f & !LANGUAGE_FUNCTION) as usize)
                .map_or(f, |&i| LANGUAGE_FUNCTION | i),
            false => f,
        };
        for (f, name) in own.called {
            if let Some(&i) = map.get(f as usize) {
                total.called.entry(i).or_insert(name);
            }
        }
        for ((f, line), ns) in own.lines {
            *total.lines.entry((shared(f), line)).or_default() += ns;
        }
        map
    }

    /// What every thread that added its own learnt, by the shared indices; `None` if none
    /// did.
    pub fn take(&self) -> Option<LanguageSamples> {
        let mut learnt = self.0.lock().unwrap_or_else(|e| e.into_inner());
        learnt.index.clear();
        learnt.total.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(line: i32) -> ScriptFunction {
        ScriptFunction {
            name: None,
            source: "@w.lua".to_string(),
            line_defined: line,
            last_line_defined: line + 2,
            size_code: 10,
        }
    }

    #[test]
    fn the_threads_functions_share_one_numbering_and_their_figures_add_up() {
        let shared = SharedScripts::default();
        let first = LanguageSamples {
            language: "lua".to_string(),
            functions: vec![function(1), function(5)],
            called: HashMap::from([(1, "global 'b'".to_string())]),
            lines: HashMap::from([((LANGUAGE_FUNCTION | 1, 6), 100), ((3, 0), 7)]),
            placed: 10,
            ..LanguageSamples::default()
        };
        assert_eq!(shared.add(first), [0, 1]);
        // A second thread learnt them in another order, and one more.
        let second = LanguageSamples {
            language: "lua".to_string(),
            functions: vec![function(9), function(5), function(1)],
            called: HashMap::from([(1, "local 'b'".to_string()), (0, "global 'c'".to_string())]),
            lines: HashMap::from([
                ((LANGUAGE_FUNCTION | 1, 6), 50),
                ((LANGUAGE_FUNCTION, 9), 1),
            ]),
            placed: 4,
            unknown: 2,
            ..LanguageSamples::default()
        };
        assert_eq!(shared.add(second), [2, 1, 0]);
        let total = shared.take().unwrap();
        assert_eq!(total.functions, [function(1), function(5), function(9)]);
        assert_eq!(total.lines[&(LANGUAGE_FUNCTION | 1, 6)], 150);
        assert_eq!(total.lines[&(LANGUAGE_FUNCTION | 2, 9)], 1);
        assert_eq!(total.lines[&(3, 0)], 7);
        // The first name found stays.
        assert_eq!(total.called[&1], "global 'b'");
        assert_eq!(total.called[&2], "global 'c'");
        assert_eq!((total.placed, total.unknown), (14, 2));
        assert!(shared.take().is_none());
    }
}
