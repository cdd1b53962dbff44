//! Reading the program: bytes from disk (read-only), what kind of file it is, and whether
//! wprof can run it. Every problem is one [`Failure`] naming the file.

use std::path::Path;

use crate::exit::Failure;
use crate::settings::EntryPoint;

/// The import module of WASI preview 1.
pub const WASI_P1: &str = "wasi_snapshot_preview1";

/// A module wprof can run, as read from disk.
#[derive(Debug, Clone)]
pub struct LoadedModule {
    /// The module's binary bytes (text input is converted).
    pub bytes: Vec<u8>,
    /// blake3 of `bytes`.
    pub digest: [u8; 32],
}

impl LoadedModule {
    /// The digest as lowercase hex.
    pub fn digest_hex(&self) -> String {
        wprof_cache::hex(&self.digest)
    }
}

/// Reads `path` and checks that it is a WASI preview 1 command module that the engine
/// accepts. Nothing is written anywhere.
pub fn load(path: &Path, engine: &wasmtime::Engine) -> Result<LoadedModule, Failure> {
    let module = read(path)?;
    validate(&module, path, engine)?;
    Ok(module)
}

/// Reads `path` and checks that it is a WASI preview 1 command, without validating the
/// code: for callers that validate only when nothing earlier did (a module the cache knows
/// by its digest was validated when it was stored; compiling validates too).
pub fn read(path: &Path) -> Result<LoadedModule, Failure> {
    match read_program(path)? {
        Program::Module(module) => Ok(module),
        Program::Component(_) => Err(Failure::input(format!(
            "{} is a WebAssembly component; only `wprof run` takes components, the other \
             commands take core modules",
            path.display()
        ))),
    }
}

/// A program wprof can run, as read from disk.
#[derive(Debug, Clone)]
pub enum Program {
    /// A WASI preview 1 command module.
    Module(LoadedModule),
    /// A component's bytes (checked by [`crate::prepare::component::ComponentLayout`]).
    Component(Vec<u8>),
}

/// Reads `path`: a WASI preview 1 command module (checked as [`read`] does) or a component
/// (only read).
pub fn read_program(path: &Path) -> Result<Program, Failure> {
    read_program_entered(path, &EntryPoint::default())
}

/// [`read_program`] of a program entered and linked as `entry` says (`wprof run`'s
/// `--invoke` and `--unknown-imports-trap`).
pub fn read_program_entered(path: &Path, entry: &EntryPoint) -> Result<Program, Failure> {
    let shown = path.display();
    let raw =
        std::fs::read(path).map_err(|e| Failure::input(format!("cannot read {shown}: {e}")))?;
    let bytes = if raw.starts_with(b"\0asm") {
        raw
    } else if looks_like_text(&raw) {
        wat::parse_bytes(&raw)
            .map(|b| b.into_owned())
            .map_err(|e| {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                Failure::input(format!("{shown} is not valid WebAssembly text: {first}"))
            })?
    } else {
        return Err(Failure::input(format!(
            "{shown} is not a WebAssembly module (no \\0asm header)"
        )));
    };
    if wasmparser::Parser::is_component(&bytes) {
        return Ok(Program::Component(bytes));
    }
    check_command(&bytes, entry).map_err(|why| Failure::input(format!("{shown} {why}")))?;
    // On every core: a 69 MB module takes 70 ms on one.
    let digest = *blake3::Hasher::new()
        .update_rayon(&bytes)
        .finalize()
        .as_bytes();
    Ok(Program::Module(LoadedModule { bytes, digest }))
}

/// Checks that the engine accepts `module` (read from `path`): one [`Failure`] naming the
/// file and the first problem.
pub fn validate(
    module: &LoadedModule,
    path: &Path,
    engine: &wasmtime::Engine,
) -> Result<(), Failure> {
    wasmtime::Module::validate(engine, &module.bytes).map_err(|e| {
        Failure::input(format!(
            "{} is not a valid module: {}",
            path.display(),
            one_line(&e.to_string())
        ))
    })
}

fn looks_like_text(raw: &[u8]) -> bool {
    std::str::from_utf8(raw).is_ok_and(|s| s.trim_start().starts_with(['(', ';']))
}

fn one_line(s: &str) -> String {
    s.lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

/// Whether `bytes` (a module) imports a shared memory: a threaded program (wasi-threads),
/// which the wasmtime CLI no longer runs.
pub fn is_threaded(bytes: &[u8]) -> bool {
    use wasmparser::{Payload, TypeRef};
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(Payload::ImportSection(reader)) => {
                return reader
                    .into_imports()
                    .flatten()
                    .any(|i| matches!(i.ty, TypeRef::Memory(m) if m.shared));
            }
            Ok(Payload::CodeSectionStart { .. }) | Err(_) => return false,
            Ok(_) => {}
        }
    }
    false
}

