//! Wasm backtraces of a trap, told in terms of the original module.
//!
//! wasmtime reports frames of the module it ran. When that is the instrumented module, its
//! function indices are shifted by the probe imports and its code offsets moved by the
//! probes; this module maps each frame back (index, name, original offset through the
//! agent's offset map) so a trap under wprof reads like one under `wasmtime run`.

use wprof_agent::{Indexed, Instrumenter, ProbeImports, ProbePlan};

/// One frame of a wasm backtrace, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The function's index in the module that ran.
    pub func_index: u32,
    /// The instruction's offset in that module.
    pub module_offset: Option<usize>,
    /// The function's name, if known.
    pub name: Option<String>,
}

/// The wasm frames of an error, if it carries a backtrace.
pub fn frames_of(e: &wasmtime::Error) -> Vec<Frame> {
    e.downcast_ref::<wasmtime::WasmBacktrace>()
        .map(|bt| {
            bt.frames()
                .iter()
                .map(|f| Frame {
                    func_index: f.func_index(),
                    module_offset: f.module_offset(),
                    name: f.func_name().map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The error report `wasmtime run` prints for a trap, from frames and the trap message;
/// `invoked` is the function `--invoke` named, if any.
pub fn report(module: &str, invoked: Option<&str>, frames: &[Frame], message: &str) -> String {
    let what = match invoked {
        Some(name) => format!("`{name}`"),
        None => "command default".to_string(),
    };
    let mut out = format!(
        "failed to run main module `{module}`\n\nCaused by:\n    0: failed to invoke {what}\n"
    );
    if frames.is_empty() {
        out.push_str(&format!("    1: {message}\n"));
        return out;
    }
    out.push_str("    1: error while executing at wasm backtrace:\n");
    for (i, f) in frames.iter().enumerate() {
        let offset = f
            .module_offset
            .map(|o| format!("{o:#x}"))
            .unwrap_or_else(|| "?".to_string());
        let name = f
            .name
            .clone()
            .unwrap_or_else(|| format!("<wasm function {}>", f.func_index));
        out.push_str(&format!("{i:>5}: {offset:>8} - <unknown>!{name}\n"));
    }
    out.push_str(&format!("    2: {message}\n"));
    out
}

/// Maps frames of the instrumented module back to `original`: probe frames dropped,
/// indices unshifted (a live function's probed copy is the function), offsets through the
/// offset map. Frames that cannot be mapped are kept as they are.
pub fn to_original(
    frames: &[Frame],
    original: &[u8],
    instrumented: &[u8],
    plan: &ProbePlan,
) -> Vec<Frame> {
    let Ok(instrumenter) = Instrumenter::new(original, plan) else {
        return frames.to_vec();
    };
    let imports = instrumenter.imported_function_count();
    let defined_count = instrumenter.defined_function_count() as usize;
    let indices = instrumenter.indices();
    let summaries = instrumenter.functions();
    // Probe imports and, in the inline modes, the agent's node finder (its body first)
    // come before the module's own functions.
    let shift = ProbeImports::shift(plan.mode);
    let added_bodies = (shift - ProbeImports::COUNT) as usize;
    let bodies: Vec<std::ops::Range<usize>> = wasmparser::Parser::new(0)
        .parse_all(instrumented)
        .filter_map(|p| match p {
            Ok(wasmparser::Payload::CodeSectionEntry(body)) => Some(body.range()),
            _ => None,
        })
        .skip(added_bodies)
        .collect();
    frames
        .iter()
        .filter(|f| indices.what(f.func_index) != Indexed::Probe)
        .map(|f| {
            if f.func_index < imports {
                return f.clone();
            }
            // The probed copies' bodies follow the functions' own.
            let (id, copy) = match indices.what(f.func_index) {
                Indexed::ProbedCopy(id) => (id, true),
                _ => (f.func_index - shift, false),
            };
            let defined = id - imports;
            let name = summaries.get(id as usize).map(|s| s.name.clone());
            let offset = f.module_offset.and_then(|at| {
                let placed = defined as usize + if copy { defined_count } else { 0 };
                let new_body = bodies.get(placed)?;
                let old_body = summaries.get(id as usize)?.body.clone()?;
                let rel = u32::try_from(at.checked_sub(new_body.start)?).ok()?;
                let body = instrumenter.instrument_function(defined).ok()?;
                let rel = if copy { body.probed_at? + rel } else { rel };
                let &(old, _) = body.offsets.iter().rev().find(|&&(_, new)| new <= rel)?;
                Some(old_body.start + old as usize)
            });
            Frame {
                func_index: id,
                module_offset: offset.or(f.module_offset),
                name: name.or_else(|| f.name.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_map_back_to_original_offsets_and_indices() {
        let original = wat::parse_str(
            r#"(module
              (func $inner unreachable)
              (func $outer nop call $inner)
              (func (export "_start") call $outer))"#,
        )
        .unwrap();
        let plan = ProbePlan::default();
        let out = wprof_agent::instrument(&original, &plan).unwrap();
        let engine = crate::run::engine::new_engine().unwrap();
        let module = wasmtime::Module::new(&engine, &out.bytes).unwrap();
        let linker = crate::run::runner::probe_linker(&engine, plan.mode).unwrap();
        let mut store =
            crate::run::runner::bare_store(&engine, Some(crate::run::collector::Collector::new(3)));
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let start = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .unwrap();
        let err = start.call(&mut store, ()).unwrap_err();
        let frames = to_original(&frames_of(&err), &original, &out.bytes, &plan);
        let names: Vec<_> = frames
            .iter()
            .map(|f| f.name.as_deref().unwrap_or("?"))
            .collect();
        assert_eq!(names, ["inner", "outer", "_start"]);
        assert_eq!(
            frames.iter().map(|f| f.func_index).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        // `unreachable` in the original, and the `call $inner` after the `nop`.
        let probe_map = &out.probe_map.functions;
        assert_eq!(
            frames[0].module_offset,
            Some(probe_map[0].offsets[0].0 as usize)
        );
        assert_eq!(
            frames[1].module_offset,
            Some(probe_map[1].offsets[1].0 as usize)
        );
        assert_eq!(original[frames[0].module_offset.unwrap()], 0x00);
        assert_eq!(original[frames[1].module_offset.unwrap()], 0x10);
    }
}
