//! A tick's language frames, resolved (see [`super::LanguageReader::resolve`]), put in
//! its native path in place of the eval loop's frames: the placing the module docs of
//! [`super`] describe. It reads no memory, so it can run after the program ended (sample
//! mode places each calling context's frames once its tree is read).

use super::LanguageSamples;
use crate::languages::lua::LuaFrame;
use crate::languages::quickjs::{placing, JsFrame};
use crate::languages::{Interpreter, Language};

/// Puts `resolved`, the language frames of `ticks` ticks (innermost first; `truncated` if
/// their walk was), in `path` (the module's functions, outermost first) in place of
/// `interpreter`'s eval frames, counting in `counts` how it went; whether the innermost
/// function is now the script's (the ticks found the eval loop running it, and their
/// innermost frame's line is the script's line).
pub fn place(
    interpreter: &Interpreter,
    counts: &mut LanguageSamples,
    path: &mut Vec<u32>,
    resolved: &[u64],
    truncated: bool,
    ticks: u64,
) -> bool {
    let eval = interpreter.eval;
    counts.truncated += ticks * u64::from(truncated);
    if resolved.is_empty() || !path.contains(&eval) {
        return false;
    }
    let innermost_is_eval = path.last() == Some(&eval);
    match &interpreter.language {
        // Python's frames are kept as Lua's are (`is_entry` marks a run's end).
        language @ (Language::Lua(_) | Language::Python(_)) => {
            let mut runs = runs(resolved, |id| id);
            // Python has no stacks of its own for coroutines: a whole walk with one run
            // fewer than eval frames caught the innermost entering or leaving (its thread
            // state not yet, or no longer, pointing at its frame); it stays native rather
            // than take its caller's run.
            let evals = path.iter().filter(|&&f| f == eval).count();
            let between = matches!(language, Language::Python(_))
                && !truncated
                && innermost_is_eval
                && runs.len() + 1 == evals;
            if between {
                runs.insert(0, vec![eval]);
                counts.between_calls += ticks;
            }
            counts.unplaced_runs += ticks * put_runs(path, eval, &runs);
            counts.placed += ticks;
            innermost_is_eval && !between
        }
        Language::QuickJs(_, calls) => {
            let js: Vec<JsFrame> = resolved.iter().map(|&w| JsFrame::unpack(w)).collect();
            let Some(placement) = placing::place(path, eval, &js, truncated, calls) else {
                counts.unaligned += ticks;
                return false;
            };
            counts.between_calls += ticks * u64::from(placement.between);
            for (j, at) in placement.pairs {
                if !js[j].native {
                    path[at] = js[j].bytecode;
                }
            }
            counts.placed += ticks;
            // QuickJS keeps no position of the bytecode it runs (see `quickjs`).
            false
        }
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
    use crate::run::stacks::languages::LANGUAGE_FUNCTION;

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
