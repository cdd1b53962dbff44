//! The differential check of the agent, one case at a time: wasm-smith makes a module from
//! the case's bytes (every proposal wprof's engine runs, exports everywhere, no imports),
//! and it is run as it is and instrumented in every mode, with the same engine
//! configuration and fuel. Every export is called in order with zero arguments; the
//! results, traps, and then the exported memories and globals must be the same. A case
//! where either side runs out of fuel or stack (the probes use some of both) is
//! inconclusive and counted, not compared; an agent error is a typed refusal, counted. Two
//! plans add every hook besides the probes (allocators' reports, injection checks: see
//! [`crate::hooks`]). Damaged copies of each module go to the agent too: it refuses or
//! instruments them, and never panics.
//!
//! Two drivers share this file: the plain test on a fixed sequence of seeds
//! (`tests/all/fuzz.rs`) and the cargo-fuzz target `differential` (`fuzz/`), which includes
//! it by path, so that both run the same check.

use wasmtime::{Engine, Extern, Instance, Linker, Module, Store, Trap, Val, ValType};
use wprof_agent::{ProbeMode, ProbePlan};

/// What happened to one call (or the instantiation), comparable across the two runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Returned(Vec<String>),
    Trapped(String),
    /// Out of fuel or stack: the comparison stops here.
    Inconclusive,
}

/// Everything observable of one run: each call's outcome, then the exported state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    calls: Vec<(String, Outcome)>,
    state: Vec<(String, String)>,
}

/// The fuel of the original's run; the instrumented module gets 50 times as much.
pub const FUEL: u64 = 200_000;

/// The engine both sides run on.
pub fn engine() -> Engine {
    let mut config = wprof::run::engine::config();
    // The rewrite's semantics do not depend on Cranelift's optimizations; compiling without
    // them makes a case about three times faster. Compiling is most of a case's time, and
    // the drivers run a case per core: one thread compiles each module, which spares the
    // pool of compiling threads fighting the other cases' for the cores.
    config
        .consume_fuel(true)
        .cranelift_opt_level(wasmtime::OptLevel::None)
        .parallel_compilation(false);
    Engine::new(&config).unwrap()
}

/// What wasm-smith generates.
pub fn smith_config() -> wasm_smith::Config {
    wasm_smith::Config {
        max_imports: 0,
        min_funcs: 1,
        max_funcs: 25,
        export_everything: true,
        canonicalize_nans: true,
        // Shared memories (a quarter of the memories) and atomics; a case runs on one thread,
        // which is enough to see that the rewrite keeps their semantics. Wasmtime runs no
        // shared globals or tables.
        threads_enabled: true,
        shared_everything_threads_enabled: false,
        wide_arithmetic_enabled: true,
        // Small memories and tables (each run hashes every memory), two memories at most.
        max_memories: 2,
        max_memory32_bytes: 1 << 20,
        max_memory64_bytes: 1 << 20,
        max_table_elements: 1_000,
        ..Default::default()
    }
}

/// Copies of `wasm` with a byte flipped, a byte cut off the end and a section's size
/// changed: what a damaged file or a buggy producer gives the agent.
fn damaged_copies(wasm: &[u8], case: u64) -> Vec<Vec<u8>> {
    let at = |k: u64| (case.wrapping_mul(2_654_435_761).wrapping_add(k) as usize) % wasm.len();
    let mut flipped = wasm.to_vec();
    flipped[at(1)] ^= 1 << (case % 8);
    let mut grown = wasm.to_vec();
    // Past the header: the first section's size byte.
    if grown.len() > 9 {
        grown[9] = grown[9].wrapping_add(1 + (case % 3) as u8);
    }
    vec![flipped, wasm[..wasm.len() - 1].to_vec(), grown]
}

