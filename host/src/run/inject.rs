//! Fault injection (`--inject`): a host function the module imports fails as asked, on
//! every call or on the Nth only, so that a program's error paths can be tested. The
//! function the module imports is replaced in the linker by one that counts its calls and,
//! when it is the call asked for, traps or returns the given value (a WASI errno, by name
//! or number, for the `wasi_snapshot_preview1` functions) instead of running; every other
//! call goes to the real function. The profile and the summary say what was injected and
//! how often.
//!
//! The real function must see the program's memory: WASI's functions read and write it
//! through the export `memory` of the instance that called them. A host function calling
//! another directly has no calling instance, so every call that is not injected goes
//! through a trampoline, a two-line module instantiated beside the program that exports
//! the program's memory and calls the real function.
//!
//! What a spec says, and how it is read: [`crate::injection`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use wasmtime::{Extern, Func, FuncType, Instance, Linker, Module, Store, Val, ValType};

use crate::exit::Failure;
use crate::injection::{parse_value, Action, Injection, InjectionRecord};
use crate::run::host_state::HostState;

/// The error an injected trap ends the program with (under a [`wasmtime::Trap`]).
#[derive(Debug)]
pub struct InjectedTrap(String);

impl std::fmt::Display for InjectedTrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InjectedTrap {}

/// An injection in place: its counts, and the way to the real function.
#[derive(Debug)]
pub struct Armed {
    injection: Injection,
    calls: Arc<AtomicU64>,
    injected: Arc<AtomicU64>,
    real: Func,
    ty: FuncType,
    /// The trampoline's function, once [`connect`] made it.
    via: Arc<OnceLock<Func>>,
}

impl Armed {
    /// What the profile records.
    pub fn record(&self) -> InjectionRecord {
        InjectionRecord {
            spec: self.injection.spec.clone(),
            target: self.injection.target(),
            action: self.injection.action_text(),
            call: self.injection.call,
            calls: self.calls.load(Ordering::Relaxed),
            injected: self.injected.load(Ordering::Relaxed),
        }
    }
}

/// Replaces in `linker` each import `injections` name by one that injects; the module
/// must import it, and the action must fit its type. Called before instantiating.
pub fn arm(
    linker: &mut Linker<HostState>,
    store: &mut Store<HostState>,
    module: &Module,
    injections: &[Injection],
) -> Result<Vec<Armed>, Failure> {
    let mut armed = Vec::new();
    for injection in injections {
        let bad = |why: String| Failure::input(format!("--inject {}: {why}", injection.spec));
        let imported = module
            .imports()
            .find(|i| i.module() == injection.module && i.name() == injection.name)
            .and_then(|i| i.ty().func().cloned())
            .ok_or_else(|| {
                bad(format!(
                    "the module imports no function {}",
                    injection.target()
                ))
            })?;
        let Ok(Extern::Func(real)) = linker.get(&mut *store, &injection.module, &injection.name)
        else {
            return Err(bad(format!(
                "wprof provides no function {} to inject into",
                injection.target()
            )));
        };
        let value = injected_value(injection, &imported).map_err(bad)?;
        let calls = Arc::new(AtomicU64::new(0));
        let injected = Arc::new(AtomicU64::new(0));
        let via: Arc<OnceLock<Func>> = Arc::new(OnceLock::new());
        let (counted, hit, nth) = (calls.clone(), injected.clone(), injection.call);
        let (to_real, way) = (real, via.clone());
        let target = injection.target();
        linker.allow_shadowing(true);
        linker
            .func_new(
                &injection.module,
                &injection.name,
                imported.clone(),
                move |mut caller, params, out| {
                    let call = counted.fetch_add(1, Ordering::Relaxed) + 1;
                    if nth.is_some_and(|n| n != call) {
                        return way.get().unwrap_or(&to_real).call(&mut caller, params, out);
                    }
                    hit.fetch_add(1, Ordering::Relaxed);
                    match &value {
                        // A trap, as a wasm trap ends the program (exit 134), saying why.
                        None => Err(wasmtime::Error::new(InjectedTrap(format!(
                            "wprof injected a trap into {target} (call {call})"
                        )))
                        .context(wasmtime::Trap::UnreachableCodeReached)),
                        Some(v) => {
                            out[0] = *v;
                            Ok(())
                        }
                    }
                },
            )
            .map_err(|e| bad(format!("cannot link the injection: {e}")))?;
        linker.allow_shadowing(false);
        armed.push(Armed {
            injection: injection.clone(),
            calls,
            injected,
            real,
            ty: imported,
            via,
        });
    }
    Ok(armed)
}

