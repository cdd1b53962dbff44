//! Where the probes live in the instrumented module, and what the host learns about it.

use std::collections::HashMap;
use std::ops::Range;

use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{BlockType, Encode};

use crate::layout::ModuleLayout;
use crate::{AgentError, ContextArena, FunctionKind};

/// The functions an instrumented module imports from the profiler.
///
/// In [`crate::ProbeMode::Time`] each takes an `i32`: a function id (the function's index in
/// the original module), or for `unwind` a frame token. In [`crate::ProbeMode::Cost`] each
/// also takes an `i64`: the number of wasm instructions executed so far.
#[derive(Debug, Clone, Copy)]
pub struct ProbeImports;

impl ProbeImports {
    /// The import module name.
    pub const MODULE: &'static str = "wprof";
    /// `enter(id)`: function `id` starts (a defined function's first instruction, or just
    /// before a direct call to imported function `id`).
    pub const ENTER: &'static str = "enter";
    /// `exit(id)`: function `id` returns.
    pub const EXIT: &'static str = "exit";
    /// `tail(id)`: function `id` is about to make a tail call; its frame closes when the
    /// callee's does.
    pub const TAIL: &'static str = "tail";
    /// `enter_catching(id) -> token`: like `enter`, for a function that catches
    /// exceptions; returns a token for its frame (its depth on the shadow stack).
    pub const ENTER_CATCHING: &'static str = "enter_catching";
    /// `unwind(token)`: an exception was caught in the frame `token`: every frame above it
    /// was unwound, and closes now.
    pub const UNWIND: &'static str = "unwind";
    /// `site(offset)`: the next call is made from this offset of the caller's body (only
    /// called when the plan asks for call sites).
    pub const SITE: &'static str = "site";
    /// `called(id)`: function `id` was called and is counted, not timed (time mode: a short
    /// function, see [`crate::ProbePlan::short_max`]); it has no exit probe.
    pub const CALLED: &'static str = "called";
    /// `alloc(id, kind, a, b, result, node)`: allocator function `id` is about to return
    /// (allocation profiling, see [`crate::Allocators`]); `(i32, i32, i64, i64, i64, i32)`.
    pub const ALLOC: &'static str = "alloc";
    /// `inject(id) -> i32`: function `id` starts and may be injected into (fault
    /// injection, see [`crate::Injections`]): 1 when this call returns the injected value
    /// instead of running; the host traps for an injected trap.
    pub const INJECT: &'static str = "inject";
    /// The id time mode's `enter` and `exit` report around a `memory.atomic.wait32` or
    /// `wait64`: not a function of the module (ids are below 2^30 - 1, and carry no Go
    /// flag here), so that the host charges the time the thread waits to the wait rather
    /// than to the function waiting.
    pub const WAIT_ID: u32 = (1 << 30) - 1;
    /// How many probe functions are imported.
    pub const COUNT: u32 = 9;
    /// All probe import names, in the order they are appended to the import section.
    pub const NAMES: [&'static str; 9] = [
        Self::ENTER,
        Self::EXIT,
        Self::TAIL,
        Self::ENTER_CATCHING,
        Self::UNWIND,
        Self::SITE,
        Self::CALLED,
        Self::ALLOC,
        Self::INJECT,
    ];

    /// How far the module's defined functions move in the instrumented module: past the
    /// probe imports and, in the inline modes, past the node finder the agent defines
    /// first (see [`ContextArena`]).
    pub fn shift(mode: crate::ProbeMode) -> u32 {
        Self::COUNT + u32::from(mode.counts_inline())
    }
}

/// With [`crate::ProbePlan::live`], every probed function's probes sit behind its own
/// switch: one byte per function id, in a memory the module exports as
/// [`SwitchTable::MEMORY`], at [`SwitchTable::base`] + id.
///
/// `0` (the initial value) means the probes are on; any other value, off. A live function
/// has two bodies: its own, at its own index, reads its byte and either runs the
/// original's instructions as they are (function indices renumbered) or tail-calls its
/// probed copy, a function of the same type the agent appends (see [`FunctionIndices`]).
/// An activation is probed from its entry to its exit or not at all, whenever the byte
/// changes, and with every switch off what is left of the probes is one load and one
/// branch per call, in a body that is the original's otherwise: the probed copy's locals,
/// calls and registers do not weigh on it (a live module has about twice the code to
/// compile, and the offset map of each function lists both bodies). What it calls with probes on
/// hangs under its nearest caller whose probes were on: in the inline modes a function
/// whose probes are on puts the slot global back at exit as it found it at entry (so that
/// a caller without probes, which sets no slot, calls through its own caller's), and in
/// sample mode stores that slot in the current-node cell (its caller runs again).
///
/// The host may write the bytes from another thread while the program runs: in the inline
/// modes the table lies in the tree's memory (after the overflow table, see
/// [`ContextArena::switches`]); in time mode the agent adds a memory of its own that never
/// grows.
#[derive(Debug, Clone, Copy)]
pub struct SwitchTable;