fn zero(ty: &ValType) -> Option<Val> {
    Some(match ty {
        ValType::I32 => Val::I32(0),
        ValType::I64 => Val::I64(0),
        ValType::F32 => Val::F32(0),
        ValType::F64 => Val::F64(0),
        ValType::V128 => Val::V128(0u128.into()),
        ValType::Ref(r) if r.is_nullable() => Val::null_ref(r.heap_type()),
        ValType::Ref(_) => return None,
    })
}

fn show(v: &Val) -> String {
    match v {
        Val::I32(x) => format!("i32 {x}"),
        Val::I64(x) => format!("i64 {x}"),
        Val::F32(x) => format!("f32 {x:#x}"),
        Val::F64(x) => format!("f64 {x:#x}"),
        Val::V128(x) => format!("v128 {:#x}", x.as_u128()),
        other => format!("ref null={}", other.ref_().is_none_or(|r| r.is_null())),
    }
}

fn outcome(e: &wasmtime::Error) -> Outcome {
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel | Trap::StackOverflow) => Outcome::Inconclusive,
        Some(trap) => Outcome::Trapped(format!("{trap:?}")),
        // Not a trap (an exception escaping the export, a host error): its first line.
        None => Outcome::Trapped(e.to_string().lines().next().unwrap_or_default().into()),
    }
}

/// Runs `module` (probe imports, if any, are no-ops) and observes it; `exports` are the
/// original's (the instrumented module exports more).
pub fn observe(engine: &Engine, module: &Module, exports: &[String], fuel: u64) -> Observed {
    observe_switching(engine, module, exports, fuel, Turning::Nothing)
}

/// What [`observe_switching`] turns before each call to an export.
#[derive(Debug, Clone, Copy)]
enum Turning {
    Nothing,
    /// A live module's switches (see `wprof_agent::SwitchTable`): function `id`'s probes
    /// are off when bit `(id + call) % 64` of `pattern` is set; the table of `functions`
    /// bytes is at `base`.
    Switches {
        pattern: u64,
        base: u32,
        functions: u32,
    },
    /// An adaptive module's timers (see `wprof_agent::ContextArena::TIMER`): every other
    /// node of its tree (of `functions` functions), by `pattern`, gets a timer set; the
    /// host's `enter_catching` answers with a token, so that timed activations run both
    /// ends of their timer.
    Timers {
        pattern: u64,
        functions: u32,
    },
}