/// What a call gets instead of running (`None`: a trap), if the action fits the
/// function's type `ty`; else why not.
fn injected_value(injection: &Injection, ty: &FuncType) -> Result<Option<Val>, String> {
    let results: Vec<ValType> = ty.results().collect();
    match (&injection.action, results.as_slice()) {
        (Action::Trap, _) => Ok(None),
        (Action::Errno(n), [ValType::I32]) => Ok(Some(Val::I32(i32::from(*n)))),
        (Action::Errno(_), _) => Err(format!(
            "{} does not return an errno (one i32)",
            injection.target()
        )),
        (Action::Return(text), [ty]) => parse_value(text, ty).map(Some).ok_or_else(|| {
            format!(
                "`{text}` is not a value of {}'s result type",
                injection.name
            )
        }),
        (Action::Return(_), _) => Err(format!(
            "{} has {} results; return:VALUE needs one",
            injection.target(),
            results.len()
        )),
    }
}

/// After the program is instantiated: makes each injection's trampoline to its real
/// function (see the module's documentation). Without one (the program exports no
/// 32- or 64-bit unshared `memory`, or the function's types are not numbers), calls go to
/// the real function directly, as they do for functions that use no memory.
pub fn connect(store: &mut Store<HostState>, program: &Instance, armed: &[Armed]) {
    if armed.is_empty() {
        return;
    }
    let Some(memory) = program.get_memory(&mut *store, "memory") else {
        return;
    };
    let index = if memory.ty(&*store).is_64() {
        "i64 "
    } else {
        ""
    };
    for a in armed {
        let Some(wat) = trampoline(&a.ty, index) else {
            continue;
        };
        let made = Module::new(store.engine(), wat).and_then(|module| {
            Instance::new(&mut *store, &module, &[memory.into(), a.real.into()])
        });
        match made.map(|t| t.get_func(&mut *store, "call")) {
            Ok(Some(call)) => {
                let _ = a.via.set(call);
            }
            Ok(None) | Err(_) => tracing::warn!(
                "no trampoline for {}; its calls run without the program's memory",
                a.injection.target()
            ),
        }
    }
}

/// The trampoline module for a function of type `ty` (`index`: `i64 ` for a 64-bit
/// memory), as text.
fn trampoline(ty: &FuncType, index: &str) -> Option<String> {
    let name = |t: ValType| match t {
        ValType::I32 => Some("i32"),
        ValType::I64 => Some("i64"),
        ValType::F32 => Some("f32"),
        ValType::F64 => Some("f64"),
        _ => None,
    };
    let params = ty.params().map(name).collect::<Option<Vec<_>>>()?;
    let results = ty.results().map(name).collect::<Option<Vec<_>>>()?;
    let signature = format!(
        "(param {}) (result {})",
        params.join(" "),
        results.join(" ")
    );
    let args: String = (0..params.len())
        .map(|i| format!("local.get {i} "))
        .collect();
    Some(format!(
        "(module (import \"program\" \"memory\" (memory {index}0)) \
         (import \"real\" \"function\" (func $real {signature})) \
         (export \"memory\" (memory 0)) \
         (func (export \"call\") {signature} {args}call $real))"
    ))
}