/// Checks the shape of a WASI command: an exported `_start` of type `[] -> []` (or, with
/// `--invoke`, the export named, taking no parameters and returning numbers), and imports
/// from WASI preview 1 only (and, for a threaded program, wasi-threads' shared memory and
/// `wasi::thread-spawn`; with `--unknown-imports-trap`, any function).
fn check_command(bytes: &[u8], entry: &EntryPoint) -> Result<(), String> {
    use wasmparser::{Payload, TypeRef};
    // Each function's type, and each type's shape: (takes nothing, returns nothing,
    // returns numbers only).
    let mut func_types: Vec<u32> = Vec::new();
    let mut shapes: Vec<(bool, bool, bool)> = Vec::new();
    let wanted = entry.invoke.as_deref().unwrap_or("_start");
    let mut found = None;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("is not a valid module: {e}"))?;
        match payload {
            Payload::TypeSection(reader) => {
                for group in reader.into_iter().flatten() {
                    for sub in group.into_types() {
                        shapes.push(match &sub.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => (
                                f.params().is_empty(),
                                f.results().is_empty(),
                                f.results().iter().all(|t| {
                                    use wasmparser::ValType::*;
                                    matches!(t, I32 | I64 | F32 | F64)
                                }),
                            ),
                            _ => (false, false, false),
                        });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| format!("is not a valid module: {e}"))?;
                    if import.module == wprof_agent::ProbeImports::MODULE {
                        return Err("is already instrumented by wprof (it imports from `wprof`); run the original module".to_string());
                    }
                    // wasi-threads: a shared memory and `wasi::thread-spawn` (a program built
                    // with `-pthread` for wasm32-wasip1-threads; see `crate::run::threads`).
                    let shared = matches!(import.ty, TypeRef::Memory(m) if m.shared);
                    let is_func = matches!(import.ty, TypeRef::Func(_) | TypeRef::FuncExact(_));
                    let threads =
                        shared || (import.module == "wasi" && import.name == "thread-spawn");
                    let trapped = entry.unknown_imports_trap && is_func;
                    if !threads && !trapped && import.module != WASI_P1 {
                        return Err(format!(
                            "is not a WASI command: it imports `{}::{}`, and wprof provides only \
                             `{WASI_P1}` (--unknown-imports-trap links such imports to traps)",
                            import.module, import.name
                        ));
                    }
                    if let TypeRef::Func(t) | TypeRef::FuncExact(t) = import.ty {
                        func_types.push(t);
                    }
                }
            }
            Payload::FunctionSection(reader) => {
                for t in reader.into_iter().flatten() {
                    func_types.push(t);
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader.into_iter().flatten() {
                    if export.name == wanted && export.kind == wasmparser::ExternalKind::Func {
                        found = Some(export.index);
                    }
                }
            }
            _ => {}
        }
    }
    let Some(index) = found else {
        return Err(match &entry.invoke {
            Some(name) => format!("exports no function `{name}` to invoke"),
            None => "is not a WASI command: it exports no `_start` function (a reactor's or a \
                     library's exports are called with --invoke FUNCTION)"
                .to_string(),
        });
    };
    let (no_params, no_results, numbers) = func_types
        .get(index as usize)
        .and_then(|t| shapes.get(*t as usize))
        .copied()
        .unwrap_or_default();
    match &entry.invoke {
        None if !(no_params && no_results) => Err(
            "is not a WASI command: its `_start` takes parameters or returns values".to_string(),
        ),
        Some(name) if !(no_params && numbers) => Err(format!(
            "cannot be invoked at `{name}`: wprof calls a function that takes no parameters \
             and returns numbers only"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(wat: &str) -> Result<(), String> {
        check_command(&wat::parse_str(wat).unwrap(), &EntryPoint::default())
    }

    #[test]
    fn a_reactor_is_run_at_the_export_invoked_and_unknown_imports_may_trap() {
        let reactor = wat::parse_str(
            r#"(module (import "host" "call" (func (param i32) (result i32)))
                 (func (export "_initialize")) (func (export "run") (result i32) i32.const 0)
                 (func (export "takes") (param i32)))"#,
        )
        .unwrap();
        let entry = |invoke: Option<&str>, trap: bool| EntryPoint {
            invoke: invoke.map(str::to_string),
            unknown_imports_trap: trap,
        };
        assert!(check_command(&reactor, &entry(Some("run"), true)).is_ok());
        let no_trap = check_command(&reactor, &entry(Some("run"), false)).unwrap_err();
        assert!(no_trap.contains("`host::call`") && no_trap.contains("--unknown-imports-trap"));
        let no_start = check_command(&reactor, &entry(None, true)).unwrap_err();
        assert!(no_start.contains("no `_start`") && no_start.contains("--invoke"));
        assert!(check_command(&reactor, &entry(Some("missing"), true))
            .unwrap_err()
            .contains("no function `missing`"));
        assert!(check_command(&reactor, &entry(Some("takes"), true))
            .unwrap_err()
            .contains("takes no parameters"));
    }

    #[test]
    fn commands_and_not() {
        assert!(check(r#"(module (func (export "_start")))"#).is_ok());
        assert!(check(r#"(module (func (export "main")))"#)
            .unwrap_err()
            .contains("no `_start`"));
        assert!(check(r#"(module (func (export "_start") (param i32)))"#)
            .unwrap_err()
            .contains("takes parameters"));
        assert!(
            check(r#"(module (import "env" "f" (func)) (func (export "_start")))"#)
                .unwrap_err()
                .contains("`env::f`")
        );
        assert!(check(
            r#"(module (import "wprof" "enter" (func (param i32))) (func (export "_start")))"#
        )
        .unwrap_err()
        .contains("already instrumented"));
    }
}
