//! The probe plan: which probes to insert. Part of every cache key.

/// What the probes measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProbeMode {
    /// Entry/exit probes that call the host, which reads a clock: exact calls and times.
    #[default]
    Time,
    /// Deterministic cost: every basic block adds its static instruction count to a local,
    /// which goes into the function's calling-context node when it returns. No host call:
    /// calls and contexts are counted inline (see [`crate::ContextArena`]).
    Cost,
    /// Low overhead timing: calls and calling contexts counted inline as in
    /// [`ProbeMode::Cost`], and the current context kept in a memory cell that the host
    /// samples from another thread to attribute time. No host call per probe.
    Sample,
    /// Sample mode's inline counts and sampled times, and in each calling-context node a
    /// timer the host sets while the program runs (see [`crate::ContextArena::TIMER`]): a
    /// timed activation calls the host at entry and exit, which reads a clock. The host
    /// walks the hot paths, timing a few contexts at a time.
    Adaptive,
}

impl ProbeMode {
    /// Every mode, in the order benchmarks and help texts list them.
    pub const ALL: [ProbeMode; 4] = [
        ProbeMode::Time,
        ProbeMode::Cost,
        ProbeMode::Sample,
        ProbeMode::Adaptive,
    ];

    /// The name used on the command line and in profiles.
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Time => "time",
            ProbeMode::Cost => "cost",
            ProbeMode::Sample => "sample",
            ProbeMode::Adaptive => "adaptive",
        }
    }

    /// Whether calls are counted inline into a calling-context tree the module keeps
    /// (every mode but [`ProbeMode::Time`]).
    pub fn counts_inline(self) -> bool {
        !matches!(self, ProbeMode::Time)
    }

    /// Whether the host samples the running context (the module keeps the current-node
    /// cell, see [`crate::ContextArena::CURRENT`]).
    pub fn samples(self) -> bool {
        matches!(self, ProbeMode::Sample | ProbeMode::Adaptive)
    }
}

/// Which probes the agent inserts. Two plans with the same [`ProbePlan::digest`] produce
/// the same instrumented code for one module.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProbePlan {
    /// What the probes measure.
    pub mode: ProbeMode,
    /// Report each call's site (`wprof.site(offset)` before every call instruction), so
    /// that edges can be split by call site.
    pub call_sites: bool,
    /// Functions left without probes, if any (see [`Selection`]).
    pub selection: Option<std::sync::Arc<Selection>>,
    /// Every probed function's probes sit behind a switch the host can turn while the
    /// program runs (see [`crate::SwitchTable`]).
    pub live: bool,
    /// Time mode: a function whose body is straight-line work of at most this many
    /// instructions (no loop, no call, no exception handling, nothing whose cost grows with
    /// its operands) is counted, not timed: its entry calls `wprof.called(id)`, which reads
    /// no clock, and it has no exit probe, so its time is its caller's self time. Two clock
    /// reads cost more than such a body. 0 times every function. Other modes ignore it.
    pub short_max: u32,
    /// Coverage (the inline modes): the basic blocks of every probed function count their
    /// executions, in counters of their own where control can jump to them (see
    /// [`crate::ContextArena::counters`]), and each body records where its blocks
    /// start ([`crate::InstrumentedBody::blocks`]). Time mode ignores it.
    pub coverage: bool,
    /// Allocation profiling: the module's allocator functions, each of which reports
    /// every block it hands out or takes back (see [`Allocators`]).
    pub allocators: Option<std::sync::Arc<Allocators>>,
    /// Fault injection: functions whose calls the host may make fail (see
    /// [`Injections`]).
    pub injections: Option<std::sync::Arc<Injections>>,
    /// Sample and adaptive mode: a parameter of one function kept at each of its entries
    /// (see [`StateCapture`]).
    pub capture: Option<StateCapture>,
}

