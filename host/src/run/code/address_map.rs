//! Where a sampled program counter is in the wasm module, read from the compiled artifact.
//!
//! wasmtime keeps, beside a module's machine code, a map from `.text` offsets to the
//! module's byte offsets, indexed by blocks so that one address is found in a few steps. Its
//! public API only iterates the whole map (`wasmtime::Module::address_map`): 40 million
//! entries, 0.2 s, for a 69 MB module, paid at the end of every sample-mode run. This module
//! reads the same map from the serialized module wprof loaded (the ELF section
//! `wasmtime_environ::obj::ELF_WASMTIME_ADDRMAP`, searched with
//! `wasmtime_environ::lookup_file_pos`, both of the exact wasmtime version wprof embeds). A
//! test checks it against the iteration on a real compile, so a wasmtime that changes the
//! format fails it rather than misplacing samples.

use std::fs::File;
use std::ops::Range;

use object::{Object, ObjectSection};

/// The address map of a serialized module, mapped from its file.
#[derive(Debug)]
pub struct ArtifactAddressMap {
    file: memmap2::Mmap,
    section: Range<usize>,
}

impl ArtifactAddressMap {
    /// The map in the serialized module `file`; `None` when it cannot be read or has none.
    pub fn open(file: &File) -> Option<Self> {
        // SAFETY: the file is only read. It is this process's own anonymous file (see
        // `crate::prepare::artifact_image`); were it changed while mapped, the worst outcome
        // would be a misplaced sample, since nothing from it is executed or trusted beyond a
        // lookup.
        let file = unsafe { memmap2::Mmap::map(file) }.ok()?;
        let section = {
            let elf = object::File::parse(&file[..]).ok()?;
            let section = elf.section_by_name(wasmtime_environ::obj::ELF_WASMTIME_ADDRMAP)?;
            let (start, len) = section.file_range()?;
            usize::try_from(start).ok()?..usize::try_from(start + len).ok()?
        };
        file.get(section.clone())?;
        Some(ArtifactAddressMap { file, section })
    }

    /// The map in a serialized module or component held in memory (copied).
    pub fn of_bytes(bytes: &[u8]) -> Option<Self> {
        let mut copy = memmap2::MmapMut::map_anon(bytes.len().max(1)).ok()?;
        copy[..bytes.len()].copy_from_slice(bytes);
        let file = copy.make_read_only().ok()?;
        let section = {
            let elf = object::File::parse(&file[..bytes.len()]).ok()?;
            let section = elf.section_by_name(wasmtime_environ::obj::ELF_WASMTIME_ADDRMAP)?;
            let (start, len) = section.file_range()?;
            usize::try_from(start).ok()?..usize::try_from(start + len).ok()?
        };
        file.get(section.clone())?;
        Some(ArtifactAddressMap { file, section })
    }

    /// The module byte offset of the instruction at `text_offset` of the module's `.text`
    /// (in a component's, of the core module the instruction belongs to).
    pub fn file_offset(&self, text_offset: usize) -> Option<u32> {
        wasmtime_environ::lookup_file_pos(&self.file[self.section.clone()], text_offset)?
            .file_offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_agree_with_the_engines_own_map() {
        let wat = r#"(module
            (memory 1)
            (func $sum (param i32) (result i32) (local i32)
              (loop $l
                (local.set 1 (i32.add (local.get 1) (i32.load (local.get 0))))
                (local.set 0 (i32.sub (local.get 0) (i32.const 4)))
                (br_if $l (i32.gt_s (local.get 0) (i32.const 0))))
              (local.get 1))
            (func (export "_start") (drop (call $sum (i32.const 64)))))"#;
        let engine = crate::run::engine::new_engine().unwrap();
        let module = wasmtime::Module::new(&engine, wat).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cwasm");
        std::fs::write(&path, module.serialize().unwrap()).unwrap();
        let image = std::fs::File::open(&path).unwrap();
        let map = ArtifactAddressMap::open(&image).expect("the artifact has an address map");
        let entries: Vec<(usize, Option<u32>)> = module.address_map().unwrap().collect();
        assert!(entries.iter().filter(|(_, o)| o.is_some()).count() > 2);
        let text = module.text().len();
        let mut covering = None;
        let mut next = entries.iter().peekable();
        for at in 0..text {
            while let Some(&&(start, offset)) = next.peek() {
                if start > at {
                    break;
                }
                covering = offset;
                next.next();
            }
            if entries[0].0 <= at {
                assert_eq!(map.file_offset(at), covering, "text offset {at}");
            }
        }
        let junk = tempfile::tempfile().unwrap();
        assert!(ArtifactAddressMap::open(&junk).is_none());
        std::fs::write(dir.path().join("junk"), b"not an artifact").unwrap();
        let junk = std::fs::File::open(dir.path().join("junk")).unwrap();
        assert!(ArtifactAddressMap::open(&junk).is_none());
    }
}
