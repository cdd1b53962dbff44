//! A component's core modules prepared for `wprof run` (see [`super::component`]): each
//! module that can have probes instrumented through the cache by its own bytes (the
//! functions the canonical ABI's callbacks may reach left out in time mode), the component
//! rewritten around them, and what the run must know of each: its ids in the component's
//! id space, its probes, and where its memories stand among those the instantiation makes.

use wprof_agent::ProbePlan;

use crate::components::rewrite::{self, Replacement};
use crate::components::{qualified_name, ComponentLayout};
use crate::exit::Failure;
use crate::prepare::component::callbacks::callback_closures;
use crate::prepare::component::interpreter::ComponentInterpreter;
use crate::prepare::injections::{split_component, ComponentSplit, CoreModuleRef};
use crate::prepare::instrument;
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;
use crate::profile::{FunctionInfo, InstrumentationStats};
use crate::progress::Progress;
use crate::run::component::coverage::{self, ModuleCoverage};
use crate::run::component::{ExpectedMemory, ModuleProbes};
use crate::settings::RunSettings;

/// The component's core modules instrumented, the component rewritten around them.
pub(super) struct PreparedComponent {
    /// The rewritten component.
    pub(super) component: Vec<u8>,
    /// Every function of every instrumented module, in the component's id space.
    pub(super) functions: Vec<FunctionInfo>,
    /// The instrumented modules' probes, in probe-instance order.
    pub(super) modules: Vec<ModuleProbes>,
    /// Summed over the modules.
    pub(super) stats: InstrumentationStats,
    /// The instrumented modules' names, in order.
    pub(super) module_names: Vec<String>,
    /// How many of them came whole from the cache.
    pub(super) cached_modules: u32,
    /// Cost mode: the memories the component's instantiation makes (see
    /// [`crate::run::component::ExpectedMemory`]).
    pub(super) memories: Vec<ExpectedMemory>,
}

pub(super) fn prepare(
    settings: &RunSettings,
    bytes: &[u8],
    layout: &ComponentLayout,
    injections: &ComponentSplit,
    cache: &mut CacheSession,
    progress: &Progress,
) -> Result<PreparedComponent, String> {
    let inline = settings.mode.counts_inline();
    let plan = ProbePlan {
        mode: settings.mode,
        call_sites: settings.call_sites,
        selection: settings.filter.selection().map(std::sync::Arc::new),
        short_max: settings.short_max,
        // The inline modes: a function puts back at exit the slot it was entered through,
        // so that each entry into a module from another starts at the module's root.
        live: inline,
        coverage: settings.coverage,
        allocators: settings
            .allocs
            .then(|| std::sync::Arc::new(settings.allocators.plan())),
        ..ProbePlan::default()
    };
    let several = layout.several_modules();
    let interpreter = interpreter_of(settings, bytes, layout);
    // The module (by index among the instrumented) the interpreter is, once instrumented.
    let mut interpreter_k = None;
    let mut functions = Vec::new();
    let mut modules = Vec::new();
    let mut replacements = Vec::new();
    let mut stats = InstrumentationStats::default();
    let mut module_names = Vec::new();
    let mut cached_modules = 0u32;
    let mut minimums = std::collections::HashMap::new();
    // Time mode's probes call the host, which the canonical ABI's callbacks may not do.
    let callbacks = match inline {
        true => vec![Default::default(); layout.modules.len()],
        false => callback_closures(
            &layout
                .modules
                .iter()
                .map(|m| &bytes[m.range.clone()])
                .collect::<Vec<_>>(),
        )?,
    };
    // Positions (the engine's module numbers) of the modules instrumented; `--inject`'s
    // plans are by their order.
    let probed = layout.modules.iter().enumerate().filter(|(_, m)| m.probed);
    for (nth, (position, module)) in probed.enumerate() {
        let core = &bytes[module.range.clone()];
        let loaded = LoadedModule {
            bytes: core.to_vec(),
            digest: *blake3::hash(core).as_bytes(),
        };
        let path =
            std::path::PathBuf::from(format!("{}#{}", settings.module.display(), module.name));
        let callbacks = &callbacks[position];
        let mut plan = match callbacks.is_empty() {
            true => plan.clone(),
            false => ProbePlan {
                selection: Some(std::sync::Arc::new(callbacks_left_out(&plan, callbacks))),
                ..plan.clone()
            },
        };
        plan.injections = injections.plans[nth].clone().map(std::sync::Arc::new);
        let interpreter = interpreter
            .as_ref()
            .filter(|i| i.position == position)
            .map(|i| i.interpreter.clone());
        plan.capture = interpreter.as_ref().map(|i| i.state_capture());
        let prepared = match instrument::from_cache(&loaded, &path, &plan, cache) {
            Some(hit) => hit,
            None => instrument::instrument(
                &loaded,
                &path,
                &plan,
                &instrument::FunctionRules {
                    filter: &settings.filter,
                    allocators: &settings.allocators,
                    left_out: Some(callbacks),
                },
                cache,
                progress,
            )
            .map_err(|e| format!("module {}: {e}", module.name))?,
        };
        let instrumented = prepared
            .bytes(&loaded)
            .ok_or_else(|| format!("module {}: its cached form is damaged", module.name))?
            .to_vec();
        let imports = crate::components::probe_imports(&instrumented)?;
        let offset = functions.len() as u32;
        functions.extend(prepared.functions.iter().map(|f| FunctionInfo {
            id: offset + f.id,
            name: qualified_name(&module.name, &f.name, several),
            kind: f.kind.clone(),
        }));
        minimums.insert(
            position,
            (
                crate::components::defined_memory_minimums(&instrumented)?,
                (!imports.is_empty()).then_some(modules.len()),
                crate::components::imports_memory(core)?,
            ),
        );
        if !imports.is_empty() {
            if interpreter.is_some() {
                interpreter_k = Some(modules.len());
            }
            let coverage = prepared.blocks.clone().map(|map| ModuleCoverage {
                map: coverage::in_component(map, offset, module.range.start as u32, |name| {
                    qualified_name(&module.name, name, several)
                }),
                functions: prepared.functions.len() as u32,
            });
            modules.push(ModuleProbes {
                offset,
                indices: wprof_agent::FunctionIndices {
                    imports: crate::components::imported_functions(core)?,
                    functions: prepared.functions.len() as u32,
                    mode: plan.mode,
                    live: plan.live,
                },
                position,
                probe_code: prepared.probe_code.clone(),
                imports: imports.clone(),
                coverage,
                allocators: prepared
                    .allocators
                    .iter()
                    .map(|a| crate::profile::AllocatorRecord {
                        function: offset + a.function,
                        name: qualified_name(&module.name, &a.name, several),
                        ..a.clone()
                    })
                    .collect(),
                interpreter,
            });
        }
        stats.functions_total += prepared.stats.functions_total;
        stats.functions_instrumented += prepared.stats.functions_instrumented;
        stats.functions_from_cache += prepared.stats.functions_from_cache;
        module_names.push(module.name.clone());
        cached_modules += u32::from(prepared.stats.module_from_cache);
        replacements.push(Replacement {
            component: module.component,
            module_index: module.index,
            bytes: instrumented,
            probes: imports,
        });
    }
    stats.module_from_cache = cached_modules as usize == replacements.len();
    // The modules left without probes: their memories, to find the others' among them.
    for (position, module) in layout.modules.iter().enumerate() {
        if !module.probed {
            let core = &bytes[module.range.clone()];
            minimums.insert(
                position,
                (
                    crate::components::defined_memory_minimums(core)?,
                    None,
                    crate::components::imports_memory(core)?,
                ),
            );
        }
    }
    let component = rewrite::rewrite(bytes, &layout.components, &replacements)?;
    // Each instantiation makes its module's memories in order; an instrumented module's
    // tree memory is its last (the agent appends it). A module the component imports has
    // memories no one here knows: nothing will match.
    let mut memories = Vec::new();
    for position in &layout.instantiations {
        let Some((sizes, probed, imports_memory)) = position.and_then(|p| minimums.get(&p)) else {
            memories.push(ExpectedMemory {
                minimum: usize::MAX,
                tree_of: None,
                main_of: None,
                program_of: None,
            });
            continue;
        };
        for (i, &minimum) in sizes.iter().enumerate() {
            let last = i + 1 == sizes.len();
            memories.push(ExpectedMemory {
                minimum,
                tree_of: probed.filter(|_| inline && last),
                // Memory 0, unless imported or the tree memory the inline modes append.
                main_of: probed
                    .filter(|_| settings.allocs && i == 0 && !(inline && last) && !imports_memory),
                // The interpreter's linear memory: memory 0 of the module that defines it.
                program_of: interpreter_k
                    .filter(|_| i == 0 && interpreter.as_ref().map(|i| i.memory_of) == *position),
            });
        }
    }
    Ok(PreparedComponent {
        component,
        functions,
        modules,
        stats,
        module_names,
        cached_modules,
        memories,
    })
}