/// [`observe`], turning what `turning` says before each call to an export.
fn observe_switching(
    engine: &Engine,
    module: &Module,
    exports: &[String],
    fuel: u64,
    turning: Turning,
) -> Observed {
    // Growth is bounded too (fuel counts instructions, not the bytes a `memory.fill` or a
    // `table.grow` touches): past the limits, growing fails the same way on both sides.
    let limits = wasmtime::StoreLimitsBuilder::new()
        .memory_size(16 << 20)
        .table_elements(10_000)
        .build();
    let mut store = Store::new(engine, limits);
    store.limiter(|limits| limits);
    let mut linker = Linker::new(engine);
    for import in module.imports() {
        if let wasmtime::ExternType::Func(ty) = import.ty() {
            let results: Vec<ValType> = ty.results().collect();
            let token = import.module() == wprof_agent::ProbeImports::MODULE
                && import.name() == wprof_agent::ProbeImports::ENTER_CATCHING;
            linker
                .func_new(import.module(), import.name(), ty, move |_, _, out| {
                    for (slot, ty) in out.iter_mut().zip(&results) {
                        *slot = if token {
                            Val::I32(1)
                        } else {
                            zero(ty).unwrap_or(Val::I32(0))
                        };
                    }
                    Ok(())
                })
                .unwrap();
        }
    }
    let mut observed = Observed {
        calls: Vec::new(),
        state: Vec::new(),
    };
    store.set_fuel(fuel).unwrap();
    let instance: Instance = match linker.instantiate(&mut store, module) {
        Ok(i) => i,
        Err(e) => {
            observed.calls.push(("<instantiate>".into(), outcome(&e)));
            return observed;
        }
    };
    for name in exports {
        let Some(Extern::Func(f)) = instance.get_export(&mut store, name) else {
            continue;
        };
        let call = observed.calls.len() as u32;
        match turning {
            Turning::Nothing => {}
            Turning::Switches {
                pattern,
                base,
                functions,
            } => {
                if let Some(Extern::Memory(m)) =
                    instance.get_export(&mut store, wprof_agent::SwitchTable::MEMORY)
                {
                    let data = m.data_mut(&mut store);
                    for id in 0..functions {
                        let at = (base + id) as usize;
                        if at < data.len() {
                            data[at] = u8::from(pattern >> ((id + call) % 64) & 1 == 1);
                        }
                    }
                }
            }
            Turning::Timers { pattern, functions } => {
                if let Some(Extern::Memory(m)) =
                    instance.get_export(&mut store, wprof_agent::ContextArena::MEMORY)
                {
                    let data = m.data_mut(&mut store);
                    let tree = wprof::run::inline::tree::InlineTree::read(&data[..], functions);
                    for (i, node) in tree.nodes.iter().enumerate().skip(1) {
                        let on = pattern >> ((i as u32 + call) % 64) & 1 == 1;
                        let bit = wprof_agent::ContextArena::TIMED;
                        let at = (node.address + wprof_agent::ContextArena::FUNCTION) as usize;
                        if let Some(field) = data.get_mut(at..at + 4) {
                            let id1 = u32::from_le_bytes(field.try_into().unwrap()) & !bit;
                            let value = if on { id1 | bit } else { id1 };
                            field.copy_from_slice(&value.to_le_bytes());
                        }
                    }
                }
            }
        }
        let ty = f.ty(&store);
        let Some(args) = ty.params().map(|t| zero(&t)).collect::<Option<Vec<_>>>() else {
            continue;
        };
        let mut results: Vec<Val> = ty
            .results()
            .map(|t| zero(&t).unwrap_or(Val::I32(0)))
            .collect();
        store.set_fuel(fuel).unwrap();
        let o = match f.call(&mut store, &args, &mut results) {
            Ok(()) => Outcome::Returned(results.iter().map(show).collect()),
            Err(e) => outcome(&e),
        };
        let stop = o == Outcome::Inconclusive;
        observed.calls.push((name.clone(), o));
        if stop {
            return observed;
        }
    }
    for name in exports {
        match instance.get_export(&mut store, name) {
            Some(Extern::Memory(m)) => {
                let digest = blake3::hash(m.data(&store));
                observed
                    .state
                    .push((name.clone(), digest.to_hex().to_string()));
            }
            Some(Extern::SharedMemory(m)) => {
                let cells = m.data();
                // SAFETY: `UnsafeCell<u8>` has `u8`'s layout, and nothing writes the memory
                // while it is read: the store's one thread has returned from the module.
                let bytes =
                    unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), cells.len()) };
                let digest = blake3::hash(bytes);
                observed
                    .state
                    .push((name.clone(), format!("shared {}", digest.to_hex())));
            }
            Some(Extern::Global(g)) => {
                let v = g.get(&mut store);
                observed.state.push((name.clone(), show(&v)));
            }
            _ => {}
        }
    }
    observed
}

fn inconclusive(o: &Observed) -> bool {
    o.calls.iter().any(|(_, c)| *c == Outcome::Inconclusive)
}

/// Why a case compared nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// The bytes were too few for wasm-smith to make a module.
    NoModule,
    /// Wasmtime does not compile the generated module.
    DoesNotCompile,
    /// The module has a `memory.atomic.wait` on a shared memory: with one thread, no
    /// notify comes, and a wait's timeout may be forever.
    WaitsOnSharedMemory,
    /// The original ran out of fuel or stack.
    Inconclusive,
}

