//! WebAssembly components as wprof sees them: the core modules a component defines at any
//! depth and their names, whether it is a WASI 0.2 command, the names a profile gives their
//! functions, and how instrumented modules' probes are linked to the host (the names both
//! the rewrite, [`crate::prepare::component`], and the run, [`crate::run::component`],
//! use), and the rewrite that links them ([`rewrite`]).
//!
//! The core modules a component defines are the program (for a component made from a WASI
//! preview 1 module, the module itself, the preview 1 adapter and wit-component's two small
//! glue modules); in a composition of components, those of each nested component too (see
//! [`layout`]).

pub mod layout;
pub mod rewrite;

pub use layout::{ComponentLayout, CoreModule};

use wasmparser::{Parser, Payload};

/// The export a WASI 0.2 command runs: `wasi:cli/run@0.2.x`, whose `run` function is its
/// `main`.
pub const CLI_RUN: &str = "wasi:cli/run@0.2";

/// A core module's name as reports show it: wit-component's `wit-component:adapter:NAME`
/// becomes `NAME`, `wit-component:shim` becomes `shim`.
pub(crate) fn short_module_name(name: &str) -> String {
    name.rsplit(':').next().unwrap_or(name).to_string()
}

/// A function's name in a component's profile: `module!function` when the component has
/// several core modules, else the function's own name.
pub fn qualified_name(module: &str, function: &str, several: bool) -> String {
    if several {
        format!("{module}!{function}")
    } else {
        function.to_string()
    }
}

/// The minimum size in bytes of each memory `module` (a core module) defines, in order.
pub fn defined_memory_minimums(module: &[u8]) -> Result<Vec<usize>, String> {
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(|e| e.to_string())? {
            Payload::MemorySection(reader) => {
                return reader
                    .into_iter()
                    .map(|m| {
                        let m = m.map_err(|e| e.to_string())?;
                        let page = 1u64 << m.page_size_log2.unwrap_or(16);
                        usize::try_from(m.initial.saturating_mul(page))
                            .map_err(|_| "a memory too large".to_string())
                    })
                    .collect();
            }
            Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok(Vec::new())
}

/// Whether `module` (a core module) imports a memory (its memory 0 is then not its own).
pub fn imports_memory(module: &[u8]) -> Result<bool, String> {
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(|e| e.to_string())? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    if matches!(import.ty, wasmparser::TypeRef::Memory(_)) {
                        return Ok(true);
                    }
                }
            }
            Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok(false)
}

/// How many functions `module` (a core module) has, imported and defined: where the next
/// module's ids start in a component's profile.
pub fn function_count(module: &[u8]) -> Result<u32, String> {
    functions(module).map(|(imported, defined)| imported + defined)
}

/// How many functions `module` (a core module) imports.
pub fn imported_functions(module: &[u8]) -> Result<u32, String> {
    functions(module).map(|(imported, _)| imported)
}

/// How many functions `module` imports, and how many it defines.
fn functions(module: &[u8]) -> Result<(u32, u32), String> {
    use wasmparser::TypeRef;
    let (mut imported, mut defined) = (0, 0);
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(|e| e.to_string())? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    if matches!(import.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                        imported += 1;
                    }
                }
            }
            Payload::FunctionSection(reader) => defined += reader.count(),
            Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok((imported, defined))
}

/// The name of the host instance that satisfies the `k`-th instrumented module's probes.
pub fn probe_instance_name(k: usize) -> String {
    format!("wprof:probes/module{k}")
}

/// A probe import's name as a component function: `enter_catching` becomes
/// `enter-catching` (component names are kebab-case).
pub fn probe_function_name(core_name: &str) -> String {
    core_name.replace('_', "-")
}

/// One probe import of an instrumented module: its core name and signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeImport {
    /// The field name under module `wprof`.
    pub name: String,
    /// Parameter types.
    pub params: Vec<wasmparser::ValType>,
    /// Result types (at most one).
    pub results: Vec<wasmparser::ValType>,
}