/// An interpreter's eval loop, whose state parameter the sampler's language walk starts
/// from: the first instructions of function `function` (an id) store its `i32` parameter
/// `param` in the tree memory's word [`crate::ContextArena::CAPTURED`], which the host
/// reads while the program runs (each thread's instance has its own tree memory, so each
/// thread its own value). Only in the modes that sample ([`ProbeMode::samples`]), and only
/// in the function's probed code (with live probes, not while its switch is off).
///
/// An eval loop calls itself (a JavaScript call is a native call of QuickJS's), and the
/// current-node cell is stored at entry only: after a call returned, the cell would name
/// the callee's node while the caller runs on in the same function, which the program
/// counter cannot tell apart. So the captured function also does what a function with
/// live probes does at exit: the cell names the slot it was reached through, inside its
/// caller's node, again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateCapture {
    /// The function, by id (imports counted).
    pub function: u32,
    /// Its `i32` parameter kept.
    pub param: u32,
}

impl StateCapture {
    /// What a body's key holds of function `id`'s capture (nothing for the others, so that
    /// their bodies are shared with plans that capture nothing).
    pub(crate) fn key_bytes(&self, id: u32) -> Option<[u8; 4]> {
        (self.function == id).then(|| self.param.to_le_bytes())
    }
}

/// A value an injected call returns instead of running the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InjectedValue {
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
    /// An `f32`, by its bits.
    F32(u32),
    /// An `f64`, by its bits.
    F64(u64),
}

impl InjectedValue {
    fn key_bytes(self) -> [u8; 9] {
        let (tag, bits) = match self {
            InjectedValue::I32(v) => (1, u64::from(v as u32)),
            InjectedValue::I64(v) => (2, v as u64),
            InjectedValue::F32(v) => (3, u64::from(v)),
            InjectedValue::F64(v) => (4, v),
        };
        let mut out = [tag; 9];
        out[1..].copy_from_slice(&bits.to_le_bytes());
        out
    }

    /// Its type.
    pub fn val_type(self) -> wasmparser::ValType {
        match self {
            InjectedValue::I32(_) => wasmparser::ValType::I32,
            InjectedValue::I64(_) => wasmparser::ValType::I64,
            InjectedValue::F32(_) => wasmparser::ValType::F32,
            InjectedValue::F64(_) => wasmparser::ValType::F64,
        }
    }
}

/// The module's own functions that fault injection targets.
///
/// Each starts (after its entry probe) with a call to `wprof.inject(id) -> i32`: the host
/// counts the call and either lets it run (0), ends the program with a trap (its own error),
/// or, for a function with a value here, says 1: the function then returns that value at
/// once, through its exit probe. A function switched off (see [`ProbePlan::live`]) does
/// not ask.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Injections {
    /// A digest of how the set was chosen (the host's specs): with the module's digest, it
    /// names the set without computing it (a module manifest's key).
    pub spec: crate::Digest,
    /// The functions by id, each with the value an injected call returns (`None`: an
    /// injected call traps).
    pub targets: std::collections::BTreeMap<u32, Option<InjectedValue>>,
}

impl Injections {
    /// What a body's key holds of function `id`'s injection (nothing for a function that
    /// has none).
    pub(crate) fn key_bytes(&self, id: u32) -> Option<[u8; 10]> {
        let value = self.targets.get(&id)?;
        let mut out = [0u8; 10];
        out[0] = 1;
        if let Some(v) = value {
            out[1..].copy_from_slice(&v.key_bytes());
        }
        Some(out)
    }
}

/// Defined functions left without probes: each is part of its nearest probed caller.
///
/// An excluded function gets no entry, exit or tail probe and is counted nowhere; what it
/// calls is counted under its nearest probed caller (time mode: the host's shadow stack
/// never saw it; the inline modes: before each of its calls it points the slot global back
/// at the slot its caller set, kept in a local). In sample mode it stores that slot's
/// address (inside the caller's node) in the current-node cell at entry and whenever it
/// runs again after a call or a catch, so that its time is its caller's. In cost mode its
/// instructions are not counted. Calls from it to imports keep their probes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// A digest of how the set was chosen (the host's patterns): with the module's digest,
    /// it names the set without computing it (a module manifest's key).
    pub spec: crate::Digest,
    /// The ids (indices in the original module) of the defined functions left without
    /// probes.
    pub excluded: std::collections::BTreeSet<u32>,
    /// The functions left without probes make no probe calls at all: their calls to
    /// imports are not bracketed either (a component's functions that may run in a
    /// canonical ABI callback, where any call out of the component traps).
    pub silent: bool,
}

