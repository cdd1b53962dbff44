//! `--inject` into the module's own functions: which specs name one of them rather than an
//! import, the functions they name, and the values the agent puts in their bodies (see
//! [`wprof_agent::Injections`]). Injections into imports stay with the host's wrappers
//! (`run::host_calls`).

use std::collections::BTreeMap;

use wprof_agent::{InjectedValue, Injections, Instrumenter, ProbePlan};

use crate::exit::Failure;
use crate::injection::{parse_value, Action, Injection};

/// An injection into one of the module's own functions.
#[derive(Debug, Clone)]
pub struct FunctionInjection {
    /// The spec.
    pub injection: Injection,
    /// Its place among the specs.
    pub order: usize,
    /// The function's id.
    pub id: u32,
    /// The function's name, as profiles show it.
    pub name: String,
}

/// The specs, split: those into imports (in order) and those into the module's own
/// functions, with the agent's plan for the latter (`None` when there are none).
#[derive(Debug, Default)]
pub struct Split {
    /// Into imports.
    pub imports: Vec<Injection>,
    /// Into the module's own functions.
    pub functions: Vec<FunctionInjection>,
    /// The agent's part.
    pub plan: Option<Injections>,
}

/// Splits `injections` for the module `bytes`: a spec is an import's when it says `wasi:`
/// or names an import `MODULE::NAME`; else it names the module's own functions by their
/// name (as the name section has it, or demangled), every one so named. A spec that names
/// none, a function named by two specs, or an action that does not fit the function's
/// result is one line (exit 2).
pub fn split(bytes: &[u8], injections: &[Injection]) -> Result<Split, Failure> {
    let mut out = Split::default();
    if injections.is_empty() {
        return Ok(out);
    }
    let bad = |i: &Injection, why: String| Failure::input(format!("--inject {}: {why}", i.spec));
    let instrumenter = Instrumenter::new(bytes, &ProbePlan::default())
        .map_err(|e| Failure::input(format!("--inject: cannot read the module: {e}")))?;
    let names = instrumenter.function_names();
    let imported = instrumenter.imported_function_count() as usize;
    let shown = crate::go_symbols::shown_names(bytes, &names);
    let mut targets = BTreeMap::new();
    for (order, injection) in injections.iter().enumerate() {
        let import = format!("{}::{}", injection.module, injection.name);
        if injection.is_wasi() || names[..imported].contains(&import) {
            out.imports.push(injection.clone());
            continue;
        }
        let ids: Vec<usize> = (imported..names.len())
            .filter(|&id| {
                let name = &names[id];
                name == &injection.function
                    || shown[id].as_deref() == Some(injection.function.as_str())
                    || crate::demangle::demangle(name).as_deref()
                        == Some(injection.function.as_str())
            })
            .collect();
        if ids.is_empty() {
            return Err(bad(
                injection,
                format!(
                    "the module has no function {} (neither an import nor its own)",
                    injection.function
                ),
            ));
        }
        for id in ids {
            let id = id as u32;
            let results = instrumenter.results(id).unwrap_or_default();
            let value = injected_value(injection, &results).map_err(|why| bad(injection, why))?;
            if targets.insert(id, value).is_some() {
                return Err(bad(
                    injection,
                    format!("{} is named by another --inject too", names[id as usize]),
                ));
            }
            out.functions.push(FunctionInjection {
                injection: injection.clone(),
                order,
                id,
                name: names[id as usize].clone(),
            });
        }
    }
    if !targets.is_empty() {
        let mut h = blake3::Hasher::new();
        h.update(b"wprof injections v1\0");
        for (id, value) in &targets {
            h.update(format!("{id}={value:?};").as_bytes());
        }
        out.plan = Some(Injections {
            spec: *h.finalize().as_bytes(),
            targets,
        });
    }
    Ok(out)
}

/// The value an injected call of a function with `results` returns (`None`: it traps), if
/// the action fits them; else why not.
fn injected_value(
    injection: &Injection,
    results: &[wasmparser::ValType],
) -> Result<Option<InjectedValue>, String> {
    use wasmparser::ValType as W;
    let text = match &injection.action {
        Action::Trap => return Ok(None),
        Action::Errno(n) => n.to_string(),
        Action::Return(text) => text.clone(),
    };
    let ty = match results {
        [W::I32] => wasmtime::ValType::I32,
        [W::I64] => wasmtime::ValType::I64,
        [W::F32] => wasmtime::ValType::F32,
        [W::F64] => wasmtime::ValType::F64,
        _ => {
            return Err(format!(
                "{} does not return one number ({} results)",
                injection.function,
                results.len()
            ))
        }
    };
    let value = parse_value(&text, &ty).ok_or_else(|| {
        format!(
            "`{text}` is not a value of {}'s result type",
            injection.function
        )
    })?;
    Ok(Some(match value {
        wasmtime::Val::I32(v) => InjectedValue::I32(v),
        wasmtime::Val::I64(v) => InjectedValue::I64(v),
        wasmtime::Val::F32(bits) => InjectedValue::F32(bits),
        wasmtime::Val::F64(bits) => InjectedValue::F64(bits),
        other => return Err(format!("`{text}` is a {other:?}, not a number")),
    }))
}
