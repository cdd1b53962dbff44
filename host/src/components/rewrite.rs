//! The component an instrumented run compiles: the original with its top-level core modules
//! replaced by their instrumented versions, and each instrumented module's probe imports
//! (module `wprof`, see [`wprof_agent::ProbeImports`]) satisfied by functions the component
//! imports from the host.
//!
//! For the `k`-th instrumented module the component gains, ahead of everything it had:
//!
//! - an instance type with one function per probe import of that module (the core
//!   signature lifted: `i32` as `u32`, `i64` as `u64`, floats as themselves), imported as
//!   [`crate::components::probe_instance_name`]`(k)`;
//! - each function aliased out of that instance and lowered (`canon lower`, no options:
//!   the probes pass numbers only);
//! - a core instance bundling the lowered functions under their core names, passed as the
//!   module's `wprof` import when the component instantiates it.
//!
//! Everything the original defines moves up by what was added in front of it in the index
//! spaces that grew (component types, instances and functions; core functions and
//! instances), inside nested components too when they name the top level through an outer
//! alias; core modules, memories, tables, globals and core types keep their indices.

use std::borrow::Cow;
use std::collections::HashMap;

use wasm_encoder::reencode::{component_utils, Reencode, ReencodeComponent};

use crate::components::{module_alias, probe_function_name, probe_instance_name, ProbeImport};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, Component, ComponentAliasSection, ComponentExportKind,
    ComponentImportSection, ComponentTypeRef, ComponentTypeSection, ComponentValType, ExportKind,
    InstanceSection, InstanceType, ModuleArg, PrimitiveValType,
};

fn lifted(ty: wasmparser::ValType) -> Result<ComponentValType, String> {
    use wasmparser::ValType as V;
    Ok(ComponentValType::Primitive(match ty {
        V::I32 => PrimitiveValType::U32,
        V::I64 => PrimitiveValType::U64,
        V::F32 => PrimitiveValType::F32,
        V::F64 => PrimitiveValType::F64,
        other => {
            return Err(format!(
                "a probe takes {other}, which a component cannot pass"
            ))
        }
    }))
}

/// A core module of the component to put in place of the original: its new bytes and the
/// probe imports they make.
#[derive(Debug, Clone)]
pub struct Replacement {
    /// The module's index in the component's core module index space.
    pub module_index: u32,
    /// The instrumented module.
    pub bytes: Vec<u8>,
    /// Its probe imports (see [`crate::components::probe_imports`]); empty: no `wprof` import to satisfy.
    pub probes: Vec<ProbeImport>,
}

/// `component` with the core modules of `replacements` replaced and their probes imported
/// from the host: the `k`-th replacement with probes imports [`crate::components::probe_instance_name`]`(k)`
/// (counting only replacements that have probes).
pub fn rewrite(component: &[u8], replacements: &[Replacement]) -> Result<Vec<u8>, String> {
    let mut out = Component::new();
    let probed: Vec<&Replacement> = replacements
        .iter()
        .filter(|r| !r.probes.is_empty())
        .collect();
    let k_count = probed.len() as u32;
    let mut types = ComponentTypeSection::new();
    let mut imports = ComponentImportSection::new();
    let mut aliases = ComponentAliasSection::new();
    let mut lowered = CanonicalFunctionSection::new();
    let mut bundles = InstanceSection::new();
    let mut funcs = 0u32;
    let mut bundle_of = HashMap::new();
    for (k, replacement) in probed.iter().enumerate() {
        let mut instance = InstanceType::new();
        for (j, probe) in replacement.probes.iter().enumerate() {
            let params = probe
                .params
                .iter()
                .enumerate()
                .map(|(p, ty)| Ok((format!("p{p}"), lifted(*ty)?)))
                .collect::<Result<Vec<_>, String>>()?;
            let result = probe.results.first().map(|ty| lifted(*ty)).transpose()?;
            instance
                .ty()
                .function()
                .params(params.iter().map(|(n, t)| (n.as_str(), *t)))
                .result(result);
            instance.export(
                probe_function_name(&probe.name),
                ComponentTypeRef::Func(j as u32),
            );
        }
        types.instance(&instance);
        imports.import(probe_instance_name(k), ComponentTypeRef::Instance(k as u32));
        let first = funcs;
        for probe in &replacement.probes {
            aliases.alias(Alias::InstanceExport {
                instance: k as u32,
                kind: ComponentExportKind::Func,
                name: &probe_function_name(&probe.name),
            });
            lowered.lower(funcs, []);
            funcs += 1;
        }
        bundles.export_items(
            replacement
                .probes
                .iter()
                .enumerate()
                .map(|(j, p)| (p.name.as_str(), ExportKind::Func, first + j as u32)),
        );
        bundle_of.insert(replacement.module_index, k as u32);
    }
    if k_count > 0 {
        out.section(&types);
        out.section(&imports);
        out.section(&aliases);
        out.section(&lowered);
        out.section(&bundles);
    }
    let mut rewriter = Rewriter {
        depth: 0,
        added_types: k_count,
        added_instances: k_count,
        added_funcs: funcs,
        added_core_funcs: funcs,
        added_core_instances: k_count,
        modules_seen: 0,
        replaced: replacements
            .iter()
            .map(|r| (r.module_index, r.bytes.as_slice()))
            .collect(),
        bundle_of,
    };
    rewriter
        .parse_component(&mut out, wasmparser::Parser::new(0), component)
        .map_err(|e| format!("cannot rewrite the component: {e}"))?;
    Ok(out.finish())
}

