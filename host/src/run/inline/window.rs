//! The profile of a window of a running program (`wprof run --serve`): at the window's two
//! ends, the module's tree is read while the program runs (calls and, in cost mode,
//! instructions per node) and, in the sampling modes, the sampler hands over a copy of its
//! readings; the second minus the first, replayed like a finished run's tree, is the
//! window's [`Profile`].
//!
//! The tree is read through [`LiveTree`]: links only, each written after the node it names,
//! in a memory that never moves. A node's figures only grow, so the window's are
//! differences; a node made during the window counts from zero. A component's window reads
//! every module's tree and grafts them as its run's end does (nodes keyed by
//! [`crate::run::inline::tree::module_node_key`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::Module;
use wprof_agent::ProbeMode;

use crate::profile::{Ending, FunctionInfo, InstrumentationStats, ModuleRef, Profile};
use crate::run::adaptive::live_tree::LiveTree;
use crate::run::allocs::AllocTracker;
use crate::run::code::map::CodeMap;
use crate::run::collector::{Collector, PS_PER_NS};
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::inline::tree::InlineTree;
use crate::run::start::ProbeBytes;

/// `--serve` (the inline modes): who serves windows of the profile while the program runs
/// (see [`crate::run::inline::window`]).
pub struct Serve {
    /// Every function of the original module, in id order (the windows' names).
    pub functions: Vec<crate::profile::FunctionInfo>,
    /// The module, as profiles name it.
    pub module_ref: crate::profile::ModuleRef,
    /// Called with the window source before the program starts; what it returns is dropped
    /// when the program ends, which must stop whatever reads windows.
    pub start: Box<dyn FnOnce(crate::run::inline::window::WindowSource) -> Box<dyn std::any::Any>>,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

/// `--serve` while the program runs: windows read the module's tree (`instance`'s, in a
/// memory that never moves) and, in the sampling modes, ask the sampler's `desk` for its
/// readings until `ended`. What it returns is dropped when the program ends, which stops
/// whatever reads windows; `None` (after one warning) where the tree cannot be read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn serve_while_running(
    serve: Serve,
    store: &mut wasmtime::Store<crate::run::host_state::HostState>,
    instance: &wasmtime::Instance,
    mode: ProbeMode,
    module: &Module,
    sampler: Option<(Arc<SampleDesk>, Option<ProbeBytes>, Duration)>,
    ended: Arc<AtomicBool>,
    allocs: Option<Arc<Mutex<AllocTracker>>>,
) -> Option<Box<dyn std::any::Any>> {
    let Some(tree) = live_tree(store, instance) else {
        crate::say!(
            "wprof: warning: --serve cannot read the module's tree while it runs on this host; \
             nothing is served"
        );
        return None;
    };
    let source = WindowSource::new(
        tree,
        mode,
        serve.functions,
        serve.module_ref,
        sampler.map(|(desk, bytes, longest)| (desk, module.clone(), bytes, longest)),
        ended,
    )
    .with_allocs(allocs);
    Some((serve.start)(source))
}

/// The module's tree read while it runs, `None` where its memory could move.
fn live_tree(
    store: &mut wasmtime::Store<crate::run::host_state::HostState>,
    instance: &wasmtime::Instance,
) -> Option<crate::run::adaptive::live_tree::LiveTree> {
    use crate::run::adaptive::live_tree::{prepare, LiveTree, TreeSize};
    let memory = instance.get_memory(&mut *store, wprof_agent::ContextArena::MEMORY)?;
    if !crate::run::host_state::never_moves(&memory.ty(&*store)) {
        return None;
    }
    let (base, size) = prepare(&mut *store, &memory);
    // SAFETY: the memory never moves and holds `size` bytes, and the view is used only
    // while the store lives (the windows stop before `run` goes on past the program).
    Some(unsafe { LiveTree::new(base, TreeSize::Fixed(size)) })
}

/// What the window's profile is made from; shared with the thread that asks for windows.
pub struct WindowSource {
    trees: Trees,
    mode: ProbeMode,
    functions: Vec<FunctionInfo>,
    module_ref: ModuleRef,
    /// Set when the program has ended: the tree is not to be read any more.
    ended: Arc<AtomicBool>,
    /// With `--allocs`: the run's blocks so far.
    allocs: Option<Arc<Mutex<AllocTracker>>>,
}

/// The trees a window reads.
enum Trees {
    /// A module's; in the sampling modes, with the sampler's desk and how to tell its
    /// program counters.
    Module {
        tree: LiveTree,
        sampling: Option<Sampling>,
    },
    /// A component's modules'; in sample mode, with the component sampler's desk (its
    /// readings per module position) and its period.
    Component {
        modules: Vec<ModuleTree>,
        desk: Option<(Arc<SampleDesk<Vec<Samples>>>, Duration)>,
    },
}