impl SwitchTable {
    /// Export name of the memory holding the table.
    pub const MEMORY: &'static str = "wprof:switches";

    /// The address of function 0's byte, for a module of `functions` functions
    /// instrumented for `mode`.
    pub fn base(mode: crate::ProbeMode, functions: u32) -> u32 {
        if mode.counts_inline() {
            ContextArena::switches(functions)
        } else {
            0
        }
    }
}

/// Where a live module's switches are (see [`SwitchTable`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SwitchIndices {
    /// The memory holding them.
    pub memory: u32,
    /// Function 0's byte.
    pub base: u32,
}

/// How an instrumented module numbers its functions: the original's imports, the probe
/// imports, in the inline modes the node finder, the original's defined functions, with live
/// probes the probed copy of each of them (see [`SwitchTable`]) in the same order, then
/// functions the agent adds for coverage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FunctionIndices {
    /// Functions the original module imports.
    pub imports: u32,
    /// Functions of the original module, imported and defined.
    pub functions: u32,
    /// What the probes measure.
    pub mode: crate::ProbeMode,
    /// Live probes: each defined function has a probed copy.
    pub live: bool,
}

/// What a function of an instrumented module is (see [`FunctionIndices::what`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexed {
    /// Function `id` of the original module: an import, or its own body.
    Function(u32),
    /// The probed copy of the original's function `id` (live probes).
    ProbedCopy(u32),
    /// A probe import, or a function the agent added.
    Probe,
}

impl FunctionIndices {
    /// The index of the original's function `id` in the instrumented module.
    pub fn renumber(&self, id: u32) -> u32 {
        if id < self.imports {
            id
        } else {
            id + ProbeImports::shift(self.mode)
        }
    }

    /// How many probed copies the module holds: one per defined function with live
    /// probes, else none.
    pub fn copies(&self) -> u32 {
        if self.live {
            self.functions - self.imports
        } else {
            0
        }
    }

    /// The index of the probed copy of the original's defined function `id`.
    pub fn probed_copy(&self, id: u32) -> Option<u32> {
        (self.live && (self.imports..self.functions).contains(&id))
            .then(|| self.functions + ProbeImports::shift(self.mode) + (id - self.imports))
    }

    /// The index of the first function the agent adds after the copies (coverage).
    pub fn first_added(&self) -> u32 {
        self.functions + ProbeImports::shift(self.mode) + self.copies()
    }

    /// What the instrumented module's function `index` is.
    pub fn what(&self, index: u32) -> Indexed {
        let shift = ProbeImports::shift(self.mode);
        let defined = self.functions - self.imports;
        if index < self.imports {
            Indexed::Function(index)
        } else if index < self.imports + shift {
            Indexed::Probe
        } else if index < self.functions + shift {
            Indexed::Function(index - shift)
        } else if index < self.functions + shift + self.copies() {
            Indexed::ProbedCopy(index - shift - defined)
        } else {
            Indexed::Probe
        }
    }
}

