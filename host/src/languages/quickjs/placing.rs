//! Where QuickJS's frames go among a tick's native frames: each frame beside the native
//! frame that pushed it.
//!
//! QuickJS-ng pushes a bytecode function's frame in `JS_CallInternal`, and a C function's
//! in the function that calls it (`js_call_c_function`, `js_call_c_function_data`,
//! `js_call_c_closure`). Not every `JS_CallInternal` pushes one: a call of a bound
//! function, a proxy, a generator, an async function or a promise's resolving function
//! goes through `JS_CallInternal` into that class's handler, which calls on (through
//! `JS_CallInternal` again) without a frame of its own; and `new` of a C class calls
//! `js_call_c_function` without `JS_CallInternal`. So the native frames that pushed a
//! frame are the C callers, and each `JS_CallInternal` whose next frame is not a handler
//! ([`Calls`]); innermost with innermost, they pair with the frames, kind with kind.
//!
//! Bellard's QuickJS is the same but for names: `js_call_c_function` is its only C caller
//! that pushes a frame; its C functions with data (`js_c_function_data_call`, which pushes
//! none) and its generators (`js_generator_function_call`) have handlers.
//!
//! A tick may catch the innermost of them before it pushed its frame or after it popped
//! it: one such native frame more than frames; it then stays native (the interpreter's
//! call overhead). Frames that do not pair that way (a handler wprof does not know, or
//! inlined into its caller) leave the whole tick native, counted.

use super::JsFrame;

/// The native functions that push a C function's frame or hand a call on, by id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Calls {
    /// Push a C function's frame.
    c_calls: Vec<u32>,
    /// A class's call handler, which calls on without a frame of its own.
    handlers: Vec<u32>,
}

/// [`Calls::NAMES`]' first ones: the C callers.
const C_CALLS: usize = 3;

impl Calls {
    /// The functions [`Calls::named`] wants: the C callers, then the handlers.
    pub const NAMES: &'static [&'static str] = &[
        "js_call_c_function",
        "js_call_c_function_data",
        "js_call_c_closure",
        "js_call_bound_function",
        "js_call_generator_function",
        "js_proxy_call",
        "js_promise_resolve_function_call",
        "js_async_function_call",
        "js_async_function_resolve_call",
        "js_async_generator_function_call",
        // Bellard's QuickJS's own.
        "js_c_function_data_call",
        "js_generator_function_call",
    ];

    /// The calls from the ids the name section gave [`Calls::NAMES`] (`None`: not named,
    /// perhaps inlined); `js_call_c_function` must be there.
    pub fn named(ids: &[Option<u32>]) -> Result<Calls, String> {
        if ids.first().copied().flatten().is_none() {
            return Err("no `js_call_c_function` in the name section".to_string());
        }
        let (c, handlers) = ids.split_at(C_CALLS.min(ids.len()));
        Ok(Calls {
            c_calls: c.iter().flatten().copied().collect(),
            handlers: handlers.iter().flatten().copied().collect(),
        })
    }
}

/// Where a tick's frames go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// For each frame that has one, innermost first: the frame's index in the frames and
    /// its native frame's in the path.
    pub pairs: Vec<(usize, usize)>,
    /// The innermost native frame that pushes frames had none (entering or leaving a call).
    pub between: bool,
}

