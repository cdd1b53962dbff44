//! Core functions of the instrumented modules that the host calls once the program has
//! ended (coverage's dump functions, see [`wprof_agent::ContextArena::COVERAGE_DUMP`]),
//! made callable. wasmtime's component API reaches only what a component exports lifted,
//! so the rewrite aliases each out of its module's core instance, lifts it as
//! `(func (param "at" u32))` and exports it as [`lifted_export_name`]. They are appended
//! after everything the component defines, so no index moves; their own indices are the
//! counts of the top level's index spaces ([`TopCounts`]).

use std::collections::HashMap;

use wasm_encoder::{
    Alias, CanonicalFunctionSection, Component, ComponentAliasSection, ComponentExportKind,
    ComponentExportSection, ComponentTypeSection, ComponentValType, ExportKind, PrimitiveValType,
};
use wasmparser::{
    CanonicalFunction, ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind,
    ComponentTypeRef, ExternalKind, Instance, Payload,
};

/// The component export through which the host calls core export `j` of the lifted ones
/// of the `k`-th replacement (see [`crate::components::rewrite::Replacement::lifted`]).
pub fn lifted_export_name(k: usize, j: usize) -> String {
    format!("wprof-lifted-m{k}-f{j}")
}

/// How many items the top level of a component defines so far in the index spaces the
/// appended exports name, and the core instance of each core module's first
/// instantiation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct TopCounts {
    pub component_types: u32,
    pub component_funcs: u32,
    pub core_funcs: u32,
    pub core_instances: u32,
    /// Core module index -> the core instance that first instantiated it.
    pub instance_of: HashMap<u32, u32>,
}

impl TopCounts {
    /// Counts what a top-level `payload` defines.
    pub fn see(&mut self, payload: &Payload<'_>) -> Result<(), wasmparser::BinaryReaderError> {
        match payload {
            Payload::ComponentTypeSection(reader) => self.component_types += reader.count(),
            Payload::ComponentImportSection(reader) => {
                for import in reader.clone() {
                    match import?.ty {
                        ComponentTypeRef::Func(_) => self.component_funcs += 1,
                        ComponentTypeRef::Type(_) => self.component_types += 1,
                        _ => {}
                    }
                }
            }
            // An export is a new item of its kind.
            Payload::ComponentExportSection(reader) => {
                for export in reader.clone() {
                    self.component_kind(export?.kind);
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader.clone() {
                    match alias? {
                        ComponentAlias::InstanceExport { kind, .. } => self.component_kind(kind),
                        ComponentAlias::CoreInstanceExport {
                            kind: ExternalKind::Func | ExternalKind::FuncExact,
                            ..
                        } => self.core_funcs += 1,
                        ComponentAlias::Outer {
                            kind: ComponentOuterAliasKind::Type,
                            ..
                        } => self.component_types += 1,
                        _ => {}
                    }
                }
            }
            Payload::ComponentCanonicalSection(reader) => {
                for function in reader.clone() {
                    match function? {
                        CanonicalFunction::Lift { .. } => self.component_funcs += 1,
                        // Every other canonical function is a core function.
                        _ => self.core_funcs += 1,
                    }
                }
            }
            Payload::InstanceSection(reader) => {
                for instance in reader.clone() {
                    if let Instance::Instantiate { module_index, .. } = instance? {
                        self.instance_of
                            .entry(module_index)
                            .or_insert(self.core_instances);
                    }
                    self.core_instances += 1;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn component_kind(&mut self, kind: ComponentExternalKind) {
        match kind {
            ComponentExternalKind::Func => self.component_funcs += 1,
            ComponentExternalKind::Type => self.component_types += 1,
            _ => {}
        }
    }
}

/// Appends to `out` the lifted exports: for each `(instance, names)` of `lifted` (the core
/// instance and the `k`-th replacement's core exports to lift), export `j` as
/// [`lifted_export_name`]`(k, j)`. `counts` are those of the whole top level so far.
pub(super) fn append(out: &mut Component, counts: &TopCounts, lifted: &[(usize, u32, &[String])]) {
    if lifted.iter().all(|(_, _, names)| names.is_empty()) {
        return;
    }
    let mut types = ComponentTypeSection::new();
    types
        .function()
        .params([("at", ComponentValType::Primitive(PrimitiveValType::U32))])
        .result(None);
    let ty = counts.component_types;
    let mut aliases = ComponentAliasSection::new();
    let mut lifts = CanonicalFunctionSection::new();
    let mut exports = ComponentExportSection::new();
    let mut n = 0u32;
    for &(k, instance, names) in lifted {
        for (j, name) in names.iter().enumerate() {
            aliases.alias(Alias::CoreInstanceExport {
                instance,
                kind: ExportKind::Func,
                name,
            });
            lifts.lift(counts.core_funcs + n, ty, []);
            exports.export(
                lifted_export_name(k, j),
                ComponentExportKind::Func,
                counts.component_funcs + n,
                None,
            );
            n += 1;
        }
    }
    out.section(&types);
    out.section(&aliases);
    out.section(&lifts);
    out.section(&exports);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The top level's counts as wasmparser's validator gives them.
    fn validated(bytes: &[u8]) -> (u32, u32, u32, u32) {
        let types = wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(bytes)
            .unwrap();
        let t = types.as_ref();
        (
            t.component_type_count(),
            t.component_function_count(),
            t.function_count(),
            t.core_instance_count(),
        )
    }

    fn counted(bytes: &[u8]) -> TopCounts {
        let mut counts = TopCounts::default();
        let mut depth = 0;
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            let payload = payload.unwrap();
            match payload {
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) => depth -= 1,
                ref p if depth == 0 => counts.see(p).unwrap(),
                _ => {}
            }
        }
        counts
    }

    const WAT: &str = r#"(component
      (type $ft (func (param "x" u32) (result u32)))
      (import "host" (instance $host (export "f" (func (type $ft))) (export "t" (type (sub resource)))))
      (import "g" (func $g (type $ft)))
      (alias export $host "f" (func $hf))
      (alias export $host "t" (type $t))
      (core module $m
        (import "h" "g" (func (param i32) (result i32)))
        (func (export "double") (param i32) (result i32) local.get 0 i32.const 2 i32.mul)
        (func (export "dump") (param i32)))
      (core func $lg (canon lower (func $g)))
      (core func $drop (canon resource.drop $t))
      (core instance $hi (export "g" (func $lg)))
      (core instance $i (instantiate $m (with "h" (instance $hi))))
      (alias core export $i "double" (core func $double))
      (func $lifted (type $ft) (canon lift (core func $double)))
      (export "double" (func $lifted))
      (component $inner (core module $n) (core instance (instantiate $n)))
      (instance $ci (instantiate $inner))
      (export "ty" (type $ft))
    )"#;

    #[test]
    fn top_counts_are_the_validators() {
        let wat = wat::parse_str(WAT).unwrap();
        let sample = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../samples/component.wasm"
        ))
        .unwrap();
        for bytes in [&wat[..], &sample[..]] {
            let c = counted(bytes);
            assert_eq!(
                (
                    c.component_types,
                    c.component_funcs,
                    c.core_funcs,
                    c.core_instances
                ),
                validated(bytes)
            );
        }
        // The module's one instantiation: core instance 1 (after the bundle).
        assert_eq!(counted(&wat).instance_of, HashMap::from([(0, 1)]));
    }

