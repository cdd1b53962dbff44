//! The functions of a component's core modules that run while the component may not call
//! out: the canonical ABI's allocation callbacks (`realloc`, through which the host hands
//! the component strings and lists) and post-return functions, and everything they call.
//!
//! Wasmtime traps a call to any import from them ("cannot leave component instance"), so
//! time mode's probes, which are such calls, must stay out of them: those functions are
//! left without probes (their time is their caller's). The callbacks are found by the
//! names every component toolchain exports them under (`cabi_realloc`,
//! `cabi_import_realloc`, `cabi_export_realloc`, `cabi_post_*`); what they call, through
//! direct calls within a module, through an import into every module that exports a
//! function of the import's name (a dynamically linked component's `malloc` lives in its
//! libc module), and through `call_indirect` into every function of the module's tables.
//! Over-approximate on purpose: a function left out costs its probes; one left in stops
//! the program.

use std::collections::{BTreeSet, HashMap};

use wasmparser::{Operator, Payload};

/// Whether an export is a canonical ABI callback.
fn is_callback(export: &str) -> bool {
    export.starts_with("cabi_realloc")
        || export == "cabi_import_realloc"
        || export == "cabi_export_realloc"
        || export.starts_with("cabi_post_")
}

/// What the closure needs of one core module.
#[derive(Debug, Default)]
struct Calls {
    /// Functions it imports: each one's field name, by index.
    imports: Vec<String>,
    /// Exported functions by name.
    exports: HashMap<String, u32>,
    /// Callback exports.
    roots: Vec<u32>,
    /// Per defined function: the functions it calls directly, and whether it calls
    /// through a table.
    calls: Vec<(Vec<u32>, bool)>,
    /// Every function placed in a table by an element segment.
    in_tables: Vec<u32>,
}

impl Calls {
    fn read(module: &[u8]) -> Result<Self, String> {
        let mut out = Calls::default();
        for payload in wasmparser::Parser::new(0).parse_all(module) {
            match payload.map_err(|e| e.to_string())? {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.map_err(|e| e.to_string())?;
                        if matches!(
                            import.ty,
                            wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                        ) {
                            out.imports.push(import.name.to_string());
                        }
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.map_err(|e| e.to_string())?;
                        if export.kind == wasmparser::ExternalKind::Func {
                            if is_callback(export.name) {
                                out.roots.push(export.index);
                            }
                            out.exports.insert(export.name.to_string(), export.index);
                        }
                    }
                }
                Payload::ElementSection(reader) => {
                    for element in reader {
                        let element = element.map_err(|e| e.to_string())?;
                        match element.items {
                            wasmparser::ElementItems::Functions(functions) => {
                                for f in functions {
                                    out.in_tables.push(f.map_err(|e| e.to_string())?);
                                }
                            }
                            wasmparser::ElementItems::Expressions(_, exprs) => {
                                for expr in exprs {
                                    let expr = expr.map_err(|e| e.to_string())?;
                                    for op in expr.get_operators_reader() {
                                        if let Ok(Operator::RefFunc { function_index }) = op {
                                            out.in_tables.push(function_index);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let mut callees = Vec::new();
                    let mut indirect = false;
                    let mut ops = body.get_operators_reader().map_err(|e| e.to_string())?;
                    while !ops.eof() {
                        match ops.read().map_err(|e| e.to_string())? {
                            Operator::Call { function_index }
                            | Operator::ReturnCall { function_index } => {
                                callees.push(function_index)
                            }
                            Operator::CallIndirect { .. }
                            | Operator::ReturnCallIndirect { .. }
                            | Operator::CallRef { .. }
                            | Operator::ReturnCallRef { .. } => indirect = true,
                            _ => {}
                        }
                    }
                    out.calls.push((callees, indirect));
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// For each of `modules` (a component's core modules), the ids (function indices) of its
/// defined functions that may run inside a canonical ABI callback, the callbacks included.
pub fn callback_closures(modules: &[&[u8]]) -> Result<Vec<BTreeSet<u32>>, String> {
    let read: Vec<Calls> = modules
        .iter()
        .map(|m| Calls::read(m))
        .collect::<Result<_, _>>()?;
    let mut reached: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); modules.len()];
    let mut stack: Vec<(usize, u32)> = read
        .iter()
        .enumerate()
        .flat_map(|(m, c)| c.roots.iter().map(move |&f| (m, f)))
        .collect();
    let mut tables_taken = vec![false; modules.len()];
    let mut names_taken: BTreeSet<String> = BTreeSet::new();
    while let Some((m, f)) = stack.pop() {
        let module = &read[m];
        let imported = module.imports.len() as u32;
        let Some(defined) = f.checked_sub(imported) else {
            // An import: whatever another module exports under its name.
            let name = &module.imports[f as usize];
            if names_taken.insert(name.clone()) {
                for (other, calls) in read.iter().enumerate() {
                    if let Some(&g) = calls.exports.get(name) {
                        stack.push((other, g));
                    }
                }
            }
            continue;
        };
        if !reached[m].insert(f) {
            continue;
        }
        let Some((callees, indirect)) = module.calls.get(defined as usize) else {
            continue;
        };
        stack.extend(callees.iter().map(|&g| (m, g)));
        if *indirect && !tables_taken[m] {
            tables_taken[m] = true;
            stack.extend(module.in_tables.iter().map(|&g| (m, g)));
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
        let reached: Vec<u32> = callback_closures(&[&module]).unwrap()[0]
            .iter()
            .copied()
            .collect();
        // $malloc 1, $sbrk 2, $realloc 5, $post 6, $other2 7; not the import 0.
        assert_eq!(reached, [1, 2, 5, 6, 7]);
    }

    #[test]
    fn imports_lead_into_the_modules_that_export_them_and_tables_are_followed() {
        // Main's realloc calls libc's through an import; libc's calls through its table.
        let main = wat::parse_str(
            r#"(module
                (import "env" "realloc" (func $realloc (param i32) (result i32)))
                (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                    local.get 3 call $realloc)
                (func (export "work")))"#,
        )
        .unwrap();
        let libc = wat::parse_str(
            r#"(module
                (type $t (func (param i32) (result i32)))
                (table 2 funcref)
                (elem (i32.const 0) $grow $spare)
                (func $realloc (export "realloc") (param i32) (result i32)
                    local.get 0 i32.const 0 call_indirect (type $t))
                (func $grow (param i32) (result i32) local.get 0)
                (func $spare (param i32) (result i32) local.get 0)
                (func $printf (export "printf")))"#,
        )
        .unwrap();
        let reached = callback_closures(&[&main, &libc]).unwrap();
        assert_eq!(reached[0].iter().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(reached[1].iter().copied().collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn a_module_without_callbacks_has_none() {
        let module = wat::parse_str("(module (func (export \"f\")))").unwrap();
        assert!(callback_closures(&[&module]).unwrap()[0].is_empty());
    }
}
