//! An interpreted language's frames put in stack mode's native stacks, as `py-spy --native`
//! shows them: the script's functions stand where the interpreter's eval loop ran them,
//! and the native code they called (a C function of the language's library, the
//! allocator, a WASI call) stays above them.
//!
//! A tick's language frames (see [`crate::run::interrupt::language`]) come innermost first,
//! each marked if its call started a run of the eval loop (called from native code). So
//! they fall into runs, one per native frame of the eval loop, innermost with innermost:
//! each such native frame is replaced by its run's functions. An eval frame without a run
//! (a coroutine's resumer, whose stack is another state's) stays native; runs beyond the
//! eval frames (a walk that caught the interpreter between two states) are left out and
//! counted.
//!
//! The language's functions get ids of their own in the stacks, [`LANGUAGE_FUNCTION`] and
//! their index in [`LanguageReader::functions`]; the profile gives them ids after the
//! module's (see `commands::run::modes::stack`).

use std::collections::HashMap;

use crate::languages::lua::{self, LuaFrame, LuaFunction};
use crate::languages::Language;
use crate::profile::FunctionInfo;
use crate::run::interrupt::language::LanguageWalk;
use crate::run::stacks::StackSamples;

/// Set in a stack's id of a language function (its index below it).
pub const LANGUAGE_FUNCTION: u32 = 1 << 31;

/// What the reader learnt of a thread's language frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LanguageSamples {
    /// The language (`lua`).
    pub language: String,
    /// The functions, by index.
    pub functions: Vec<LuaFunction>,
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
}

/// Turns a thread's ticks' language frames into ids in its stacks.
#[derive(Debug)]
pub struct LanguageReader {
    walk: &'static LanguageWalk,
    /// Prototypes read, by address: the two words that name one (its source string's
    /// address and the line it is defined at, read again at each use, as the address may
    /// be another prototype's once the first was freed) and its function's index.
    protos: HashMap<u32, ((u32, i32), u32)>,
    index: HashMap<LuaFunction, u32>,
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
        let eval = self.walk.interpreter().eval;
        self.samples.truncated += u64::from(truncated);
        if frames.is_empty() || !path.contains(&eval) {
            return None;
        }
        let innermost_is_eval = path.last() == Some(&eval);
        let runs = runs(frames, |proto| self.id_of(proto));
        self.name_by_callers(frames);
        self.samples.unplaced_runs += put_runs(path, eval, &runs);
        self.samples.placed += 1;
        if !innermost_is_eval {
            return None;
        }
        let frame = LuaFrame::unpack(frames[0]);
        let Language::Lua(layout) = &self.walk.interpreter().language;
        (frame.proto != 0)
            .then(|| {
                self.walk
                    .with_memory(|memory| lua::line(layout, memory, frame.proto, frame.pc))
                    .flatten()
            })
            .flatten()
    }

    /// The id of the function whose prototype is at `proto`.
    fn id_of(&mut self, proto: u32) -> u32 {
        let Language::Lua(layout) = &self.walk.interpreter().language;
        let known = self.protos.get(&proto).copied();
        let read = (proto != 0).then(|| {
            self.walk.with_memory(|memory| {
                let key = lua::function_key(layout, memory, proto)?;
                match known {
                    Some((seen, index)) if seen == key => Some((key, Ok(index))),
                    _ => Some((key, Err(lua::function(layout, memory, proto)?))),
                }
            })
        });
        let index = match (read.flatten().flatten(), known) {
            (Some((_, Ok(index))), _) => return LANGUAGE_FUNCTION | index,
            (Some((key, Err(function))), _) => {
                let index = self.index_of(function);
                self.protos.insert(proto, (key, index));
                index
            }
            // The memory gone at the end of the run: the prototype as read before.
            (None, Some((_, index))) if !self.walk.is_alive() => index,
            (None, _) => {
                self.samples.unknown += 1;
                self.index_of(LuaFunction {
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
        let Language::Lua(layout) = &self.walk.interpreter().language;
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

    fn index_of(&mut self, function: LuaFunction) -> u32 {
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
    let mut ids: HashMap<LuaFunction, u32> = HashMap::new();
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
                    let name = source_line(f.file(), f.line_defined)
                        .and_then(|line| lua::name_in_source(&line))
                        .or_else(|| own.called.get(&(index as u32)).cloned());
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
    }
    total
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
