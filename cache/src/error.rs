//! Errors from the cache. Every one of them means "go on without the cache".

use std::path::{Path, PathBuf};

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Another process holds the store.
    #[error("cache {} is in use by another process", path.display())]
    Locked {
        /// The store's path.
        path: PathBuf,
    },
    /// The store is damaged beyond what sled can recover.
    #[error("cache {} is corrupt: {detail}", path.display())]
    Corrupt {
        /// The store's path.
        path: PathBuf,
        /// What sled reported.
        detail: String,
    },
    /// An I/O error.
    #[error("failed to {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Any other store error.
    #[error("cache {} failed: {detail}", path.display())]
    Store {
        /// The store's path.
        path: PathBuf,
        /// What sled reported.
        detail: String,
    },
}

impl CacheError {
    pub(crate) fn from_sled(e: sled::Error, path: &Path) -> Self {
        let path = path.to_path_buf();
        match e {
            // sled reports a held lock as an I/O error of its own wording.
            sled::Error::Io(io)
                if io.kind() == std::io::ErrorKind::WouldBlock
                    || io.to_string().contains("could not acquire lock") =>
            {
                CacheError::Locked { path }
            }
            sled::Error::Io(io) => CacheError::Io {
                what: format!("use cache {}", path.display()),
                source: io,
            },
            sled::Error::Corruption { .. } => CacheError::Corrupt {
                path,
                detail: e.to_string(),
            },
            other => CacheError::Store {
                path,
                detail: other.to_string(),
            },
        }
    }
}
