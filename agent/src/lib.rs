//! The wprof agent: rewrites a WebAssembly module so that it reports to a profiler.
//!
//! Bytes in, bytes and a probe map out. The agent does no I/O and knows nothing about the
//! engine or the cache: the host decides which function bodies to take from its cache and
//! which to have the agent instrument, and the agent assembles the final module.
//!
//! # What the probes are
//!
//! The instrumented module imports a few functions from the module `wprof` (see
//! [`ProbeImports`]), each taking one `i32`: a function id, which is always the function's
//! index in the *original* module (imports first, as in the wasm index space).
//!
//! - every defined function calls `wprof.enter(id)` first and `wprof.exit(id)` on every
//!   way out: `return`, falling off the end, and any branch to the function's outermost
//!   label (`br`, `br_if`, `br_table`, `br_on_*`) — the original body is wrapped in a block
//!   so that all of those land on one exit probe;
//! - a direct call to an imported function is bracketed by `wprof.enter(import)` and
//!   `wprof.exit(import)`, so that the import is a node of its own in the profile;
//! - a tail call (`return_call*`) first calls `wprof.tail(id)`: the caller's frame is then
//!   closed by the collector together with the callee's;
//! - with [`ProbePlan::call_sites`], every call instruction is preceded by
//!   `wprof.site(offset)`, its offset from the start of the caller's body.
//!
//! Calls between defined functions get no probes: the callee's entry and exit say it all.
//!
//! With [`ProbePlan::live`], each probed function's probes sit behind a switch the host can
//! turn while the program runs (see [`SwitchTable`]).
//!
//! # How bodies are rewritten
//!
//! The rewriter works on the binary encoding: instructions that need no change are copied
//! byte for byte, so every construct the parser understands survives untouched, and the map
//! from original to instrumented instruction offsets is exact. Imported probe functions are
//! appended after the module's own imports, which shifts the index of every defined
//! function by [`ProbeImports::COUNT`]; call sites, `ref.func`, exports, elements, the start
//! function and the name section are renumbered accordingly.
//!
//! # Example
//!
//! ```
//! let wasm = wat::parse_str(r#"
//!     (module
//!       (func $double (export "double") (param i32) (result i32)
//!         local.get 0
//!         i32.const 2
//!         i32.mul))
//! "#).unwrap();
//! let out = wprof_agent::instrument(&wasm, &wprof_agent::ProbePlan::default()).unwrap();
//! let double = &out.probe_map.functions[0];
//! assert_eq!(double.name, "double");
//! assert!(out.bytes.len() > wasm.len());
//! ```

#![deny(missing_docs)]

mod assemble;
mod body;
mod context_arena;
pub mod entry_counts;
mod error;
mod finder;
mod layout;
mod plan;
mod probe_code;
mod probe_map;
mod renumber;

pub use body::{instruction_weight, BlockCount, InstrumentedBody};
pub use context_arena::ContextArena;
pub use error::AgentError;
pub use layout::{FunctionKind, FunctionSummary};
pub use plan::{
    AllocRole, Allocators, InjectedValue, Injections, ProbeMode, ProbePlan, Selection, StateCapture,
};
pub use probe_code::{ProbeCode, SECTION as PROBE_CODE_SECTION};
pub use probe_map::{
    FunctionIndices, FunctionProbes, GoTimeFlags, Indexed, InstrumentedModule, ProbeImports,
    ProbeMap, SwitchTable,
};

/// Version of everything the agent emits. Bump it whenever the instrumented code for a
/// given input changes, so that cached bodies from an older agent are never reused (the
/// keys also hold [`AGENT_CODE`], which changes with any change of the agent's sources).
pub const AGENT_FORMAT_VERSION: u32 = 38;

/// A digest of the agent's sources at build time (`build.rs`): with it in every key of
/// what the agent writes (see [`key_agent`]), a change of the agent that forgot to bump
/// [`AGENT_FORMAT_VERSION`] still never reuses an older build's bodies from a cache.
pub const AGENT_CODE: &str = env!("WPROF_AGENT_CODE");

/// Adds what identifies the agent that writes a cached value to that value's key: its
/// format version and the digest of its sources.
pub fn key_agent(h: &mut blake3::Hasher) {
    h.update(&AGENT_FORMAT_VERSION.to_le_bytes());
    h.update(AGENT_CODE.as_bytes());
}

/// A blake3 digest, as raw bytes.
pub type Digest = [u8; 32];

/// A module being instrumented: its parsed layout, the probe plan, and where the probes go.
///
/// Use it in three steps: list [`Instrumenter::functions`] (each defined function carries
/// the cache key of its instrumented body), produce each body either from a cache or with
/// [`Instrumenter::instrument_function`], then [`Instrumenter::assemble`] the module.
#[derive(Debug)]
pub struct Instrumenter<'a> {
    layout: layout::ModuleLayout<'a>,
    plan: ProbePlan,
    probes: probe_map::ProbeLayout,
    /// [`Selection::set_digest`] of the plan's selection, once.
    selection_digest: Option<Digest>,
}

