//! An interpreted language's frames put in stack mode's native stacks, as `py-spy --native`
//! shows them: the script's functions stand where the interpreter's eval loop ran them,
//! and the native code they called (a C function of the language's library, the
//! allocator, a WASI call) stays above them.
//!
//! A tick's language frames (see [`crate::run::interrupt::language`]) come innermost first.
//! They fall into runs, one per native frame of the eval loop, innermost with innermost:
//! each such native frame is replaced by its run's functions. A Lua frame is marked if its
//! call started a run of the eval loop (called from native code), which ends a run; each
//! JavaScript frame stands in place of the native frame that pushed it (see
//! [`crate::languages::quickjs::placing`]). A Lua eval frame without a run (a coroutine's
//! resumer, whose stack is another state's) stays native; runs beyond the eval frames (a
//! walk that caught the interpreter between two states) are left out and counted.
//!
//! The language's functions get ids of their own in the stacks, [`LANGUAGE_FUNCTION`] and
//! their index in [`LanguageReader::functions`]; the profile gives them ids after the
//! module's (see `commands::run::modes::stack`).

mod merge;
pub mod place;

use std::collections::HashMap;

use crate::languages::cpython;
use crate::languages::lua::{self, LuaFrame};
use crate::languages::memory::Memory;
use crate::languages::quickjs::{self, JsFrame};
use crate::languages::{Language, ScriptFunction};
use crate::run::interrupt::language::LanguageWalk;

pub use merge::{merge, merge_one};

/// Set in a stack's id of a language function (its index below it).
pub const LANGUAGE_FUNCTION: u32 = 1 << 31;

/// What the reader learnt of a thread's language frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LanguageSamples {
    /// The language (`lua`, `js`).
    pub language: String,
    /// The functions, by index.
    pub functions: Vec<ScriptFunction>,
    /// Once [`merge`]d, each function's id in the profile.
    pub ids: Vec<u32>,
    /// The name Lua's traceback gives a function where a Lua caller called it (`global
    /// 'fib'`), the first found, by index.
    pub called: HashMap<u32, String>,
    /// Ticks whose language frames were put in their stack.
    pub placed: u64,
    /// Ticks whose walk was truncated (a chain that did not hold together, or deeper than
    /// the room for it): their outermost language frames are missing.
    pub truncated: u64,
    /// Runs of language frames that had no eval frame to stand in (left out).
    pub unplaced_runs: u64,
    /// CPU time per line of the script (by the function's id in the profile, once
    /// [`merge`]d, and line).
    pub lines: HashMap<(u32, i32), u64>,
    /// Frames whose function could not be read (the memory gone, a prototype being
    /// rewritten, or a call being set up): shown as an unknown function.
    pub unknown: u64,
    /// Ticks that found the innermost eval frame without a language frame of its own yet
    /// (or any more): the interpreter entering or leaving a call; that frame stays native.
    pub between_calls: u64,
    /// Ticks whose language frames did not line up with the native frames that push them
    /// (a call handler wprof does not know): left native.
    pub unaligned: u64,
}

impl LanguageSamples {
    /// Adds `other`'s tallies of ticks and frames (not its functions or lines, which are
    /// numbered by their own thread).
    pub fn add_tallies(&mut self, other: &LanguageSamples) {
        self.placed += other.placed;
        self.truncated += other.truncated;
        self.unplaced_runs += other.unplaced_runs;
        self.unknown += other.unknown;
        self.between_calls += other.between_calls;
        self.unaligned += other.unaligned;
    }
}

/// Turns a thread's ticks' language frames into ids in its stacks.
#[derive(Debug)]
pub struct LanguageReader {
    walk: &'static LanguageWalk,
    /// Prototypes (Lua) or bytecode (JavaScript) read, by address: the two words that
    /// name one (see [`lua::function_key`], [`quickjs::function_key`]; read again at each
    /// use, as the address may be another function's once the first was freed) and its
    /// function's index.
    protos: HashMap<u32, ((u32, i32), u32)>,
    index: HashMap<ScriptFunction, u32>,
    /// Calling instructions looked at (a caller's prototype and instruction), and the
    /// name each gives.
    call_sites: HashMap<(u32, i32), Option<String>>,
    samples: LanguageSamples,
}