/// Pairs `frames` (innermost first; `truncated` if the walk did not reach the outermost)
/// with the native frames of `path` (outermost first) that pushed them; `None` if they do
/// not pair. `eval` is `JS_CallInternal`.
pub fn place(
    path: &[u32],
    eval: u32,
    frames: &[JsFrame],
    truncated: bool,
    calls: &Calls,
) -> Option<Placement> {
    // The native frames that pushed a frame, innermost first, and whether each is a C one.
    let handing_on = |next: Option<&u32>| {
        next.is_some_and(|n| calls.c_calls.contains(n) || calls.handlers.contains(n))
    };
    let pushers: Vec<(usize, bool)> = path
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(i, &f)| {
            if calls.c_calls.contains(&f) {
                Some((i, true))
            } else if f == eval && !handing_on(path.get(i + 1)) {
                Some((i, false))
            } else {
                None
            }
        })
        .collect();
    let pairs = |skip: usize| -> Option<Vec<(usize, usize)>> {
        let natives = pushers.get(skip..)?;
        // Every frame has its native frame (a truncated walk: the innermost ones); every
        // native frame its frame, unless the walk was truncated.
        let fits = match truncated {
            true => frames.len() <= natives.len(),
            false => frames.len() == natives.len(),
        };
        if !fits {
            return None;
        }
        frames
            .iter()
            .zip(natives)
            .enumerate()
            .map(|(j, (frame, &(at, c)))| (frame.native == c).then_some((j, at)))
            .collect()
    };
    if let Some(pairs) = pairs(0) {
        return Some(Placement {
            pairs,
            between: false,
        });
    }
    // The innermost native frame a pusher with no frame (yet, or any more).
    let innermost = pushers.first().is_some_and(|&(at, _)| at + 1 == path.len());
    if innermost {
        if let Some(pairs) = pairs(1) {
            return Some(Placement {
                pairs,
                between: true,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVAL: u32 = 10;
    const C_CALL: u32 = 20;
    const BOUND: u32 = 30;
    const CONSTRUCT: u32 = 40;

    fn calls() -> Calls {
        let mut ids = vec![None; Calls::NAMES.len()];
        ids[0] = Some(C_CALL);
        ids[3] = Some(BOUND);
        Calls::named(&ids).unwrap()
    }

    fn js(bytecode: u32) -> JsFrame {
        JsFrame {
            bytecode,
            pc: -1,
            native: false,
        }
    }

    fn c() -> JsFrame {
        JsFrame {
            bytecode: 0,
            pc: -1,
            native: true,
        }
    }

    #[test]
    fn each_frame_pairs_with_the_native_frame_that_pushed_it() {
        // main -> EVAL(outer) -> EVAL(sort, C) -> C_CALL -> 5 -> EVAL(comparator)
        let path = [1, EVAL, EVAL, C_CALL, 5, EVAL];
        let frames = [js(300), c(), js(100)];
        let placed = place(&path, EVAL, &frames, false, &calls()).unwrap();
        assert_eq!(placed.pairs, [(0, 5), (1, 3), (2, 1)]);
        assert!(!placed.between);
    }

    #[test]
    fn a_bound_functions_handler_and_a_c_constructor_are_passed_over_or_paired() {
        // outer -> EVAL(bound: hands on) -> BOUND -> EVAL(target)
        let path = [1, EVAL, 7, EVAL, BOUND, EVAL];
        let frames = [js(200), js(100)];
        let placed = place(&path, EVAL, &frames, false, &calls()).unwrap();
        assert_eq!(placed.pairs, [(0, 5), (1, 1)]);
        // `new Map(...)`: a C frame under a constructor call, no JS_CallInternal.
        let path = [1, EVAL, CONSTRUCT, C_CALL, 8];
        let placed = place(&path, EVAL, &[c(), js(100)], false, &calls()).unwrap();
        assert_eq!(placed.pairs, [(0, 3), (1, 1)]);
    }

    #[test]
    fn a_call_being_entered_stays_native_and_what_does_not_pair_is_none() {
        // The innermost JS_CallInternal has not pushed its frame yet.
        let path = [1, EVAL, 7, EVAL];
        let placed = place(&path, EVAL, &[js(100)], false, &calls()).unwrap();
        assert_eq!(placed.pairs, [(0, 1)]);
        assert!(placed.between);
        // Not innermost: no pairing.
        assert_eq!(
            place(&[1, EVAL, EVAL, 7], EVAL, &[js(1)], false, &calls()),
            None
        );
        // Kinds that do not match.
        assert_eq!(place(&[1, EVAL], EVAL, &[c()], false, &calls()), None);
        // A truncated walk pairs its innermost frames.
        let path = [1, EVAL, EVAL, EVAL];
        let placed = place(&path, EVAL, &[js(3), js(2)], true, &calls()).unwrap();
        assert_eq!(placed.pairs, [(0, 3), (1, 2)]);
    }
}
