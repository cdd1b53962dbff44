//! WebAssembly components as wprof sees them: the core modules at a component's top level
//! and their names, whether it is a WASI 0.2 command, the names a profile gives their
//! functions, and how instrumented modules' probes are linked to the host (the names both
//! the rewrite, [`crate::prepare::component`], and the run, [`crate::run::component`],
//! use), and the rewrite that links them ([`rewrite`]).
//!
//! A component is taken apart only at its top level: the core modules defined there are
//! the program (for a component made from a WASI preview 1 module, the module itself, the
//! preview 1 adapter and wit-component's two small glue modules). Core modules inside
//! nested components run as they are.

pub mod rewrite;

use std::ops::Range;

use wasmparser::{Chunk, Parser, Payload};

/// The export a WASI 0.2 command runs: `wasi:cli/run@0.2.x`, whose `run` function is its
/// `main`.
pub const CLI_RUN: &str = "wasi:cli/run@0.2";

/// A core module defined at a component's top level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreModule {
    /// Its index among the component's core modules (the core module index space).
    pub index: u32,
    /// Its name in the component's name section, else `module{index}`.
    pub name: String,
    /// Where its bytes are in the component.
    pub range: Range<usize>,
}

/// What wprof needs to know of a component before it runs it.
#[derive(Debug, Clone)]
pub struct ComponentLayout {
    /// The core modules defined at the top level, in index order.
    pub modules: Vec<CoreModule>,
    /// The component's exports (top level).
    pub exports: Vec<String>,
    /// Core modules imported or aliased rather than defined.
    pub imported_modules: u32,
    /// The module of each core instance the component instantiates, in order (the order
    /// the engine instantiates them in, and makes their memories).
    pub instantiations: Vec<u32>,
    /// Core modules inside nested components, at any depth: they run as they are.
    pub nested_modules: u32,
}

impl ComponentLayout {
    /// Reads the top level of `bytes`, a component. Nested components are skipped whole.
    pub fn read(bytes: &[u8]) -> Result<Self, String> {
        let mut modules = Vec::new();
        let mut exports = Vec::new();
        let mut names: Vec<(u32, String)> = Vec::new();
        let mut imported_modules = 0u32;
        let mut instantiations = Vec::new();
        let mut nested_modules = 0;
        let mut parser = Parser::new(0);
        let mut rest = bytes;
        loop {
            let (consumed, payload) = match parser.parse(rest, true).map_err(|e| e.to_string())? {
                Chunk::Parsed { consumed, payload } => (consumed, payload),
                Chunk::NeedMoreData(_) => return Err("the component ends early".to_string()),
            };
            let mut skip = 0;
            match payload {
                Payload::ModuleSection {
                    unchecked_range, ..
                } => {
                    let index = imported_modules + modules.len() as u32;
                    modules.push(CoreModule {
                        index,
                        name: format!("module{index}"),
                        range: unchecked_range.clone(),
                    });
                    skip = unchecked_range.len();
                }
                Payload::ComponentSection {
                    unchecked_range, ..
                } => {
                    nested_modules += core_modules_in(&bytes[unchecked_range.clone()])?;
                    skip = unchecked_range.len();
                }
                Payload::ComponentImportSection(reader) => {
                    for import in reader {
                        let import = import.map_err(|e| e.to_string())?;
                        if matches!(import.ty, wasmparser::ComponentTypeRef::Module(_)) {
                            imported_modules += 1;
                        }
                    }
                }
                Payload::ComponentAliasSection(reader) => {
                    for alias in reader {
                        if module_alias(&alias.map_err(|e| e.to_string())?) {
                            imported_modules += 1;
                        }
                    }
                }
                Payload::InstanceSection(reader) => {
                    for instance in reader {
                        if let wasmparser::Instance::Instantiate { module_index, .. } =
                            instance.map_err(|e| e.to_string())?
                        {
                            instantiations.push(module_index);
                        }
                    }
                }
                Payload::ComponentExportSection(reader) => {
                    for export in reader {
                        exports.push(export.map_err(|e| e.to_string())?.name.name.to_string());
                    }
                }
                Payload::CustomSection(section) if section.name() == "component-name" => {
                    let reader = wasmparser::ComponentNameSectionReader::new(
                        wasmparser::BinaryReader::new(section.data(), section.data_offset()),
                    );
                    for subsection in reader.flatten() {
                        if let wasmparser::ComponentName::CoreModules(map) = subsection {
                            names.extend(
                                map.into_iter()
                                    .flatten()
                                    .map(|n| (n.index, n.name.to_string())),
                            );
                        }
                    }
                }
                Payload::End(_) => break,
                _ => {}
            }
            rest = &rest[consumed + skip..];
        }
        for (index, name) in names {
            if let Some(m) = modules.iter_mut().find(|m| m.index == index) {
                m.name = short_module_name(&name);
            }
        }
        Ok(ComponentLayout {
            modules,
            exports,
            imported_modules,
            instantiations,
            nested_modules,
        })
    }

    /// Whether the component is a WASI 0.2 command (it exports `wasi:cli/run`).
    pub fn is_command(&self) -> bool {
        self.exports.iter().any(|e| e.starts_with(CLI_RUN))
    }

    /// Whether function names need their module's name: more than one core module.
    pub fn several_modules(&self) -> bool {
        self.modules.len() > 1
    }
}

/// A core module's name as reports show it: wit-component's `wit-component:adapter:NAME`
/// becomes `NAME`, `wit-component:shim` becomes `shim`.
fn short_module_name(name: &str) -> String {
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

/// The core modules defined in `component`, at any depth.
fn core_modules_in(component: &[u8]) -> Result<u32, String> {
    let mut count = 0;
    for payload in Parser::new(0).parse_all(component) {
        if let Payload::ModuleSection { .. } = payload.map_err(|e| e.to_string())? {
            count += 1;
        }
    }
    Ok(count)
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
        assert_eq!(names, ["first", "second"]);
        assert_eq!(layout.modules[1].index, 1);
        assert!(layout.is_command());
        assert!(layout.several_modules());
        assert_eq!(layout.instantiations, [0]);
        assert_eq!(layout.nested_modules, 2);
        let first = &layout.modules[0];
        assert!(wasmparser::Parser::is_core_wasm(
            &bytes[first.range.clone()]
        ));
    }

    #[test]
    fn a_component_without_cli_run_is_not_a_command() {
        let bytes = wat::parse_str("(component (core module))").unwrap();
        let layout = ComponentLayout::read(&bytes).unwrap();
        assert!(!layout.is_command());
        assert_eq!(layout.modules[0].name, "module0");
        assert!(!layout.several_modules());
        assert_eq!(layout.nested_modules, 0);
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