/// Index assignments for the probes in one instrumented module.
#[derive(Debug)]
pub(crate) struct ProbeLayout {
    /// What the probes measure.
    pub mode: crate::ProbeMode,
    /// The probes sit behind switches (see [`SwitchTable`]).
    pub live: bool,
    /// Basic blocks are counted (see [`crate::ProbePlan::coverage`]).
    pub coverage: bool,
    /// Globals of the original module; in the inline modes the slot global and the
    /// tree's allocation pointer follow them.
    pub original_globals: u32,
    /// Memories of the original module; in the inline modes the tree's memory follows
    /// them.
    pub original_memories: u32,
    /// Frames can end without returning: the module has exception tags (a throw unwinds
    /// them) or imports WASI's `proc_exit`/`proc_raise` (a callee can end the program).
    /// Cost mode then keeps every frame's count flushed before each call.
    pub frames_may_vanish: bool,
    /// Function imports of the original module; probe imports follow them.
    pub imported_funcs: u32,
    /// Functions of the original module, imported and defined (the ids probes report).
    pub functions: u32,
    /// The module defines functions (a module without code gets no context tree).
    pub has_code: bool,
    /// Types of the original module; appended types follow them.
    pub original_types: u32,
    /// Function types to append, as (params, results): the four probe types (see
    /// [`ProbeLayout::import_type`] and [`ProbeLayout::child_type`]), then block types of
    /// multi-value wrappers.
    pub appended_types: Vec<(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>)>,
    /// The block type wrapping the body of a function of each type index in use.
    pub wrapper_blocks: HashMap<u32, BlockType>,
    /// A Go module in the inline modes: Go functions' probes know re-entries from calls
    /// (see [`ContextArena::go_table`]).
    pub go: bool,
    /// Go modules: the function id of `runtime.morestack`, if it has one.
    pub go_morestack: Option<u32>,
    /// A Go module in time mode: Go functions' probes flag re-entries, unwinding exits and
    /// goroutine switches for the host (see [`GoTimeFlags`]).
    pub go_time: bool,
}

impl ProbeLayout {
    pub fn plan(layout: &ModuleLayout<'_>, plan: &crate::ProbePlan) -> Result<Self, AgentError> {
        use wasmparser::ValType::{I32, I64};
        let mut probes = ProbeLayout {
            mode: plan.mode,
            live: plan.live,
            coverage: plan.counts_blocks(),
            original_globals: layout.globals,
            original_memories: layout.memories,
            frames_may_vanish: layout.tags > 0
                || layout.imported_funcs.iter().any(|f| {
                    f.module.starts_with("wasi")
                        && matches!(f.field.as_str(), "proc_exit" | "proc_raise")
                }),
            imported_funcs: layout.imported_funcs.len() as u32,
            functions: (layout.imported_funcs.len() + layout.defined_funcs.len()) as u32,
            has_code: !layout.defined_funcs.is_empty(),
            original_types: layout.types.len() as u32,
            appended_types: vec![
                (vec![I32], vec![]),
                (vec![I32], vec![I32]),
                (vec![I32, I32, I32], vec![I32]),
                (vec![I32, I32, I64, I64, I64, I32], vec![]),
            ],
            wrapper_blocks: HashMap::new(),
            go: layout.go && plan.mode.counts_inline(),
            go_time: layout.go && plan.mode == crate::ProbeMode::Time,
            go_morestack: layout
                .names
                .iter()
                .find(|(_, name)| name.as_str() == "runtime.morestack")
                .map(|(&id, _)| id),
        };
        for func in &layout.defined_funcs {
            if probes.wrapper_blocks.contains_key(&func.type_index) {
                continue;
            }
            let results = &layout.signature(func.type_index).results;
            let block = match results.as_slice() {
                [] => BlockType::Empty,
                [one] => BlockType::Result(val_type(*one, func.body.start)?),
                many => {
                    let wanted = (Vec::new(), many.to_vec());
                    let at = match probes.appended_types.iter().position(|t| *t == wanted) {
                        Some(at) => at,
                        None => {
                            probes.appended_types.push(wanted);
                            probes.appended_types.len() - 1
                        }
                    };
                    BlockType::FunctionType(probes.original_types + at as u32)
                }
            };
            probes.wrapper_blocks.insert(func.type_index, block);
        }
        Ok(probes)
    }

    /// The type index of probe import `name` (one of [`ProbeImports::NAMES`]).
    pub fn import_type(&self, name: &str) -> u32 {
        self.original_types
            + match name {
                ProbeImports::ENTER_CATCHING | ProbeImports::INJECT => 1,
                ProbeImports::ALLOC => 3,
                _ => 0,
            }
    }

    /// The type of the node finder, `(slot, id + 1, slots) -> node`.
    pub fn child_type(&self) -> u32 {
        self.original_types + 2
    }

    pub fn enter_catching(&self) -> u32 {
        self.imported_funcs + 3
    }

    pub fn unwind(&self) -> u32 {
        self.imported_funcs + 4
    }

    pub fn site(&self) -> u32 {
        self.imported_funcs + 5
    }

    pub fn called(&self) -> u32 {
        self.imported_funcs + 6
    }

    pub fn alloc(&self) -> u32 {
        self.imported_funcs + 7
    }

    pub fn inject(&self) -> u32 {
        self.imported_funcs + 8
    }