impl Selection {
    /// A digest of the set itself, part of every body's cache key.
    pub fn set_digest(&self) -> crate::Digest {
        let mut h = blake3::Hasher::new();
        h.update(b"wprof-agent excluded v1\0");
        for id in &self.excluded {
            h.update(&id.to_le_bytes());
        }
        if self.silent {
            h.update(b"\0silent");
        }
        *h.finalize().as_bytes()
    }
}

/// What an allocator function does, and which of its parameters say it. Parameter
/// numbers count from 0; each names an `i32` or `i64` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AllocRole {
    /// Returns a new block of `size` bytes (`malloc`, `operator new`, `aligned_alloc`'s
    /// second parameter, `__rust_alloc`).
    Alloc {
        /// The parameter holding the size.
        size: u8,
    },
    /// Returns a new block of `count * size` bytes (`calloc`).
    Calloc {
        /// The parameter holding the number of elements.
        count: u8,
        /// The parameter holding an element's size.
        size: u8,
    },
    /// Moves the block at `ptr` to a new block of `size` bytes, which it returns
    /// (`realloc`, `__rust_realloc`): the old block is freed unless the result is 0.
    Realloc {
        /// The parameter holding the old block's address.
        ptr: u8,
        /// The parameter holding the new size.
        size: u8,
    },
    /// Takes back the block at `ptr` (`free`, `operator delete`, `__rust_dealloc`).
    Free {
        /// The parameter holding the block's address.
        ptr: u8,
    },
    /// Stores the address of a new block of `size` bytes at the address in `out` of
    /// memory 0 and returns 0 when it succeeds (`posix_memalign`).
    AllocAt {
        /// The parameter holding where the new block's address goes.
        out: u8,
        /// The parameter holding the size.
        size: u8,
    },
}

impl AllocRole {
    /// The `kind` argument of the allocation probe (see [`crate::ProbeImports::ALLOC`]).
    pub fn code(self) -> u32 {
        match self {
            AllocRole::Alloc { .. } => 0,
            AllocRole::Calloc { .. } => 1,
            AllocRole::Realloc { .. } => 2,
            AllocRole::Free { .. } => 3,
            AllocRole::AllocAt { .. } => 4,
        }
    }

    /// The role of probe argument `kind`, if any (its parameters unknown: 0).
    pub fn from_code(kind: u32) -> Option<AllocRole> {
        Some(match kind {
            0 => AllocRole::Alloc { size: 0 },
            1 => AllocRole::Calloc { count: 0, size: 0 },
            2 => AllocRole::Realloc { ptr: 0, size: 0 },
            3 => AllocRole::Free { ptr: 0 },
            4 => AllocRole::AllocAt { out: 0, size: 0 },
            _ => return None,
        })
    }

    /// The two parameters the probe passes, as its `a` and `b` arguments (`None`: 0).
    pub fn arguments(self) -> (Option<u8>, Option<u8>) {
        match self {
            AllocRole::Alloc { size } => (None, Some(size)),
            AllocRole::Calloc { count, size } => (Some(count), Some(size)),
            AllocRole::Realloc { ptr, size } => (Some(ptr), Some(size)),
            AllocRole::Free { ptr } => (Some(ptr), None),
            AllocRole::AllocAt { out, size } => (Some(out), Some(size)),
        }
    }

    /// Whether the function's result is the probe's `result` argument (every role but
    /// [`AllocRole::Free`]).
    pub fn uses_result(self) -> bool {
        !matches!(self, AllocRole::Free { .. })
    }

    /// Three bytes that say the role whole (its code and its parameters), as a body's key
    /// and a manifest hold it.
    pub fn to_bytes(self) -> [u8; 3] {
        let (a, b) = self.arguments();
        [
            self.code() as u8,
            a.map_or(0xff, |a| a),
            b.map_or(0xff, |b| b),
        ]
    }

