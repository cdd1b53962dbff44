//! The profile on disk: written atomically (a reader sees the old file or the new one,
//! never a part) and read back with its format version checked.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

use super::{Profile, FORMAT_VERSION};

impl Profile {
    /// Writes the profile to `path` atomically: a reader sees the old file or the new one,
    /// never a part.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("failed to create a file in {}", dir.display()))?;
        serde_json::to_writer_pretty(&mut tmp, self).context("failed to encode the profile")?;
        tmp.write_all(b"\n")?;
        tmp.persist(path)
            .with_context(|| format!("failed to write {}", path.display()))?;
        Ok(())
    }

    /// Reads a profile written by [`Profile::write`].
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let profile: Profile = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a wprof profile", path.display()))?;
        anyhow::ensure!(
            profile.format_version == FORMAT_VERSION,
            "{} has profile format {}, this wprof reads format {FORMAT_VERSION}",
            path.display(),
            profile.format_version
        );
        Ok(profile)
    }
}
