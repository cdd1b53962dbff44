//! What wprof learns of a module by reading it, kept in the cache under the module's digest
//! so that a module is read once, not at every run: the interpreter it is (its eval loop
//! and the layout of its structures, read from its DWARF: 5 to 13 ms on CPython) and each
//! defined function's source file and first line (from the DWARF's line programs, which
//! the caller reads: see `commands::run::modes::sources`; 10 ms on CPython 3.11 for the
//! functions of a `print(1)`).
//!
//! Facts are keyed by the module's digest and by the digest of the code that learns them
//! (`WPROF_FACTS_CODE`, see `build.rs`): a build that reads modules differently learns
//! each anew instead of taking an older build's facts. Within a process each fact is
//! learnt once per module ([`interpreter`], [`sources`]); a run first [`recall`]s what the
//! cache knows and at its end [`keep`]s what it had to learn. A value that cannot be read
//! (damaged, or of another layout) is a miss: the facts are learnt again and rewritten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use wprof_cache::{Cache, Kind};

use crate::languages::Interpreter;
use crate::prepare::loader::LoadedModule;
use crate::prepare::session::CacheSession;

/// The interpreter a module is, if it is one whose language's frames wprof reads, or why
/// they cannot be read (see [`crate::languages::find`]).
pub type Found = Option<Result<Arc<Interpreter>, String>>;

/// Each defined function's source file and first line, from the module's DWARF.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sources {
    /// Imported functions: the first defined function's id.
    imported: u32,
    /// The files, each once.
    files: Vec<String>,
    /// By defined function, in order: its file (an index in `files`) and first line;
    /// `None` where the DWARF gives it no line.
    functions: Vec<Option<(u32, u32)>>,
}

impl Sources {
    /// The sources of a module with `imported` imported functions and `defined` defined
    /// ones, of which `found` gives some theirs (by function id: file and first line).
    pub fn new(
        imported: u32,
        defined: usize,
        found: impl IntoIterator<Item = (u32, String, u32)>,
    ) -> Sources {
        let mut sources = Sources {
            imported,
            files: Vec::new(),
            functions: vec![None; defined],
        };
        let mut files: HashMap<String, u32> = HashMap::new();
        for (id, file, line) in found {
            let Some(slot) = id
                .checked_sub(imported)
                .and_then(|i| sources.functions.get_mut(i as usize))
            else {
                continue;
            };
            let file = *files.entry(file).or_insert_with_key(|file| {
                sources.files.push(file.clone());
                sources.files.len() as u32 - 1
            });
            *slot = Some((file, line));
        }
        sources
    }

    /// The source file and first line of the function `id`, if it has them.
    pub fn get(&self, id: u32) -> Option<(&str, u32)> {
        let index = id.checked_sub(self.imported)? as usize;
        let (file, line) = (*self.functions.get(index)?)?;
        Some((self.files.get(file as usize)?, line))
    }

    /// Whether any function has a line (when none does, no sampled offset has one either,
    /// and a run need not read the DWARF for its lines).
    pub fn any(&self) -> bool {
        self.functions.iter().any(Option::is_some)
    }
}

/// What the cache keeps of a module: the facts learnt so far (a run that asked for one
/// only leaves the other to a later run).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    interpreter: Option<Option<Result<Interpreter, String>>>,
    sources: Option<Sources>,
}

/// A module's facts in this process.
#[derive(Debug, Default)]
struct Known {
    interpreter: Option<Found>,
    sources: Option<Arc<Sources>>,
    /// The cache was asked.
    recalled: bool,
    /// Something was learnt that the cache did not have.
    learnt: bool,
}

/// Every module's facts in this process, by digest.
fn known() -> std::sync::MutexGuard<'static, HashMap<[u8; 32], Known>> {
    static KNOWN: OnceLock<Mutex<HashMap<[u8; 32], Known>>> = OnceLock::new();
    KNOWN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The cache's key of `loaded`'s facts.
fn key(loaded: &LoadedModule) -> [u8; 32] {
    crate::prepare::cache_values::facts_key(&loaded.digest)
}

/// Takes what the cache knows of `loaded`, once per process, before anything asks.
pub fn recall(cache: &mut CacheSession, loaded: &LoadedModule) {
    if known().get(&loaded.digest).is_some_and(|k| k.recalled) {
        return;
    }
    let stored = cache
        .get(Kind::Facts, &key(loaded))
        .and_then(|bytes| postcard::from_bytes::<Stored>(&bytes).ok());
    let mut known = known();
    let facts = known.entry(loaded.digest).or_default();
    facts.recalled = true;
    let Some(stored) = stored else {
        return;
    };
    if facts.interpreter.is_none() {
        facts.interpreter = stored
            .interpreter
            .map(|found| found.map(|r| r.map(Arc::new)));
    }
    if facts.sources.is_none() {
        facts.sources = stored.sources.map(Arc::new);
    }
}

/// Whether `value` is a module's facts as this build stores them (`wprof cache verify`).
pub fn decodes(value: &[u8]) -> bool {
    postcard::from_bytes::<Stored>(value).is_ok()
}