impl LanguageReader {
    /// The reader of the frames `walk` takes.
    pub fn new(walk: &'static LanguageWalk) -> Self {
        LanguageReader {
            walk,
            protos: HashMap::new(),
            index: HashMap::new(),
            call_sites: HashMap::new(),
            samples: LanguageSamples {
                language: walk.interpreter().language.name().to_string(),
                ..LanguageSamples::default()
            },
        }
    }

    /// What was learnt.
    pub fn finish(self) -> LanguageSamples {
        self.samples
    }

    /// Puts the language frames `frames` (packed, innermost first; `truncated` if their
    /// walk was) in `path` (the module's functions, outermost first), in place of the eval
    /// loop's frames; when the innermost function is now the script's (the tick found the
    /// eval loop running it), the line of the script it was at.
    pub fn splice(&mut self, path: &mut Vec<u32>, frames: &[u64], truncated: bool) -> Option<i32> {
        let interpreter = self.walk.interpreter();
        if frames.is_empty() || !path.contains(&interpreter.eval) {
            self.samples.truncated += u64::from(truncated);
            return None;
        }
        let resolved = self.resolve(frames);
        let interpreter = self.walk.interpreter();
        place::place(
            interpreter,
            &mut self.samples,
            path,
            &resolved,
            truncated,
            1,
        )
        .then(|| self.line(frames[0]))
        .flatten()
    }

    /// The frames `frames` (packed, innermost first) with each function's address replaced
    /// by its id ([`LANGUAGE_FUNCTION`] and its index) and their positions left out: what
    /// [`place::place`] puts in a path, the same for every tick in the same functions.
    /// Reads the functions not seen yet from the program's memory.
    pub fn resolve(&mut self, frames: &[u64]) -> Vec<u64> {
        // The flags above the position (see `LuaFrame::pack`, `JsFrame::pack`).
        const FLAGS: u64 = 0b11 << 62;
        let native = |word: u64| match &self.walk.interpreter().language {
            Language::QuickJs(..) => JsFrame::unpack(word).native,
            Language::Lua(_) | Language::Python(_) => false,
        };
        let resolved = frames
            .iter()
            .map(|&word| match native(word) {
                true => word & (FLAGS | u64::from(u32::MAX)),
                false => word & FLAGS | u64::from(self.id_of(word as u32)),
            })
            .collect();
        self.name_by_callers(frames);
        resolved
    }

    /// The line of the script the innermost frame `innermost` (packed) was at, where the
    /// language keeps it (QuickJS keeps no position of the bytecode it runs, see
    /// [`quickjs`]).
    pub fn line(&self, innermost: u64) -> Option<i32> {
        let language = &self.walk.interpreter().language;
        let frame = LuaFrame::unpack(innermost);
        if frame.proto == 0 {
            return None;
        }
        self.walk
            .with_memory(|memory| match language {
                Language::Lua(layout) => lua::line(layout, memory, frame.proto, frame.pc),
                Language::Python(layout) => cpython::line(layout, memory, frame.proto, frame.pc),
                Language::QuickJs(..) => None,
            })
            .flatten()
    }

