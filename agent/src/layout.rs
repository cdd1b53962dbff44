//! The structure of the original module, read without decoding any code: types, imported
//! and defined functions, body locations, names and exports.

use std::collections::HashMap;
use std::ops::Range;

use wasmparser::{CompositeInnerType, Parser, Payload, TypeRef};

use crate::AgentError;

/// Parameters and results of a function type, as the parser reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FuncSig {
    pub params: Vec<wasmparser::ValType>,
    pub results: Vec<wasmparser::ValType>,
}

#[derive(Debug)]
pub(crate) struct ImportedFunc {
    pub module: String,
    pub field: String,
}

#[derive(Debug)]
pub(crate) struct DefinedFunc {
    pub type_index: u32,
    /// The body's bytes (locals and code, without the size prefix) in the module.
    pub body: Range<usize>,
}

/// Whether a function is defined by the module or imported into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionKind {
    /// Defined in the module: instrumented with entry and exit probes.
    Local,
    /// Imported: wrapped with probes at each direct call site.
    Import,
}

impl FunctionKind {
    /// `"local"` or `"import"`, as in profiles.
    pub fn name(self) -> &'static str {
        match self {
            FunctionKind::Local => "local",
            FunctionKind::Import => "import",
        }
    }
}

/// One function of the original module, as [`crate::Instrumenter::functions`] lists it.
#[derive(Debug, Clone)]
pub struct FunctionSummary {
    /// The function's index in the original module: its id in probes and profiles.
    pub id: u32,
    /// Name from the name section, `module::field` for imports, else a name given by
    /// [`crate::Instrumenter::name_unnamed`] (the module's DWARF), else the export name,
    /// else `func[N]`.
    pub name: String,
    /// Local or imported.
    pub kind: FunctionKind,
    /// For a defined function: the cache key of its instrumented body.
    pub key: Option<crate::Digest>,
    /// For a defined function: its body's byte range in the original module.
    pub body: Option<Range<usize>>,
}

#[derive(Debug)]
pub(crate) struct ModuleLayout<'a> {
    pub bytes: &'a [u8],
    /// One entry per type index: the signature if it is a function type.
    pub types: Vec<Option<FuncSig>>,
    pub imported_funcs: Vec<ImportedFunc>,
    pub defined_funcs: Vec<DefinedFunc>,
    /// Globals, imported and defined.
    pub globals: u32,
    /// Memories, imported and defined.
    pub memories: u32,
    /// Exception tags, imported and defined (none: nothing in the module can throw).
    pub tags: u32,
    /// Function names from the name section, by original index.
    pub names: HashMap<u32, String>,
    /// Names of defined functions the name section leaves unnamed, from elsewhere (the
    /// host reads them from DWARF): only shown, never written into a module.
    pub other_names: HashMap<u32, String>,
    /// The first exported name of each exported function.
    pub export_names: HashMap<u32, String>,
    /// A Go module (`GOOS=wasip1 GOARCH=wasm`): a `go:buildid` section, and Go's registers
    /// in the first globals (`SP` an `i32`, `CTXT` and `g` `i64`s).
    pub go: bool,
}