/// Stores in the background what this process learnt of `loaded` that the cache did not
/// have (with what it had), for the next run.
pub fn keep(cache: &mut CacheSession, loaded: &LoadedModule) {
    let stored = {
        let mut known = known();
        let Some(facts) = known.get_mut(&loaded.digest).filter(|k| k.learnt) else {
            return;
        };
        facts.learnt = false;
        Stored {
            interpreter: facts
                .interpreter
                .clone()
                .map(|found| found.map(|r| r.map(|i| (*i).clone()))),
            sources: facts.sources.as_deref().cloned(),
        }
    };
    let Ok(bytes) = postcard::to_allocvec(&stored) else {
        return;
    };
    let key = key(loaded);
    cache.store_in_background("a module's facts", move |cache: &Cache| {
        cache.put(Kind::Facts, &key, &bytes)
    });
}

/// The interpreter `loaded` is (see [`crate::languages::find`]): as known, else read from
/// its DWARF now.
pub fn interpreter(loaded: &LoadedModule) -> Found {
    if let Some(found) = known()
        .get(&loaded.digest)
        .and_then(|k| k.interpreter.clone())
    {
        return found;
    }
    let found = crate::languages::find(&loaded.bytes).map(|r| r.map(Arc::new));
    let mut known = known();
    let facts = known.entry(loaded.digest).or_default();
    facts.interpreter = Some(found.clone());
    facts.learnt = true;
    found
}

/// The sources of `loaded`'s functions, if known without reading the module.
pub fn known_sources(loaded: &LoadedModule) -> Option<Arc<Sources>> {
    known().get(&loaded.digest).and_then(|k| k.sources.clone())
}

/// The sources of `loaded`'s functions: as known, else as `learn` reads them now.
pub fn sources(loaded: &LoadedModule, learn: impl FnOnce() -> Sources) -> Arc<Sources> {
    if let Some(sources) = known_sources(loaded) {
        return sources;
    }
    let sources = Arc::new(learn());
    let mut known = known();
    let facts = known.entry(loaded.digest).or_default();
    facts.sources = Some(sources.clone());
    facts.learnt = true;
    sources
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(text: &str) -> LoadedModule {
        let bytes = wat::parse_str(text).unwrap();
        LoadedModule {
            digest: *blake3::hash(&bytes).as_bytes(),
            bytes,
        }
    }

    #[test]
    fn a_function_s_source_is_found_by_its_id_past_the_imports() {
        let found = [(2, "b.c".to_string(), 7), (4, "a.c".to_string(), 3)];
        // Ids out of the module's defined functions are left out.
        let more = [(1, "x.c".to_string(), 1), (5, "x.c".to_string(), 1)];
        let sources = Sources::new(2, 3, found.into_iter().chain(more));
        assert_eq!(sources.files, ["b.c", "a.c"]);
        assert_eq!(sources.get(0), None);
        assert_eq!(sources.get(2), Some(("b.c", 7)));
        assert_eq!(sources.get(3), None);
        assert_eq!(sources.get(4), Some(("a.c", 3)));
        assert_eq!(sources.get(5), None);
        assert!(sources.any());
        assert!(!Sources::new(2, 3, []).any());
    }

    #[test]
    fn facts_learnt_are_kept_recalled_and_not_learnt_again() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = module("(module (func (export \"_start\")))");
        let mut cache = CacheSession::open(Some(dir.path()));
        recall(&mut cache, &loaded);
        assert_eq!(interpreter(&loaded), None);
        assert!(!sources(&loaded, Sources::default).any());
        // Known now: not learnt again.
        assert!(!sources(&loaded, || unreachable!()).any());
        keep(&mut cache, &loaded);
        cache.release();
        let stored = cache
            .get(Kind::Facts, &key(&loaded))
            .expect("stored under the module's key");
        let stored: Stored = postcard::from_bytes(&stored).unwrap();
        assert_eq!(stored.interpreter, Some(None));
        assert_eq!(stored.sources, Some(Sources::default()));
        // Nothing new: nothing stored again.
        keep(&mut cache, &loaded);
        assert!(!cache.storing());
    }

    #[test]
    fn the_benchmark_sets_interpreters_are_stored_and_read_back_as_found() {
        let bench = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bench");
        for name in [
            "lua.wasm",
            "qjs.wasm",
            "qjs_bellard.wasm",
            "python/python.wasm",
        ] {
            let Ok(bytes) = std::fs::read(bench.join(name)) else {
                assert!(
                    std::env::var_os("WPROF_REQUIRE_TOOLS").is_none(),
                    "{name} is required: bash bench/programs/build.sh --small"
                );
                continue;
            };
            let found = crate::languages::find(&bytes).expect("an interpreter");
            let stored = Stored {
                interpreter: Some(Some(found.clone())),
                sources: None,
            };
            let read: Stored =
                postcard::from_bytes(&postcard::to_allocvec(&stored).unwrap()).unwrap();
            assert_eq!(read.interpreter, Some(Some(found)), "{name}");
        }
    }

    #[test]
    fn a_damaged_value_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = module("(module (func (export \"_start\") nop))");
        let mut cache = CacheSession::open(Some(dir.path()));
        let c = cache.cache().unwrap();
        c.put(Kind::Facts, &key(&loaded), b"\xff\xff\xff not postcard")
            .unwrap();
        recall(&mut cache, &loaded);
        assert_eq!(known_sources(&loaded), None);
        assert!(known().get(&loaded.digest).unwrap().recalled);
    }
}
