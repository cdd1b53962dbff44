//! Sample mode for a component: every period, where the program thread is, charged to the
//! core module running there and to that module's current-node cell.
//!
//! A component has a tree (and a current-node cell) per instrumented core module, and
//! several of them are on the stack at once (main calls the adapter, which calls the host),
//! so a cell alone cannot say who runs. The program thread's own timer interrupts it (the
//! same [`crate::run::interrupt`] session as a module's run) and the interrupted program
//! counter says which module's code runs ([`ComponentCode`]); that module's cell, read by
//! the same interruption, says in which context. A tick in no module's code (the host, the engine's
//! trampolines) goes to the module that last ran wasm, whose cell then holds the node of
//! the import it called; without ticks (no timer on this host), to the first module.
//! [`call_sampled`] runs the program with the sampler beside it; in adaptive mode each
//! module's walker learns of the ticks in that module's functions. In an interpreter (see
//! [`crate::prepare::component::interpreter`]) the ticks also walk its language's frames,
//! from the eval loop's state its module's probes keep in its tree memory, in the linear
//! memory the interpreter runs in.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use wasmtime::component::Component;
use wasmtime::Store;

use crate::run::adaptive::walker::Walker;
use crate::run::clock::Clock;
use crate::run::code::map::Running;
use crate::run::component::code::ComponentCode;
use crate::run::component::memory::MadeMemory;
use crate::run::component::state::{ComponentState, ModuleProbes};
use crate::run::inline::sampler::Watch;
use crate::run::inline::sampler::{SampleDesk, Samples};
use crate::run::inline::scripts::{ScriptTicks, Scripted};
use crate::run::interrupt::language::LanguageWalk;
use crate::run::interrupt::Target;
use crate::run::switches::Switchboard;
use crate::settings::sample_period::SamplePeriod;
use crate::settings::RunSettings;
use wprof_agent::ContextArena;

/// A cell that stays 0, for [`crate::run::interrupt::Session::begin`] (the component's
/// sampler reads the running module's own cell instead).
pub static NO_CELL: AtomicU32 = AtomicU32::new(0);

/// A module's current-node cell, in its tree memory.
#[derive(Debug, Clone, Copy)]
pub struct Cell(*const u32);

// SAFETY: the cell is only read, with atomic loads, while its memory lives (see `new`).
unsafe impl Send for Cell {}
// SAFETY: as above.
unsafe impl Sync for Cell {}

impl Cell {
    /// The cell of the tree memory at `base`.
    ///
    /// # Safety
    ///
    /// The memory must hold at least [`ContextArena::CURRENT`] + 4 bytes and stay where it
    /// is for as long as the cell is read.
    pub unsafe fn new(base: usize) -> Self {
        Cell((base + ContextArena::CURRENT as usize) as *const u32)
    }

    /// A cell that stays 0: a module without a tree.
    pub fn none() -> Self {
        Cell(NO_CELL.as_ptr())
    }

    fn read(self) -> u32 {
        // SAFETY: valid for 4-byte atomic loads (see `new`); the program writes it with
        // plain stores, which an atomic load of the same size reads whole.
        unsafe { AtomicU32::from_ptr(self.0.cast_mut()).load(Ordering::Relaxed) }
    }
}

/// The cells to begin the interrupt session with: the first, and the others, which each
/// tick records too (up to [`crate::run::interrupt::MORE_CELLS`]; later ones are read by
/// the sampler when it takes the tick).
pub fn cells_of(cells: &[Cell]) -> (*const u32, Vec<*const u32>) {
    let first = cells.first().map_or(NO_CELL.as_ptr().cast_const(), |c| c.0);
    let more = cells
        .iter()
        .skip(1)
        .take(crate::run::interrupt::MORE_CELLS)
        .map(|c| c.0)
        .collect();
    (first, more)
}

