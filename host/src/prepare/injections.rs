//! `--inject` into the module's own functions: which specs name one of them rather than an
//! import, the functions they name, and the values the agent puts in their bodies (see
//! [`wprof_agent::Injections`]). Injections into imports stay with the host's wrappers
//! (`run::host_calls`).

use std::collections::BTreeMap;

use wprof_agent::{InjectedValue, Injections, Instrumenter, ProbePlan};

use crate::exit::Failure;
use crate::settings::injection::{parse_value, Action, Injection};

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
    let module = OwnFunctions::read(bytes)?;
    let mut picks = Vec::new();
    for (order, injection) in injections.iter().enumerate() {
        let import = format!("{}::{}", injection.module, injection.name);
        if injection.is_wasi() || module.names[..module.imported].contains(&import) {
            out.imports.push(injection.clone());
            continue;
        }
        let ids = module.named(&injection.function);
        if ids.is_empty() {
            return Err(bad(
                injection,
                format!(
                    "the module has no function {} (neither an import nor its own)",
                    injection.function
                ),
            ));
        }
        picks.push((order, injection, ids));
    }
    (out.functions, out.plan) = module.plan(&picks, 0, &|name| name.to_string())?;
    Ok(out)
}

/// `--inject` on a component: what goes to each of its core modules.
#[derive(Debug, Default)]
pub struct ComponentSplit {
    /// Every function injected into, ids and names in the component's terms.
    pub functions: Vec<FunctionInjection>,
    /// The agent's part for each core module, in the order given.
    pub plans: Vec<Option<Injections>>,
}

/// One core module of a component, as [`split_component`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct CoreModuleRef<'a> {
    /// Its name in the component.
    pub name: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// Its function 0's id in the component's id space.
    pub offset: u32,
}

/// Splits `injections` over a component's core `modules`. Every spec names own functions
/// of them: `MODULE::NAME` (and `wasi:NAME`, WASI preview 1's module) the function NAME of
/// the core module named MODULE (the preview 1 adapter implements WASI's functions as its
/// own); a plain name, the functions so named in any module, or `MODULE!NAME` in one.
/// `qualify` names a module's function as the profile does. Failures as [`split`]'s.
pub fn split_component(
    modules: &[CoreModuleRef<'_>],
    injections: &[Injection],
    qualify: &dyn Fn(&str, &str) -> String,
) -> Result<ComponentSplit, Failure> {
    let mut out = ComponentSplit {
        functions: Vec::new(),
        plans: vec![None; modules.len()],
    };
    if injections.is_empty() {
        return Ok(out);
    }
    let read: Vec<OwnFunctions> = modules
        .iter()
        .map(|m| OwnFunctions::read(m.bytes))
        .collect::<Result<_, _>>()?;
    let mut picks: Vec<Vec<(usize, &Injection, Vec<u32>)>> = vec![Vec::new(); modules.len()];
    for (order, injection) in injections.iter().enumerate() {
        let mut found = false;
        for (k, (module, own)) in modules.iter().zip(&read).enumerate() {
            let ids = if !injection.module.is_empty() {
                match injection.module == module.name {
                    true => own.named(&injection.name),
                    false => Vec::new(),
                }
            } else {
                match injection.function.split_once('!') {
                    Some((name, function)) if name == module.name => own.named(function),
                    Some(_) => Vec::new(),
                    None => own.named(&injection.function),
                }
            };
            if !ids.is_empty() {
                found = true;
                picks[k].push((order, injection, ids));
            }
        }
        if !found {
            let names: Vec<&str> = modules.iter().map(|m| m.name).collect();
            return Err(bad(
                injection,
                format!(
                    "the component has no function {} (in none of its core modules: {})",
                    injection.target(),
                    names.join(", ")
                ),
            ));
        }
    }
    for (k, (module, own)) in modules.iter().zip(&read).enumerate() {
        let (functions, plan) =
            own.plan(&picks[k], module.offset, &|name| qualify(module.name, name))?;
        out.functions.extend(functions);
        out.plans[k] = plan;
    }
    Ok(out)
}

fn bad(i: &Injection, why: String) -> Failure {
    Failure::input(format!("--inject {}: {why}", i.spec))
}

/// A module's functions, as specs name them.
struct OwnFunctions<'a> {
    instrumenter: Instrumenter<'a>,
    names: Vec<String>,
    shown: Vec<Option<String>>,
    imported: usize,
}

impl<'a> OwnFunctions<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, Failure> {
        let mut instrumenter = Instrumenter::new(bytes, &ProbePlan::default())
            .map_err(|e| Failure::input(format!("--inject: cannot read the module: {e}")))?;
        crate::prepare::instrument::dwarf_names::name_unnamed(&mut instrumenter, bytes);
        let names = instrumenter.function_names();
        let imported = instrumenter.imported_function_count() as usize;
        let shown = crate::go_symbols::shown_names(bytes, &names);
        Ok(OwnFunctions {
            instrumenter,
            names,
            shown,
            imported,
        })
    }

    /// The defined functions named `function` (as the name section has it, or shown).
    fn named(&self, function: &str) -> Vec<u32> {
        (self.imported..self.names.len())
            .filter(|&id| {
                let name = &self.names[id];
                name == function
                    || self.shown[id].as_deref() == Some(function)
                    || crate::demangle::demangle(name).as_deref() == Some(function)
            })
            .map(|id| id as u32)
            .collect()
    }

    /// The agent's plan for `picks` (each spec's place, the spec, the functions it names),
    /// and the functions injected into, their ids moved by `offset` and named by `name`.
    fn plan(
        &self,
        picks: &[(usize, &Injection, Vec<u32>)],
        offset: u32,
        name: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<FunctionInjection>, Option<Injections>), Failure> {
        let mut functions = Vec::new();
        let mut targets = BTreeMap::new();
        for (order, injection, ids) in picks {
            for &id in ids {
                let results = self.instrumenter.results(id).unwrap_or_default();
                let value =
                    injected_value(injection, &results).map_err(|why| bad(injection, why))?;
                if targets.insert(id, value).is_some() {
                    return Err(bad(
                        injection,
                        format!(
                            "{} is named by another --inject too",
                            self.names[id as usize]
                        ),
                    ));
                }
                functions.push(FunctionInjection {
                    injection: (*injection).clone(),
                    order: *order,
                    id: offset + id,
                    name: name(&self.names[id as usize]),
                });
            }
        }
        if targets.is_empty() {
            return Ok((functions, None));
        }
        let mut h = blake3::Hasher::new();
        h.update(b"wprof injections v1\0");
        for (id, value) in &targets {
            h.update(format!("{id}={value:?};").as_bytes());
        }
        let plan = Injections {
            spec: *h.finalize().as_bytes(),
            targets,
        };
        Ok((functions, Some(plan)))
    }
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
