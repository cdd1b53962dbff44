//! Reading the program: bytes from disk (read-only), what kind of file it is, and whether
//! wprof can run it. Every problem is one [`Failure`] naming the file.

use std::path::Path;

use crate::exit::Failure;

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
    check_command(&bytes).map_err(|why| Failure::input(format!("{shown} {why}")))?;
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

/// Checks the shape of a WASI command: an exported `_start` of type `[] -> []`, and
/// imports from WASI preview 1 only (and, for a threaded program, wasi-threads' shared
/// memory and `wasi::thread-spawn`).
fn check_command(bytes: &[u8]) -> Result<(), String> {
    use wasmparser::{Payload, TypeRef};
    let mut func_types: Vec<u32> = Vec::new();
    let mut type_is_nullary: Vec<bool> = Vec::new();
    let mut start = None;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("is not a valid module: {e}"))?;
        match payload {
            Payload::TypeSection(reader) => {
                for group in reader.into_iter().flatten() {
                    for sub in group.into_types() {
                        type_is_nullary.push(match &sub.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => {
                                f.params().is_empty() && f.results().is_empty()
                            }
                            _ => false,
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
                    if shared || (import.module == "wasi" && import.name == "thread-spawn") {
                        if let TypeRef::Func(t) | TypeRef::FuncExact(t) = import.ty {
                            func_types.push(t);
                        }
                        continue;
                    }
                    if import.module != WASI_P1 {
                        return Err(format!(
                            "is not a WASI command: it imports `{}::{}`, and wprof provides only `{WASI_P1}`",
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
                    if export.name == "_start" && export.kind == wasmparser::ExternalKind::Func {
                        start = Some(export.index);
                    }
                }
            }
            _ => {}
        }
    }
    let Some(start) = start else {
        return Err("is not a WASI command: it exports no `_start` function".to_string());
    };
    let nullary = func_types
        .get(start as usize)
        .and_then(|t| type_is_nullary.get(*t as usize))
        .copied()
        .unwrap_or(false);
    if !nullary {
        return Err(
            "is not a WASI command: its `_start` takes parameters or returns values".to_string(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(wat: &str) -> Result<(), String> {
        check_command(&wat::parse_str(wat).unwrap())
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
