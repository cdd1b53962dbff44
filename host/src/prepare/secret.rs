//! The user's secret key: 32 random bytes in `$XDG_CONFIG_HOME/wprof/key` (else
//! `~/.config/wprof/key`), created on first use with mode 0600, outside the cache directory.
//!
//! wprof authenticates compiled artifacts with it (a blake3 keyed hash): deserializing
//! compiled code trusts its bytes, so only code this user's wprof compiled on this machine
//! is ever loaded. A cache copied from elsewhere, or edited, holds artifacts whose MAC does
//! not verify here: they are recompiled, never loaded. The key never goes into the cache,
//! a bundle or a profile.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// A 32-byte secret key.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// The key's bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// blake3 keyed with this key over `parts`, in order; a large part (a compiled
    /// artifact) is hashed on every core.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        for p in parts {
            if p.len() >= 1 << 20 {
                h.update_rayon(p);
            } else {
                h.update(p);
            }
        }
        *h.finalize().as_bytes()
    }

    /// Loads the key from its default place, creating it if there is none.
    pub fn load_or_create() -> anyhow::Result<Self> {
        let path = default_path().context("no $XDG_CONFIG_HOME or $HOME for the secret key")?;
        Self::load_or_create_at(&path)
    }

    /// Loads the key at `path`, creating it (and its folder, 0700) if there is none. A
    /// key file that others may read, or of the wrong size, is refused.
    pub fn load_or_create_at(path: &Path) -> anyhow::Result<Self> {
        match Self::read(path) {
            Ok(Some(key)) => return Ok(key),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        let dir = path.parent().context("the key path has no folder")?;
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .context("failed to read random bytes for the secret key")?;
        // Written aside, then linked into place: of two processes creating it at once,
        // one wins and the other reads the winner's key.
        let temp = dir.join(format!(".key-{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let written = (|| {
            use std::io::Write;
            let mut f = options.open(&temp)?;
            f.write_all(&key)?;
            f.sync_all()?;
            std::fs::hard_link(&temp, path)
        })();
        let _ = std::fs::remove_file(&temp);
        match written {
            Ok(()) => Ok(Self(key)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::read(path)?
                .with_context(|| format!("the secret key {} vanished", path.display())),
            Err(e) => Err(e).with_context(|| format!("failed to create {}", path.display())),
        }
    }

    fn read(path: &Path) -> anyhow::Result<Option<Self>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("failed to read {}", path.display())),
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                bail!(
                    "the secret key {} is readable by others (mode {:o}); refusing it",
                    path.display(),
                    mode & 0o777
                );
            }
        }
        let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            anyhow::anyhow!(
                "the secret key {} has {} bytes, not 32",
                path.display(),
                b.len()
            )
        })?;
        Ok(Some(Self(key)))
    }
}

/// `$XDG_CONFIG_HOME/wprof/key`, else `~/.config/wprof/key`.
pub fn default_path() -> Option<PathBuf> {
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("wprof").join("key"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| {
            PathBuf::from(home)
                .join(".config")
                .join("wprof")
                .join("key")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_private_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf/wprof/key");
        let a = SecretKey::load_or_create_at(&path).unwrap();
        let b = SecretKey::load_or_create_at(&path).unwrap();
        assert_eq!(a.bytes(), b.bytes());
        assert_ne!(a.bytes(), &[0u8; 32]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(SecretKey::load_or_create_at(&path).is_err());
        }
        assert_ne!(a.mac(&[b"x"]), a.mac(&[b"y"]));
    }
}