/// How much time the readings owe the next ticks before the cell alone takes it. A
/// module's sampler waits 16 readings; a component's waits longer, since the modules'
/// cells go back to their roots as calls return and so say less: with three busy loops
/// beside it, a Lua component's eval loop kept up to 13.6% of `shares.lua`'s time at 16
/// readings (the thread off its core longer than that), none at a second (eight runs
/// each, 2026-12-02).
const LATE_TICK_PATIENCE_PS: u64 = 1_000_000_000_000;

/// Samples the program thread from `started` (on `clock`) until `stop`: per module (index
/// in `cells`), the time charged to each of its readings, in picoseconds. In an
/// interpreter (`scripts`: its module's position), the ticks in its module's code also
/// resolve the language frames they walked (see [`crate::run::inline::scripts`]), kept in
/// that module's samples. With live probes, `switches` and each module's first component
/// id: a tick in a function whose switch is off is marked so (bit 0 of its cell, see
/// [`crate::run::inline::attribution`]). With `--serve`, `desk` gets a copy of the
/// readings when asked. Adaptive mode: each module's walker (`walkers`, by position)
/// learns of every tick in that module's functions and of every reading.
#[allow(clippy::too_many_arguments)]
pub fn sample(
    cells: &[Cell],
    asking: Option<(Target, &ComponentCode)>,
    switches: Option<(&Switchboard, &[Option<u32>])>,
    desk: Option<&SampleDesk<Vec<Samples>>>,
    walkers: &mut [Option<Walker>],
    (clock, period, stop, started): (&Clock, SamplePeriod, &AtomicBool, u64),
    scripts: Option<usize>,
) -> Vec<Samples> {
    let mut out: Vec<Samples> = vec![Samples::default(); cells.len()];
    if cells.is_empty() {
        return out;
    }
    let mut last = started;
    let mut seen = asking.map_or(0, |(target, _)| target.ticks());
    let mut running = 0usize;
    let mut now_period = period.base;
    let mut script_ticks: Option<ScriptTicks> = None;
    // Picoseconds read while no tick came, owed to the next ticks.
    let mut owed = 0u64;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let target = asking.map(|(target, _)| target);
        let period = crate::run::inline::sampler::period_now(
            period,
            clock,
            started,
            &mut now_period,
            target,
        );
        if !stopping {
            std::thread::park_timeout(period);
        }
        let now = clock.now_ps();
        let mut elapsed = now.saturating_sub(last);
        last = now;
        // Where the ticks since the last reading found the thread.
        let mut places: Vec<(usize, Option<u32>, Option<Running>, u32)> = Vec::new();
        if let Some((target, code)) = asking {
            let ticks = target.ticks();
            if script_ticks.is_none() && scripts.is_some() {
                script_ticks = target.language().map(ScriptTicks::new);
            }
            for tick in seen + 1..=ticks {
                let Some(at) = target.at(tick) else { continue };
                let (module, what) = match code.running(at.pc) {
                    Some((module, what)) if module < cells.len() => (module, what),
                    _ => (running, Running::Outside),
                };
                running = module;
                // The module's cell as the tick found it (see `cells_of`), else now.
                let mut cell = match module {
                    0 => Some(at.cell),
                    m => at.more.get(m - 1).copied(),
                };
                if let (Some((board, offsets)), Running::Function(f)) = (switches, what) {
                    let off = offsets
                        .get(module)
                        .copied()
                        .flatten()
                        .is_some_and(|offset| board.reads_off(offset + f));
                    if off {
                        cell = Some(cell.unwrap_or_else(|| cells[module].read()) | 1);
                    }
                }
                // The script's frames stand in the interpreter's module only: another
                // module's tree has none of its eval loop's contexts.
                let stack = match script_ticks.as_mut() {
                    Some(ticks) if scripts == Some(module) => ticks.stack_at(target, tick, what),
                    _ => 0,
                };
                places.push((module, cell, Some(what), stack));
            }
            seen = ticks;
        }
        // A reading no tick came in (the timer is late, or the thread was not running)
        // owes its time to the next ticks, as in a module's run (see
        // `crate::run::inline::sampler`), unless none comes within a second.
        let late = asking.is_some() && !stopping && owed < LATE_TICK_PATIENCE_PS;
        if places.is_empty() && late {
            owed += elapsed;
        } else {
            if places.is_empty() {
                places.push((running, None, None, 0));
            } else {
                out[running].answered += places.len() as u64;
            }
            elapsed += std::mem::take(&mut owed);
        }
        let share = elapsed / places.len().max(1) as u64;
        for (module, cell, what, stack) in places {
            let cell = cell.unwrap_or_else(|| cells[module].read());
            if stack != 0 {
                let scripted = out[module].scripted.entry(((cell, what), stack));
                scripted.or_default().add(Scripted::tick(share));
            }
            if let (Some(Running::Function(f)), Some(Some(walker))) =
                (what, walkers.get_mut(module))
            {
                walker.ran(cell, f, share);
            }
            *out[module].time.entry((cell, what)).or_default() += share;
        }
        for walker in walkers.iter_mut().flatten() {
            walker.tick(now);
        }
        out[0].readings += 1;
        if let Some(desk) = desk {
            desk.offer(&out);
        }
        if stopping {
            if let (Some(position), Some(ticks)) = (scripts, script_ticks) {
                out[position].script_stacks = Some(std::sync::Arc::new(ticks.finish()));
            }
            return out;
        }
    }
}