/// One instrumented core module of a component, for its windows.
#[derive(Debug)]
pub struct ModuleTree {
    /// Its index among the instrumented modules (see [`crate::run::component`]).
    pub k: usize,
    /// Its position among the component's core modules (the sampler's index).
    pub position: usize,
    /// Its function 0's component id.
    pub offset: u32,
    /// Its function count.
    pub functions: u32,
    /// Its tree, read while it runs.
    pub tree: LiveTree,
}

struct Sampling {
    desk: Arc<SampleDesk>,
    module: Module,
    code: CodeMap,
    probe_bytes: Option<ProbeBytes>,
    /// The sampler's period: how long a copy of its readings may take.
    period: Duration,
}

impl std::fmt::Debug for WindowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowSource")
            .field("mode", &self.mode)
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

/// One end of a window.
struct End {
    tree: InlineTree,
    /// Sampled picoseconds per node address.
    time: HashMap<u32, u64>,
    at: Instant,
}

impl WindowSource {
    /// A source over the running module's tree `tree`; in the sampling modes, the
    /// sampler's `desk` with what names its program counters.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        tree: LiveTree,
        mode: ProbeMode,
        functions: Vec<FunctionInfo>,
        module_ref: ModuleRef,
        desk: Option<(Arc<SampleDesk>, Module, Option<ProbeBytes>, Duration)>,
        ended: Arc<AtomicBool>,
    ) -> Self {
        let sampling = desk.map(|(desk, module, probe_bytes, period)| Sampling {
            code: CodeMap::of(&module, mode),
            desk,
            module,
            probe_bytes,
            period,
        });
        WindowSource {
            trees: Trees::Module { tree, sampling },
            mode,
            functions,
            module_ref,
            ended,
            allocs: None,
        }
    }

    /// A source over a running component's instrumented `modules`; in sample mode, the
    /// component sampler's `desk` and period.
    pub(crate) fn of_component(
        modules: Vec<ModuleTree>,
        mode: ProbeMode,
        functions: Vec<FunctionInfo>,
        module_ref: ModuleRef,
        desk: Option<(Arc<SampleDesk<Vec<Samples>>>, Duration)>,
        ended: Arc<AtomicBool>,
    ) -> Self {
        WindowSource {
            trees: Trees::Component { modules, desk },
            mode,
            functions,
            module_ref,
            ended,
            allocs: None,
        }
    }

    /// With the run's blocks (`--allocs`), for [`WindowSource::allocations`].
    pub(crate) fn with_allocs(mut self, allocs: Option<Arc<Mutex<AllocTracker>>>) -> Self {
        self.allocs = allocs;
        self
    }

    /// Whether allocations are profiled (and [`WindowSource::allocations`] has them).
    pub fn has_allocs(&self) -> bool {
        self.allocs.is_some()
    }

    /// The blocks handed out since the program started, by context, and those live now
    /// (as Go's `allocs` profile): a profile whose calls are the run's so far.
    pub fn allocations(&self) -> Result<Profile, String> {
        let allocs = self
            .allocs
            .as_ref()
            .ok_or("allocations are not profiled (run with --allocs)")?;
        if self.ended.load(Ordering::Acquire) {
            return Err("the program has ended".to_string());
        }
        let (by_node, record) = {
            let tracker = allocs.lock().unwrap_or_else(|e| e.into_inner());
            (tracker.by_node(), tracker.record_of_run())
        };
        // The tree after the blocks: every node they name is in it.
        let tree = match &self.trees {
            Trees::Module { tree, .. } => InlineTree::read(tree, self.functions.len() as u32),
            Trees::Component { modules, .. } => Self::grafted(modules, |_, _| {}),
        };
        let mut collector = Collector::new(self.functions.len());
        if self.mode != ProbeMode::Cost {
            collector = collector.with_quantum(PS_PER_NS);
        }
        tree.replay(&mut collector, |_| 0, None, None, Some(&by_node));
        collector.finish_at(collector.last());
        let mut profile = self.profile_of(&collector, Duration::ZERO);
        profile.allocations = Some(record);
        Ok(profile)
    }

    fn end(&self) -> Result<End, String> {
        if self.ended.load(Ordering::Acquire) {
            return Err("the program has ended".to_string());
        }
        let (live, sampling) = match &self.trees {
            Trees::Module { tree, sampling } => (tree, sampling),
            Trees::Component { modules, desk } => return self.component_end(modules, desk),
        };
        let time = match sampling {
            Some(s) => {
                let mut samples = s
                    .desk
                    .ask(s.period * 20 + Duration::from_millis(200))
                    .ok_or("the sampler did not answer (the program has ended)")?;
                let probes = crate::run::start::probe_pcs(
                    &s.module,
                    &s.code,
                    s.probe_bytes.as_ref(),
                    &samples.located_pcs(),
                );
                samples.resolve(&s.code, &probes);
                samples
            }
            None => Samples::default(),
        };
        // The tree after the samples: every node they name is in it.
        if self.ended.load(Ordering::Acquire) {
            return Err("the program has ended".to_string());
        }
        let tree = InlineTree::read(live, self.functions.len() as u32);
        let time = if sampling.is_some() {
            crate::run::inline::attribution::attribute(&tree, &time).time
        } else {
            HashMap::new()
        };
        Ok(End {
            tree,
            time,
            at: Instant::now(),
        })
    }

    /// [`WindowSource::end`] of a component: every module's tree grafted into one, nodes
    /// keyed by module.
    fn component_end(
        &self,
        modules: &[ModuleTree],
        desk: &Option<(Arc<SampleDesk<Vec<Samples>>>, Duration)>,
    ) -> Result<End, String> {
        use crate::run::inline::tree::module_node_key;
        let samples = match desk {
            Some((desk, period)) => Some(
                desk.ask(*period * 20 + Duration::from_millis(200))
                    .ok_or("the sampler did not answer (the program has ended)")?,
            ),
            None => None,
        };
        // The trees after the samples: every node they name is in them.
        if self.ended.load(Ordering::Acquire) {
            return Err("the program has ended".to_string());
        }
        let mut time = HashMap::new();
        let tree = Self::grafted(modules, |m, own| {
            if let Some(samples) = samples.as_ref().and_then(|s| s.get(m.position)) {
                let attribution = crate::run::inline::attribution::attribute(own, samples);
                for (address, ps) in attribution.time {
                    if let Some(key) = module_node_key(m.k, address) {
                        time.insert(key, ps);
                    }
                }
            }
        });
        Ok(End {
            tree,
            time,
            at: Instant::now(),
        })
    }

    /// Every module's tree read now and grafted into one (nodes keyed by module), each
    /// shown to `each` before it is grafted.
    fn grafted(
        modules: &[ModuleTree],
        mut each: impl FnMut(&ModuleTree, &InlineTree),
    ) -> InlineTree {
        let mut tree = InlineTree::empty();
        for m in modules {
            let own = InlineTree::read(&m.tree, m.functions);
            each(m, &own);
            tree.graft(own, m.k, m.offset);
        }
        tree
    }

    /// The profile of the next `length` of the program (shorter if `stop` is set or the
    /// program ends first).
    pub fn profile(&self, length: Duration, stop: &AtomicBool) -> Result<Profile, String> {
        let first = self.end()?;
        let deadline = first.at + length;
        while Instant::now() < deadline
            && !stop.load(Ordering::Acquire)
            && !self.ended.load(Ordering::Acquire)
        {
            std::thread::sleep(Duration::from_millis(20).min(length));
        }
        let last = self.end()?;
        Ok(self.difference(&first, &last))
    }

    fn difference(&self, first: &End, last: &End) -> Profile {
        let before: HashMap<u32, (u64, u64)> = first
            .tree
            .nodes
            .iter()
            .map(|n| (n.address, (n.calls, n.self_cost)))
            .collect();
        let mut tree = last.tree.clone();
        for n in &mut tree.nodes {
            let (calls, cost) = before.get(&n.address).copied().unwrap_or((0, 0));
            n.calls = n.calls.saturating_sub(calls);
            n.self_cost = n.self_cost.saturating_sub(cost);
        }
        let cost = self.mode == ProbeMode::Cost;
        let self_time = |n: &crate::run::inline::tree::InlineNode| {
            if cost {
                n.self_cost
            } else {
                let was = first.time.get(&n.address).copied().unwrap_or(0);
                last.time
                    .get(&n.address)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(was)
            }
        };
        tree.keep_active(&self_time);
        let mut collector = Collector::new(self.functions.len());
        if !cost {
            collector = collector.with_quantum(PS_PER_NS);
        }
        tree.replay(&mut collector, self_time, None, None, None);
        collector.finish_at(collector.last());
        self.profile_of(&collector, last.at.saturating_duration_since(first.at))
    }

    /// The profile of what `collector` holds, `wall` long, of a program still running.
    fn profile_of(&self, collector: &Collector, wall: Duration) -> Profile {
        let mut profile = crate::run::to_profile::profile_of_run(
            self.module_ref.clone(),
            &self.functions,
            InstrumentationStats::default(),
            self.mode,
            collector,
            Ending {
                exit_code: 0,
                trap: None,
                wall_time: wall.as_nanos() as u64,
                sampling: None,
            },
        );
        profile.outcome = "running".to_string();
        profile
    }
}
