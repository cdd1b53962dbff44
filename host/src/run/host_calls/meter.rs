//! Measuring one call to a host function: wall time by wprof's clock, the program thread's
//! on-CPU time by the kernel's per-thread clock, and where the figures of a run's calls are
//! kept (per import, and per calling context in the inline modes). The wrappers that
//! measure are [`crate::run::host_calls`]'s.

use rustc_hash::FxHashMap;
use wasmtime::Memory;
use wprof_agent::ContextArena;

use crate::profile::HostFigures;
use crate::run::clock::Clock;

/// One call, measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCall {
    /// Wall-clock nanoseconds.
    pub wall_ns: u64,
    /// The thread's on-CPU nanoseconds.
    pub cpu_ns: u64,
    /// Bytes moved, for an I/O function.
    pub bytes: Option<u32>,
}

impl HostCall {
    fn figures(&self) -> HostFigures {
        HostFigures {
            calls: 1,
            wall_ns: self.wall_ns,
            cpu_ns: self.cpu_ns,
            bytes: self.bytes.map(u64::from),
        }
    }
}

/// The calling thread's on-CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`; about 0.2 µs
/// a reading here, a system call), or 0 where the clock cannot be read.
pub fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if read != 0 {
        return 0;
    }
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// The CPU time between two readings of the thread's CPU clock with nothing between them:
/// the median of 63, in nanoseconds.
fn cpu_read_ns() -> u64 {
    let mut last = thread_cpu_ns();
    let mut deltas: Vec<u64> = (0..63)
        .map(|_| {
            let now = thread_cpu_ns();
            let delta = now.saturating_sub(last);
            last = now;
            delta
        })
        .collect();
    deltas.sort_unstable();
    deltas[deltas.len() / 2]
}

/// Where a call started.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    wall_ps: u64,
    /// `None`: the CPU clock is not read (a function that never waits).
    cpu_ns: Option<u64>,
}

/// The clocks a wrapper reads.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    clock: Clock,
    /// What one reading of the thread's CPU clock adds to the CPU time between two
    /// readings, in nanoseconds: subtracted from every call's.
    cpu_read_ns: u64,
}

impl Meter {
    /// A meter on wprof's clock (the one time mode's probes read), calibrated once per
    /// process.
    pub fn new() -> Self {
        static SHARED: std::sync::OnceLock<Meter> = std::sync::OnceLock::new();
        *SHARED.get_or_init(|| Self {
            clock: Clock::new(),
            cpu_read_ns: cpu_read_ns(),
        })
    }

    /// Picoseconds on wprof's clock.
    #[inline]
    pub fn now_ps(&self) -> u64 {
        self.clock.now_ps()
    }

    /// A call starts now; with `cpu`, the thread's CPU time is read too (else the call is
    /// taken as on CPU throughout).
    #[inline]
    pub fn start(&self, cpu: bool) -> Started {
        // The CPU clock first: its system call is then outside the wall time (and its
        // cost inside the CPU time is the calibrated `cpu_read_ns`).
        let cpu_ns = cpu.then(thread_cpu_ns);
        Started {
            wall_ps: self.clock.now_ps(),
            cpu_ns,
        }
    }

    /// The call that started at `started` has returned, having moved `bytes`.
    #[inline]
    pub fn finish(&self, started: Started, bytes: Option<u32>) -> HostCall {
        let wall_ns = self.clock.now_ps().saturating_sub(started.wall_ps) / 1000;
        let cpu_ns = match started.cpu_ns {
            Some(start) => thread_cpu_ns()
                .saturating_sub(start)
                .saturating_sub(self.cpu_read_ns),
            None => wall_ns,
        };
        HostCall {
            wall_ns,
            // The CPU clock's readings bracket the wall clock's: never more than it.
            cpu_ns: cpu_ns.min(wall_ns),
            bytes,
        }
    }
}

impl Default for Meter {
    fn default() -> Self {
        Self::new()
    }
}

/// The figures of a run's host calls: per import (every call), and in the inline modes per
/// node of the module's context tree (the calls the probes bracketed).
#[derive(Debug, Default)]
pub struct HostAccount {
    /// Per function id (imports come first in a module's index space).
    totals: Vec<HostFigures>,
    /// Inline modes: per node address of the module's tree.
    by_node: FxHashMap<u32, HostFigures>,
    /// Inline modes: the tree's memory, where the probes leave the import's node.
    arena: Option<Memory>,
}

impl HostAccount {
    /// Inline modes: the module's tree is in `arena` (known once it is instantiated).
    pub fn set_arena(&mut self, arena: Memory) {
        self.arena = Some(arena);
    }
}

