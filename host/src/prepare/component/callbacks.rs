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
//! libc module), and through `call_indirect` of a type into every function of that
//! signature placed in the module's tables, or, when its table is shared (imported or
//! exported: a dynamically linked component's one table), in the tables of every module
//! that shares one. `call_ref`, and modules with GC types, reach every function in the
//! tables. Over-approximate on purpose: a function left out costs its probes; one left in
//! stops the program.

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
    /// Per defined function: the functions it calls directly, and what it calls through
    /// a table.
    calls: Vec<(Vec<u32>, Indirect)>,
    /// Every function placed in a table by an element segment.
    in_tables: Vec<u32>,
    /// The signature of each function type, by type index (`None` with GC types: then
    /// every `call_indirect` is [`Indirect::Any`]).
    signatures: Option<Vec<Option<wasmparser::FuncType>>>,
    /// The type index of every function, imports first.
    function_types: Vec<u32>,
    /// Whether its table is imported or exported (shared with other modules).
    shares_table: bool,
}

/// What a function calls through tables.
#[derive(Debug, Default, Clone)]
enum Indirect {
    /// Nothing.
    #[default]
    None,
    /// `call_indirect`s of these type indices.
    Typed(BTreeSet<u32>),
    /// Any function in a table (`call_ref`, or types not told apart).
    Any,
}

impl Indirect {
    fn add(&mut self, ty: Option<u32>) {
        match (std::mem::take(self), ty) {
            (Indirect::Any, _) | (_, None) => *self = Indirect::Any,
            (Indirect::None, Some(t)) => *self = Indirect::Typed(BTreeSet::from([t])),
            (Indirect::Typed(mut types), Some(t)) => {
                types.insert(t);
                *self = Indirect::Typed(types);
            }
        }
    }
}

