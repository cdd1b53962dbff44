//! `--live` and `--serve` on a component: the switchboard over every instrumented module's
//! switch table, and the windows `--serve` makes over every module's tree while the program
//! runs; both read the trees in the memories the instantiation made (see
//! [`crate::run::component::memory`]).

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use wprof_agent::ProbeMode;

use crate::run::allocs::AllocTracker;
use crate::run::component::memory::MadeMemory;
use crate::run::component::state::ModuleProbes;
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::inline::window::{ModuleTree, Serve, WindowSource};
use crate::run::switches::Switchboard;
use crate::settings::RunSettings;

/// `--serve`: starts serving windows of the modules' trees (`trees`, as `(module, memory)`),
/// with copies of the sampler's readings from `desk` (sample mode) and the blocks `allocs`
/// tracks; what it returns stops the serving when dropped, which must happen once `ended`
/// is set and before the trees' memories go.
pub fn serve_windows(
    serve: Serve,
    mode: ProbeMode,
    (modules, trees): (&[ModuleProbes], &[(usize, MadeMemory)]),
    desk: Option<Arc<SampleDesk<Vec<Samples>>>>,
    ended: Arc<AtomicBool>,
    allocs: Option<Arc<Mutex<AllocTracker>>>,
    settings: &RunSettings,
) -> Box<dyn Any> {
    let windows = trees
        .iter()
        .map(|(k, memory)| ModuleTree {
            k: *k,
            position: modules[*k].position,
            offset: modules[*k].offset,
            functions: modules[*k].indices.functions,
            // SAFETY: the tree memory never moves and lives as long as the store; the
            // windows stop (`ended`, then what this returns dropped) before it goes.
            tree: unsafe { memory.live_tree() },
        })
        .collect();
    let source = WindowSource::of_component(
        windows,
        mode,
        serve.functions,
        serve.module_ref,
        desk.map(|d| (d, settings.sample_period.longest())),
        ended,
    )
    .with_allocs(allocs);
    (serve.start)(source)
}

/// Live probes: the one warning when a switch table is not where it should be.
pub fn switches_unreachable() {
    crate::say!("wprof: warning: the probes' switches cannot be reached; every probe stays on");
}

/// Live probes: the switchboard over every instrumented module's switch table (in its tree
/// memory), started, with what turns the switches and the functions' names; `None` (one
/// warning) if a table is not where it should be.
#[allow(clippy::type_complexity)]
pub fn switchboard(
    modules: &[ModuleProbes],
    trees: &[(usize, MadeMemory)],
    mode: ProbeMode,
    live: crate::run::runner::Live,
) -> Option<(
    std::sync::Arc<Switchboard>,
    Box<dyn std::any::Any>,
    Vec<String>,
)> {
    let mut tables = Vec::new();
    for (k, memory) in trees {
        let module = &modules[*k];
        let functions = module.indices.functions;
        let base = wprof_agent::SwitchTable::base(mode, functions) as usize;
        if memory.size.load(Ordering::Acquire) < base + functions as usize {
            switches_unreachable();
            return None;
        }
        tables.push((module.offset, functions, (memory.base + base) as *mut u8));
    }
    // SAFETY: each table lies within its tree memory (checked above), which never moves
    // and lives as long as the store; the board is closed before the store goes.
    let board = std::sync::Arc::new(unsafe { Switchboard::over(&tables, live.switchable) });
    let running = (live.start)(board.clone());
    Some((board, running, live.names))
}