    pub fn enter(&self) -> u32 {
        self.imported_funcs
    }

    pub fn exit(&self) -> u32 {
        self.imported_funcs + 1
    }

    pub fn tail(&self) -> u32 {
        self.imported_funcs + 2
    }

    /// In the inline modes, where the tree lives.
    pub fn arena(&self) -> Option<InlineIndices> {
        if !self.mode.counts_inline() || !self.has_code {
            return None;
        }
        let go = self.go.then(|| GoIndices {
            running: Self::GO_G,
            g: self.original_globals + 3,
            last: self.original_globals + 4,
            morestack: self.original_globals + 5,
            table: ContextArena::go_table(self.functions),
        });
        Some(InlineIndices {
            slot: self.original_globals,
            end: self.original_globals + 1,
            self_tail: self.original_globals + 2,
            memory: self.original_memories,
            sampled: self.mode.samples(),
            child: self.imported_funcs + ProbeImports::COUNT,
            go,
        })
    }

    /// Go's `g` register: global 2 of a Go module (an `i64` holding the address of the
    /// running goroutine's `g`).
    pub(crate) const GO_G: u32 = 2;

    /// A Go module in time mode: the `(global (mut i32))` holding the goroutine the
    /// probes last told the host about.
    pub fn go_time_global(&self) -> Option<u32> {
        (self.go_time && self.has_code).then_some(self.original_globals)
    }

    /// With live probes, where the switches are.
    pub fn switches(&self) -> Option<SwitchIndices> {
        if !self.live || !self.has_code {
            return None;
        }
        Some(SwitchIndices {
            memory: self
                .arena()
                .map_or(self.original_memories, |arena| arena.memory),
            base: SwitchTable::base(self.mode, self.functions),
        })
    }

    /// In [`crate::ProbeMode::Adaptive`] (with code): the host arms contexts for timing (see
    /// [`ContextArena::TIMED`]).
    pub fn timed(&self) -> bool {
        self.mode == crate::ProbeMode::Adaptive && self.arena().is_some()
    }

    /// Whether the agent adds a memory: the tree's (inline modes), or the switches' (time
    /// mode, live).
    pub fn adds_memory(&self) -> bool {
        self.arena().is_some() || self.switches().is_some()
    }

    /// How the instrumented module numbers its functions.
    pub fn indices(&self) -> FunctionIndices {
        FunctionIndices {
            imports: self.imported_funcs,
            functions: self.functions,
            mode: self.mode,
            live: self.switches().is_some(),
        }
    }

    /// The new index of original function `id`.
    pub fn renumber(&self, id: u32) -> u32 {
        if id < self.imported_funcs {
            id
        } else {
            id + ProbeImports::shift(self.mode)
        }
    }

    /// Everything about the index space that an instrumented body depends on.
    pub fn context_bytes(&self) -> Vec<u8> {
        let arena = self.arena();
        let mut out = Vec::new();
        for n in [
            self.imported_funcs,
            ProbeImports::COUNT,
            self.enter(),
            self.exit(),
            self.tail(),
            self.enter_catching(),
            self.unwind(),
            self.site(),
            self.called(),
            self.alloc(),
            self.inject(),
            self.original_types,
            self.child_type(),
            self.original_memories,
            u32::from(self.frames_may_vanish),
            arena.map_or(u32::MAX, |a| a.slot),
            arena.map_or(u32::MAX, |a| a.memory),
            arena.map_or(u32::MAX, |a| a.self_tail),
            arena.map_or(u32::MAX, |a| u32::from(a.sampled)),
            arena.map_or(u32::MAX, |a| a.child),
            u32::from(self.live),
            u32::from(self.go),
            u32::from(self.go_time),
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        if self.live || self.go || self.go_time {
            // The switches' and the goroutine table's addresses follow the number of
            // functions.
            out.extend_from_slice(&self.functions.to_le_bytes());
        }
        out
    }

    pub fn wrapper_block(&self, type_index: u32) -> BlockType {
        self.wrapper_blocks[&type_index]
    }

    pub fn wrapper_block_bytes(&self, type_index: u32) -> Vec<u8> {
        let mut out = Vec::new();
        self.wrapper_block(type_index).encode(&mut out);
        out
    }
}

/// Indices of what the inline modes add to a module.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InlineIndices {
    /// `(global (mut i32))`: the slot the next entry follows.
    pub slot: u32,
    /// `(global (mut i32))`: the first free byte of the tree's memory.
    pub end: u32,
    /// `(global (mut i32))`: set by a function's tail call to itself, read and cleared by
    /// its entry (see `body.rs`).
    pub self_tail: u32,
    /// The tree's memory.
    pub memory: u32,
    /// Sample mode: the running node is kept at [`ContextArena::CURRENT`].
    pub sampled: bool,
    /// The node finder: the first defined function, before the module's own.
    pub child: u32,
    /// A Go module: what its functions' probes use to tell re-entries from calls.
    pub go: Option<GoIndices>,
}

