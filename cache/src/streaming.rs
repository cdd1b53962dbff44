//! Values written in parts as they are made, for values too large to hold whole in memory
//! beside what makes them (the compiled functions of a 69 MB module: 122 MB compressed,
//! written while the compile that makes them runs at its peak of memory).
//!
//! The parts go to a private temporary file beside the value's place, its envelope's header
//! left blank until [`ValueWriter::finish`] knows the digest; then the file is renamed into
//! place, as [`Cache::put`] does. Nothing is visible under the key before that: a writer
//! dropped unfinished (or a process killed) leaves no value, and its temporary file is
//! removed (or swept as any other).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

use crate::envelope::{Digester, HEADER};
use crate::{files, io, stats, Cache, CacheError, Key, Kind};

/// A value of the cache being written (see the module's documentation).
#[derive(Debug)]
pub struct ValueWriter {
    kind: Kind,
    path: PathBuf,
    temp: Option<PathBuf>,
    file: File,
    digester: Digester,
}

impl Cache {
    /// Starts writing the value of `key` in parts (see [`ValueWriter`]). Not for kinds with
    /// files.
    pub fn put_in_parts(&self, kind: Kind, key: &Key) -> Result<ValueWriter, CacheError> {
        assert!(!kind.has_file(), "{} values need a file", kind.name());
        let path = self.entry_path(kind, key);
        let created = match files::create_temp_beside(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = path.parent().expect("cache files live in folders");
                files::create_private_dir(parent).map_err(io("create", parent))?;
                files::create_temp_beside(&path)
            }
            other => other,
        };
        let (temp, mut file) = created.map_err(io("write", &path))?;
        if let Err(e) = file.write_all(&[0; HEADER]) {
            let _ = std::fs::remove_file(&temp);
            return Err(io("write", &temp)(e));
        }
        Ok(ValueWriter {
            kind,
            path,
            temp: Some(temp),
            file,
            digester: Digester::new(kind.tag(), key),
        })
    }
}

impl ValueWriter {
    /// Appends `part` to the value.
    pub fn write(&mut self, part: &[u8]) -> Result<(), CacheError> {
        self.digester.update(part);
        let temp = self.temp.as_ref().expect("written until finished");
        self.file.write_all(part).map_err(io("write", temp))
    }

    /// Seals the value and puts it under its key in `cache` (the one it came from),
    /// replacing whatever was there.
    pub fn finish(mut self, cache: &Cache) -> Result<(), CacheError> {
        let temp = self.temp.take().expect("finished once");
        let sealed = (|| {
            self.file.seek(SeekFrom::Start(0))?;
            self.file.write_all(&self.digester.header())?;
            std::fs::rename(&temp, &self.path)
        })();
        if let Err(e) = sealed {
            let _ = std::fs::remove_file(&temp);
            return Err(io("write", &self.path)(e));
        }
        cache.count(self.kind, stats::WRITES);
        Ok(())
    }
}

impl Drop for ValueWriter {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let _ = std::fs::remove_file(temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_written_in_parts_reads_as_one_put_whole() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let key = [5; 32];
        let mut w = cache.put_in_parts(Kind::Compiled, &key).unwrap();
        // Nothing under the key while it is written.
        assert_eq!(cache.get(Kind::Compiled, &key).unwrap(), None);
        w.write(b"hello, ").unwrap();
        w.write(b"").unwrap();
        w.write(b"world").unwrap();
        w.finish(&cache).unwrap();
        assert_eq!(
            cache.get(Kind::Compiled, &key).unwrap().as_deref(),
            Some(&b"hello, world"[..])
        );
        // The same bytes on disk as a whole put makes.
        let parts = std::fs::read(cache.entry_path(Kind::Compiled, &key)).unwrap();
        cache.put(Kind::Compiled, &key, b"hello, world").unwrap();
        let whole = std::fs::read(cache.entry_path(Kind::Compiled, &key)).unwrap();
        assert_eq!(parts, whole);
    }

    #[test]
    fn an_unfinished_value_leaves_nothing_and_the_old_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let key = [6; 32];
        cache.put(Kind::Compiled, &key, b"old").unwrap();
        let mut w = cache.put_in_parts(Kind::Compiled, &key).unwrap();
        w.write(b"half of a new one").unwrap();
        let temp = w.temp.clone().unwrap();
        assert!(temp.exists());
        drop(w);
        assert!(!temp.exists());
        assert_eq!(
            cache.get(Kind::Compiled, &key).unwrap().as_deref(),
            Some(&b"old"[..])
        );
    }
}
