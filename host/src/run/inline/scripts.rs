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

use std::collections::HashMap;

use crate::run::code::map::Running;
use crate::run::interrupt::language::LanguageWalk;
use crate::run::interrupt::Target;
use crate::run::stacks::languages::{LanguageReader, LanguageSamples};

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