/// Time mode in a Go module (see [`ContextArena::go_table`] for how Go switches
/// goroutines): the probes of a function with Go's signature add flags to the function id
/// they pass, and the module exports Go's `g` register for the host to read.
#[derive(Debug, Clone, Copy)]
pub struct GoTimeFlags;

impl GoTimeFlags {
    /// In `enter`'s argument: the function is re-entered (`PC_B` != 0), not called.
    pub const REENTRY: u32 = 1 << 31;
    /// In `enter`'s argument: another goroutine runs since the last such flag; read its
    /// `g` from the export [`GoTimeFlags::G_EXPORT`].
    pub const SWITCHED: u32 = 1 << 30;
    /// In `exit`'s argument: the function returns 1, unwinding the wasm stack for a
    /// goroutine switch; the frame is not over.
    pub const UNWINDING: u32 = 1 << 31;
    /// The function id without the flags.
    pub const ID: u32 = (1 << 30) - 1;
    /// Export name of Go's `g` register (an `i64` global).
    pub const G_EXPORT: &'static str = "wprof:go_g";
}

/// The globals and memory a Go module's probes use (see [`ContextArena::go_table`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GoIndices {
    /// Go's own `g` register (`i64`).
    pub running: u32,
    /// `(global (mut i32))`: the goroutine the probes last saw running.
    pub g: u32,
    /// `(global (mut i32))`: the node of the frame that goroutine is in.
    pub last: u32,
    /// `(global i32)`: `runtime.morestack`'s id + 1, or 0.
    pub morestack: u32,
    /// The goroutine table's address in the tree's memory.
    pub table: u32,
}

pub(crate) fn val_type(
    ty: wasmparser::ValType,
    offset: usize,
) -> Result<wasm_encoder::ValType, AgentError> {
    RoundtripReencoder
        .val_type(ty)
        .map_err(|e| AgentError::Unsupported {
            what: format!("value type {ty}: {e}"),
            offset,
        })
}

/// The instrumented module and its probe map.
#[derive(Debug, Clone)]
pub struct InstrumentedModule {
    /// The instrumented module's bytes, ready to compile.
    pub bytes: Vec<u8>,
    /// What the probes mean and where each instruction went.
    pub probe_map: ProbeMap,
    /// Sample mode: which of `bytes` are probes (what its `wprof.probe-code` section says).
    pub probe_code: Option<crate::ProbeCode>,
}

/// Every function of the original module with its probe id, name and offset map.
#[derive(Debug, Clone, Default)]
pub struct ProbeMap {
    /// In id order: imported functions first, then defined ones.
    pub functions: Vec<FunctionProbes>,
}

/// One function in the probe map.
#[derive(Debug, Clone)]
pub struct FunctionProbes {
    /// Index in the original module; the id the probes report.
    pub id: u32,
    /// Display name (name section, else export name, else `func[N]`; `module::field` for
    /// imports).
    pub name: String,
    /// Local or imported.
    pub kind: FunctionKind,
    /// Body byte range in the original module (defined functions only).
    pub original_body: Option<Range<u32>>,
    /// Body byte range in the instrumented module (defined functions only); with live
    /// probes, the function's own body: its switch's dispatch and the original's
    /// instructions.
    pub instrumented_body: Option<Range<u32>>,
    /// With live probes, the byte range of the function's probed copy (see
    /// [`SwitchTable`]).
    pub probed_body: Option<Range<u32>>,
    /// Original instruction offset -> instrumented instruction offset, both absolute file
    /// offsets, one pair per original instruction, in order (with live probes, those of the
    /// function's own body, then those of its probed copy).
    pub offsets: Vec<(u32, u32)>,
    /// With [`crate::ProbePlan::coverage`]: where each basic block starts, as in
    /// [`crate::InstrumentedBody::blocks`] (empty otherwise).
    pub blocks: Vec<(u32, crate::BlockCount)>,
}
