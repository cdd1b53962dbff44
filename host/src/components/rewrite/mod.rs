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

use crate::components::layout::DefinedComponent;
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
    /// The component defining it (see [`crate::components::ComponentLayout::components`]; 0
    /// is the top level).
    pub component: usize,
    /// The module's index in that component's core module index space.
    pub module_index: u32,
    /// The instrumented module.
    pub bytes: Vec<u8>,
    /// Its probe imports (see [`crate::components::probe_imports`]); empty: no `wprof` import to satisfy.
    pub probes: Vec<ProbeImport>,
}

/// `component` with the core modules of `replacements` replaced and their probes imported
/// from the host: the `k`-th replacement with probes imports [`crate::components::probe_instance_name`]`(k)`
/// (counting only replacements that have probes). A nested component holding replaced
/// modules, at any depth, imports the probe instances of those modules under the same
/// names, and the component instantiating it passes them on. `components` are the
/// component's defined components ([`crate::components::ComponentLayout::components`]).
pub fn rewrite(
    component: &[u8],
    components: &[DefinedComponent],
    replacements: &[Replacement],
) -> Result<Vec<u8>, String> {
    let probed: Vec<&Replacement> = replacements
        .iter()
        .filter(|r| !r.probes.is_empty())
        .collect();
    // What each defined component imports: the probe instances of the modules it or the
    // components nested in it define, by k.
    let mut needs: Vec<Vec<usize>> = vec![Vec::new(); components.len().max(1)];
    for (k, r) in probed.iter().enumerate() {
        let mut c = Some(r.component);
        while let Some(id) = c {
            let need = needs
                .get_mut(id)
                .ok_or_else(|| format!("no component {id} in the layout"))?;
            need.push(k);
            c = components.get(id).and_then(|d| d.parent);
        }
    }
    let mut rewriter = Rewriter {
        frames: Vec::new(),
        probed: &probed,
        needs: &needs,
        components,
        next_component: 1,
        replaced: replacements
            .iter()
            .map(|r| ((r.component, r.module_index), r.bytes.as_slice()))
            .collect(),
    };
    let mut out = Component::new();
    rewriter.enter(&mut out, 0)?;
    rewriter
        .parse_component(&mut out, wasmparser::Parser::new(0), component)
        .map_err(|e| format!("cannot rewrite the component: {e}"))?;
    Ok(out.finish())
}

/// What the rewrite added at the front of one component's index spaces.
#[derive(Debug, Default, Clone, Copy)]
struct Added {
    types: u32,
    instances: u32,
    funcs: u32,
    core_funcs: u32,
    core_instances: u32,
}

/// One level of nesting while re-encoding: a component (top level or nested), or a type
/// or module declaration inside one (whose index spaces are its own and unchanged).
#[derive(Debug, Default)]
struct Frame {
    /// The defined component this is (see [`rewrite`]'s `components`); `None` for a
    /// declaration.
    component: Option<usize>,
    added: Added,
    /// Core modules defined, imported or aliased so far.
    modules_seen: u32,
    /// Module index -> its bundle of lowered probes (core instance index).
    bundle_of: HashMap<u32, u32>,
    /// k -> the component instance index of probe instance `k`, imported here.
    instance_of: HashMap<usize, u32>,
}

/// The re-encoder: shifts indices, swaps modules, adds the probes' imports and arguments.
struct Rewriter<'a> {
    frames: Vec<Frame>,
    /// The replacements with probes, by k.
    probed: &'a [&'a Replacement],
    /// Per defined component: the k's it imports.
    needs: &'a [Vec<usize>],
    components: &'a [DefinedComponent],
    /// The id the next nested component definition has (definitions are numbered as they
    /// come, the top level 0).
    next_component: usize,
    replaced: HashMap<(usize, u32), &'a [u8]>,
}