    /// The role of [`AllocRole::to_bytes`]'s bytes, if they are one's.
    pub fn from_bytes(bytes: [u8; 3]) -> Option<AllocRole> {
        let [code, a, b] = bytes;
        let role = match (AllocRole::from_code(u32::from(code))?, a, b) {
            (AllocRole::Alloc { .. }, 0xff, size) => AllocRole::Alloc { size },
            (AllocRole::Calloc { .. }, count, size) => AllocRole::Calloc { count, size },
            (AllocRole::Realloc { .. }, ptr, size) => AllocRole::Realloc { ptr, size },
            (AllocRole::Free { .. }, ptr, 0xff) => AllocRole::Free { ptr },
            (AllocRole::AllocAt { .. }, out, size) => AllocRole::AllocAt { out, size },
            _ => return None,
        };
        (role.to_bytes() == bytes).then_some(role)
    }
}

/// The allocator functions of a module (allocation profiling).
///
/// Each gets, before every way out of it (its returns, falling off its end, and its tail
/// calls), one call to
/// `wprof.alloc(id, kind, a, b, result, node)`: its function id, its role's
/// [`AllocRole::code`], the role's two parameters as they were at entry (kept in locals
/// the probe adds; [`AllocRole::arguments`]), its result (0 for a free) and in the inline
/// modes the address of its calling-context node (0 in time mode, where the host's shadow
/// stack knows it). Sizes, addresses and the result are zero-extended to `i64`. A role
/// whose report holds the result makes the function's tail calls ordinary calls followed
/// by a return, so that it reports after its callee (a function whose tail calls include
/// calls to itself does not report: that would grow the stack without bound); a
/// [`AllocRole::Free`] reports before its tail calls. A function left without probes (see
/// [`Selection`]) or switched off (see [`ProbePlan::live`]) does not report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allocators {
    /// A digest of how the set was chosen (the host's rules): with the module's digest, it
    /// names the set without computing it (a module manifest's key).
    pub spec: crate::Digest,
    /// The allocator functions by id, with their roles.
    pub roles: std::collections::BTreeMap<u32, AllocRole>,
}

impl Allocators {
    /// What a body's key holds of function `id`'s role (nothing for a function that has
    /// none, so that its body is shared with plans that profile no allocations).
    pub(crate) fn key_bytes(&self, id: u32) -> Option<[u8; 3]> {
        self.roles.get(&id).map(|role| role.to_bytes())
    }
}

impl ProbePlan {
    /// A digest of the plan, for cache keys (a selection by its [`Selection::spec`],
    /// allocators by their [`Allocators::spec`]).
    pub fn digest(&self) -> crate::Digest {
        let mut h = self.hasher();
        if let Some(allocators) = &self.allocators {
            h.update(b"\0allocators\0");
            h.update(&allocators.spec);
        }
        if let Some(injections) = &self.injections {
            h.update(b"\0injections\0");
            h.update(&injections.spec);
        }
        if let Some(capture) = self.captured() {
            h.update(b"\0capture, its caller named at exit\0");
            h.update(&capture.function.to_le_bytes());
            h.update(&capture.param.to_le_bytes());
        }
        *h.finalize().as_bytes()
    }

    /// A digest of what every body's instrumentation depends on: the plan without its
    /// allocators, injections and capture (a body's key adds its own role, injection and
    /// capture, see [`Allocators`], [`Injections`] and [`StateCapture`]).
    pub fn body_digest(&self) -> crate::Digest {
        *self.hasher().finalize().as_bytes()
    }

    /// Whether calls of function `id` may be injected into, and the value an injected call
    /// returns.
    pub fn injection(&self, id: u32) -> Option<Option<InjectedValue>> {
        self.injections.as_ref()?.targets.get(&id).copied()
    }

    /// The capture the probes make: the plan's, in a mode that samples.
    pub fn captured(&self) -> Option<StateCapture> {
        self.capture.filter(|_| self.mode.samples())
    }

    /// The role of function `id`, if it is one of the plan's allocators.
    pub fn alloc_role(&self, id: u32) -> Option<AllocRole> {
        self.allocators.as_ref()?.roles.get(&id).copied()
    }