impl Calls {
    fn read(module: &[u8]) -> Result<Self, String> {
        let mut out = Calls {
            signatures: Some(Vec::new()),
            ..Calls::default()
        };
        for payload in wasmparser::Parser::new(0).parse_all(module) {
            match payload.map_err(|e| e.to_string())? {
                Payload::TypeSection(reader) => {
                    let mut signatures = Vec::new();
                    for ty in reader.into_iter_err_on_gc_types() {
                        match ty {
                            Ok(f) => signatures.push(Some(f)),
                            Err(_) => {
                                out.signatures = None;
                                signatures.clear();
                                break;
                            }
                        }
                    }
                    if out.signatures.is_some() {
                        out.signatures = Some(signatures);
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.map_err(|e| e.to_string())?;
                        match import.ty {
                            wasmparser::TypeRef::Func(t) | wasmparser::TypeRef::FuncExact(t) => {
                                out.imports.push(import.name.to_string());
                                out.function_types.push(t);
                            }
                            wasmparser::TypeRef::Table(_) => out.shares_table = true,
                            _ => {}
                        }
                    }
                }
                Payload::FunctionSection(reader) => {
                    for t in reader {
                        out.function_types.push(t.map_err(|e| e.to_string())?);
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.map_err(|e| e.to_string())?;
                        if export.kind == wasmparser::ExternalKind::Table {
                            out.shares_table = true;
                        }
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
                    let mut indirect = Indirect::None;
                    let mut ops = body.get_operators_reader().map_err(|e| e.to_string())?;
                    while !ops.eof() {
                        match ops.read().map_err(|e| e.to_string())? {
                            Operator::Call { function_index }
                            | Operator::ReturnCall { function_index } => {
                                callees.push(function_index)
                            }
                            Operator::CallIndirect { type_index, .. }
                            | Operator::ReturnCallIndirect { type_index, .. } => {
                                indirect.add(Some(type_index))
                            }
                            Operator::CallRef { .. } | Operator::ReturnCallRef { .. } => {
                                indirect.add(None)
                            }
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
    // The (module, signature) pairs whose table functions are on the stack already;
    // `None` for every signature.
    let mut tables_taken: BTreeSet<(usize, Option<Signature>)> = BTreeSet::new();
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
        // The modules whose table functions a call through this module's table may reach.
        let sharing: Vec<usize> = match module.shares_table {
            true => (0..read.len()).filter(|&o| read[o].shares_table).collect(),
            false => vec![m],
        };
        let wanted: Vec<Option<Signature>> = match indirect {
            Indirect::None => Vec::new(),
            Indirect::Any => vec![None],
            Indirect::Typed(types) => match &module.signatures {
                Some(signatures) => types
                    .iter()
                    .map(|&t| {
                        signatures
                            .get(t as usize)
                            .cloned()
                            .flatten()
                            .map(|f| signature(&f))
                    })
                    .collect(),
                None => vec![None],
            },
        };
        for signature in wanted {
            for &o in &sharing {
                if !tables_taken.insert((o, signature.clone())) {
                    continue;
                }
                let other = &read[o];
                stack.extend(
                    other
                        .in_tables
                        .iter()
                        .filter(|&&g| match &signature {
                            None => true,
                            Some(wanted) => other.signature_of(g).is_none_or(|s| s == *wanted),
                        })
                        .map(|&g| (o, g)),
                );
            }
        }
    }
    Ok(reached)
}

impl Calls {
    /// Function `f`'s signature; `None` if its type is not known.
    fn signature_of(&self, f: u32) -> Option<Signature> {
        let t = *self.function_types.get(f as usize)?;
        Some(signature(
            self.signatures.as_ref()?.get(t as usize)?.as_ref()?,
        ))
    }
}

/// A function type's parameters and results, comparable across modules (no GC types).
type Signature = (Vec<wasmparser::ValType>, Vec<wasmparser::ValType>);

fn signature(f: &wasmparser::FuncType) -> Signature {
    (f.params().to_vec(), f.results().to_vec())
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
    fn a_call_through_a_table_reaches_the_functions_of_its_signature() {
        let module = wat::parse_str(
            r#"(module
                (type $t (func (param i32) (result i32)))
                (table 3 funcref)
                (elem (i32.const 0) $same $other $swapped)
                (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                    local.get 3 i32.const 0 call_indirect (type $t))
                (func $same (param i32) (result i32) local.get 0)
                (func $other)
                (func $swapped (param i32 i32)))"#,
        )
        .unwrap();
        let reached = callback_closures(&[&module]).unwrap();
        // The callback 0 and $same 1; not $other, nor $swapped, whose types differ.
        assert_eq!(reached[0].iter().copied().collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn a_shared_table_leads_into_every_module_that_places_functions_in_it() {
        // Dynamic linking: libc's qsort calls back, through the one table, a comparator
        // that main placed there; main's own table functions of another type stay out.
        let main = wat::parse_str(
            r#"(module
                (import "env" "table" (table 4 funcref))
                (import "env" "qsort" (func $qsort (param i32)))
                (elem (i32.const 2) $compare $print)
                (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                    i32.const 2 call $qsort i32.const 0)
                (func $compare (param i32 i32) (result i32) i32.const 0)
                (func $print (param i32)))"#,
        )
        .unwrap();
        let libc = wat::parse_str(
            r#"(module
                (type $cmp (func (param i32 i32) (result i32)))
                (import "env" "table" (table 4 funcref))
                (func (export "qsort") (param i32)
                    (drop (call_indirect (type $cmp) (i32.const 1) (i32.const 2) (local.get 0)))))"#,
        )
        .unwrap();
        let reached = callback_closures(&[&main, &libc]).unwrap();
        // main: the callback 1 and $compare 2 (not $print 3); libc: qsort 0.
        assert_eq!(reached[0].iter().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(reached[1].iter().copied().collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_module_without_callbacks_has_none() {
        let module = wat::parse_str("(module (func (export \"f\")))").unwrap();
        assert!(callback_closures(&[&module]).unwrap()[0].is_empty());
    }
}
