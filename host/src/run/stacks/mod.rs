//! Stack mode: the module runs with one counter at each function's entry and no other
//! probe, and a timer of its thread interrupts it every sample period; the signal handler
//! walks the thread's frame pointers ([`frames`]) and a reader thread turns each tick's
//! return addresses into the stack of the module's functions that were running, as `perf
//! record --call-graph fp` would. Time is sampled as perf samples it; each function's calls
//! are counted exactly by its entry counter ([`entry_counts`]), and edges and contexts get
//! no calls.
//!
//! Each tick is charged the time since the tick read before it (its own timestamps, taken by
//! the handler), so a tick lost to the ring (the reader was late) leaves its time to the
//! next one: the CPU time the thread used meanwhile, so that a thread the system took the
//! core from (a busy machine) is not charged the time it waited, and a thread blocked in
//! the engine (`memory.atomic.wait`, joining another thread) is charged nothing, as perf's
//! CPU clock charges it. A tick whose program counter is in the host (a WASI call, the
//! engine) is charged to the innermost of the module's functions on its stack, or, when
//! that function's call into the host is a direct call of an import, to the import, a
//! callee of it, with the whole time that passed, so that a program asleep in a WASI call
//! is seen waiting there (see [`StackSamples::resolve_imports`]).
//!
//! Every thread of a program that spawns threads is sampled so, by its own timer and its
//! own reader ([`while_walking`]).

mod added;
pub mod entry_counts;
mod found;
pub mod languages;
pub mod profile;
mod written_pages;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::run::clock::ThreadCpuClock;
use crate::run::code::map::CodeMap;
use crate::run::interrupt::frames::{self, Stack};
use crate::run::interrupt::{Session, Target, SLOTS_KEPT};
use crate::settings::sample_period::SamplePeriod;
pub use found::Found;
use found::{found_in, is_return};

/// The shortest the reader sleeps between two readings.
const MIN_NAP: Duration = Duration::from_micros(100);
/// After this many ticks in a row that found the thread blocked (10 ms at the default
/// period), its timer stops (a tick would only wake it) until its CPU clock says it runs
/// again. Not sooner: a worker waiting a moment for its next job would then run unsampled
/// for a while after it woke (on zstd_mt, 8 ticks put stack mode 7.2% from perf against
/// 4.9% with 50, while the ticks' own cost on the waiting threads went from 38.8 ms of the
/// run's 0.8 s without pausing to 5.4 ms and 9.6 ms).
const PAUSE_AFTER: u32 = 50;

/// While its timer is stopped, a thread that used this much CPU time since the reader last
/// looked has run: the timer starts again. A stopped thread is not woken for ticks, so its
/// CPU clock moves only when it runs; a waiting worker woken for nothing uses a few
/// microseconds. Not a period's worth: a program that woke from a read of stdin, wrote its
/// output in 50 µs and slept 50 ms in `poll_oneoff` had its sleep charged to the read.
const RESUME_AFTER_CPU_NS: u64 = 10_000;

/// A thread found blocked at two ticks in a row that used this much CPU time between them
/// ran in between: taking a tick costs a blocked thread a few microseconds (see
/// [`StackSamples::place`]). A worker woken, busy for a few milliseconds between two ticks
/// of a long period and waiting again had its work charged to no function before.
const RAN_BETWEEN_BLOCKED_TICKS_NS: u64 = 100_000;

/// A stack of the module's functions, outermost first, and where the innermost of them
/// called into the host when the tick was taken there (the return address into it).
pub type Path = (Vec<u32>, Option<usize>);