    fn hasher(&self) -> blake3::Hasher {
        let mut h = blake3::Hasher::new();
        h.update(b"wprof-agent plan v1\0");
        h.update(self.mode.name().as_bytes());
        h.update(&[u8::from(self.call_sites)]);
        if let Some(selection) = &self.selection {
            h.update(b"\0selection\0");
            h.update(&selection.spec);
        }
        if self.live {
            h.update(b"\0live");
        }
        if self.counts_short() {
            h.update(b"\0short\0");
            h.update(&self.short_max.to_le_bytes());
        }
        if self.counts_blocks() {
            h.update(b"\0coverage");
        }
        h
    }

    /// Whether some functions are counted, not timed (see [`ProbePlan::short_max`]).
    pub fn counts_short(&self) -> bool {
        self.mode == ProbeMode::Time && self.short_max > 0
    }

    /// Whether basic blocks are counted (see [`ProbePlan::coverage`]).
    pub fn counts_blocks(&self) -> bool {
        self.coverage && self.mode.counts_inline()
    }

    /// Whether the function of id `id` is left without probes.
    pub fn excludes(&self, id: u32) -> bool {
        self.selection
            .as_ref()
            .is_some_and(|s| s.excluded.contains(&id))
    }

    /// Whether function `id` is left without probes and silent (see [`Selection::silent`]).
    pub fn silences(&self, id: u32) -> bool {
        self.selection
            .as_ref()
            .is_some_and(|s| s.silent && s.excluded.contains(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_stable_and_depends_on_mode() {
        let a = ProbePlan::default();
        assert_eq!(a.digest(), ProbePlan::default().digest());
        assert_ne!(a.digest(), [0u8; 32]);
        let cost = ProbePlan {
            mode: ProbeMode::Cost,
            ..ProbePlan::default()
        };
        let sites = ProbePlan {
            call_sites: true,
            ..ProbePlan::default()
        };
        assert_ne!(a.digest(), sites.digest());
        assert_ne!(a.digest(), cost.digest());
        let sample = ProbePlan {
            mode: ProbeMode::Sample,
            ..ProbePlan::default()
        };
        assert_ne!(sample.digest(), cost.digest());
        // A selection changes it; with none, it is the digest of earlier versions.
        let selected = ProbePlan {
            selection: Some(std::sync::Arc::new(Selection {
                spec: [1; 32],
                excluded: [3].into(),
                silent: false,
            })),
            ..ProbePlan::default()
        };
        assert_ne!(selected.digest(), a.digest());
        assert!(selected.excludes(3) && !selected.excludes(4) && !a.excludes(3));
        let live = ProbePlan {
            live: true,
            ..ProbePlan::default()
        };
        assert_ne!(live.digest(), a.digest());
        let short = ProbePlan {
            short_max: 40,
            ..ProbePlan::default()
        };
        assert_ne!(short.digest(), a.digest());
        // Only time mode counts short functions: elsewhere the bound changes nothing.
        let sample_short = ProbePlan {
            short_max: 40,
            ..sample.clone()
        };
        assert_eq!(sample_short.digest(), sample.digest());
        // Coverage counts blocks in the inline modes only.
        let covered = ProbePlan {
            coverage: true,
            ..sample.clone()
        };
        assert_ne!(covered.digest(), sample.digest());
        // Roles round-trip through their bytes.
        for role in [
            AllocRole::Alloc { size: 1 },
            AllocRole::Calloc { count: 0, size: 1 },
            AllocRole::Realloc { ptr: 0, size: 3 },
            AllocRole::Free { ptr: 0 },
            AllocRole::AllocAt { out: 0, size: 2 },
        ] {
            assert_eq!(AllocRole::from_bytes(role.to_bytes()), Some(role));
        }
        assert_eq!(AllocRole::from_bytes([3, 0, 1]), None);
        assert_eq!(AllocRole::from_bytes([9, 0, 0]), None);
        let time_covered = ProbePlan {
            coverage: true,
            ..ProbePlan::default()
        };
        assert_eq!(time_covered.digest(), a.digest());
    }
}