impl<'a> ModuleLayout<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, AgentError> {
        let mut layout = ModuleLayout {
            bytes,
            types: Vec::new(),
            imported_funcs: Vec::new(),
            defined_funcs: Vec::new(),
            globals: 0,
            memories: 0,
            tags: 0,
            names: HashMap::new(),
            other_names: HashMap::new(),
            export_names: HashMap::new(),
            go: false,
        };
        let mut go_buildid = false;
        let mut first_globals = Vec::new();
        let mut defined_types = Vec::new();
        let mut bodies = Vec::new();
        for payload in Parser::new(0).parse_all(bytes) {
            match payload? {
                Payload::Version {
                    encoding: wasmparser::Encoding::Component,
                    ..
                } => return Err(AgentError::Component),
                Payload::TypeSection(reader) => {
                    for group in reader {
                        for sub in group?.into_types() {
                            layout.types.push(match &sub.composite_type.inner {
                                CompositeInnerType::Func(f) => Some(FuncSig {
                                    params: f.params().to_vec(),
                                    results: f.results().to_vec(),
                                }),
                                _ => None,
                            });
                        }
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import?;
                        match import.ty {
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => {
                                layout.imported_funcs.push(ImportedFunc {
                                    module: import.module.to_string(),
                                    field: import.name.to_string(),
                                })
                            }
                            TypeRef::Global(_) => layout.globals += 1,
                            TypeRef::Memory(_) => layout.memories += 1,
                            TypeRef::Tag(_) => layout.tags += 1,
                            _ => {}
                        }
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        defined_types.push(ty?);
                    }
                }
                Payload::GlobalSection(reader) => {
                    if layout.globals == 0 {
                        for global in reader.clone().into_iter().take(3) {
                            first_globals.push(global?.ty.content_type);
                        }
                    }
                    layout.globals += reader.count();
                }
                Payload::MemorySection(reader) => layout.memories += reader.count(),
                Payload::TagSection(reader) => layout.tags += reader.count(),
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        if export.kind == wasmparser::ExternalKind::Func {
                            layout
                                .export_names
                                .entry(export.index)
                                .or_insert_with(|| export.name.to_string());
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => bodies.push(body.range()),
                Payload::CustomSection(section) if section.name() == "go:buildid" => {
                    go_buildid = true;
                }
                Payload::CustomSection(section) => {
                    if let wasmparser::KnownCustom::Name(names) = section.as_known() {
                        layout.read_names(names);
                    }
                }
                _ => {}
            }
        }
        {
            use wasmparser::ValType::{I32, I64};
            layout.go = go_buildid && first_globals == [I32, I64, I64];
        }
        if defined_types.len() != bodies.len() {
            return Err(AgentError::Unsupported {
                what: format!(
                    "a module declaring {} functions with {} bodies",
                    defined_types.len(),
                    bodies.len()
                ),
                offset: 0,
            });
        }
        for (type_index, body) in defined_types.into_iter().zip(bodies) {
            match layout.types.get(type_index as usize) {
                Some(Some(_)) => {}
                _ => {
                    return Err(AgentError::Unsupported {
                        what: format!("a function whose type {type_index} is not a function type"),
                        offset: body.start,
                    })
                }
            }
            layout.defined_funcs.push(DefinedFunc { type_index, body });
        }
        Ok(layout)
    }

    /// Reads function names; a malformed name section is ignored, as engines do.
    fn read_names(&mut self, names: wasmparser::NameSectionReader<'_>) {
        for sub in names.into_iter().flatten() {
            if let wasmparser::Name::Function(map) = sub {
                for naming in map.into_iter().flatten() {
                    self.names.insert(naming.index, naming.name.to_string());
                }
            }
        }
    }

    /// The id (original index) of the `defined`-th defined function.
    pub fn function_id(&self, defined: u32) -> u32 {
        self.imported_funcs.len() as u32 + defined
    }

    pub fn signature(&self, type_index: u32) -> &FuncSig {
        self.types[type_index as usize]
            .as_ref()
            .expect("defined functions have function types (checked in parse)")
    }

    /// The name a profile shows for function `id`.
    pub fn display_name(&self, id: u32) -> String {
        if let Some(import) = self.imported_funcs.get(id as usize) {
            return format!("{}::{}", import.module, import.field);
        }
        if let Some(name) = self.names.get(&id) {
            return name.clone();
        }
        if let Some(name) = self.other_names.get(&id) {
            return name.clone();
        }
        if let Some(name) = self.export_names.get(&id) {
            return name.clone();
        }
        format!("func[{id}]")
    }

    pub fn summaries(&self, key: impl Fn(u32) -> crate::Digest) -> Vec<FunctionSummary> {
        let imports = self.imported_funcs.len() as u32;
        let mut out = Vec::with_capacity(imports as usize + self.defined_funcs.len());
        for id in 0..imports {
            out.push(FunctionSummary {
                id,
                name: self.display_name(id),
                kind: FunctionKind::Import,
                key: None,
                body: None,
            });
        }
        for (defined, func) in self.defined_funcs.iter().enumerate() {
            let id = imports + defined as u32;
            out.push(FunctionSummary {
                id,
                name: self.display_name(id),
                kind: FunctionKind::Local,
                key: Some(key(defined as u32)),
                body: Some(func.body.clone()),
            });
        }
        out
    }
}