/// How the ticks walk the language of the interpreter `module` (`k` among the instrumented
/// modules, whose tree memory is among `trees`) in its linear memory `program`: its
/// module's position, and the walk; `None` for a module that is no interpreter.
fn language_walk(
    module: &ModuleProbes,
    k: usize,
    trees: &[(usize, MadeMemory)],
    program: &MadeMemory,
) -> Option<(usize, &'static LanguageWalk)> {
    let interpreter = module.interpreter.as_ref()?;
    let (_, tree) = trees.iter().find(|(t, _)| *t == k)?;
    let state = (tree.base + ContextArena::CAPTURED as usize) as *const u32;
    let size = program.size.load(Ordering::Acquire);
    // SAFETY: the tree memory holds the capture page (its size was checked against the
    // module's) and the program's memory `size` bytes; both live as long as the store, and
    // neither moves (see `crate::run::component::memory`). The walk is stopped before the
    // session ends, within the store's life (see `call_sampled`).
    let walk = unsafe {
        LanguageWalk::new(
            (**interpreter).clone(),
            state,
            program.base as *const u8,
            size,
        )
    };
    Some((module.position, Box::leak(Box::new(walk))))
}

/// Sample and adaptive mode: calls `run` with the program thread's timer asking where it is
/// and a sampler thread charging the time (see [`crate::run::component::sampler`]) and
/// telling each module's walker (adaptive mode, `walkers` by position): the result, and per
/// core module (by position) its samples.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call_sampled(
    store: &mut Store<ComponentState>,
    command: &wasmtime_wasi::p2::bindings::sync::Command,
    component: &Component,
    (modules, trees): (&[ModuleProbes], &[(usize, MadeMemory)]),
    program: Option<(usize, &MadeMemory)>,
    switches: Option<&Switchboard>,
    desk: Option<&SampleDesk<Vec<Samples>>>,
    walkers: &mut [Option<Walker>],
    settings: &RunSettings,
) -> (wasmtime::Result<Result<(), ()>>, Vec<Samples>) {
    let positions = modules
        .iter()
        .map(|m| m.position)
        .max()
        .map_or(0, |p| p + 1);
    let mut cells = vec![Cell::none(); positions];
    let mut indices = vec![None; positions];
    let mut probe_code = vec![None; positions];
    let mut offsets = vec![None; positions];
    for (k, memory) in trees {
        let module = &modules[*k];
        indices[module.position] = Some(module.indices);
        probe_code[module.position] = module.probe_code.clone();
        offsets[module.position] = Some(module.offset);
        // SAFETY: the tree memory holds the cell (its size was checked against the
        // module's), and stays where it is while the store lives, past the sampler.
        cells[module.position] = unsafe { Cell::new(memory.base) };
    }
    let code = crate::run::component::code::ComponentCode::of(
        component,
        &indices,
        probe_code,
        settings.mode,
    );
    let (first, more) = crate::run::component::sampler::cells_of(&cells);
    // SAFETY: every cell is in a tree memory that stays where it is while the store lives,
    // or is the static `NO_CELL`; the session ends before either goes.
    let session = unsafe {
        crate::run::interrupt::Session::begin_with(first, &more, settings.sample_period.base)
    };
    if session.is_none() || code.is_none() {
        crate::say!(
            "wprof: warning: sample mode cannot ask the program's thread where it is; each \
             reading goes to the component's first module"
        );
    }
    let asking = session.as_ref().map(|s| s.target()).zip(code.as_ref());
    // The ticks walk the interpreter's language too, when there is one.
    let scripts = program.and_then(|(k, memory)| language_walk(&modules[k], k, trees, memory));
    let walking = session.is_some()
        && scripts.is_some_and(|(_, walk)| crate::run::interrupt::walk_language(walk));
    let scripts = scripts.filter(|_| walking).map(|(position, _)| position);
    let clock = crate::run::clock::Clock::new();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (cells, clock, stop, period) = (&cells, &clock, &stop, settings.sample_period);
        let switches = switches.map(|board| (board, offsets.as_slice()));
        // Taken before the sampler thread starts, so that one scheduled late loses no
        // time (a run of a few hundred microseconds can end before it starts).
        let timing = (clock, period, stop, clock.now_ps());
        let sampler =
            s.spawn(move || sample(cells, asking, switches, desk, walkers, timing, scripts));
        let result = command.wasi_cli_run().call_run(&mut *store);
        stop.store(true, Ordering::Release);
        sampler.thread().unpark();
        let samples = sampler.join().unwrap_or_default();
        // The sampler has read the frames: the walk ends before the session does.
        if walking {
            crate::run::interrupt::stop_walking_language();
        }
        drop(session);
        (result, samples)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn without_ticks_each_reading_goes_to_the_first_modules_cell() {
        let memory = vec![0u32; 16];
        let base = memory.as_ptr() as usize;
        // SAFETY: 64 bytes, alive for the whole test.
        let cells = [unsafe { Cell::new(base) }, unsafe { Cell::new(base) }];
        // The cell (at byte 8) holds node 1024.
        // SAFETY: in bounds; nothing else reads it now.
        unsafe { AtomicU32::from_ptr((base + 8) as *mut u32).store(1024, Ordering::Relaxed) };
        let stop = AtomicBool::new(false);
        let clock = Clock::monotonic();
        let samples = std::thread::scope(|s| {
            let sampler = s.spawn(|| {
                sample(
                    &cells,
                    None,
                    None,
                    None,
                    &mut [],
                    (
                        &clock,
                        SamplePeriod::fixed(Duration::from_millis(1)),
                        &stop,
                        clock.now_ps(),
                    ),
                    None,
                )
            });
            std::thread::sleep(Duration::from_millis(20));
            stop.store(true, Ordering::Release);
            sampler.thread().unpark();
            sampler.join().unwrap()
        });
        assert_eq!(samples.len(), 2);
        assert!(samples[0].readings > 1);
        assert!(samples[1].time.is_empty());
        assert!(samples[0].time.values().sum::<u64>() > 0);
        assert!(samples[0]
            .time
            .keys()
            .all(|&(cell, what)| cell == 1024 && what.is_none()));
        drop(memory);
    }
}
