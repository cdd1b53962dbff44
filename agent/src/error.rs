//! Why the agent could not instrument a module.

/// An error from the agent. Every variant means "this module cannot be instrumented": the
/// host runs it uninstrumented instead.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The bytes are not a WebAssembly module the parser understands.
    #[error("cannot parse module: {0}")]
    Parse(#[from] wasmparser::BinaryReaderError),
    /// The bytes are a component, not a core module.
    #[error("components are not supported yet (this is a component, not a core module)")]
    Component,
    /// A construct the rewriter does not handle.
    #[error("cannot instrument {what} (at offset {offset:#x})")]
    Unsupported {
        /// What was found.
        what: String,
        /// Where, as a byte offset in the original module.
        offset: usize,
    },
    /// The host handed [`crate::Instrumenter::assemble`] the wrong number of bodies.
    #[error("expected {expected} function bodies, got {got}")]
    BodyCount {
        /// Defined functions in the module.
        expected: usize,
        /// Bodies given.
        got: usize,
    },
    /// Instrumenting a function panicked (a bug in the agent), caught by the host.
    #[error("the agent failed on function {function}: {message}")]
    Panicked {
        /// The function's name.
        function: String,
        /// The panic's message.
        message: String,
    },
    /// Re-encoding a section failed.
    #[error("cannot re-encode module: {0}")]
    Encode(String),
}

impl From<wasm_encoder::reencode::Error> for AgentError {
    fn from(e: wasm_encoder::reencode::Error) -> Self {
        AgentError::Encode(e.to_string())
    }
}
