//! The kinds of values, each in its own keyspace and folders, and the tags that seal
//! each kind's values and usage records apart.

/// The kinds of values, each in its own keyspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An instrumented function body with its offset map.
    Function,
    /// A module manifest: what an instrumented module is made of.
    Manifest,
    /// A whole module (original or instrumented), keyed by its own digest.
    Module,
    /// A small record in the store plus a large companion file beside it (wprof: compiled
    /// machine code).
    Artifact,
    /// Machine-specific values that never leave the machine (wprof: compiled functions of
    /// wasmtime's incremental compilation cache).
    Compiled,
    /// What was learnt of a module by reading it, keyed by the module's digest (wprof: the
    /// interpreter it is, each function's source).
    Facts,
}

impl Kind {
    /// Every kind, in a fixed order.
    pub const ALL: [Kind; 6] = [
        Kind::Function,
        Kind::Manifest,
        Kind::Module,
        Kind::Artifact,
        Kind::Compiled,
        Kind::Facts,
    ];

    /// The kind's name (also the name of its folders).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Function => "functions",
            Kind::Manifest => "manifests",
            Kind::Module => "modules",
            Kind::Artifact => "artifacts",
            Kind::Compiled => "compiled",
            Kind::Facts => "facts",
        }
    }

    /// The kind called `name` (see [`Kind::name`]).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether values of this kind have a companion file.
    pub fn has_file(self) -> bool {
        self == Kind::Artifact
    }

    /// Whether values of this kind mean anything on another machine (and so belong in an
    /// export): not compiled code.
    pub fn is_portable(self) -> bool {
        !matches!(self, Kind::Artifact | Kind::Compiled)
    }

    pub(crate) fn tag(self) -> u8 {
        self.index() as u8 + 1
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Kind::Function => 0,
            Kind::Manifest => 1,
            Kind::Module => 2,
            Kind::Artifact => 3,
            Kind::Compiled => 4,
            Kind::Facts => 5,
        }
    }

    pub(crate) fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }
}

/// The envelope tag of usage records: this bit over the kind's tag.
pub(crate) const USAGE_TAG: u8 = 0x80;
