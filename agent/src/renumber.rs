//! Renumbering the original module's sections for the instrumented one: defined functions
//! moved up past the probe imports, the probe types, imports, globals, memories and exports
//! appended, and the instrumented bodies and retry functions in place (see
//! [`crate::assemble`], which drives it).

use wasm_encoder::reencode::{utils, Reencode};
use wasm_encoder::{EntityType, ImportSection, Module, SectionId, TypeSection};

use crate::probe_map::{val_type, ProbeLayout};
use crate::{AgentError, ContextArena, InstrumentedBody, ProbeImports, SwitchTable};

type ReencodeResult = Result<(), wasm_encoder::reencode::Error<AgentError>>;

/// Re-encodes the module's sections with defined functions moved up past the probe imports.
pub(crate) struct Renumber<'a> {
    pub(crate) probes: &'a ProbeLayout,
    pub(crate) bodies: &'a [InstrumentedBody],
    /// The type of each defined function (of its probed copy, with live probes).
    pub(crate) types: Vec<u32>,
    /// How many parameters each defined function takes.
    pub(crate) params: Vec<u32>,
    /// The original's function names, to name the probed copies after them.
    pub(crate) names: Vec<(u32, String)>,
    /// Coverage: block counters in all (see [`ContextArena::counters`]).
    pub(crate) counters: u32,
    /// The defined functions (by their order) whose entry leaves for a retry function,
    /// in order: the `k`-th one's is the `k`-th function appended (see
    /// [`ContextArena::RETRY`]).
    pub(crate) retries: Vec<usize>,
    pub(crate) wrote_types: bool,
    pub(crate) wrote_imports: bool,
    pub(crate) wrote_globals: bool,
    pub(crate) wrote_memories: bool,
    pub(crate) wrote_exports: bool,
}

