//! Fault injection (`--inject`): an imported host function fails as asked, on every call or
//! on the Nth only, so that a program's error paths can be tested. The call asked for traps
//! or returns the given value (a WASI errno, by name or number, for the
//! `wasi_snapshot_preview1` functions) instead of running; every other call runs. The
//! profile and the summary say what was injected and how often.
//!
//! What a spec says, and how it is read: [`crate::settings::injection`]; the wrapper that asks an
//! [`Injector`] at each call: [`super`].

use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::{FuncType, Val, ValRaw, ValType};

use crate::settings::injection::{parse_value, Action, Injection, InjectionRecord};

/// The error an injected trap ends the program with (under a [`wasmtime::Trap`]).
#[derive(Debug)]
pub struct InjectedTrap(String);

impl std::fmt::Display for InjectedTrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InjectedTrap {}

/// An injection in place on one import: what a call gets instead of running, and the
/// counts.
#[derive(Debug)]
pub struct Injector {
    injection: Injection,
    /// What the records name: the import (`module::name`) or the module's own function.
    target: String,
    /// Its place among the `--inject` specs.
    order: usize,
    /// The result an injected call returns; `None`: it traps.
    value: Option<ValRaw>,
    calls: AtomicU64,
    injected: AtomicU64,
}

impl Injector {
    /// The injection, `order`th of the specs, on a function of type `ty`, if its action
    /// fits the type; else why not.
    pub fn new(injection: &Injection, order: usize, ty: &FuncType) -> Result<Self, String> {
        let value = injected_value(injection, ty)?.map(|v| match v {
            Val::I32(x) => ValRaw::i32(x),
            Val::I64(x) => ValRaw::i64(x),
            Val::F32(bits) => ValRaw::f32(bits),
            Val::F64(bits) => ValRaw::f64(bits),
            // `parse_value` makes numbers only.
            _ => ValRaw::i32(0),
        });
        Ok(Self {
            injection: injection.clone(),
            target: injection.target(),
            order,
            value,
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        })
    }

    /// The injection, `order`th of the specs, into the module's own function `name`, whose
    /// instrumented body holds the value an injected call returns, if any (see
    /// [`wprof_agent::Injections`]): [`Injector::call`] then gives a placeholder.
    pub fn for_function(injection: &Injection, order: usize, name: &str) -> Self {
        Self {
            injection: injection.clone(),
            target: name.to_string(),
            order,
            value: (injection.action != Action::Trap).then(|| ValRaw::i32(0)),
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Counts a call; `Some` when it is one to inject into: the result it returns instead
    /// of running, or the trap that ends the program.
    pub fn call(&self) -> Option<Result<ValRaw, wasmtime::Error>> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if self.injection.call.is_some_and(|n| n != call) {
            return None;
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(match self.value {
            Some(v) => Ok(v),
            // A trap, as a wasm trap ends the program (exit 134), saying why.
            None => Err(wasmtime::Error::new(InjectedTrap(format!(
                "wprof injected a trap into {} (call {call})",
                self.target
            )))
            .context(wasmtime::Trap::UnreachableCodeReached)),
        })
    }

    /// Its place among the `--inject` specs.
    pub fn order(&self) -> usize {
        self.order
    }

    /// What the profile records.
    pub fn record(&self) -> InjectionRecord {
        InjectionRecord {
            spec: self.injection.spec.clone(),
            target: self.target.clone(),
            action: self.injection.action_text(),
            call: self.injection.call,
            calls: self.calls.load(Ordering::Relaxed),
            injected: self.injected.load(Ordering::Relaxed),
        }
    }
}

/// The injections into the module's own functions, by function id (the agent's probe asks
/// at each call: see [`wprof_agent::Injections`]).
#[derive(Debug, Default)]
pub struct FunctionInjectors {
    by_id: rustc_hash::FxHashMap<u32, Injector>,
}

impl FunctionInjectors {
    /// Injects `injection` (the `order`th spec) into function `id`, named `name`.
    pub fn add(&mut self, id: u32, name: &str, injection: &Injection, order: usize) {
        self.by_id
            .insert(id, Injector::for_function(injection, order, name));
    }

    /// A call of function `id` starts: 0 to run it, 1 to return the injected value, or the
    /// injected trap.
    pub fn ask(&self, id: u32) -> Result<i32, wasmtime::Error> {
        match self.by_id.get(&id).and_then(Injector::call) {
            None => Ok(0),
            Some(Ok(_)) => Ok(1),
            Some(Err(trap)) => Err(trap),
        }
    }

    /// What each did, with its place among the specs. A spec that matched several
    /// functions has a record for each.
    pub fn records(&self) -> Vec<(usize, InjectionRecord)> {
        let mut out: Vec<(usize, InjectionRecord)> = self
            .by_id
            .values()
            .map(|i| (i.order(), i.record()))
            .collect();
        out.sort_by(|a, b| (a.0, &a.1.target).cmp(&(b.0, &b.1.target)));
        out
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_nth_call_is_injected() {
        let engine = wasmtime::Engine::default();
        let ty = FuncType::new(&engine, [ValType::I32], [ValType::I32]);
        let spec = Injection::parse("wasi:fd_write=errno:EIO@2").unwrap();
        let injector = Injector::new(&spec, 0, &ty).unwrap();
        assert!(injector.call().is_none());
        let second = injector.call().unwrap().unwrap();
        assert_eq!(second.get_i32(), 29);
        assert!(injector.call().is_none());
        let record = injector.record();
        assert_eq!((record.calls, record.injected), (3, 1));
    }

    #[test]
    fn an_action_must_fit_the_type() {
        let engine = wasmtime::Engine::default();
        let none = FuncType::new(&engine, [ValType::I32], []);
        let spec = Injection::parse("wasi:proc_exit=errno:EIO").unwrap();
        assert!(Injector::new(&spec, 0, &none).is_err());
        let trap = Injection::parse("wasi:proc_exit=trap").unwrap();
        let injector = Injector::new(&trap, 0, &none).unwrap();
        assert!(injector.call().unwrap().is_err());
    }
}
