//! Stack mode: the original module runs without a probe, and a timer of its thread
//! interrupts it every sample period; the signal handler walks the thread's frame pointers
//! ([`frames`]) and a reader thread turns each tick's return addresses into the stack of the
//! module's functions that were running, as `perf record --call-graph fp` would. Time is
//! sampled as perf samples it; calls are not counted (no probe runs).
//!
//! Each tick is charged the time since the tick read before it (its own timestamps, taken by
//! the handler), so a tick lost to the ring (the reader was late) leaves its time to the
//! next one: the CPU time the thread used meanwhile when the tick found it in the module's
//! code, so that a thread the system took the core from (a busy machine) is not charged the
//! time it waited; the time that passed when it found it in the host, so that a program
//! asleep in a WASI call is seen waiting there. A tick whose program counter is in
//! the host (a WASI call, the engine) is charged to the innermost of the module's
//! functions on its stack, or, when that function's call into the host is a direct call of
//! an import, to the import, a callee of it (see [`StackSamples::resolve_imports`]).

pub mod profile;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::run::code_map::{CodeMap, Running};
use crate::run::interrupt::frames::{self, Stack};
use crate::run::interrupt::{Target, SLOTS_KEPT};
use crate::sample_period::SamplePeriod;

/// The shortest the reader sleeps between two readings.
const MIN_NAP: Duration = Duration::from_micros(100);

/// A stack of the module's functions, outermost first, and where the innermost of them
/// called into the host when the tick was taken there (the return address into it).
pub type Path = (Vec<u32>, Option<usize>);

/// What the reader gathered.
#[derive(Debug, Clone, Default)]
pub struct StackSamples {
    /// Nanoseconds per stack.
    pub time: HashMap<Path, u64>,
    /// Ticks read.
    pub ticks: u64,
    /// Ticks whose slot a later tick took before they were read (their time went to the
    /// next one read).
    pub lost: u64,
    /// Ticks with none of the module's functions on the stack (the host before or after
    /// the program, or a walk stopped by code without frame pointers) and their time.
    pub outside: u64,
    /// Their time, in nanoseconds: charged to no function.
    pub outside_ns: u64,
    /// Ticks whose stack was deeper than [`frames::DEPTH`] (their outermost functions are
    /// missing, so they start below the program's entry).
    pub truncated: u64,
}

impl StackSamples {
    /// Charges the stack of `stack` (the program counter, then return addresses), mapped to
    /// functions by `code`: `cpu_ns` when it was in the module's code, else `wall_ns`.
    fn place(&mut self, code: &CodeMap, stack: &Stack, wall_ns: u64, cpu_ns: u64) {
        let mut functions = Vec::with_capacity(stack.pcs.len());
        let mut host_call = None;
        for (i, &pc) in stack.pcs.iter().enumerate() {
            // A return address is just past its call: the byte before it is the call's.
            let address = if i == 0 { pc } else { pc.wrapping_sub(1) };
            if let Running::Function(id) = code.running(address) {
                if functions.is_empty() && i > 0 {
                    host_call = Some(pc);
                }
                functions.push(id);
            }
        }
        if functions.is_empty() {
            self.outside += 1;
            self.outside_ns += wall_ns;
            return;
        }
        let ns = match host_call {
            Some(_) => wall_ns,
            None => cpu_ns.min(wall_ns),
        };
        functions.reverse();
        self.truncated += u64::from(stack.truncated);
        *self.time.entry((functions, host_call)).or_default() += ns;
    }