/// Sample and adaptive mode: the interpreter among the component's modules, whose
/// script's frames the ticks read; said when there is one whose frames cannot be read. Not
/// with `--native`, nor with live probes (a function switched off keeps nothing).
fn interpreter_of(
    settings: &RunSettings,
    bytes: &[u8],
    layout: &ComponentLayout,
) -> Option<ComponentInterpreter> {
    if !settings.mode.samples() || settings.native || settings.live {
        return None;
    }
    match crate::prepare::component::interpreter::find(bytes, layout)? {
        Ok(found) => Some(found),
        Err((module, why)) => {
            let shown = format!("{}#{module}", settings.module.display());
            super::modes::scripts::unreadable(&shown, &why);
            None
        }
    }
}

/// The selection of a module with functions callbacks may run: the user's, and those left
/// out (the set is named in full: the component's other modules decide it too).
fn callbacks_left_out(
    plan: &ProbePlan,
    left_out: &std::collections::BTreeSet<u32>,
) -> wprof_agent::Selection {
    let mut h = blake3::Hasher::new();
    h.update(b"wprof component callbacks left out, silent v3\0");
    if let Some(user) = &plan.selection {
        h.update(&user.spec);
    }
    for id in left_out {
        h.update(&id.to_le_bytes());
    }
    wprof_agent::Selection {
        spec: *h.finalize().as_bytes(),
        excluded: Default::default(),
        silent: true,
    }
}

/// `--inject` over the component's core modules (see
/// [`crate::prepare::injections::split_component`]).
pub(super) fn inject_into(
    settings: &RunSettings,
    bytes: &[u8],
    layout: &ComponentLayout,
) -> Result<ComponentSplit, Failure> {
    let several = layout.several_modules();
    let mut modules = Vec::new();
    let mut offset = 0;
    for module in layout.modules.iter().filter(|m| m.probed) {
        let core = &bytes[module.range.clone()];
        modules.push(CoreModuleRef {
            name: &module.name,
            bytes: core,
            offset,
        });
        offset += crate::components::function_count(core).map_err(Failure::input)?;
    }
    split_component(&modules, &settings.injections, &|module, function| {
        qualified_name(module, function, several)
    })
}