/// What the reader gathered.
#[derive(Debug, Clone, Default)]
pub struct StackSamples {
    /// Nanoseconds per stack: CPU time (see [`read`]).
    pub time: HashMap<Path, u64>,
    /// For stacks that ended in the host: the time that passed there beyond the thread's
    /// CPU time, which becomes the stack's when the host was running an import the
    /// program called (see [`StackSamples::resolve_imports`]).
    pub waited: HashMap<Path, u64>,
    /// Ticks read.
    pub ticks: u64,
    /// Ticks whose slot a later tick took before they were read (their time went to the
    /// next one read).
    pub lost: u64,
    /// Time of ticks with none of the module's functions on the stack (the host before
    /// or after the program, or a walk stopped by code without frame pointers), in
    /// nanoseconds: charged to no function.
    pub outside_ns: u64,
    /// Ticks whose stack was deeper than [`frames::DEPTH`] (their outermost functions are
    /// missing, so they start below the program's entry).
    pub truncated: u64,
    /// CPU time a thread blocked in the host used between two ticks that both found it
    /// blocked: taking the ticks (see [`StackSamples::place`]). Charged to no function.
    pub interrupting_ns: u64,
    /// Per import, once [`StackSamples::resolve_imports`] found them: the sampled time the
    /// thread spent in its calls, on the CPU and waiting (the wall time beyond the CPU
    /// time), in nanoseconds. Stack mode's host-call figures: sampled, as its functions'
    /// times are, rather than two readings of the thread's CPU clock around every call
    /// (system calls that cost SQLite on a file more than its reads did).
    pub imports: HashMap<u32, ImportTime>,
    /// CPU time per address of the innermost function (see [`Found::pc`]), in
    /// nanoseconds: the time per source line, once [`StackSamples::locate_addresses`]
    /// turned the addresses into the module's offsets.
    pub at_pc: HashMap<usize, u64>,
    /// CPU time of ticks at the counters' own instructions, left out of every function
    /// (see [`StackSamples::locate_addresses`]), in nanoseconds.
    pub counters_ns: u64,
    /// CPU time per offset in the original module's code, once located.
    pub at_offset: HashMap<u32, u64>,
    /// CPU time at addresses of no offset in the module (code the compiler added, such as
    /// a function's prologue), once located.
    pub unlocated_ns: u64,
    /// An interpreted language's functions, when the thread's ticks walked its frames (in
    /// the stacks, their ids are [`languages::LANGUAGE_FUNCTION`] and their index).
    pub languages: Option<languages::LanguageSamples>,
    /// CPU time per line of a script, by the script's function (its id in the stacks)
    /// and line: the time of ticks whose innermost function was the script's.
    pub script_lines: HashMap<(u32, i32), u64>,
    /// CPU time per script function (its id in the stacks) and address of the eval loop
    /// running it, until [`StackSamples::locate_addresses`] found which addresses are the
    /// counters'.
    pub script_pcs: HashMap<(u32, usize), u64>,
}

/// The sampled time of one import's calls (see [`StackSamples::imports`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportTime {
    /// On the CPU, nanoseconds.
    pub cpu_ns: u64,
    /// Off it (blocked, asleep, or waiting for a processor), nanoseconds.
    pub waited_ns: u64,
}