    /// Gives each stack that ended in the host the import its innermost function called
    /// there, where that call is a `call` of an import (read from the module's bytes at
    /// the call's offset, which `offsets` finds for sorted return addresses); other calls
    /// into the host (the engine's own, an import reached through a table) leave the time
    /// with the function.
    pub fn resolve_imports(
        &mut self,
        bytes: &[u8],
        imports: u32,
        offsets: impl FnOnce(&[usize]) -> Vec<Option<u32>>,
    ) {
        let mut calls: Vec<usize> = self
            .time
            .keys()
            .filter_map(|(_, call)| call.map(|at| at.wrapping_sub(1)))
            .collect();
        if calls.is_empty() {
            return;
        }
        calls.sort_unstable();
        calls.dedup();
        let found: HashMap<usize, Option<u32>> = calls
            .iter()
            .zip(offsets(&calls))
            .map(|(&at, offset)| (at, offset.and_then(|o| called_import(bytes, o, imports))))
            .collect();
        let time = std::mem::take(&mut self.time);
        for ((mut functions, call), ns) in time {
            if let Some(import) =
                call.and_then(|at| found.get(&at.wrapping_sub(1)).copied().flatten())
            {
                functions.push(import);
            }
            *self.time.entry((functions, None)).or_default() += ns;
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

/// Reads the ticks of `target` until `stop` is set, then once more, mapping their stacks
/// with `code`; the ticks began at `started` (on [`frames::monotonic_ns`]'s clock, and the
/// program thread's CPU clock, [`frames::thread_cpu_ns`]).
/// The timer's period follows `period` as the program runs on (see
/// [`crate::sample_period`]), and the reader wakes often enough that the ring of ticks
/// never fills. Whoever sets `stop` should unpark the reading thread. What is read after the
/// last tick, up to `stop`, goes to that tick's stack.
pub fn read(
    target: Target,
    code: &CodeMap,
    stop: &AtomicBool,
    (started_ns, started_cpu_ns): (u64, u64),
    period: SamplePeriod,
) -> StackSamples {
    let mut current = period.base;
    let mut samples = StackSamples::default();
    let mut stack = Stack::default();
    let mut last_read = 0u64;
    let mut last_at = started_ns;
    let mut last_cpu = started_cpu_ns;
    // The last tick placed (its buffer swapped with the reading one: no copy per tick).
    let mut last = Stack::default();
    let mut placed_any = false;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if !stopping {
            std::thread::park_timeout((current * (SLOTS_KEPT as u32 / 4)).max(MIN_NAP));
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
            let wall = stack.at_ns.saturating_sub(last_at);
            let cpu = stack.cpu_ns.saturating_sub(last_cpu);
            last_at = last_at.max(stack.at_ns);
            last_cpu = last_cpu.max(stack.cpu_ns);
            samples.ticks += 1;
            samples.place(code, &stack, wall, cpu);
            std::mem::swap(&mut stack, &mut last);
            placed_any = true;
        }
        last_read = last_read.max(newest);
        if stopping {
            // The time since the last tick (the program's end), on its stack, up to a
            // period: not a tick of its own.
            let tail = frames::monotonic_ns()
                .saturating_sub(last_at)
                .min(current.as_nanos() as u64);
            if placed_any {
                samples.place(code, &last, tail, tail);
            } else {
                samples.outside_ns += tail;
            }
            return samples;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_call_of_an_import_becomes_the_imports_time() {
        // Function 1 (the only import is 0) calls import 0 at offset 3 and something
        // else (a `call_indirect`) at offset 6.
        let bytes = [0, 0, 0, 0x10, 0x00, 0, 0x11, 0x00, 0x00];
        let mut samples = StackSamples::default();
        samples.time.insert((vec![2, 1], Some(0x105)), 10);
        samples.time.insert((vec![2, 1], Some(0x108)), 20);
        samples.time.insert((vec![2, 1], None), 5);
        samples.resolve_imports(&bytes, 1, |calls| {
            assert_eq!(calls, [0x104, 0x107]);
            vec![Some(3), Some(6)]
        });
        assert_eq!(samples.time.get(&(vec![2, 1, 0], None)), Some(&10));
        assert_eq!(samples.time.get(&(vec![2, 1], None)), Some(&25));
        assert_eq!(samples.time.len(), 2);
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
