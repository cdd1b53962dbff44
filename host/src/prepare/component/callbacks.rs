//! The functions of a component's core module that run while the component may not call
//! out: the canonical ABI's allocation callbacks (`realloc`, through which the host hands
//! the component strings and lists) and post-return functions, and everything they call.
//!
//! Wasmtime traps a call to any import from them ("cannot leave component instance"), so
//! time mode's probes, which are such calls, must stay out of them: those functions are
//! left without probes (their time is their caller's). The callbacks are found by the
//! names every component toolchain exports them under (`cabi_realloc`,
//! `cabi_import_realloc`, `cabi_export_realloc`, `cabi_post_*`); what they call, through
//! direct calls.

use std::collections::BTreeSet;

use wasmparser::{Operator, Payload};

/// Whether an export is a canonical ABI callback.
fn is_callback(export: &str) -> bool {
    export.starts_with("cabi_realloc")
        || export == "cabi_import_realloc"
        || export == "cabi_export_realloc"
        || export.starts_with("cabi_post_")
}

/// The ids (function indices) of the defined functions of `module` reachable from its
/// callbacks by direct calls, the callbacks included.
pub fn callback_closure(module: &[u8]) -> Result<BTreeSet<u32>, String> {
    let mut imported = 0u32;
    let mut roots = Vec::new();
    let mut calls: Vec<Vec<u32>> = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload.map_err(|e| e.to_string())? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    if matches!(
                        import.ty,
                        wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                    ) {
                        imported += 1;
                    }
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(|e| e.to_string())?;
                    if export.kind == wasmparser::ExternalKind::Func && is_callback(export.name) {
                        roots.push(export.index);
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let mut callees = Vec::new();
                if !roots.is_empty() {
                    let mut ops = body.get_operators_reader().map_err(|e| e.to_string())?;
                    while !ops.eof() {
                        match ops.read().map_err(|e| e.to_string())? {
                            Operator::Call { function_index }
                            | Operator::ReturnCall { function_index } => {
                                callees.push(function_index)
                            }
                            _ => {}
                        }
                    }
                }
                calls.push(callees);
            }
            _ => {}
        }
    }
    let mut reached = BTreeSet::new();
    let mut stack = roots;
    while let Some(f) = stack.pop() {
        let Some(defined) = f.checked_sub(imported) else {
            continue;
        };
        if !reached.insert(f) {
            continue;
        }
        if let Some(callees) = calls.get(defined as usize) {
            stack.extend(callees.iter().copied());
        }
    }
    Ok(reached)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_and_what_they_call_are_found_and_nothing_else() {
        let module = wat::parse_str(
            r#"(module
                (import "env" "f" (func $import))
                (func $malloc (param i32) (result i32) call $sbrk local.get 0 i32.add)
                (func $sbrk (result i32) call $import i32.const 0)
                (func $main call $other)
                (func $other)
                (func $realloc (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                    local.get 3 call $malloc)
                (func $post (export "cabi_post_run") return_call $other2)
                (func $other2)
                (export "main" (func $main)))"#,
        )
        .unwrap();
        let reached: Vec<u32> = callback_closure(&module).unwrap().into_iter().collect();
        // $malloc 1, $sbrk 2, $realloc 5, $post 6, $other2 7; not the import 0.
        assert_eq!(reached, [1, 2, 5, 6, 7]);
    }

    #[test]
    fn a_module_without_callbacks_has_none() {
        let module = wat::parse_str("(module (func (export \"f\")))").unwrap();
        assert!(callback_closure(&module).unwrap().is_empty());
    }
}