impl Rewriter<'_> {
    fn frame(&self) -> &Frame {
        self.frames.last().expect("a frame while re-encoding")
    }

    fn added(&self) -> Added {
        self.frame().added
    }

    /// Starts defined component `id` in `out`: imports the probe instances it needs, lowers
    /// those of its own modules, and bundles them per module.
    fn enter(&mut self, out: &mut Component, id: usize) -> Result<(), String> {
        let need = self.needs.get(id).cloned().unwrap_or_default();
        let mut frame = Frame {
            component: Some(id),
            ..Default::default()
        };
        if need.is_empty() {
            self.frames.push(frame);
            return Ok(());
        }
        let mut types = ComponentTypeSection::new();
        let mut imports = ComponentImportSection::new();
        let mut aliases = ComponentAliasSection::new();
        let mut lowered = CanonicalFunctionSection::new();
        let mut bundles = InstanceSection::new();
        let mut funcs = 0u32;
        for (i, &k) in need.iter().enumerate() {
            let replacement = self.probed[k];
            types.instance(&probe_instance_type(replacement)?);
            imports.import(probe_instance_name(k), ComponentTypeRef::Instance(i as u32));
            frame.instance_of.insert(k, i as u32);
            if replacement.component != id {
                continue;
            }
            let first = funcs;
            for probe in &replacement.probes {
                aliases.alias(Alias::InstanceExport {
                    instance: i as u32,
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
            frame
                .bundle_of
                .insert(replacement.module_index, frame.bundle_of.len() as u32);
        }
        out.section(&types);
        out.section(&imports);
        if funcs > 0 {
            out.section(&aliases);
            out.section(&lowered);
            out.section(&bundles);
        }
        frame.added = Added {
            types: need.len() as u32,
            instances: need.len() as u32,
            funcs,
            core_funcs: funcs,
            core_instances: frame.bundle_of.len() as u32,
        };
        self.frames.push(frame);
        Ok(())
    }
}

/// The instance type of a module's probes: one function per probe import, its core
/// signature lifted.
fn probe_instance_type(replacement: &Replacement) -> Result<InstanceType, String> {
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
    Ok(instance)
}

impl Reencode for Rewriter<'_> {
    type Error = String;

    fn function_index(
        &mut self,
        func: u32,
    ) -> Result<u32, wasm_encoder::reencode::Error<Self::Error>> {
        Ok(func + self.added().core_funcs)
    }
}

impl ReencodeComponent for Rewriter<'_> {
    fn component_type_index(&mut self, ty: u32) -> u32 {
        ty + self.added().types
    }

    fn component_instance_index(&mut self, instance: u32) -> u32 {
        instance + self.added().instances
    }

    fn component_func_index(&mut self, func: u32) -> u32 {
        func + self.added().funcs
    }

    fn instance_index(&mut self, instance: u32) -> u32 {
        instance + self.added().core_instances
    }

    fn outer_component_type_index(&mut self, count: u32, ty: u32) -> u32 {
        let at = self.frames.len().checked_sub(1 + count as usize);
        ty + at.map_or(0, |at| self.frames[at].added.types)
    }

    fn push_depth(&mut self) {
        self.frames.push(Frame::default());
    }

    fn pop_depth(&mut self) {
        self.frames.pop();
    }

    fn parse_component_submodule(
        &mut self,
        component: &mut Component,
        _parser: wasmparser::Parser,
        module: &[u8],
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        // Every module is copied as it is (or replaced), never re-encoded.
        let frame = self.frames.last_mut().expect("a frame");
        let index = frame.modules_seen;
        frame.modules_seen += 1;
        let bytes = frame
            .component
            .and_then(|c| self.replaced.get(&(c, index)).copied())
            .unwrap_or(module);
        component.section(&wasm_encoder::RawSection {
            id: wasm_encoder::ComponentSectionId::CoreModule as u8,
            data: bytes,
        });
        Ok(())
    }

    fn parse_component_subcomponent(
        &mut self,
        component: &mut Component,
        parser: wasmparser::Parser,
        data: &[u8],
        whole_component: &[u8],
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        let id = self.next_component;
        self.next_component += 1;
        let mut nested = Component::new();
        self.enter(&mut nested, id)
            .map_err(wasm_encoder::reencode::Error::UserError)?;
        component_utils::parse_component(self, &mut nested, parser, data, whole_component)?;
        self.frames.pop();
        component.section(&wasm_encoder::NestedComponentSection(&nested));
        Ok(())
    }

    fn parse_component_payload(
        &mut self,
        component: &mut Component,
        payload: wasmparser::Payload<'_>,
        whole_component: &[u8],
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        use wasmparser::Payload;
        let frame = self.frames.last_mut().expect("a frame");
        match payload {
            Payload::ComponentImportSection(ref reader) => {
                frame.modules_seen += reader
                    .clone()
                    .into_iter()
                    .flatten()
                    .filter(|i| matches!(i.ty, wasmparser::ComponentTypeRef::Module(_)))
                    .count() as u32;
            }
            Payload::ComponentAliasSection(ref reader) => {
                frame.modules_seen += reader
                    .clone()
                    .into_iter()
                    .flatten()
                    .filter(|a| module_alias(a))
                    .count() as u32;
            }
            _ => {}
        }
        component_utils::parse_component_payload(self, component, payload, whole_component)
    }

    fn parse_instance(
        &mut self,
        instances: &mut InstanceSection,
        instance: wasmparser::Instance<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        let wasmparser::Instance::Instantiate { module_index, args } = instance else {
            return component_utils::parse_instance(self, instances, instance);
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
        if let Some(&bundle) = self.frame().bundle_of.get(&module_index) {
            new_args.push((
                Cow::Borrowed(wprof_agent::ProbeImports::MODULE),
                ModuleArg::Instance(bundle),
            ));
        }
        instances.instantiate(
            self.module_index(module_index),
            new_args.iter().map(|(n, a)| (n.as_ref(), *a)),
        );
        Ok(())
    }

    fn parse_component_instance(
        &mut self,
        instances: &mut wasm_encoder::ComponentInstanceSection,
        instance: wasmparser::ComponentInstance<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
        let wasmparser::ComponentInstance::Instantiate {
            component_index,
            args,
        } = instance
        else {
            return component_utils::parse_component_instance(self, instances, instance);
        };
        let mut new_args: Vec<(String, ComponentExportKind, u32)> = args
            .iter()
            .map(|arg| {
                (
                    arg.name.to_string(),
                    arg.kind.into(),
                    self.component_external_index(arg.kind, arg.index),
                )
            })
            .collect();
        // A nested component holding replaced modules gets their probe instances.
        let nested = self
            .frame()
            .component
            .and_then(|c| self.components.get(c))
            .and_then(|c| {
                c.components
                    .get(component_index as usize)
                    .copied()
                    .flatten()
            });
        if let Some(nested) = nested {
            for k in self.needs.get(nested).into_iter().flatten() {
                let here = self.frame().instance_of.get(k).copied().ok_or_else(|| {
                    wasm_encoder::reencode::Error::UserError(format!(
                        "probe instance {k} is not imported where its component is instantiated"
                    ))
                })?;
                new_args.push((probe_instance_name(*k), ComponentExportKind::Instance, here));
            }
        }
        instances.instantiate(
            self.component_index(component_index),
            new_args.iter().map(|(n, kind, i)| (n.as_str(), *kind, *i)),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests;