impl Skip {
    /// Every reason, in the order a tally lists them.
    pub const ALL: [Skip; 4] = [
        Skip::NoModule,
        Skip::DoesNotCompile,
        Skip::WaitsOnSharedMemory,
        Skip::Inconclusive,
    ];

    /// A few words for a tally.
    pub fn name(self) -> &'static str {
        match self {
            Skip::NoModule => "too few bytes for a module",
            Skip::DoesNotCompile => "module does not compile",
            Skip::WaitsOnSharedMemory => "atomic wait on a shared memory",
            Skip::Inconclusive => "original out of fuel or stack",
        }
    }
}

/// What of the threads proposal a module uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Threads {
    /// A memory is shared.
    pub shared_memory: bool,
    /// A function has an atomic instruction (`fence` included).
    pub atomics: bool,
    /// A `memory.atomic.wait32` or `wait64` on a shared memory (see
    /// [`Skip::WaitsOnSharedMemory`]); a wait on an unshared memory traps, and is kept.
    pub waits_on_shared_memory: bool,
}

impl Threads {
    /// What `wasm` (a valid module) uses; a part it cannot read counts as a wait.
    pub fn of(wasm: &[u8]) -> Self {
        use wasmparser::{Operator, Payload};
        let mut threads = Threads::default();
        let mut shared = Vec::new();
        let unreadable = Threads {
            waits_on_shared_memory: true,
            ..threads
        };
        for payload in wasmparser::Parser::new(0).parse_all(wasm) {
            match payload {
                Ok(Payload::MemorySection(memories)) => {
                    shared.extend(memories.into_iter().map(|m| m.is_ok_and(|m| m.shared)));
                    threads.shared_memory = shared.contains(&true);
                }
                Ok(Payload::CodeSectionEntry(body)) => {
                    let Ok(mut ops) = body.get_operators_reader() else {
                        return unreadable;
                    };
                    while !ops.eof() {
                        let Ok(op) = ops.read() else {
                            return unreadable;
                        };
                        // Every atomic instruction's name has it (`I32AtomicRmwAdd`,
                        // `MemoryAtomicNotify`, `AtomicFence`).
                        if !threads.atomics && format!("{op:?}").contains("Atomic") {
                            threads.atomics = true;
                        }
                        if let Operator::MemoryAtomicWait32 { memarg }
                        | Operator::MemoryAtomicWait64 { memarg } = op
                        {
                            if shared.get(memarg.memory as usize).copied().unwrap_or(true) {
                                threads.waits_on_shared_memory = true;
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => return unreadable,
            }
        }
        threads
    }
}

/// What one case gave.
#[derive(Debug, Default)]
pub struct CaseReport {
    /// Instrumented runs compared with the original's.
    pub compared: u64,
    /// Why the case compared nothing, if it did not.
    pub skipped: Option<Skip>,
    /// What of the threads proposal the module uses.
    pub threads: Threads,
    /// Instrumented runs that ran out of fuel or stack where the original did not (the
    /// probes use some of both): not compared.
    pub inconclusive: u64,
    /// Plans the agent refused, each with its error.
    pub refused: Vec<String>,
    /// Differences between the original and an instrumented copy, and panics of the agent:
    /// each one a bug.
    pub divergences: Vec<String>,
}

/// The engine, the generator's configuration and the plans every case runs with.
pub struct Checker {
    engine: Engine,
    config: wasm_smith::Config,
    plans: Vec<ProbePlan>,
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// Every mode (adaptive mode with timers set at random between calls), then every mode
    /// that has live probes with them (switched at random between calls), time mode's short
    /// functions, and every hook besides the probes.
    pub fn new() -> Self {
        let plans: Vec<ProbePlan> = [false, true]
            .into_iter()
            .flat_map(|live| {
                ProbeMode::ALL.map(|mode| ProbePlan {
                    mode,
                    live,
                    ..ProbePlan::default()
                })
            })
            // Time mode with short functions counted, not timed (wprof run's default bound),
            // with and without switches.
            .chain([false, true].map(|live| ProbePlan {
                mode: ProbeMode::Time,
                live,
                short_max: 40,
                ..ProbePlan::default()
            }))
            // Every hook besides the probes (see `crate::hooks`), in time and sample mode.
            .chain([ProbeMode::Time, ProbeMode::Sample].map(|mode| ProbePlan {
                mode,
                allocators: Some(Default::default()),
                ..ProbePlan::default()
            }))
            .collect();
        Self {
            engine: engine(),
            config: smith_config(),
            plans,
        }
    }

    /// The engine cases run on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Case `case` (named `label` in what it reports), its module made from `data`;
    /// `pattern` chooses which switches and timers are turned between calls.
    pub fn check(&self, case: u64, label: &str, data: &[u8], pattern: u64) -> CaseReport {
        let mut report = CaseReport::default();
        let engine = &self.engine;
        let mut u = arbitrary::Unstructured::new(data);
        let Ok(generated) = wasm_smith::Module::new(self.config.clone(), &mut u) else {
            report.skipped = Some(Skip::NoModule);
            return report;
        };
        let wasm = generated.to_bytes();
        // Damaged input: the agent refuses it with a typed error or instruments it, and
        // never panics.
        for damaged in damaged_copies(&wasm, case) {
            let quiet = std::panic::catch_unwind(|| {
                ProbeMode::ALL.map(|mode| {
                    let plan = ProbePlan {
                        mode,
                        ..ProbePlan::default()
                    };
                    wprof_agent::instrument(&damaged, &plan).is_ok()
                })
            });
            if quiet.is_err() {
                report
                    .divergences
                    .push(format!("{label}: the agent panicked on damaged input"));
            }
            let counted = std::panic::catch_unwind(|| {
                wprof_agent::entry_counts::count_entries(&damaged).is_ok()
            });
            if counted.is_err() {
                report.divergences.push(format!(
                    "{label}: the call counters panicked on damaged input"
                ));
            }
        }
        report.threads = Threads::of(&wasm);
        if report.threads.waits_on_shared_memory {
            report.skipped = Some(Skip::WaitsOnSharedMemory);
            return report;
        }
        let Ok(original) = Module::new(engine, &wasm) else {
            report.skipped = Some(Skip::DoesNotCompile);
            return report;
        };
        let exports: Vec<String> = original.exports().map(|e| e.name().to_string()).collect();
        let reference = observe(engine, &original, &exports, FUEL);
        if inconclusive(&reference) {
            report.skipped = Some(Skip::Inconclusive);
            return report;
        }
        for plan in &self.plans {
            let mode = format!(
                "{}{}{}",
                plan.mode.name(),
                if plan.live { " live" } else { "" },
                if plan.allocators.is_some() {
                    " hooks"
                } else {
                    ""
                }
            );
            let instrumented = match plan.allocators {
                Some(_) => crate::hooks::instrument_with_hooks(&wasm, plan),
                None => wprof_agent::instrument(&wasm, plan),
            };
            let instrumented = match instrumented {
                Ok(m) => m,
                Err(e) => {
                    report.refused.push(format!("{label} {mode}: {e}"));
                    continue;
                }
            };
            let module = match Module::new(engine, &instrumented.bytes) {
                Ok(m) => m,
                Err(e) => {
                    report.divergences.push(format!(
                        "{label} {mode}: the instrumented module does not compile: {e}"
                    ));
                    continue;
                }
            };
            let functions = instrumented.probe_map.functions.len() as u32;
            let turning = if plan.live {
                Turning::Switches {
                    pattern,
                    base: wprof_agent::SwitchTable::base(plan.mode, functions),
                    functions,
                }
            } else if plan.mode == ProbeMode::Adaptive {
                Turning::Timers { pattern, functions }
            } else {
                Turning::Nothing
            };
            let got = observe_switching(engine, &module, &exports, 50 * FUEL, turning);
            if inconclusive(&got) {
                report.inconclusive += 1;
                continue;
            }
            report.compared += 1;
            if got != reference {
                report.divergences.push(format!(
                    "{label} {mode}: {got:?}\n  vs original {reference:?}"
                ));
            }
        }
        self.check_counted(label, &wasm, &exports, &reference, &mut report);
        self.check_slots(label, data, &mut report);
        report
    }

    /// Stack mode's calls through a table that never changes, counted at the site by slot
    /// (see `wprof_agent::entry_counts`): the default configuration's modules never make
    /// them (every table is exported, and GC's types leave the table of pairs to count).
    /// A second module from the same bytes, without GC and with a table at least, its
    /// tables kept to itself (no run observes a table), must behave as its original too.
    fn check_slots(&self, label: &str, data: &[u8], report: &mut CaseReport) {
        let config = wasm_smith::Config {
            gc_enabled: false,
            min_tables: 1,
            ..self.config.clone()
        };
        let mut u = arbitrary::Unstructured::new(data);
        let Ok(generated) = wasm_smith::Module::new(config, &mut u) else {
            return;
        };
        let Some(wasm) = without_table_exports(&generated.to_bytes()) else {
            return;
        };
        if Threads::of(&wasm).waits_on_shared_memory {
            return;
        }
        let Ok(original) = Module::new(&self.engine, &wasm) else {
            return;
        };
        let exports: Vec<String> = original.exports().map(|e| e.name().to_string()).collect();
        let reference = observe(&self.engine, &original, &exports, FUEL);
        if !inconclusive(&reference) {
            let label = format!("{label} (tables kept inside)");
            self.check_counted(&label, &wasm, &exports, &reference, report);
        }
    }

    /// Stack mode's module, the original with its call counters (see
    /// `wprof_agent::entry_counts`): it must behave as the original, and its edges' memory
    /// must read back.
    fn check_counted(
        &self,
        label: &str,
        wasm: &[u8],
        exports: &[String],
        reference: &Observed,
        report: &mut CaseReport,
    ) {
        let counted = match wprof_agent::entry_counts::count_entries(wasm) {
            Ok(counted) => counted,
            Err(e) => {
                report.refused.push(format!("{label} stack: {e}"));
                return;
            }
        };
        let module = match Module::new(&self.engine, &counted.bytes) {
            Ok(m) => m,
            Err(e) => {
                report.divergences.push(format!(
                    "{label} stack: the counted module does not compile: {e}"
                ));
                return;
            }
        };
        let got = observe_switching(&self.engine, &module, exports, 50 * FUEL, Turning::Nothing);
        if inconclusive(&got) {
            report.inconclusive += 1;
            return;
        }
        report.compared += 1;
        if got != *reference {
            report.divergences.push(format!(
                "{label} stack: {got:?}\n  vs original {reference:?}"
            ));
        }
    }
}

/// `wasm` with no table exported, if it exported one; every other section as it was.
fn without_table_exports(wasm: &[u8]) -> Option<Vec<u8>> {
    use wasmparser::{ExternalKind, Payload};
    let mut module = wasm_encoder::Module::new();
    let mut dropped = false;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let payload = payload.ok()?;
        if let Payload::ExportSection(reader) = &payload {
            let mut section = wasm_encoder::ExportSection::new();
            for export in reader.clone() {
                let export = export.ok()?;
                match export.kind {
                    ExternalKind::Table => dropped = true,
                    kind => {
                        section.export(export.name, kind.into(), export.index);
                    }
                }
            }
            module.section(&section);
        } else if let Some((id, range)) = payload.as_section() {
            module.section(&wasm_encoder::RawSection {
                id,
                data: &wasm[range],
            });
        }
    }
    dropped.then(|| module.finish())
}