impl StackSamples {
    /// What the walks could not place, for the profile, with `others`' (the spawned
    /// threads').
    pub fn record<'a>(
        &'a self,
        others: impl IntoIterator<Item = &'a StackSamples>,
    ) -> crate::profile::StackWalkRecord {
        let mut record = crate::profile::StackWalkRecord::default();
        for samples in std::iter::once(self).chain(others) {
            record.outside_ns += samples.outside_ns;
            record.interrupting_ns += samples.interrupting_ns;
            record.counters_ns += samples.counters_ns;
            record.lost += samples.lost;
            record.truncated += samples.truncated;
        }
        record
    }

    /// Charges a tick that found `path` (`None`: outside the module) after `wall_ns` passed
    /// and the thread used `cpu_ns`; whether the thread was blocked: in the host for most
    /// of that time (it used less than half of it). A blocked tick gives the CPU time used
    /// to `ran`, where the tick before found the thread running: it ran there until it
    /// blocked. When the tick before found it blocked as well (`ran` is `None`), that time
    /// is the interruptions' own (a blocked thread woken to take a tick and blocking again)
    /// and is kept apart, unless it is more than taking a tick costs
    /// ([`RAN_BETWEEN_BLOCKED_TICKS_NS`]): the thread woke, ran and blocked again between
    /// the two ticks, and the CPU time goes to the function that blocked again, the last
    /// known to have run. What passed beyond the CPU time in the host is kept as waited.
    fn place(
        &mut self,
        found: Option<&Found>,
        ran: Option<&Found>,
        wall_ns: u64,
        cpu_ns: u64,
    ) -> bool {
        let Some(found) = found else {
            self.outside_ns += wall_ns;
            return false;
        };
        let path = &found.path;
        let cpu_ns = cpu_ns.min(wall_ns);
        let in_host = path.1.is_some();
        let blocked = in_host && cpu_ns < wall_ns / 2;
        match (blocked, ran) {
            (false, _) => self.add_time(found, cpu_ns),
            (true, Some(ran)) => self.add_time(ran, cpu_ns),
            (true, None) if cpu_ns >= RAN_BETWEEN_BLOCKED_TICKS_NS => {
                let ran = Found {
                    path: (path.0.clone(), None),
                    ..found.clone()
                };
                self.add_time(&ran, cpu_ns)
            }
            (true, None) => self.interrupting_ns += cpu_ns,
        }
        if in_host && wall_ns > cpu_ns {
            add(&mut self.waited, path, wall_ns - cpu_ns);
        }
        blocked
    }

    /// CPU time of `found`'s stack, spent at its address (and line of a script; the address
    /// is the eval loop's where a script's function stands in its place, whose lines are
    /// the script's, not the interpreter's).
    fn add_time(&mut self, found: &Found, ns: u64) {
        add(&mut self.time, &found.path, ns);
        let in_script = found
            .path
            .0
            .last()
            .is_some_and(|&f| f & languages::LANGUAGE_FUNCTION != 0);
        match (in_script, found.path.0.last()) {
            (true, Some(&function)) => {
                *self.script_pcs.entry((function, found.pc)).or_default() += ns
            }
            _ => *self.at_pc.entry(found.pc).or_default() += ns,
        }
        if let (Some(line), Some(&function)) = (found.script_line, found.path.0.last()) {
            *self.script_lines.entry((function, line)).or_default() += ns;
        }
    }

    /// Turns the addresses of [`StackSamples::at_pc`] into offsets of the original
    /// module's code with `locate` (for sorted addresses): [`StackSamples::at_offset`]; the
    /// time at no offset, [`StackSamples::unlocated_ns`].
    ///
    /// The time at a counter's own instructions ([`Located::Counter`]) is wprof's, not the
    /// program's, which would not spend it uncounted: it is left out
    /// ([`StackSamples::counters_ns`]). Which of a function's stacks each such tick found
    /// is not kept, so each stack ending in the function (`function_of` an address says
    /// which; a script's function, [`StackSamples::script_pcs`]) gives up the same share of
    /// its time as the function's ticks at counters are of all its ticks.
    pub fn locate_addresses(
        &mut self,
        function_of: impl Fn(usize) -> Option<u32>,
        locate: impl FnOnce(&[usize]) -> Vec<Located>,
    ) {
        let pcs: Vec<(usize, u64)> = self.at_pc.drain().collect();
        let scripts: Vec<((u32, usize), u64)> = self.script_pcs.drain().collect();
        if pcs.is_empty() && scripts.is_empty() {
            return;
        }
        let mut addresses: Vec<usize> = pcs.iter().map(|(pc, _)| *pc).collect();
        addresses.extend(scripts.iter().map(|((_, pc), _)| *pc));
        addresses.sort_unstable();
        addresses.dedup();
        let located: HashMap<usize, Located> =
            addresses.iter().copied().zip(locate(&addresses)).collect();
        let located = |pc: usize| located.get(&pc).copied().unwrap_or(Located::Nowhere);
        // Per function: its ticks' time at counters, then that of the stacks ending in it.
        let mut counting: HashMap<u32, (u64, u64)> = HashMap::new();
        for ((function, pc), ns) in scripts {
            if located(pc) == Located::Counter {
                counting.entry(function).or_default().0 += ns;
            }
        }
        for (pc, ns) in pcs {
            match located(pc) {
                Located::Offset(offset) => *self.at_offset.entry(offset).or_default() += ns,
                Located::Counter => match function_of(pc) {
                    Some(function) => counting.entry(function).or_default().0 += ns,
                    None => self.unlocated_ns += ns,
                },
                Located::Nowhere => self.unlocated_ns += ns,
            }
        }
        if counting.is_empty() {
            return;
        }
        for (path, ns) in &self.time {
            if let Some((_, all)) = innermost(path).and_then(|f| counting.get_mut(f)) {
                *all += ns;
            }
        }
        for (path, ns) in self.time.iter_mut() {
            let Some(&(counters, all)) = innermost(path).and_then(|f| counting.get(f)) else {
                continue;
            };
            let left_out =
                (u128::from(*ns) * u128::from(counters.min(all)) / u128::from(all)) as u64;
            *ns -= left_out;
            self.counters_ns += left_out;
        }
    }

    /// Gives each stack that ended in the host the import its innermost function called
    /// there, where that call is a `call` of an import (read from the module's bytes at
    /// the call's offset, which `offsets` finds for sorted return addresses), with the time
    /// the import waited as well as its CPU time (a sleep shows where the program slept);
    /// other calls into the host (the engine's own, such as `memory.atomic.wait`, an import
    /// reached through a table) leave their CPU time with the function, as perf would.
    pub fn resolve_imports(
        &mut self,
        bytes: &[u8],
        imports: u32,
        offsets: impl FnOnce(&[usize]) -> Vec<Option<u32>>,
    ) {
        let mut calls: Vec<usize> = self
            .time
            .keys()
            .chain(self.waited.keys())
            .filter_map(|(_, call)| call.map(|at| at.wrapping_sub(1)))
            .collect();
        calls.sort_unstable();
        calls.dedup();
        let found: HashMap<usize, Option<u32>> = match calls.is_empty() {
            true => HashMap::new(),
            false => calls
                .iter()
                .zip(offsets(&calls))
                .map(|(&at, offset)| (at, offset.and_then(|o| called_import(bytes, o, imports))))
                .collect(),
        };
        let import_of = |call: Option<usize>| {
            call.and_then(|at| found.get(&at.wrapping_sub(1)).copied().flatten())
        };
        for ((mut functions, call), ns) in std::mem::take(&mut self.time) {
            if let Some(import) = import_of(call) {
                functions.push(import);
                self.imports.entry(import).or_default().cpu_ns += ns;
            }
            *self.time.entry((functions, None)).or_default() += ns;
        }
        for ((mut functions, call), ns) in std::mem::take(&mut self.waited) {
            if let Some(import) = import_of(call) {
                functions.push(import);
                self.imports.entry(import).or_default().waited_ns += ns;
                *self.time.entry((functions, None)).or_default() += ns;
            }
        }
    }
}

