//! Errors from the cache. Every one of them means "go on without the cache".

use std::path::PathBuf;

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory holds a cache of another format (or something else entirely).
    #[error("{} is not a wprof cache of this version ({found})", path.display())]
    Format {
        /// The directory.
        path: PathBuf,
        /// What its FORMAT file says.
        found: String,
    },
    /// An I/O error.
    #[error("failed to {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl CacheError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CacheError::Io {
            what: what.into(),
            source,
        }
    }
}