impl<'a> Instrumenter<'a> {
    /// Parses the module's structure (not its code) and plans where the probes go.
    pub fn new(module: &'a [u8], plan: &ProbePlan) -> Result<Self, AgentError> {
        let layout = layout::ModuleLayout::parse(module)?;
        let probes = probe_map::ProbeLayout::plan(&layout, plan)?;
        Ok(Self {
            layout,
            plan: plan.clone(),
            probes,
            selection_digest: plan.selection.as_ref().map(|s| s.set_digest()),
        })
    }

    /// Every function of the module in index order: imports first, then defined functions,
    /// with names and, for defined functions, the cache key of their instrumented body.
    pub fn functions(&self) -> Vec<FunctionSummary> {
        self.layout.summaries(|defined| self.function_key(defined))
    }

    /// The names of every function, imports first, as [`Instrumenter::functions`] gives
    /// them, without computing keys: to choose a [`Selection`] by name.
    pub fn function_names(&self) -> Vec<String> {
        self.unkeyed_functions()
            .into_iter()
            .map(|s| s.name)
            .collect()
    }

    /// Every function as [`Instrumenter::functions`] gives it, without computing keys
    /// (each `key` is zeros): to name the functions of a module that runs as it is.
    pub fn unkeyed_functions(&self) -> Vec<FunctionSummary> {
        self.layout.summaries(|_| [0; 32])
    }

    /// Leaves the defined functions of ids `excluded` without probes, the plan's
    /// [`Selection::spec`] kept (see [`Selection`]).
    pub fn exclude(&mut self, excluded: std::collections::BTreeSet<u32>) {
        let spec = self.plan.selection.as_ref().map_or([0; 32], |s| s.spec);
        let silent = self.plan.selection.as_ref().is_some_and(|s| s.silent);
        let selection = Selection {
            spec,
            excluded,
            silent,
        };
        self.selection_digest = Some(selection.set_digest());
        self.plan.selection = Some(std::sync::Arc::new(selection));
    }

    /// Makes the defined functions of `roles` allocators (see [`Allocators`]), the plan's
    /// [`Allocators::spec`] kept; returns the ids of those whose signature does not fit
    /// their role (left out, with the reason) and those that are not defined functions.
    pub fn profile_allocations(
        &mut self,
        roles: std::collections::BTreeMap<u32, AllocRole>,
    ) -> Vec<(u32, AgentError)> {
        let spec = self.plan.allocators.as_ref().map_or([0; 32], |a| a.spec);
        let mut rejected = Vec::new();
        let mut kept = std::collections::BTreeMap::new();
        for (id, role) in roles {
            let func = match self.defined(id, "an allocator") {
                Ok(func) => func,
                Err(e) => {
                    rejected.push((id, e));
                    continue;
                }
            };
            let sig = self.layout.signature(func.type_index);
            match body::alloc_locals(role, &sig.params, &sig.results, func.body.start) {
                Ok(_) => {
                    kept.insert(id, role);
                }
                Err(e) => rejected.push((id, e)),
            }
        }
        self.plan.allocators = Some(std::sync::Arc::new(Allocators { spec, roles: kept }));
        rejected
    }

    /// Makes the defined functions of `targets` ones whose calls the host may inject into
    /// (see [`Injections`]), the plan's [`Injections::spec`] kept; returns the ids of those
    /// that cannot take their injection (not a defined function, or a value that is not the
    /// function's one result), with the reason, and leaves them out.
    pub fn inject(
        &mut self,
        targets: std::collections::BTreeMap<u32, Option<InjectedValue>>,
    ) -> Vec<(u32, AgentError)> {
        let spec = self.plan.injections.as_ref().map_or([0; 32], |i| i.spec);
        let mut rejected = Vec::new();
        let mut kept = std::collections::BTreeMap::new();
        for (id, value) in targets {
            let func = match self.defined(id, "an injection target") {
                Ok(func) => func,
                Err(e) => {
                    rejected.push((id, e));
                    continue;
                }
            };
            let results = &self.layout.signature(func.type_index).results;
            match value {
                Some(v) if results.as_slice() != [v.val_type()] => rejected.push((
                    id,
                    AgentError::Unsupported {
                        what: "a returned value that is not the function's one result".to_string(),
                        offset: func.body.start,
                    },
                )),
                _ => {
                    kept.insert(id, value);
                }
            }
        }
        self.plan.injections = Some(std::sync::Arc::new(Injections {
            spec,
            targets: kept,
        }));
        rejected
    }

    /// The function of id `id`, or why `what` cannot be it: it is not one the module
    /// defines.
    fn defined(&self, id: u32, what: &str) -> Result<&layout::DefinedFunc, AgentError> {
        id.checked_sub(self.imported_function_count())
            .and_then(|d| self.layout.defined_funcs.get(d as usize))
            .ok_or_else(|| AgentError::Unsupported {
                what: format!("{what} that is not a function the module defines (id {id})"),
                offset: 0,
            })
    }