impl HostAccount {
    /// An account for a module importing `imports` functions; in the inline modes,
    /// `arena` is the memory of its context tree.
    pub fn new(imports: u32, arena: Option<Memory>) -> Self {
        Self {
            totals: vec![HostFigures::default(); imports as usize],
            by_node: FxHashMap::default(),
            arena,
        }
    }

    /// An account for `module`'s imported functions, without a context tree (stack mode).
    pub fn for_module(module: &wasmtime::Module) -> Self {
        let imports = module.imports().filter(|i| i.ty().func().is_some());
        Self::new(imports.count() as u32, None)
    }

    /// Records `call` to import `id`, made from the tree's node at address `node` (see
    /// [`import_node`]) if known.
    pub fn record(&mut self, id: u32, call: &HostCall, node: Option<u32>) {
        let figures = call.figures();
        if let Some(total) = self.totals.get_mut(id as usize) {
            total.add(&figures);
        }
        if let Some(node) = node {
            self.by_node.entry(node).or_default().add(&figures);
        }
    }

    /// The context tree's memory, if the module keeps one.
    pub fn arena(&self) -> Option<Memory> {
        self.arena
    }

    /// Every import's figures, by function id.
    pub fn totals(&self) -> &[HostFigures] {
        &self.totals
    }

    /// The figures per node address of the module's tree.
    pub fn by_node(&self) -> &FxHashMap<u32, HostFigures> {
        &self.by_node
    }
}

/// The node of import `id` that the probes named before the call, read from the tree's
/// bytes: the address in the current-node cell, if the node there is that import's (a call
/// the probes did not bracket, through a table or from a function without probes, leaves
/// another node there, or a slot's address).
pub(crate) fn import_node(tree: &[u8], id: u32) -> Option<u32> {
    let u32_at = |at: usize| -> Option<u32> {
        let bytes = tree.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    };
    let node = u32_at(ContextArena::CURRENT as usize)?;
    // Nodes are 8-byte aligned and past the root.
    if node < ContextArena::ROOT || node % 8 != 0 {
        return None;
    }
    let function = u32_at(node as usize + ContextArena::FUNCTION as usize)?;
    (function & !ContextArena::TIMED == id + 1).then_some(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_with(current: u32, node: u32, function_plus_one: u32) -> Vec<u8> {
        let mut tree = vec![0u8; 4096];
        let put = |tree: &mut Vec<u8>, at: u32, v: u32| {
            tree[at as usize..at as usize + 4].copy_from_slice(&v.to_le_bytes())
        };
        put(&mut tree, ContextArena::CURRENT, current);
        put(&mut tree, node + ContextArena::FUNCTION, function_plus_one);
        tree
    }

    #[test]
    fn a_call_goes_to_the_import_node_the_probes_named() {
        let tree = tree_with(200, 200, 3);
        assert_eq!(import_node(&tree, 2), Some(200));
        // Another function's node, a slot's odd address, the root: no context.
        assert_eq!(import_node(&tree, 1), None);
        assert_eq!(import_node(&tree_with(204, 200, 3), 2), None);
        assert_eq!(
            import_node(&tree_with(ContextArena::CURRENT, 200, 3), 2),
            None
        );
        // Out of the memory.
        assert_eq!(import_node(&tree_with(1 << 20, 200, 3), 2), None);
    }

    #[test]
    fn the_account_keeps_every_call_and_the_placed_ones_by_node() {
        let mut account = HostAccount::new(3, None);
        let call = HostCall {
            wall_ns: 10,
            cpu_ns: 4,
            bytes: Some(7),
        };
        let tree = tree_with(200, 200, 3);
        account.record(2, &call, import_node(&tree, 2));
        account.record(2, &call, None);
        account.record(
            0,
            &HostCall {
                bytes: None,
                ..call
            },
            import_node(&tree, 0),
        );
        let two = account.totals()[2];
        assert_eq!(
            (two.calls, two.wall_ns, two.cpu_ns, two.bytes),
            (2, 20, 8, Some(14))
        );
        assert_eq!(account.totals()[0].bytes, None);
        assert_eq!(account.by_node().len(), 1);
        assert_eq!(account.by_node()[&200].calls, 1);
    }

    #[test]
    fn the_thread_clock_moves_with_work() {
        let meter = Meter::new();
        let started = meter.start(true);
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let call = meter.finish(started, None);
        assert!(call.cpu_ns > 0 && call.wall_ns >= call.cpu_ns, "{call:?}");
    }
}
