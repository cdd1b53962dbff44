//! Where the probes live in the instrumented module, and what the host learns about it.

use std::collections::HashMap;
use std::ops::Range;

use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{BlockType, Encode};

use crate::layout::ModuleLayout;
use crate::{AgentError, FunctionKind};

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
    /// `drain()` (cost mode): the event buffer is full; the host consumes it (see
    /// [`EventBuffer`]). Takes nothing in any mode.
    pub const DRAIN: &'static str = "drain";
    /// How many probe functions are imported (and so how far defined functions shift).
    pub const COUNT: u32 = 7;
    /// All probe import names, in the order they are appended to the import section.
    pub const NAMES: [&'static str; 7] = [
        Self::ENTER,
        Self::EXIT,
        Self::TAIL,
        Self::ENTER_CATCHING,
        Self::UNWIND,
        Self::SITE,
        Self::DRAIN,
    ];
}

/// In cost mode the probes do not call the host: each writes a 16-byte event into a
/// memory the agent adds, and the module calls `wprof.drain()` when it is full.
///
/// An event is two little-endian `u64`s: a header `(id << 32) | (token << 8) | kind` and
/// the instruction counter. A token (24 bits) numbers the activations of functions that
/// catch exceptions, so that an `unwind` names the exact activation that caught. The module exports the memory as [`EventBuffer::MEMORY`] and
/// the fill level (bytes used, an `i32` global) as [`EventBuffer::LENGTH`], so the host can
/// read what is left when the program ends.
#[derive(Debug, Clone, Copy)]
pub struct EventBuffer;

impl EventBuffer {
    /// Export name of the event memory.
    pub const MEMORY: &'static str = "wprof:events";
    /// Export name of the fill-level global.
    pub const LENGTH: &'static str = "wprof:events_len";
    /// Bytes per event.
    pub const EVENT_SIZE: u32 = 16;
    /// Bytes of events that fill the buffer (one 64 KiB page).
    pub const CAPACITY: u32 = 65536;
    /// `enter`: `id` is the function.
    pub const ENTER: u8 = 0;
    /// `exit`: `id` is the function.
    pub const EXIT: u8 = 1;
    /// `tail`: `id` is the caller about to tail-call.
    pub const TAIL: u8 = 2;
    /// `enter_catching`: `id` is the function, `token` its frame token.
    pub const ENTER_CATCHING: u8 = 3;
    /// `unwind`: `token` is the catching frame's token.
    pub const UNWIND: u8 = 4;
    /// `site`: `id` is the call's offset in the caller's body.
    pub const SITE: u8 = 5;
}

/// Index assignments for the probes in one instrumented module.
#[derive(Debug)]
pub(crate) struct ProbeLayout {
    /// What the probes measure.
    pub mode: crate::ProbeMode,
    /// Globals of the original module; in cost mode the counter global, the event buffer's
    /// fill level and the count of catching activations (frame tokens) follow them.
    pub original_globals: u32,
    /// Memories of the original module; in cost mode the event buffer follows them.
    pub original_memories: u32,
    /// The module has exception tags, so frames can be unwound by a throw: cost mode then
    /// keeps every frame's count flushed before each call.
    pub may_throw: bool,
    /// Function imports of the original module; probe imports follow them.
    pub imported_funcs: u32,
    /// Types of the original module; appended types follow them.
    pub original_types: u32,
    /// Function types to append, as (params, results): the four probe types (see
    /// [`ProbeLayout::import_type`]), then block types of multi-value wrappers.
    pub appended_types: Vec<(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>)>,
    /// The block type wrapping the body of a function of each type index in use.
    pub wrapper_blocks: HashMap<u32, BlockType>,
}

impl ProbeLayout {
    pub fn plan(layout: &ModuleLayout<'_>, mode: crate::ProbeMode) -> Result<Self, AgentError> {
        use wasmparser::ValType::{I32, I64};
        let args = match mode {
            crate::ProbeMode::Time => vec![I32],
            crate::ProbeMode::Cost => vec![I32, I64],
        };
        let mut probes = ProbeLayout {
            mode,
            original_globals: layout.globals,
            original_memories: layout.memories,
            may_throw: layout.tags > 0,
            imported_funcs: layout.imported_funcs.len() as u32,
            original_types: layout.types.len() as u32,
            appended_types: vec![
                (args.clone(), vec![]),
                (args.clone(), vec![I32]),
                (args, vec![]),
                (vec![], vec![]),
            ],
            wrapper_blocks: HashMap::new(),
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
                ProbeImports::ENTER_CATCHING => 1,
                ProbeImports::UNWIND => 2,
                ProbeImports::DRAIN => 3,
                _ => 0,
            }
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

    pub fn drain(&self) -> u32 {
        self.imported_funcs + 6
    }

    /// Cost mode: the event buffer's memory, fill-level global and token-counter global.
    pub fn event_buffer(&self) -> Option<(u32, u32, u32)> {
        self.cost_global()
            .map(|counter| (self.original_memories, counter + 1, counter + 2))
    }

    /// In cost mode, the index of the instruction counter global.
    pub fn cost_global(&self) -> Option<u32> {
        (self.mode == crate::ProbeMode::Cost).then_some(self.original_globals)
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

    /// The new index of original function `id`.
    pub fn renumber(&self, id: u32) -> u32 {
        if id < self.imported_funcs {
            id
        } else {
            id + ProbeImports::COUNT
        }
    }

    /// Everything about the index space that an instrumented body depends on.
    pub fn context_bytes(&self) -> Vec<u8> {
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
            self.drain(),
            self.original_types,
            self.original_memories,
            u32::from(self.may_throw),
            self.cost_global().unwrap_or(u32::MAX),
        ] {
            out.extend_from_slice(&n.to_le_bytes());
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
    /// Body byte range in the instrumented module (defined functions only).
    pub instrumented_body: Option<Range<u32>>,
    /// Original instruction offset -> instrumented instruction offset, both absolute file
    /// offsets, one pair per original instruction, in order.
    pub offsets: Vec<(u32, u32)>,
}