/// The re-encoder: shifts indices of the top level, swaps modules, adds `wprof` arguments.
struct Rewriter<'a> {
    /// 0 at the component's top level; one more inside each nested component or type.
    depth: u32,
    added_types: u32,
    added_instances: u32,
    added_funcs: u32,
    added_core_funcs: u32,
    added_core_instances: u32,
    /// Core modules defined or imported so far at the top level.
    modules_seen: u32,
    replaced: HashMap<u32, &'a [u8]>,
    /// Module index -> its bundle of lowered probes (core instance index).
    bundle_of: HashMap<u32, u32>,
}

impl Rewriter<'_> {
    fn top(&self) -> bool {
        self.depth == 0
    }
}

impl Reencode for Rewriter<'_> {
    type Error = std::convert::Infallible;

    fn function_index(
        &mut self,
        func: u32,
    ) -> Result<u32, wasm_encoder::reencode::Error<Self::Error>> {
        Ok(if self.top() {
            func + self.added_core_funcs
        } else {
            func
        })
    }
}

impl ReencodeComponent for Rewriter<'_> {
    fn component_type_index(&mut self, ty: u32) -> u32 {
        if self.top() {
            ty + self.added_types
        } else {
            ty
        }
    }

    fn component_instance_index(&mut self, instance: u32) -> u32 {
        if self.top() {
            instance + self.added_instances
        } else {
            instance
        }
    }

    fn component_func_index(&mut self, func: u32) -> u32 {
        if self.top() {
            func + self.added_funcs
        } else {
            func
        }
    }

    fn instance_index(&mut self, instance: u32) -> u32 {
        if self.top() {
            instance + self.added_core_instances
        } else {
            instance
        }
    }

    fn outer_component_type_index(&mut self, count: u32, ty: u32) -> u32 {
        if count == self.depth {
            ty + self.added_types
        } else {
            ty
        }
    }

    fn push_depth(&mut self) {
        self.depth += 1;
    }

    fn pop_depth(&mut self) {
        self.depth -= 1;
    }

    fn parse_component_submodule(
        &mut self,
        component: &mut Component,
        parser: wasmparser::Parser,
        module: &[u8],
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        if !self.top() {
            return component_utils::parse_component_submodule(self, component, parser, module);
        }
        let index = self.modules_seen;
        self.modules_seen += 1;
        let bytes = self.replaced.get(&index).copied().unwrap_or(module);
        component.section(&wasm_encoder::RawSection {
            id: wasm_encoder::ComponentSectionId::CoreModule as u8,
            data: bytes,
        });
        Ok(())
    }

    fn parse_component_payload(
        &mut self,
        component: &mut Component,
        payload: wasmparser::Payload<'_>,
        whole_component: &[u8],
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        use wasmparser::Payload;
        if !self.top() {
            return component_utils::parse_component_payload(
                self,
                component,
                payload,
                whole_component,
            );
        }
        match payload {
            Payload::ComponentImportSection(ref reader) => {
                self.modules_seen += reader
                    .clone()
                    .into_iter()
                    .flatten()
                    .filter(|i| matches!(i.ty, wasmparser::ComponentTypeRef::Module(_)))
                    .count() as u32;
            }
            Payload::ComponentAliasSection(ref reader) => {
                self.modules_seen += reader
                    .clone()
                    .into_iter()
                    .flatten()
                    .filter(|a| module_alias(a))
                    .count() as u32;
            }
            Payload::InstanceSection(reader) => {
                let mut instances = InstanceSection::new();
                for instance in reader {
                    let instance = instance?;
                    let wasmparser::Instance::Instantiate { module_index, args } = instance else {
                        component_utils::parse_instance(self, &mut instances, instance)?;
                        continue;
                    };
                    let mut new_args: Vec<(Cow<'_, str>, ModuleArg)> = args
                        .iter()
                        .map(|arg| {
                            (
                                Cow::Borrowed(arg.name),
                                ModuleArg::Instance(self.instance_index(arg.index)),
                            )
                        })
                        .collect();
                    if let Some(&bundle) = self.bundle_of.get(&module_index) {
                        new_args.push((
                            Cow::Borrowed(wprof_agent::ProbeImports::MODULE),
                            ModuleArg::Instance(bundle),
                        ));
                    }
                    instances
                        .instantiate(module_index, new_args.iter().map(|(n, a)| (n.as_ref(), *a)));
                }
                component.section(&instances);
                return Ok(());
            }
            _ => {}
        }
        component_utils::parse_component_payload(self, component, payload, whole_component)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(bytes: &[u8]) {
        wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(bytes)
            .unwrap_or_else(|e| panic!("invalid component: {e}"));
    }

    #[test]
    fn probes_are_imported_lowered_and_passed_and_every_index_moves() {
        // Module 1 stands in for an instrumented module: it imports a probe. The
        // original's types, instances, functions and a nested component's outer alias
        // must all still point where they did.
        let original = wat::parse_str(
            r#"(component
                (type $t (func (param "x" u32)))
                (import "host" (instance $host (export "f" (func (type $t)))))
                (core module $m0 (func (export "g")))
                (core module $m1 (import "env" "f" (func (param i32))) (func (export "run")))
                (core func $f (canon lower (func $host "f")))
                (core instance $env (export "f" (func $f)))
                (core instance $i0 (instantiate $m0))
                (core instance $i1 (instantiate $m1 (with "env" (instance $env))))
                (component $nested (alias outer 1 $t (type $outer)) (import "h" (func (type $outer))))
                (func $run (canon lift (core func $i1 "run")))
                (export "run" (func $run)))"#,
        )
        .unwrap();
        valid(&original);
        let probed = wat::parse_str(
            r#"(module
                (import "env" "f" (func (param i32)))
                (import "wprof" "enter" (func (param i32)))
                (import "wprof" "enter_catching" (func (param i32) (result i32)))
                (func (export "run") i32.const 7 call 1))"#,
        )
        .unwrap();
        let probes = crate::components::probe_imports(&probed).unwrap();
        assert_eq!(probes.len(), 2);
        let out = rewrite(
            &original,
            &[Replacement {
                module_index: 1,
                bytes: probed.clone(),
                probes,
            }],
        )
        .unwrap();
        valid(&out);
        let layout = crate::components::ComponentLayout::read(&out).unwrap();
        assert_eq!(&out[layout.modules[1].range.clone()], &probed[..]);
        // The host instance is the first import.
        let text = wasmprinter::print_bytes(&out).unwrap();
        assert!(text.contains("wprof:probes/module0"), "{text}");
        assert!(text.contains("enter-catching"), "{text}");
    }

    #[test]
    fn a_component_without_replacements_is_unchanged_in_meaning() {
        let original = wat::parse_str(
            r#"(component (core module $m (func (export "f")))
                (core instance $i (instantiate $m))
                (func $f (canon lift (core func $i "f")))
                (export "f" (func $f)))"#,
        )
        .unwrap();
        let out = rewrite(&original, &[]).unwrap();
        valid(&out);
        assert_eq!(
            wasmprinter::print_bytes(&out).unwrap(),
            wasmprinter::print_bytes(&original).unwrap()
        );
    }
}