    /// The result types of function `id`, if the module defines it.
    pub fn results(&self, id: u32) -> Option<Vec<wasmparser::ValType>> {
        let defined = id.checked_sub(self.imported_function_count())?;
        let func = self.layout.defined_funcs.get(defined as usize)?;
        Some(self.layout.signature(func.type_index).results.clone())
    }

    /// How the instrumented module numbers its functions.
    pub fn indices(&self) -> FunctionIndices {
        self.probes.indices()
    }

    /// Number of imported functions (their ids come first).
    pub fn imported_function_count(&self) -> u32 {
        self.layout.imported_funcs.len() as u32
    }

    /// Number of functions defined in the module.
    pub fn defined_function_count(&self) -> u32 {
        self.layout.defined_funcs.len() as u32
    }

    /// The ids of the defined functions the name section does not name (all of them in a
    /// module without one).
    pub fn unnamed_functions(&self) -> Vec<u32> {
        (0..self.defined_function_count())
            .map(|defined| self.layout.function_id(defined))
            .filter(|id| !self.layout.names.contains_key(id))
            .collect()
    }

    /// Names functions the name section leaves unnamed, by id (the host reads them from
    /// the module's DWARF): [`Instrumenter::functions`] shows them, before export names.
    /// Names of functions the name section names, or that the module does not define, are
    /// ignored. They change no instrumented byte (nor any key): they are only shown.
    pub fn name_unnamed(&mut self, names: impl IntoIterator<Item = (u32, String)>) {
        for (id, name) in names {
            let defined = id
                .checked_sub(self.imported_function_count())
                .is_some_and(|d| d < self.defined_function_count());
            if defined && !self.layout.names.contains_key(&id) {
                self.layout.other_names.insert(id, name);
            }
        }
    }

    /// The cache key of the instrumented body of the `defined`-th defined function: a
    /// digest of everything that body depends on.
    pub fn function_key(&self, defined: u32) -> Digest {
        let func = &self.layout.defined_funcs[defined as usize];
        let mut h = blake3::Hasher::new();
        h.update(b"wprof-agent function v1\0");
        key_agent(&mut h);
        h.update(&self.plan.body_digest());
        let id = self.layout.function_id(defined);
        if let Some(role) = self.plan.allocators.as_ref().and_then(|a| a.key_bytes(id)) {
            h.update(b"\0allocator\0");
            h.update(&role);
        }
        if let Some(injection) = self.plan.injections.as_ref().and_then(|i| i.key_bytes(id)) {
            h.update(b"\0injected\0");
            h.update(&injection);
        }
        if let Some(param) = self.plan.captured().and_then(|c| c.key_bytes(id)) {
            h.update(b"\0captured, its caller named at exit\0");
            h.update(&param);
        }
        if let Some(selection) = &self.selection_digest {
            // Whether this body has probes, and (time mode) whether the functions it
            // tail-calls do: the set as a whole, so that one rule covers both.
            h.update(selection);
        }
        h.update(&self.probes.context_bytes());
        h.update(&id.to_le_bytes());
        h.update(&self.probes.wrapper_block_bytes(func.type_index));
        // The locals the probes add are numbered after the parameters.
        let params = self.layout.signature(func.type_index).params.len() as u32;
        h.update(&params.to_le_bytes());
        let body = &self.layout.bytes[func.body.clone()];
        h.update(&(body.len() as u64).to_le_bytes());
        h.update(body);
        *h.finalize().as_bytes()
    }

    /// The offsets of the call instructions of the `defined`-th defined function, from the
    /// start of its body, in order: with [`ProbePlan::call_sites`], slot `k` of the
    /// function's nodes in the inline modes (see [`ContextArena`]) is the call at
    /// `call_sites(defined)[k]`.
    pub fn call_sites(&self, defined: u32) -> Result<Vec<u32>, AgentError> {
        body::call_sites(&self.layout, defined)
    }

    /// Rewrites the body of the `defined`-th defined function.
    pub fn instrument_function(&self, defined: u32) -> Result<InstrumentedBody, AgentError> {
        body::instrument_body(&self.layout, &self.probes, &self.plan, defined)
    }

    /// Builds the instrumented module from one body per defined function, in order.
    pub fn assemble(&self, bodies: &[InstrumentedBody]) -> Result<InstrumentedModule, AgentError> {
        assemble::assemble(&self.layout, &self.probes, bodies)
    }
}

/// Instruments every function of `module` and assembles the result: the whole job, with no
/// cache. See [`Instrumenter`] to reuse bodies instrumented earlier.
pub fn instrument(module: &[u8], plan: &ProbePlan) -> Result<InstrumentedModule, AgentError> {
    let instrumenter = Instrumenter::new(module, plan)?;
    let bodies = (0..instrumenter.defined_function_count())
        .map(|i| instrumenter.instrument_function(i))
        .collect::<Result<Vec<_>, _>>()?;
    instrumenter.assemble(&bodies)
}

#[cfg(test)]
mod tests;