/// The probe imports of `module` (an instrumented core module), in import order.
pub fn probe_imports(module: &[u8]) -> Result<Vec<ProbeImport>, String> {
    use wasmparser::{Payload, TypeRef};
    let mut types: Vec<wasmparser::FuncType> = Vec::new();
    let mut probes = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload.map_err(|e| e.to_string())? {
            Payload::TypeSection(reader) => {
                for group in reader {
                    for sub in group.map_err(|e| e.to_string())?.into_types() {
                        types.push(match sub.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => f,
                            _ => wasmparser::FuncType::new([], []),
                        });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    if import.module != wprof_agent::ProbeImports::MODULE {
                        continue;
                    }
                    let TypeRef::Func(ty) = import.ty else {
                        return Err(format!("wprof::{} is not a function", import.name));
                    };
                    let ty = types
                        .get(ty as usize)
                        .ok_or_else(|| format!("wprof::{} has no type", import.name))?;
                    if ty.results().len() > 1 {
                        return Err(format!("wprof::{} returns several values", import.name));
                    }
                    probes.push(ProbeImport {
                        name: import.name.to_string(),
                        params: ty.params().to_vec(),
                        results: ty.results().to_vec(),
                    });
                }
            }
            Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok(probes)
}

/// Whether an alias adds to the core module index space.
pub fn module_alias(alias: &wasmparser::ComponentAlias<'_>) -> bool {
    use wasmparser::{ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind};
    match alias {
        ComponentAlias::InstanceExport { kind, .. } => *kind == ComponentExternalKind::Module,
        ComponentAlias::Outer { kind, .. } => *kind == ComponentOuterAliasKind::CoreModule,
        ComponentAlias::CoreInstanceExport { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_lists_its_core_modules_by_name_and_knows_a_command() {
        let bytes = wat::parse_str(
            r#"(component
                (core module $first (func (export "f")))
                (core module $second)
                (component $inner (core module $nested) (component (core module $deeper)))
                (core instance $i (instantiate $first))
                (func $run (result (result)) (canon lift (core func $i "f")))
                (instance $runner (export "run" (func $run)))
                (export "wasi:cli/run@0.2.3" (instance $runner)))"#,
        )
        .unwrap();
        let layout = ComponentLayout::read(&bytes).unwrap();
        let names: Vec<&str> = layout.modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["first", "second", "inner/nested", "inner/component2/deeper"]
        );
        assert_eq!(layout.modules[1].index, 1);
        assert_eq!(layout.modules[3].index, 0);
        assert_eq!(layout.modules[3].component, 2);
        assert!(layout.is_command());
        assert!(layout.several_modules());
        assert_eq!(layout.instantiations, [Some(0)]);
        // The nested components are never instantiated: their modules never run.
        assert!(layout.modules.iter().skip(2).all(|m| !m.probed));
        assert_eq!(layout.unprobed_modules(), 0);
        let first = &layout.modules[0];
        assert!(wasmparser::Parser::is_core_wasm(
            &bytes[first.range.clone()]
        ));
        assert!(wasmparser::Parser::is_core_wasm(
            &bytes[layout.modules[3].range.clone()]
        ));
    }

    #[test]
    fn nested_instantiations_play_where_they_stand_and_count() {
        let bytes = wat::parse_str(
            r#"(component
                (import "c" (component $imported))
                (core module $a)
                (component $once
                    (core module $b)
                    (core module $c)
                    (core instance (instantiate $c))
                    (core instance (instantiate $b)))
                (component $twice (core module $d) (core instance (instantiate $d)))
                (component $outer
                    (alias outer 1 $a (core module $a2))
                    (core instance (instantiate $a2)))
                (core instance (instantiate $a))
                (instance (instantiate $twice))
                (instance (instantiate $once))
                (instance (instantiate $twice))
                (instance (instantiate $outer))
                (instance (instantiate $imported)))"#,
        )
        .unwrap();
        let layout = ComponentLayout::read(&bytes).unwrap();
        let names: Vec<&str> = layout.modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "once/b", "once/c", "twice/d"]);
        assert_eq!(
            layout.instantiations,
            [Some(0), Some(3), Some(2), Some(1), Some(3), Some(0), None]
        );
        let probed: Vec<bool> = layout.modules.iter().map(|m| m.probed).collect();
        // `a` is instantiated by `$outer` too (through an outer alias): no probes can reach
        // it there.
        assert_eq!(probed, [false, true, true, false]);
        assert_eq!(layout.unprobed_modules(), 2);
        assert_eq!(layout.components[1].instantiated, 1);
        assert_eq!(layout.components[2].instantiated, 2);
        assert_eq!(layout.components[1].parent, Some(0));
    }

    #[test]
    fn a_component_without_cli_run_is_not_a_command() {
        let bytes = wat::parse_str("(component (core module))").unwrap();
        let layout = ComponentLayout::read(&bytes).unwrap();
        assert!(!layout.is_command());
        assert_eq!(layout.modules[0].name, "module0");
        assert!(!layout.several_modules());
        assert_eq!(layout.unprobed_modules(), 0);
    }

    #[test]
    fn adapter_names_are_shortened() {
        assert_eq!(
            short_module_name("wit-component:adapter:wasi_snapshot_preview1"),
            "wasi_snapshot_preview1"
        );
        assert_eq!(short_module_name("main"), "main");
        assert_eq!(qualified_name("main", "leaf", true), "main!leaf");
        assert_eq!(qualified_name("main", "leaf", false), "leaf");
    }
}