    /// The id of the function whose prototype (Lua) or bytecode (JavaScript) is at
    /// `address`.
    fn id_of(&mut self, address: u32) -> u32 {
        let walk = self.walk;
        let language = &walk.interpreter().language;
        let known = self.protos.get(&address).copied();
        let read = (address != 0).then(|| {
            walk.with_memory(|memory| {
                let key = function_key(language, memory, address)?;
                match known {
                    Some((seen, index)) if seen == key => Some((key, Ok(index))),
                    _ => Some((
                        key,
                        Err(function(language, memory, walk.entered(), address)?),
                    )),
                }
            })
        });
        let index = match (read.flatten().flatten(), known) {
            (Some((_, Ok(index))), _) => return LANGUAGE_FUNCTION | index,
            (Some((key, Err(function))), _) => {
                let index = self.index_of(function);
                self.protos.insert(address, (key, index));
                index
            }
            // The memory gone at the end of the run: the function as read before.
            (None, Some((_, index))) if !walk.is_alive() => index,
            (None, _) => {
                self.samples.unknown += 1;
                self.index_of(ScriptFunction {
                    name: match language {
                        Language::Lua(_) => None,
                        Language::QuickJs(..) => {
                            Some("[a JavaScript frame that could not be read]".to_string())
                        }
                        Language::Python(_) => {
                            Some("[a Python frame that could not be read]".to_string())
                        }
                    },
                    source: "?".to_string(),
                    line_defined: -1,
                    last_line_defined: -1,
                    size_code: 0,
                })
            }
        };
        LANGUAGE_FUNCTION | index
    }

    /// Names the functions of `frames` (innermost first) that a Lua caller called and that
    /// have no such name yet, as Lua's traceback would.
    fn name_by_callers(&mut self, frames: &[u64]) {
        let Language::Lua(layout) = &self.walk.interpreter().language else {
            return;
        };
        let Some(naming) = layout.naming() else {
            return;
        };
        for pair in frames.windows(2) {
            let (callee, caller) = (LuaFrame::unpack(pair[0]), LuaFrame::unpack(pair[1]));
            // Called from C (`pcall`, a sort's comparator): no calling instruction.
            if !callee.called_from_lua || callee.proto == 0 || caller.proto == 0 {
                continue;
            }
            let Some(&(_, index)) = self.protos.get(&callee.proto) else {
                continue;
            };
            if self.samples.called.contains_key(&index) {
                continue;
            }
            let site = (caller.proto, caller.pc);
            let name = match self.call_sites.get(&site) {
                Some(name) => name.clone(),
                None => {
                    let walk = self.walk;
                    let name = walk
                        .with_memory(|memory| {
                            lua::names::called_at(naming, layout, memory, caller.proto, caller.pc)
                        })
                        .flatten();
                    self.call_sites.insert(site, name.clone());
                    name
                }
            };
            if let Some(name) = name {
                self.samples.called.insert(index, name);
            }
        }
    }

    fn index_of(&mut self, function: ScriptFunction) -> u32 {
        if let Some(&index) = self.index.get(&function) {
            return index;
        }
        let index = self.samples.functions.len() as u32;
        self.samples.functions.push(function.clone());
        self.index.insert(function, index);
        index
    }
}

/// What names the function at `address` cheaply (see [`LanguageReader::protos`]).
fn function_key(
    language: &Language,
    memory: &(impl Memory + ?Sized),
    address: u32,
) -> Option<(u32, i32)> {
    match language {
        Language::Lua(layout) => lua::function_key(layout, memory, address),
        Language::QuickJs(layout, _) => quickjs::function_key(layout, memory, address),
        Language::Python(layout) => cpython::function_key(layout, memory, address),
    }
}

/// The function at `address`; `entered` is the eval loop's state (JavaScript's atoms are
/// read from its runtime).
fn function(
    language: &Language,
    memory: &(impl Memory + ?Sized),
    entered: u32,
    address: u32,
) -> Option<ScriptFunction> {
    match language {
        Language::Lua(layout) => lua::function(layout, memory, address),
        Language::QuickJs(layout, _) => {
            let rt = quickjs::runtime(layout, memory, entered)?;
            quickjs::function(layout, memory, rt, address)
        }
        Language::Python(layout) => cpython::function(layout, memory, address),
    }
}