    #[test]
    fn lifted_core_functions_are_exported_and_callable() {
        use crate::components::rewrite::{rewrite, Replacement};
        // `dump` traps when given 7; the module is instantiated twice (the first counts).
        let wat = wat::parse_str(
            r#"(component
              (core module $m
                (func (export "dump") (param i32)
                  (if (i32.eq (local.get 0) (i32.const 7)) (then unreachable))))
              (core instance $a (instantiate $m))
              (core instance $b (instantiate $m))
              (alias core export $a "dump" (core func $d))
              (func (export "keep") (param "x" u32) (canon lift (core func $d))))"#,
        )
        .unwrap();
        let layout = crate::components::ComponentLayout::read(&wat).unwrap();
        let module = &layout.modules[0];
        let out = rewrite(
            &wat,
            &[Replacement {
                module_index: module.index,
                bytes: wat[module.range.clone()].to_vec(),
                probes: Vec::new(),
                lifted: vec!["dump".into(), "dump".into()],
            }],
        )
        .unwrap();
        wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(&out)
            .unwrap();
        let engine = wasmtime::Engine::default();
        let component = wasmtime::component::Component::new(&engine, &out).unwrap();
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let call = |name: &str, at: u32| {
            let mut store = wasmtime::Store::new(&engine, ());
            let instance = linker.instantiate(&mut store, &component).unwrap();
            let f = instance
                .get_typed_func::<(u32,), ()>(&mut store, name)
                .unwrap();
            f.call(&mut store, (at,))
        };
        for j in 0..2 {
            let name = lifted_export_name(0, j);
            call(&name, 1).unwrap();
            assert!(call(&name, 7).is_err(), "{name} reaches the core function");
        }
        // What the component exported keeps its place.
        call("keep", 1).unwrap();
    }
}
