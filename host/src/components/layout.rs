//! A component's layout as wprof needs it before running it: every core module at any
//! depth (in the order the engine numbers them: as their sections come, nested components'
//! modules where the nested component is defined), every component it defines, and the
//! order its instantiation instantiates core modules in (which is the order the engine
//! makes their memories).
//!
//! The engine flattens a component when it compiles it: instantiating a nested component
//! runs that component's instantiations where the instantiation stands. So the layout plays
//! the component's instantiations through, from the top level down into each nested
//! component it instantiates, and counts how often each nested component is instantiated.
//! A core module inside a nested component that is instantiated exactly once can be
//! instrumented like one at the top level, its probes passed down through the nested
//! components' imports (see [`crate::components::rewrite`]); one inside a nested component
//! instantiated never or several times runs as it is.

use std::ops::Range;

use wasmparser::{Chunk, Parser, Payload};

use crate::components::{module_alias, short_module_name, CLI_RUN};

/// A core module defined in a component, at its top level or in a nested component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreModule {
    /// Its index among the core modules of the component defining it (that component's
    /// core module index space).
    pub index: u32,
    /// The component defining it (see [`ComponentLayout::components`]; 0 is the top level).
    pub component: usize,
    /// Its name in its component's name section, else `module{index}`; inside a nested
    /// component, after that component's name and a `/` (`inner/main`).
    pub name: String,
    /// Where its bytes are in the component.
    pub range: Range<usize>,
    /// Whether it can be instrumented: at the top level, or inside nested components each
    /// instantiated exactly once by its parent; and never instantiated by a component other
    /// than its own (through an outer alias).
    pub probed: bool,
}

/// A component the layout's component defines: the top level, or a nested one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DefinedComponent {
    /// The component defining it (`None` for the top level).
    pub parent: Option<usize>,
    /// Its name in its parent's name section, else `component{id}`.
    pub name: String,
    /// Its component index space: which of the layout's components each index is (`None`:
    /// imported or aliased from an instance).
    pub components: Vec<Option<usize>>,
    /// How many times the top level's instantiation instantiates it.
    pub instantiated: u32,
    /// Whether a component other than its parent instantiates it (through an alias).
    pub instantiated_elsewhere: bool,
}

/// What wprof needs to know of a component before it runs it.
#[derive(Debug, Clone)]
pub struct ComponentLayout {
    /// Every core module it defines, at any depth, in the engine's order (its position
    /// here is the `M` of the compiled code's `wasm[M]::function[N]` symbols).
    pub modules: Vec<CoreModule>,
    /// Every component it defines: the top level first, then nested ones as they come.
    pub components: Vec<DefinedComponent>,
    /// The component's exports (top level).
    pub exports: Vec<String>,
    /// The core modules instantiated, in the order the engine instantiates them (and makes
    /// their memories): positions in [`ComponentLayout::modules`], `None` for a module
    /// imported from outside the component or a component from outside instantiated
    /// (whose modules are not known).
    pub instantiations: Vec<Option<usize>>,
}

/// One component's scope while reading.
#[derive(Default)]
struct Scope {
    id: usize,
    /// Its core module index space: positions in the layout's modules.
    modules: Vec<Option<usize>>,
    /// What its instance sections instantiate, in order.
    steps: Vec<Step>,
    /// Core module names (by index) and nested component names (by component index).
    module_names: Vec<(u32, String)>,
    component_names: Vec<(u32, String)>,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    /// A core module, by its index in the scope's core module index space.
    Module(u32),
    /// A component, by its index in the scope's component index space.
    Component(u32),
}