/// The function a stack ended in, where it did not end in a call into the host.
fn innermost((functions, call): &Path) -> Option<&u32> {
    functions.last().filter(|_| call.is_none())
}

/// Where a sampled address of the module's code is, for
/// [`StackSamples::locate_addresses`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Located {
    /// At this offset of the original module's code.
    Offset(u32),
    /// In a counter the default mode added.
    Counter,
    /// Nowhere in the module's code that is known.
    Nowhere,
}

/// Adds `ns` to `path`'s figure in `map` (the path copied only when it is new).
fn add(map: &mut HashMap<Path, u64>, path: &Path, ns: u64) {
    match map.get_mut(path) {
        Some(figure) => *figure += ns,
        None => {
            map.insert(path.clone(), ns);
        }
    }
}

/// The import a `call` instruction at `offset` of `bytes` calls, if it is one.
fn called_import(bytes: &[u8], offset: u32, imports: u32) -> Option<u32> {
    let rest = bytes.get(offset as usize..)?;
    if rest.first() != Some(&0x10) {
        return None;
    }
    let mut reader = wasmparser::BinaryReader::new(&rest[1..], 0);
    let callee = reader.read_var_u32().ok()?;
    (callee < imports).then_some(callee)
}

/// Runs `run` on this thread while its stacks are sampled every `period` and mapped with
/// `code`: what `run` returned, and the samples (`None`, and `run` ran unsampled, where this
/// thread cannot be interrupted: see [`Session::begin_walking`]). `run` may mark where the
/// program's part of it ends ([`WalkEnd::mark`]): what the thread does after, wprof's own
/// work, is not the program's time.
pub fn while_walking<R>(
    code: &CodeMap,
    period: SamplePeriod,
    run: impl FnOnce(&WalkEnd) -> R,
) -> (R, Option<StackSamples>) {
    let end = WalkEnd::default();
    let Some(session) = Session::begin_walking(period.base) else {
        return (run(&end), None);
    };
    let stop = AtomicBool::new(false);
    let started = (frames::monotonic_ns(), frames::thread_cpu_ns());
    let cpu_clock = ThreadCpuClock::of_this_thread();
    let target = session.target();
    std::thread::scope(|s| {
        let (stop, end) = (&stop, &end);
        let reader = std::thread::Builder::new()
            .name("wprof stacks".into())
            .spawn_scoped(s, move || {
                read(target, code, (stop, end), started, period, cpu_clock)
            });
        let Ok(reader) = reader else {
            drop(session);
            return (run(end), None);
        };
        // Stops the reader however `run` ends: the scope waits for it, even in a panic.
        let stopping = Stopping(stop, reader.thread().clone());
        let result = run(end);
        drop(stopping);
        let samples = reader.join().ok();
        drop(session);
        (result, samples)
    })
}