impl Renumber<'_> {
    fn append_types(&self, types: &mut TypeSection) -> ReencodeResult {
        for (params, results) in &self.probes.appended_types {
            let params = params
                .iter()
                .map(|t| val_type(*t, 0))
                .collect::<Result<Vec<_>, _>>()
                .map_err(wasm_encoder::reencode::Error::UserError)?;
            let results = results
                .iter()
                .map(|t| val_type(*t, 0))
                .collect::<Result<Vec<_>, _>>()
                .map_err(wasm_encoder::reencode::Error::UserError)?;
            types.ty().function(params, results);
        }
        Ok(())
    }

    /// In the inline modes: the slot the next entry follows, the tree's allocation
    /// pointer and the self-tail-call flag (see [`ContextArena`]).
    fn append_globals(&self, globals: &mut wasm_encoder::GlobalSection) {
        let mutable_i32 = wasm_encoder::GlobalType {
            val_type: wasm_encoder::ValType::I32,
            mutable: true,
            shared: false,
        };
        if self.probes.go_time_global().is_some() {
            // The goroutine last told to the host.
            globals.global(mutable_i32, &wasm_encoder::ConstExpr::i32_const(0));
        }
        if self.probes.arena().is_none() {
            return;
        }
        for init in [
            ContextArena::ROOT_SLOT,
            ContextArena::first_free(self.probes.functions, self.counters),
            0,
        ] {
            globals.global(
                mutable_i32,
                &wasm_encoder::ConstExpr::i32_const(init as i32),
            );
        }
        if self.probes.go {
            // The goroutine last seen and its node (the root's, so that every node's
            // parent is one); `runtime.morestack`'s id + 1.
            for init in [0, ContextArena::ROOT] {
                globals.global(
                    mutable_i32,
                    &wasm_encoder::ConstExpr::i32_const(init as i32),
                );
            }
            let morestack = self.probes.go_morestack.map_or(0, |id| id + 1);
            globals.global(
                wasm_encoder::GlobalType {
                    mutable: false,
                    ..mutable_i32
                },
                &wasm_encoder::ConstExpr::i32_const(morestack as i32),
            );
        }
    }

    /// In the inline modes: the tree's memory; in time mode with live probes: the
    /// switches' memory, which never grows.
    fn append_memories(&self, memories: &mut wasm_encoder::MemorySection) {
        let pages = |minimum, maximum| wasm_encoder::MemoryType {
            minimum,
            maximum,
            memory64: false,
            shared: false,
            page_size_log2: None,
        };
        if self.probes.arena().is_some() {
            let first_free = u64::from(ContextArena::first_free(
                self.probes.functions,
                self.counters,
            ));
            memories.memory(pages(first_free.div_ceil(65536), None));
        } else if self.probes.switches().is_some() {
            let size = u64::from(self.probes.functions).div_ceil(65536).max(1);
            memories.memory(pages(size, Some(size)));
        }
    }

    /// In the inline modes: the tree and its globals, for the host to read and reset; with
    /// live probes, the switches' memory.
    fn append_exports(&self, exports: &mut wasm_encoder::ExportSection) {
        use wasm_encoder::ExportKind;
        if let Some(arena) = self.probes.arena() {
            exports.export(ContextArena::MEMORY, ExportKind::Memory, arena.memory);
            exports.export(ContextArena::SLOT, ExportKind::Global, arena.slot);
            exports.export(ContextArena::END, ExportKind::Global, arena.end);
            if !self.retries.is_empty() {
                let added = format!("{}{}", ContextArena::ADDED, self.retries.len());
                exports.export(&added, ExportKind::Memory, arena.memory);
            }
        }
        if let Some(switches) = self.probes.switches() {
            exports.export(SwitchTable::MEMORY, ExportKind::Memory, switches.memory);
        }
        if self.probes.go_time_global().is_some() {
            exports.export(
                crate::GoTimeFlags::G_EXPORT,
                ExportKind::Global,
                ProbeLayout::GO_G,
            );
        }
    }

    /// The retry function of the `defined`-th defined function (see [`ContextArena::RETRY`]):
    /// the node finder's node for it through the slot global, left at
    /// [`ContextArena::RETRY`] for the function's first look, then the function again.
    fn retry_function(&self, defined: usize) -> wasm_encoder::Function {
        use wasm_encoder::Instruction::*;
        let arena = self
            .probes
            .arena()
            .expect("retry functions are the inline modes'");
        let id = self.probes.imported_funcs + defined as u32;
        let params = self.params[defined];
        let mut f = wasm_encoder::Function::new([(1, wasm_encoder::ValType::I32)]);
        for i in [
            GlobalGet(arena.slot),
            I32Const(id as i32 + 1),
            I32Const(0),
            Call(arena.child),
            LocalSet(params),
            I32Const(0),
            LocalGet(params),
            I32Store(wasm_encoder::MemArg {
                offset: u64::from(ContextArena::RETRY),
                align: 2,
                memory_index: arena.memory,
            }),
            I32Const(ContextArena::RETRY as i32),
            GlobalSet(arena.slot),
        ] {
            f.instruction(&i);
        }
        for param in 0..params {
            f.instruction(&LocalGet(param));
        }
        f.instruction(&ReturnCall(self.probes.renumber(id)));
        f.instruction(&End);
        f
    }

    fn append_imports(&self, imports: &mut ImportSection) {
        for name in ProbeImports::NAMES {
            imports.import(
                ProbeImports::MODULE,
                name,
                EntityType::Function(self.probes.import_type(name)),
            );
        }
    }
}