impl ComponentLayout {
    /// Reads `bytes`, a component, nested components included.
    pub fn read(bytes: &[u8]) -> Result<Self, String> {
        let mut modules: Vec<CoreModule> = Vec::new();
        let mut components = vec![DefinedComponent::default()];
        let mut exports = Vec::new();
        let mut steps: Vec<Vec<Step>> = vec![Vec::new()];
        let mut module_spaces: Vec<Vec<Option<usize>>> = vec![Vec::new()];
        let mut scopes = vec![Scope::default()];
        let mut parsers = Vec::new();
        let mut parser = Parser::new(0);
        let mut offset = 0usize;
        loop {
            let rest = &bytes[offset..];
            let (consumed, payload) = match parser.parse(rest, true).map_err(|e| e.to_string())? {
                Chunk::Parsed { consumed, payload } => (consumed, payload),
                Chunk::NeedMoreData(_) => return Err("the component ends early".to_string()),
            };
            offset += consumed;
            let here = scopes.len() - 1;
            let id = scopes[here].id;
            match payload {
                Payload::ModuleSection {
                    unchecked_range, ..
                } => {
                    let index = scopes[here].modules.len() as u32;
                    scopes[here].modules.push(Some(modules.len()));
                    modules.push(CoreModule {
                        index,
                        component: id,
                        name: format!("module{index}"),
                        range: unchecked_range.clone(),
                        probed: false,
                    });
                    offset += unchecked_range.len();
                }
                Payload::ComponentSection { parser: inner, .. } => {
                    let nested = components.len();
                    components.push(DefinedComponent {
                        parent: Some(id),
                        name: format!("component{nested}"),
                        ..Default::default()
                    });
                    components[id].components.push(Some(nested));
                    steps.push(Vec::new());
                    module_spaces.push(Vec::new());
                    scopes.push(Scope {
                        id: nested,
                        ..Default::default()
                    });
                    parsers.push(std::mem::replace(&mut parser, inner));
                }
                Payload::ComponentImportSection(reader) => {
                    for import in reader {
                        match import.map_err(|e| e.to_string())?.ty {
                            wasmparser::ComponentTypeRef::Module(_) => {
                                scopes[here].modules.push(None)
                            }
                            wasmparser::ComponentTypeRef::Component(_) => {
                                components[id].components.push(None)
                            }
                            _ => {}
                        }
                    }
                }
                Payload::ComponentAliasSection(reader) => {
                    use wasmparser::{ComponentAlias, ComponentOuterAliasKind as Outer};
                    for alias in reader {
                        match alias.map_err(|e| e.to_string())? {
                            ComponentAlias::Outer {
                                kind: Outer::CoreModule,
                                count,
                                index,
                            } => {
                                let module = outer_scope(&scopes, count)?
                                    .modules
                                    .get(index as usize)
                                    .copied()
                                    .flatten();
                                scopes[here].modules.push(module);
                            }
                            ComponentAlias::Outer {
                                kind: Outer::Component,
                                count,
                                index,
                            } => {
                                let outer = outer_scope(&scopes, count)?.id;
                                let component = components[outer]
                                    .components
                                    .get(index as usize)
                                    .copied()
                                    .flatten();
                                components[id].components.push(component);
                            }
                            ComponentAlias::InstanceExport {
                                kind: wasmparser::ComponentExternalKind::Component,
                                ..
                            } => components[id].components.push(None),
                            other if module_alias(&other) => scopes[here].modules.push(None),
                            _ => {}
                        }
                    }
                }
                Payload::InstanceSection(reader) => {
                    for instance in reader {
                        if let wasmparser::Instance::Instantiate { module_index, .. } =
                            instance.map_err(|e| e.to_string())?
                        {
                            scopes[here].steps.push(Step::Module(module_index));
                        }
                    }
                }
                Payload::ComponentInstanceSection(reader) => {
                    for instance in reader {
                        if let wasmparser::ComponentInstance::Instantiate {
                            component_index, ..
                        } = instance.map_err(|e| e.to_string())?
                        {
                            scopes[here].steps.push(Step::Component(component_index));
                        }
                    }
                }
                Payload::ComponentExportSection(reader) if here == 0 => {
                    for export in reader {
                        exports.push(export.map_err(|e| e.to_string())?.name.name.to_string());
                    }
                }
                Payload::CustomSection(section) if section.name() == "component-name" => {
                    let reader = wasmparser::ComponentNameSectionReader::new(
                        wasmparser::BinaryReader::new(section.data(), section.data_offset()),
                    );
                    let scope = &mut scopes[here];
                    for subsection in reader.flatten() {
                        let (names, map) = match subsection {
                            wasmparser::ComponentName::CoreModules(map) => {
                                (&mut scope.module_names, map)
                            }
                            wasmparser::ComponentName::Components(map) => {
                                (&mut scope.component_names, map)
                            }
                            _ => continue,
                        };
                        names.extend(
                            map.into_iter()
                                .flatten()
                                .map(|n| (n.index, n.name.to_string())),
                        );
                    }
                }
                Payload::End(_) => {
                    let done = scopes.pop().expect("a scope");
                    for (index, name) in &done.module_names {
                        if let Some(Some(m)) = done.modules.get(*index as usize) {
                            if modules[*m].component == done.id {
                                modules[*m].name = short_module_name(name);
                            }
                        }
                    }
                    for (index, name) in &done.component_names {
                        if let Some(Some(c)) =
                            components[done.id].components.get(*index as usize).copied()
                        {
                            components[c].name = name.clone();
                        }
                    }
                    steps[done.id] = done.steps;
                    module_spaces[done.id] = done.modules;
                    match parsers.pop() {
                        Some(outer) => parser = outer,
                        None => break,
                    }
                }
                _ => {}
            }
        }
        // Nested modules' names after their component's (outermost first).
        for m in &mut modules {
            let mut c = m.component;
            while let Some(parent) = components[c].parent {
                m.name = format!("{}/{}", components[c].name, m.name);
                c = parent;
            }
        }
        let mut played = Vec::new();
        components[0].instantiated = 1;
        play(0, 0, &steps, &module_spaces, &mut components, &mut played);
        let instantiations = played.iter().map(|&(position, _)| position).collect();
        // Probes reach a module down the chain of components defining it, each
        // instantiated once by its parent, and only where it is defined (a module
        // instantiated through an outer alias would need its probes there too).
        for m in &mut modules {
            m.probed = true;
        }
        for &(position, by) in &played {
            if let Some(m) = position.map(|p| &mut modules[p]) {
                m.probed &= m.component == by;
            }
        }
        for m in &mut modules {
            let mut c = m.component;
            while let Some(parent) = components[c].parent {
                let d = &components[c];
                m.probed &= d.instantiated == 1 && !d.instantiated_elsewhere;
                c = parent;
            }
        }
        Ok(ComponentLayout {
            modules,
            components,
            exports,
            instantiations,
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

    /// Core modules that run without probes: inside nested components instantiated more
    /// than once (or by another component than their parent). Those of nested components
    /// never instantiated never run and are not counted.
    pub fn unprobed_modules(&self) -> usize {
        self.modules
            .iter()
            .filter(|m| !m.probed && self.components[m.component].instantiated > 0)
            .count()
    }
}

/// How deep nested instantiations are played (deeper ones are not counted).
const MAX_DEPTH: u32 = 100;

/// The scope `count` levels out from the innermost.
fn outer_scope(scopes: &[Scope], count: u32) -> Result<&Scope, String> {
    scopes
        .len()
        .checked_sub(1 + count as usize)
        .map(|i| &scopes[i])
        .ok_or_else(|| format!("an outer alias {count} levels out of {}", scopes.len()))
}

/// Plays component `id`'s instantiations through: its core modules' in order, and nested
/// components' where they are instantiated; each with the component instantiating it.
fn play(
    id: usize,
    depth: u32,
    steps: &[Vec<Step>],
    module_spaces: &[Vec<Option<usize>>],
    components: &mut [DefinedComponent],
    out: &mut Vec<(Option<usize>, usize)>,
) {
    for step in &steps[id] {
        match *step {
            Step::Module(index) => {
                out.push((module_spaces[id].get(index as usize).copied().flatten(), id));
            }
            Step::Component(index) => {
                let Some(Some(nested)) = components[id].components.get(index as usize).copied()
                else {
                    // A component from outside: what it instantiates is not known here.
                    out.push((None, id));
                    continue;
                };
                // Instantiations cannot form a circle (a component instantiates only
                // components defined before it ends); the bound keeps bad input finite.
                if depth >= MAX_DEPTH {
                    continue;
                }
                components[nested].instantiated += 1;
                if components[nested].parent != Some(id) {
                    components[nested].instantiated_elsewhere = true;
                }
                play(nested, depth + 1, steps, module_spaces, components, out);
            }
        }
    }
}