/// Where the program's part of a walked run ends (a spawned thread's entry returned), as
/// the walked thread marks it: the ticks after it find wprof's own work, and the time from
/// the last tick before it to it is the last the program's.
#[derive(Debug, Default)]
pub struct WalkEnd {
    /// When, on [`frames::monotonic_ns`]'s clock; 0 until marked.
    at_ns: AtomicU64,
    /// The thread's CPU time then ([`frames::thread_cpu_ns`]).
    cpu_ns: AtomicU64,
}

impl WalkEnd {
    /// Marks the end, on the walked thread.
    pub fn mark(&self) {
        self.cpu_ns
            .store(frames::thread_cpu_ns(), Ordering::Relaxed);
        self.at_ns.store(frames::monotonic_ns(), Ordering::Release);
    }

    /// When the end was marked, and the thread's CPU time then.
    fn get(&self) -> Option<(u64, u64)> {
        let at = self.at_ns.load(Ordering::Acquire);
        (at != 0).then(|| (at, self.cpu_ns.load(Ordering::Relaxed)))
    }
}

/// Sets its flag and wakes its thread when dropped.
struct Stopping<'a>(&'a AtomicBool, std::thread::Thread);

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
        self.1.unpark();
    }
}

/// Reads the ticks of `target` until `stop` is set, then once more, mapping their stacks
/// with `code`; the ticks began at `started` (on [`frames::monotonic_ns`]'s clock, and the
/// program thread's CPU clock, [`frames::thread_cpu_ns`]).
/// The timer's period follows `period` as the program runs on (see
/// [`crate::settings::sample_period`]), and the reader wakes often enough that the ring of ticks
/// never fills. Whoever sets `stop` should unpark the reading thread. What passed after the
/// last tick goes to that tick's stack: up to the end the thread marked in `end` (ticks
/// after it are dropped), else up to `stop`, a period at most. After [`PAUSE_AFTER`] ticks in a row
/// that found the thread blocked, the timer stops until `cpu_clock` (the thread's) shows it
/// running again: what it waited meanwhile goes where it blocked, as the ticks would have
/// put it (without the clock the timer never stops).
pub fn read(
    target: Target,
    code: &CodeMap,
    (stop, end): (&AtomicBool, &WalkEnd),
    (started_ns, started_cpu_ns): (u64, u64),
    period: SamplePeriod,
    cpu_clock: Option<ThreadCpuClock>,
) -> StackSamples {
    let mut current = period.base;
    let mut samples = StackSamples::default();
    let mut stack = Stack::default();
    let mut last_read = 0u64;
    let mut last_at = started_ns;
    let mut last_cpu = started_cpu_ns;
    // What the last tick read found, and whether the thread was blocked.
    let mut last: Option<(Found, bool)> = None;
    let mut blocked_in_a_row = 0u32;
    // While the timer is stopped: the thread's CPU time when the reader last looked.
    let mut paused: Option<u64> = None;
    // Once the thread's ticks walk an interpreted language's frames.
    let mut language: Option<languages::LanguageReader> = None;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if !stopping {
            // Paused, the reader looks every four periods whether the thread runs again.
            let ticks_per_nap = if paused.is_some() {
                4
            } else {
                SLOTS_KEPT as u32 / 4
            };
            std::thread::park_timeout((current * ticks_per_nap).max(MIN_NAP));
        }
        if let (Some(looked), Some(clock)) = (paused, cpu_clock) {
            // At the end, the program's part ends where the thread marked it.
            let ended = end.get().filter(|_| stopping);
            let cpu_now = match ended {
                Some((_, cpu)) => cpu,
                None => clock.now_ps().map_or(looked, |ps| ps / 1000),
            };
            let runs = cpu_now.saturating_sub(looked) >= RESUME_AFTER_CPU_NS;
            if runs || stopping {
                // The time since the last tick: what the thread waited goes where it
                // blocked (an import's sleep shows), and the CPU time it has used since it
                // woke is left to the next tick (from as long before now as it used).
                let now_ns = ended.map_or_else(frames::monotonic_ns, |(at, _)| at);
                let used = cpu_now.saturating_sub(last_cpu);
                if let Some((found, true)) = &last {
                    let waited = now_ns.saturating_sub(last_at).saturating_sub(used);
                    add(&mut samples.waited, &found.path, waited);
                }
                last_at = last_at.max(now_ns.saturating_sub(used));
                blocked_in_a_row = 0;
                paused = None;
                if !stopping {
                    target.resume();
                }
            } else {
                paused = Some(cpu_now);
            }
        }
        let running = frames::monotonic_ns().saturating_sub(started_ns);
        let now = period.at(Duration::from_nanos(running));
        if now != current {
            current = now;
            target.set_period(now);
        }
        let newest = target.ticks();
        // Ticks more than a ring behind are gone already.
        let first = (last_read + 1).max(newest.saturating_sub(SLOTS_KEPT as u64 - 1));
        samples.lost += first - (last_read + 1).min(first);
        for tick in first..=newest {
            if !target.stack_at(tick, &mut stack) {
                samples.lost += 1;
                continue;
            }
            if end.get().is_some_and(|(at, _)| stack.at_ns > at) {
                // wprof's own work after the program's part.
                continue;
            }
            let wall = stack.at_ns.saturating_sub(last_at);
            let cpu = stack.cpu_ns.saturating_sub(last_cpu);
            last_at = last_at.max(stack.at_ns);
            last_cpu = last_cpu.max(stack.cpu_ns);
            samples.ticks += 1;
            samples.truncated += u64::from(stack.truncated);
            let mut found = found_in(code, &stack, is_return);
            if language.is_none() {
                language = target.language().map(languages::LanguageReader::new);
            }
            if let (Some(found), Some(reader), Some((frames, truncated))) =
                (found.as_mut(), language.as_mut(), stack.language.as_ref())
            {
                found.script_line = reader.splice(&mut found.path.0, frames, *truncated);
            }
            let ran = last
                .as_ref()
                .filter(|(_, blocked)| !blocked)
                .map(|(f, _)| f);
            let blocked = samples.place(found.as_ref(), ran, wall, cpu);
            blocked_in_a_row = if blocked { blocked_in_a_row + 1 } else { 0 };
            last = found.map(|f| (f, blocked));
        }
        last_read = last_read.max(newest);
        if blocked_in_a_row >= PAUSE_AFTER && paused.is_none() && !stopping {
            if let Some(cpu_now) = cpu_clock.and_then(|c| c.now_ps()) {
                target.pause();
                paused = Some(cpu_now / 1000);
            }
        }
        if stopping {
            match (end.get(), &last) {
                // From the last tick to the marked end: a tick of that tick's stack (a
                // thread whose timer was paused while it waited, for a lock or for a core,
                // may have run its whole work since).
                (Some((at, cpu)), Some((found, _))) => {
                    let ran = last.as_ref().filter(|(_, blocked)| !blocked);
                    samples.place(
                        Some(found),
                        ran.map(|(f, _)| f),
                        at.saturating_sub(last_at),
                        cpu.saturating_sub(last_cpu),
                    );
                }
                // Unmarked (the program's first thread, walked to its end): the time since
                // the last tick, on its stack, up to a period (not a tick of its own).
                (None, Some((found, _))) => {
                    let tail = frames::monotonic_ns()
                        .saturating_sub(last_at)
                        .min(current.as_nanos() as u64);
                    samples.place(Some(found), None, tail, tail);
                }
                (Some((at, _)), None) => samples.outside_ns += at.saturating_sub(last_at),
                (None, None) => {
                    samples.outside_ns += frames::monotonic_ns()
                        .saturating_sub(last_at)
                        .min(current.as_nanos() as u64)
                }
            }
            samples.languages = language.map(languages::LanguageReader::finish);
            return samples;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tick's find of `path`, at address 0.
    fn at(path: &Path) -> Found {
        Found {
            path: path.clone(),
            pc: 0,
            script_line: None,
        }
    }

    #[test]
    fn a_thread_that_ran_between_two_blocked_ticks_keeps_its_cpu_time() {
        let mut samples = StackSamples::default();
        // Blocked in the host (a return address into function 2) at both ticks.
        let blocked: Path = (vec![1, 2], Some(0x105));
        // 10 ms passed and the thread used 3 ms: it woke, ran and blocked again.
        assert!(samples.place(Some(&at(&blocked)), None, 10_000_000, 3_000_000));
        assert_eq!(samples.time.get(&(vec![1, 2], None)), Some(&3_000_000));
        assert_eq!(samples.interrupting_ns, 0);
        // 10 ms passed and it used 5 µs: taking the tick, no function's.
        assert!(samples.place(Some(&at(&blocked)), None, 10_000_000, 5_000));
        assert_eq!(samples.interrupting_ns, 5_000);
        assert_eq!(samples.time.values().sum::<u64>(), 3_000_000);
        // With a tick that found it running before, the CPU time goes there.
        let ran: Path = (vec![1, 3], None);
        assert!(samples.place(Some(&at(&blocked)), Some(&at(&ran)), 10_000_000, 3_000_000));
        assert_eq!(samples.time.get(&ran), Some(&3_000_000));
    }

    #[test]
    fn a_host_call_of_an_import_becomes_the_imports_time() {
        // Function 1 (the only import is 0) calls import 0 at offset 3 and something
        // else (a `call_indirect`) at offset 6.
        let bytes = [0, 0, 0, 0x10, 0x00, 0, 0x11, 0x00, 0x00];
        let mut samples = StackSamples::default();
        samples.time.insert((vec![2, 1], Some(0x105)), 10);
        samples.time.insert((vec![2, 1], Some(0x108)), 20);
        samples.time.insert((vec![2, 1], None), 5);
        // Waiting counts in the import, not in the engine's own calls, even where the
        // stack has no CPU time of its own.
        samples.waited.insert((vec![2, 1], Some(0x105)), 100);
        samples.waited.insert((vec![2, 1], Some(0x108)), 200);
        samples.waited.insert((vec![4], Some(0x105)), 7);
        samples.resolve_imports(&bytes, 1, |calls| {
            assert_eq!(calls, [0x104, 0x107]);
            vec![Some(3), Some(6)]
        });
        assert_eq!(samples.time.get(&(vec![2, 1, 0], None)), Some(&110));
        assert_eq!(samples.time.get(&(vec![2, 1], None)), Some(&25));
        assert_eq!(samples.time.get(&(vec![4, 0], None)), Some(&7));
        assert_eq!(samples.time.len(), 3);
        assert!(samples.waited.is_empty());
        // The import's own figures: its CPU time and its waits, apart.
        assert_eq!(
            samples.imports.get(&0),
            Some(&ImportTime {
                cpu_ns: 10,
                waited_ns: 107
            })
        );
        assert_eq!(samples.imports.len(), 1);
    }

    #[test]
    fn time_at_the_counters_is_left_out_of_each_stack_of_its_function() {
        // Function 1 ran under 2 (600 ns) and under 3 (400 ns), and called import 0
        // (50 ns, which its counters have no part in); of its ticks, 200 ns were at a
        // counter (0x110), 800 ns at offset 7 (0x120). Function 3's 90 ns at offset 9
        // (0x130); 5 ns at an address nothing places (0x140).
        let mut samples = StackSamples::default();
        samples.time.insert((vec![2, 1], None), 600);
        samples.time.insert((vec![3, 1], None), 400);
        samples.time.insert((vec![2, 1, 0], None), 50);
        samples.time.insert((vec![3], None), 95);
        for (pc, ns) in [
            (0x110, 200),
            (0x120, 800),
            (0x130, 90),
            (0x140, 5),
            (0x150, 50),
        ] {
            samples.at_pc.insert(pc, ns);
        }
        // A script's function under 2, run by the eval loop (function 1): 300 ns, of
        // which 60 at the loop's counter.
        let script = languages::LANGUAGE_FUNCTION | 5;
        samples.time.insert((vec![2, script], None), 300);
        samples.script_pcs.insert((script, 0x110), 60);
        samples.script_pcs.insert((script, 0x120), 240);
        let function_of = |pc: usize| Some(if pc == 0x130 || pc == 0x140 { 3 } else { 1 });
        samples.locate_addresses(function_of, |pcs| {
            assert_eq!(pcs, [0x110, 0x120, 0x130, 0x140, 0x150]);
            vec![
                Located::Counter,
                Located::Offset(7),
                Located::Offset(9),
                Located::Nowhere,
                Located::Offset(4),
            ]
        });
        // A fifth of function 1's own time, from each of its stacks alike.
        assert_eq!(samples.time.get(&(vec![2, 1], None)), Some(&480));
        assert_eq!(samples.time.get(&(vec![3, 1], None)), Some(&320));
        assert_eq!(samples.time.get(&(vec![2, 1, 0], None)), Some(&50));
        assert_eq!(samples.time.get(&(vec![3], None)), Some(&95));
        assert_eq!(samples.time.get(&(vec![2, script], None)), Some(&240));
        assert_eq!(samples.counters_ns, 260);
        assert_eq!(samples.at_offset.get(&7), Some(&800));
        assert_eq!(samples.at_offset.values().sum::<u64>(), 940);
        assert_eq!(samples.unlocated_ns, 5);
        assert_eq!(samples.record([]).counters_ns, 260);
        assert!(samples.script_pcs.is_empty());
    }

    #[test]
    fn a_tick_blocked_in_the_host_gives_its_cpu_time_to_where_the_thread_ran() {
        let work: Path = (vec![1, 2], None);
        let wait: Path = (vec![1, 3], Some(0x40));
        let mut samples = StackSamples::default();
        // Running: its CPU time, however long the tick took (a busy machine).
        assert!(!samples.place(Some(&at(&work)), None, 100, 60));
        // Blocked in the host most of the time: the CPU time to the work before it, the
        // rest kept as waited.
        assert!(samples.place(Some(&at(&wait)), Some(&at(&work)), 100, 30));
        // Blocked again: the CPU time is the ticks' own.
        assert!(samples.place(Some(&at(&wait)), None, 100, 4));
        // Busy in the host (a write): its own.
        assert!(!samples.place(Some(&at(&wait)), Some(&at(&work)), 100, 80));
        // Nothing of the module on the stack.
        assert!(!samples.place(None, Some(&at(&work)), 100, 100));
        assert_eq!(samples.time.get(&work), Some(&90));
        assert_eq!(samples.time.get(&wait), Some(&80));
        assert_eq!(samples.waited.get(&wait), Some(&(70 + 96 + 20)));
        assert_eq!(samples.waited.get(&work), None);
        assert_eq!(samples.interrupting_ns, 4);
        assert_eq!(samples.outside_ns, 100);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_function_without_its_own_frame_keeps_its_caller() {
        // Function 5 called by 6, called by 7.
        let code = CodeMap::original_of_ranges(vec![
            (0x100, 0x200, 5),
            (0x200, 0x300, 6),
            (0x300, 0x400, 7),
        ]);
        let into_6 = 0x250;
        // The frame pointer is still 6's: the walk found the return into 7 only.
        let unframed_at = |pc, unframed| Stack {
            pcs: vec![pc, 0x350],
            unframed,
            ..Stack::default()
        };
        let never = |_| false;
        let whole = Some((vec![7, 6, 5], None));
        // At the first instruction the return address is at the stack pointer; at the
        // second, behind the frame pointer just pushed; at a return, at the stack pointer.
        let first = unframed_at(0x100, [into_6, 0]);
        assert_eq!(found_in(&code, &first, never).map(|f| f.path), whole);
        let second = unframed_at(0x101, [0x7ffd_0000, into_6]);
        assert_eq!(found_in(&code, &second, never).map(|f| f.path), whole);
        let at_return = unframed_at(0x180, [into_6, 0]);
        assert_eq!(
            found_in(&code, &at_return, |pc| pc == 0x180).map(|f| f.path),
            whole
        );
        // Elsewhere the function has its frame, and the walk its caller.
        let framed = Stack {
            pcs: vec![0x180, into_6, 0x350],
            unframed: [0x1234, 0],
            ..Stack::default()
        };
        assert_eq!(found_in(&code, &framed, never).map(|f| f.path), whole);
        // A word that returns into no function adds nothing.
        let stray = unframed_at(0x100, [0x9999, 0]);
        assert_eq!(
            found_in(&code, &stray, never).map(|f| f.path),
            Some((vec![7, 5], None))
        );
    }

    #[test]
    fn only_a_call_of_an_import_is_one() {
        let bytes = [0x10, 0x85, 0x01, 0x10, 0x02, 0x11];
        assert_eq!(called_import(&bytes, 0, 200), Some(133));
        assert_eq!(called_import(&bytes, 0, 100), None);
        assert_eq!(called_import(&bytes, 3, 3), Some(2));
        assert_eq!(called_import(&bytes, 5, 3), None);
        assert_eq!(called_import(&bytes, 9, 3), None);
    }
}