impl Reencode for Renumber<'_> {
    type Error = AgentError;

    fn function_index(
        &mut self,
        func: u32,
    ) -> Result<u32, wasm_encoder::reencode::Error<AgentError>> {
        Ok(self.probes.renumber(func))
    }

    fn start_section(
        &mut self,
        func: u32,
    ) -> Result<u32, wasm_encoder::reencode::Error<AgentError>> {
        Ok(self.probes.renumber(func))
    }

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> ReencodeResult {
        utils::parse_type_section(self, types, section)?;
        self.append_types(types)?;
        self.wrote_types = true;
        Ok(())
    }

    fn parse_import_section(
        &mut self,
        imports: &mut ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> ReencodeResult {
        utils::parse_import_section(self, imports, section)?;
        self.append_imports(imports);
        self.wrote_imports = true;
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut wasm_encoder::GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> ReencodeResult {
        utils::parse_global_section(self, globals, section)?;
        self.append_globals(globals);
        self.wrote_globals = true;
        Ok(())
    }

    fn parse_memory_section(
        &mut self,
        memories: &mut wasm_encoder::MemorySection,
        section: wasmparser::MemorySectionReader<'_>,
    ) -> ReencodeResult {
        utils::parse_memory_section(self, memories, section)?;
        self.append_memories(memories);
        self.wrote_memories = true;
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut wasm_encoder::ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> ReencodeResult {
        utils::parse_export_section(self, exports, section)?;
        self.append_exports(exports);
        self.wrote_exports = true;
        Ok(())
    }

    fn intersperse_section_hook(
        &mut self,
        module: &mut Module,
        _after: Option<SectionId>,
        before: Option<SectionId>,
    ) -> ReencodeResult {
        // A module without a type or import section still needs ours, in their places.
        if !self.wrote_types && before != Some(SectionId::Type) {
            let mut types = TypeSection::new();
            self.append_types(&mut types)?;
            module.section(&types);
            self.wrote_types = true;
        }
        if !self.wrote_imports && !matches!(before, Some(SectionId::Type | SectionId::Import)) {
            let mut imports = ImportSection::new();
            self.append_imports(&mut imports);
            module.section(&imports);
            self.wrote_imports = true;
        }
        let past_memories = matches!(
            before,
            None | Some(
                SectionId::Tag
                    | SectionId::Global
                    | SectionId::Export
                    | SectionId::Start
                    | SectionId::Element
                    | SectionId::DataCount
                    | SectionId::Code
                    | SectionId::Data
            )
        );
        if !self.wrote_memories && past_memories {
            self.wrote_memories = true;
            if self.probes.adds_memory() {
                let mut memories = wasm_encoder::MemorySection::new();
                self.append_memories(&mut memories);
                module.section(&memories);
            }
        }
        let past_globals = matches!(
            before,
            None | Some(
                SectionId::Export
                    | SectionId::Start
                    | SectionId::Element
                    | SectionId::DataCount
                    | SectionId::Code
                    | SectionId::Data
            )
        );
        if !self.wrote_globals && past_globals {
            self.wrote_globals = true;
            if self.probes.arena().is_some() {
                let mut globals = wasm_encoder::GlobalSection::new();
                self.append_globals(&mut globals);
                module.section(&globals);
            }
        }
        let past_exports = matches!(
            before,
            None | Some(
                SectionId::Start
                    | SectionId::Element
                    | SectionId::DataCount
                    | SectionId::Code
                    | SectionId::Data
            )
        );
        if !self.wrote_exports && past_exports {
            self.wrote_exports = true;
            if self.probes.adds_memory() {
                let mut exports = wasm_encoder::ExportSection::new();
                self.append_exports(&mut exports);
                module.section(&exports);
            }
        }
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut wasm_encoder::FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> ReencodeResult {
        if self.probes.arena().is_some() {
            functions.function(self.probes.child_type());
        }
        utils::parse_function_section(self, functions, section)?;
        if self.probes.indices().copies() > 0 {
            for &ty in &self.types {
                functions.function(ty);
            }
        }
        for &defined in &self.retries {
            functions.function(self.types[defined]);
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut wasm_encoder::CodeSection,
        _section: wasmparser::CodeSectionReader<'_>,
    ) -> ReencodeResult {
        if let Some(arena) = self.probes.arena() {
            code.function(&crate::finder::node_finder(
                arena.memory,
                arena.end,
                arena.go.map(|go| go.last),
            ));
        }
        let memory = self.probes.arena().map_or(0, |arena| arena.memory);
        let mut next_address = ContextArena::counters(self.probes.functions);
        // Retry functions follow everything else, in the order of their functions.
        let mut next_retry = self.probes.indices().first_added();
        let live = self.probes.indices().copies() > 0;
        let mut copies = Vec::with_capacity(if live { self.bodies.len() } else { 0 });
        for (defined, body) in self.bodies.iter().enumerate() {
            let own = self
                .probes
                .renumber(self.probes.imported_funcs + defined as u32);
            let params = self.params[defined];
            let mut place = |bytes: &[u8]| match body.probed_at {
                Some(at) => {
                    code.raw(&bytes[..at as usize]);
                    copies.push(bytes[at as usize..].to_vec());
                }
                None => {
                    code.raw(bytes);
                    if live {
                        copies.push(forwarding_copy(own, params));
                    }
                }
            };
            if body.counter_sites.is_empty() && body.retry_site.is_none() {
                place(&body.bytes);
                continue;
            }
            let mut bytes = body.bytes.clone();
            if let Some(site) = body.retry_site {
                let at = site as usize;
                let is_return_call = at.checked_sub(1).and_then(|op| bytes.get(op)) == Some(&0x12);
                match bytes.get_mut(at..at + 5) {
                    Some(index) if is_return_call => {
                        index.copy_from_slice(&crate::body::padded_leb(next_retry));
                        next_retry += 1;
                    }
                    _ => {
                        return Err(wasm_encoder::reencode::Error::UserError(
                            AgentError::Unsupported {
                                what: "a body whose retry site is not a tail call".to_string(),
                                offset: at,
                            },
                        ))
                    }
                }
            }
            for &site in &body.counter_sites {
                if !crate::body::patch_counter(&mut bytes, site as usize, memory, next_address) {
                    return Err(wasm_encoder::reencode::Error::UserError(
                        AgentError::Unsupported {
                            what: "a body whose counter sites are not counter increments"
                                .to_string(),
                            offset: site as usize,
                        },
                    ));
                }
                next_address += 8;
            }
            place(&bytes);
        }
        for copy in &copies {
            code.raw(copy);
        }
        for &defined in &self.retries {
            code.function(&self.retry_function(defined));
        }
        Ok(())
    }

    fn parse_custom_section(
        &mut self,
        module: &mut Module,
        section: wasmparser::CustomSectionReader<'_>,
    ) -> ReencodeResult {
        let name = section.name();
        // DWARF and code metadata describe the original code offsets: they would be wrong.
        // The profile keeps the original module's, through the offset map.
        if name.starts_with(".debug_") || name.starts_with("metadata.code.") {
            return Ok(());
        }
        utils::parse_custom_section(self, module, section)
    }

    fn parse_custom_name_subsection(
        &mut self,
        names: &mut wasm_encoder::NameSection,
        section: wasmparser::Name<'_>,
    ) -> ReencodeResult {
        match section {
            // Label indices change with the wrapper block; drop their names.
            wasmparser::Name::Label(_) => Ok(()),
            // Probed copies are named after their functions (in traps and perf maps).
            wasmparser::Name::Function(map) => {
                let mut out = wasm_encoder::NameMap::new();
                for naming in map {
                    let naming = naming?;
                    out.append(self.function_index(naming.index)?, naming.name);
                }
                let indices = self.probes.indices();
                for (id, name) in &self.names {
                    if let Some(copy) = indices.probed_copy(*id) {
                        out.append(copy, name);
                    }
                }
                names.functions(&out);
                Ok(())
            }
            other => utils::parse_custom_name_subsection(self, names, other),
        }
    }
}

/// The probed copy of a function without probes (left out, or counted in time mode): a
/// probed caller that finds its switch on calls it (it cannot know that the callee has no
/// probes when that follows from the callee's own body), and it passes the call on to the
/// function's own body. `params` parameters, no locals.
fn forwarding_copy(own: u32, params: u32) -> Vec<u8> {
    use wasm_encoder::{Encode, Instruction};
    // No local declarations, then the code, without a size prefix (as the bodies are).
    let mut bytes = vec![0];
    for local in 0..params {
        Instruction::LocalGet(local).encode(&mut bytes);
    }
    Instruction::ReturnCall(own).encode(&mut bytes);
    Instruction::End.encode(&mut bytes);
    bytes
}
