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

use std::collections::HashMap;

use crate::languages::cpython;
use crate::languages::lua::{self, LuaFrame};
use crate::languages::memory::Memory;
use crate::languages::quickjs::{self, placing, JsFrame};
use crate::languages::{Language, ScriptFunction};
use crate::profile::FunctionInfo;
use crate::run::interrupt::language::LanguageWalk;
use crate::run::stacks::StackSamples;

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
        let walk = self.walk;
        let eval = walk.interpreter().eval;
        self.samples.truncated += u64::from(truncated);
        if frames.is_empty() || !path.contains(&eval) {
            return None;
        }
        let innermost_is_eval = path.last() == Some(&eval);
        match &walk.interpreter().language {
            // Python's frames are kept as Lua's are (`is_entry` marks a run's end).
            language @ (Language::Lua(_) | Language::Python(_)) => {
                let mut runs = runs(frames, |proto| self.id_of(proto));
                // Python has no stacks of its own for coroutines: a whole walk with one run
                // fewer than eval frames caught the innermost entering or leaving (its
                // thread state not yet, or no longer, pointing at its frame); it stays
                // native rather than take its caller's run.
                let evals = path.iter().filter(|&&f| f == eval).count();
                let between = matches!(language, Language::Python(_))
                    && !truncated
                    && innermost_is_eval
                    && runs.len() + 1 == evals;
                if between {
                    runs.insert(0, vec![eval]);
                    self.samples.between_calls += 1;
                }
                self.name_by_callers(frames);
                self.samples.unplaced_runs += put_runs(path, eval, &runs);
                self.samples.placed += 1;
                if !innermost_is_eval || between {
                    return None;
                }
                let frame = LuaFrame::unpack(frames[0]);
                (frame.proto != 0)
                    .then(|| {
                        walk.with_memory(|memory| match language {
                            Language::Lua(layout) => {
                                lua::line(layout, memory, frame.proto, frame.pc)
                            }
                            Language::Python(layout) => {
                                cpython::line(layout, memory, frame.proto, frame.pc)
                            }
                            Language::QuickJs(..) => None,
                        })
                        .flatten()
                    })
                    .flatten()
            }
            Language::QuickJs(_, calls) => {
                let js: Vec<JsFrame> = frames.iter().map(|&w| JsFrame::unpack(w)).collect();
                let Some(placement) = placing::place(path, eval, &js, truncated, calls) else {
                    self.samples.unaligned += 1;
                    return None;
                };
                self.samples.between_calls += u64::from(placement.between);
                for (j, at) in placement.pairs {
                    if !js[j].native {
                        path[at] = self.id_of(js[j].bytecode);
                    }
                }
                self.samples.placed += 1;
                // QuickJS keeps no position of the bytecode it runs (see `quickjs`).
                None
            }
        }
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

/// Gives the language functions of every thread's stacks (`threads`) ids after the
/// module's `functions`, one per function across the threads, and names them there (their
/// kind the language's name; the name their source line gives them, `source_line` reading
/// a line of a script, see [`lua::name_in_source`]): what the threads learnt, added up, if
/// any walked a language.
pub fn merge<'a>(
    functions: &mut Vec<FunctionInfo>,
    threads: impl IntoIterator<Item = &'a mut StackSamples>,
    source_line: &dyn Fn(&str, i32) -> Option<String>,
) -> Option<LanguageSamples> {
    let mut total: Option<LanguageSamples> = None;
    let mut ids: HashMap<ScriptFunction, u32> = HashMap::new();
    // Names given, and how many functions have each (two functions defined on one line
    // and named alike are told apart by a number).
    let mut named: HashMap<String, u32> = HashMap::new();
    for samples in threads {
        let Some(own) = samples.languages.take() else {
            continue;
        };
        let total = total.get_or_insert_with(|| LanguageSamples {
            language: own.language.clone(),
            ..LanguageSamples::default()
        });
        let map: Vec<u32> = own
            .functions
            .iter()
            .enumerate()
            .map(|(index, f)| {
                *ids.entry(f.clone()).or_insert_with(|| {
                    let id = functions.len() as u32;
                    // A function the interpreter names (JavaScript's) keeps its name; one
                    // it does not, the name its source gives it.
                    let name = match f.name.as_deref() {
                        Some("") => source_line(f.file(), f.line_defined)
                            .and_then(|line| quickjs::name_at(&line, f.last_line_defined)),
                        Some(_) => None,
                        None => source_line(f.file(), f.line_defined)
                            .and_then(|line| lua::name_in_source(&line))
                            .or_else(|| own.called.get(&(index as u32)).cloned()),
                    };
                    let mut name = f.display(name.as_deref());
                    let seen = named.entry(name.clone()).or_default();
                    *seen += 1;
                    if *seen > 1 {
                        name = format!("{name} #{seen}");
                    }
                    functions.push(FunctionInfo {
                        id,
                        name,
                        kind: own.language.clone(),
                    });
                    total.functions.push(f.clone());
                    total.ids.push(id);
                    id
                })
            })
            .collect();
        for ((f, line), ns) in std::mem::take(&mut samples.script_lines) {
            let f = match f & LANGUAGE_FUNCTION != 0 {
                true => map[(f & !LANGUAGE_FUNCTION) as usize],
                false => f,
            };
            *total.lines.entry((f, line)).or_default() += ns;
        }
        for figures in [&mut samples.time, &mut samples.waited] {
            for ((mut path, call), ns) in std::mem::take(figures) {
                for f in path.iter_mut().filter(|f| **f & LANGUAGE_FUNCTION != 0) {
                    *f = map[(*f & !LANGUAGE_FUNCTION) as usize];
                }
                *figures.entry((path, call)).or_default() += ns;
            }
        }
        total.placed += own.placed;
        total.truncated += own.truncated;
        total.unplaced_runs += own.unplaced_runs;
        total.unknown += own.unknown;
        total.between_calls += own.between_calls;
        total.unaligned += own.unaligned;
    }
    total
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

/// The runs of language frames in `frames` (packed, innermost first), innermost run first,
/// each run's ids (`id_of` a prototype) outermost first: a run ends with a frame whose call
/// started a run of the eval loop.
fn runs(frames: &[u64], mut id_of: impl FnMut(u32) -> u32) -> Vec<Vec<u32>> {
    let mut runs: Vec<Vec<u32>> = Vec::new();
    let mut run = Vec::new();
    for &word in frames {
        let frame = LuaFrame::unpack(word);
        run.push(id_of(frame.proto));
        if frame.fresh {
            run.reverse();
            runs.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        run.reverse();
        runs.push(run);
    }
    runs
}

/// Replaces the frames of `eval` in `path` (outermost first) by `runs` (innermost first):
/// the innermost eval frame by the first run, and so on; an eval frame without a run stays.
/// How many runs found no eval frame.
fn put_runs(path: &mut Vec<u32>, eval: u32, runs: &[Vec<u32>]) -> u64 {
    let evals = path.iter().filter(|&&f| f == eval).count();
    let mut out = Vec::with_capacity(path.len() + runs.iter().map(Vec::len).sum::<usize>());
    let mut k = evals;
    for &f in path.iter() {
        if f != eval {
            out.push(f);
            continue;
        }
        k -= 1;
        match runs.get(k) {
            Some(run) => out.extend_from_slice(run),
            None => out.push(f),
        }
    }
    *path = out;
    runs.len().saturating_sub(evals) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVAL: u32 = 7;

    fn frame(proto: u32, fresh: bool) -> u64 {
        LuaFrame {
            proto,
            pc: 3,
            fresh,
            called_from_lua: !fresh,
        }
        .pack()
    }

    #[test]
    fn each_eval_frame_takes_its_run_innermost_with_innermost() {
        // main -> eval -> pcall (C) -> eval -> string.gsub (C) -> ... and a callback:
        // the Lua frames a, b (called from main's eval, a fresh), c, d (fresh, called from
        // pcall).
        let frames = [
            frame(104, false), // d, innermost
            frame(103, true),  // c, called from pcall
            frame(102, false), // b
            frame(101, true),  // a, the chunk
        ];
        let runs = runs(&frames, |proto| LANGUAGE_FUNCTION | (proto - 100));
        let l = |i| LANGUAGE_FUNCTION | i;
        assert_eq!(runs, [vec![l(3), l(4)], vec![l(1), l(2)]]);
        let mut path = vec![1, 2, EVAL, 20, EVAL, 30];
        assert_eq!(put_runs(&mut path, EVAL, &runs), 0);
        assert_eq!(path, [1, 2, l(1), l(2), 20, l(3), l(4), 30]);
        // A coroutine's resumer: one run for two eval frames; the outer stays native.
        let mut path = vec![1, EVAL, 20, EVAL, 30];
        assert_eq!(put_runs(&mut path, EVAL, &runs[..1]), 0);
        assert_eq!(path, [1, EVAL, 20, l(3), l(4), 30]);
        // More runs than eval frames: the outer runs left out, counted.
        let mut path = vec![1, EVAL, 30];
        assert_eq!(put_runs(&mut path, EVAL, &runs), 1);
        assert_eq!(path, [1, l(3), l(4), 30]);
    }

    #[test]
    fn frames_keep_their_prototype_instruction_and_mark_when_packed() {
        for frame in [
            LuaFrame {
                proto: 0xdead_beef,
                pc: -1,
                fresh: true,
                called_from_lua: false,
            },
            LuaFrame {
                proto: 4,
                pc: 0x3fff_fffe,
                fresh: false,
                called_from_lua: true,
            },
        ] {
            assert_eq!(LuaFrame::unpack(frame.pack()), frame);
        }
    }
}
