//! Unit tests of the store: round trips, damage detection, usage, counters, files,
//! verification and repair, export and import, sharing.

use super::*;

fn key(s: &str) -> Key {
    *blake3::hash(s.as_bytes()).as_bytes()
}

#[test]
fn round_trip_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    assert_eq!(cache.get(Kind::Manifest, &key("a")).unwrap(), None);
    cache.put(Kind::Manifest, &key("a"), b"value").unwrap();
    assert_eq!(
        cache.get(Kind::Manifest, &key("a")).unwrap().unwrap(),
        b"value"
    );
    // Kinds are separate keyspaces.
    assert_eq!(cache.get(Kind::Function, &key("a")).unwrap(), None);
    let c = cache.counts(Kind::Manifest);
    assert_eq!((c.hits, c.misses, c.writes), (1, 1, 1));
}

#[test]
fn every_flipped_byte_is_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let k = key("body");
    cache
        .put(Kind::Function, &k, b"some instrumented bytes")
        .unwrap();
    let good = cache
        .get_raw_for_tests(Kind::Function, &k)
        .unwrap()
        .unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        cache.put_raw_for_tests(Kind::Function, &k, &bad).unwrap();
        assert_eq!(cache.get(Kind::Function, &k).unwrap(), None, "byte {at}");
    }
    // Truncated and moved values are misses too.
    cache
        .put_raw_for_tests(Kind::Function, &k, &good[..good.len() - 1])
        .unwrap();
    assert_eq!(cache.get(Kind::Function, &k).unwrap(), None);
    cache
        .put_raw_for_tests(Kind::Function, &key("other"), &good)
        .unwrap();
    assert_eq!(cache.get(Kind::Function, &key("other")).unwrap(), None);
    assert!(cache.counts(Kind::Function).corrupt >= good.len() as u64);
}

#[cfg(unix)]
#[test]
fn directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/cache");
    Cache::open(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn usage_records_follow_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let k = key("m");
    cache.put(Kind::Manifest, &k, b"manifest bytes").unwrap();
    let u = cache.usage(Kind::Manifest, &k).unwrap().unwrap();
    assert_eq!(u.hits, 0);
    assert!(u.size > b"manifest bytes".len() as u64);
    assert!(u.first_use > 0 && u.first_use <= u.last_use);
    cache.get(Kind::Manifest, &k).unwrap().unwrap();
    cache.get(Kind::Manifest, &k).unwrap().unwrap();
    cache.set_note(Kind::Manifest, &k, b"dir/app.wasm").unwrap();
    let u2 = cache.usage(Kind::Manifest, &k).unwrap().unwrap();
    assert_eq!(u2.hits, 2);
    assert_eq!(u2.first_use, u.first_use);
    assert_eq!(u2.note, b"dir/app.wasm");
    // Peeking counts nothing.
    assert!(matches!(
        cache.peek(Kind::Manifest, &k).unwrap(),
        Lookup::Valid(_)
    ));
    assert_eq!(cache.usage(Kind::Manifest, &k).unwrap().unwrap().hits, 2);
}

#[test]
fn counters_are_stored_for_every_process() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cache = Cache::open(dir.path()).unwrap();
        cache.put(Kind::Function, &key("f"), b"f").unwrap();
        cache.get(Kind::Function, &key("f")).unwrap();
        cache.get(Kind::Function, &key("g")).unwrap();
    }
    {
        let cache = Cache::open(dir.path()).unwrap();
        cache.get(Kind::Function, &key("f")).unwrap();
        cache.flush().unwrap();
    }
    let cache = Cache::open(dir.path()).unwrap();
    let stats = cache.stats().unwrap();
    let (_, f) = stats.kinds[0];
    assert_eq!(f.entries, 1);
    assert_eq!((f.counts.hits, f.counts.misses, f.counts.writes), (2, 1, 1));
    assert!(stats.since > 0);
}

#[test]
fn verify_reports_and_repair_drops_damaged_values() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    for name in ["a", "b", "c"] {
        cache
            .put(Kind::Function, &key(name), name.as_bytes())
            .unwrap();
    }
    assert!(cache.verify(false).unwrap().is_empty());
    let mut raw = cache
        .get_raw_for_tests(Kind::Function, &key("b"))
        .unwrap()
        .unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    cache
        .put_raw_for_tests(Kind::Function, &key("b"), &raw)
        .unwrap();
    let problems = cache.verify(false).unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].key, hex(&key("b")));
    assert_eq!(cache.verify(true).unwrap().len(), 1);
    assert!(cache.verify(false).unwrap().is_empty());
    assert_eq!(cache.keys(Kind::Function).unwrap().len(), 2);
}

#[test]
fn records_export_and_import_checked() {
    let from = tempfile::tempdir().unwrap();
    let to = tempfile::tempdir().unwrap();
    let a = Cache::open(from.path()).unwrap();
    a.put(Kind::Manifest, &key("m"), b"manifest").unwrap();
    a.set_note(Kind::Manifest, &key("m"), b"app.wasm").unwrap();
    let b = Cache::open(to.path()).unwrap();
    for section in [
        Section::Values(Kind::Manifest),
        Section::Usage,
        Section::Stats,
    ] {
        for (k, raw) in a.records(section).unwrap() {
            assert!(b.import_record(section, &k, &raw, true).unwrap());
            let mut bad = raw.clone();
            bad[raw.len() - 1] ^= 1;
            assert!(!Cache::record_is_valid(section, &k, &bad));
        }
    }
    assert_eq!(
        b.get(Kind::Manifest, &key("m")).unwrap().unwrap(),
        b"manifest"
    );
    assert_eq!(
        b.usage(Kind::Manifest, &key("m")).unwrap().unwrap().note,
        b"app.wasm"
    );
    assert!(b.verify(false).unwrap().is_empty());
    assert_eq!(Section::from_name("artifacts"), None);
}

#[test]
fn eviction_removes_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    cache.put(Kind::Module, &key("m"), &[0u8; 1000]).unwrap();
    let before = cache.total_size().unwrap();
    assert!(before > 1000);
    assert!(cache.evict(Kind::Module, &key("m")).unwrap());
    assert!(!cache.evict(Kind::Module, &key("m")).unwrap());
    assert_eq!(cache.total_size().unwrap(), 0);
    assert_eq!(cache.usage(Kind::Module, &key("m")).unwrap(), None);
    assert_eq!(cache.stats().unwrap().kinds[2].1.counts.evicted, 1);
    assert!(cache.is_empty().unwrap());
}

#[test]
fn handles_share_one_cache_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let a = Cache::open(dir.path()).unwrap();
    let b = Cache::open(dir.path()).unwrap();
    a.put(Kind::Manifest, &key("f"), b"body").unwrap();
    assert_eq!(b.get(Kind::Manifest, &key("f")).unwrap().unwrap(), b"body");
    b.get(Kind::Manifest, &key("f")).unwrap();
    assert_eq!(a.usage(Kind::Manifest, &key("f")).unwrap().unwrap().hits, 2);
    // Counters from both handles add up.
    a.get(Kind::Manifest, &key("g")).unwrap();
    drop(a);
    drop(b);
    let c = Cache::open(dir.path()).unwrap();
    let counts = c.stats().unwrap().kinds[1].1.counts;
    assert_eq!((counts.hits, counts.misses, counts.writes), (2, 1, 1));
    // Threads too.
    let c = std::sync::Arc::new(c);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    c.put(Kind::Module, &key(&format!("{t}/{i}")), b"m")
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(c.keys(Kind::Module).unwrap().len(), 100);
    assert!(c.verify(false).unwrap().is_empty());
}

#[test]
fn another_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("FORMAT"), "something else").unwrap();
    assert!(matches!(
        Cache::open(dir.path()),
        Err(CacheError::Format { .. })
    ));
    assert!(Cache::exists(dir.path()));
}

#[test]
fn an_older_format_is_emptied_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let key = *blake3::hash(b"k").as_bytes();
    {
        let c = Cache::open(dir.path()).unwrap();
        c.put(Kind::Module, &key, b"a value of the older format")
            .unwrap();
    }
    std::fs::write(dir.path().join("FORMAT"), "wprof cache 2\n").unwrap();
    assert_eq!(
        Cache::older_format(dir.path()).as_deref(),
        Some("wprof cache 2")
    );
    let c = Cache::open(dir.path()).unwrap();
    assert_eq!(c.emptied_older_format(), Some("wprof cache 2"));
    assert_eq!(c.get(Kind::Module, &key).unwrap(), None);
    assert!(c.keys(Kind::Module).unwrap().is_empty());
    assert!(c.verify(false).unwrap().is_empty());
    drop(c);
    // Emptied once: the next open finds this format.
    assert_eq!(Cache::older_format(dir.path()), None);
    assert_eq!(
        Cache::open(dir.path()).unwrap().emptied_older_format(),
        None
    );
}

fn age(path: &std::path::Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    // A folder opens read-only; its times can be set all the same.
    let file = if path.is_dir() {
        std::fs::File::open(path)
    } else {
        std::fs::File::options().write(true).open(path)
    };
    file.unwrap().set_modified(old).unwrap();
}

#[test]
fn files_are_checked_and_leftovers_removed() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("artifact");
    let cache = Cache::open(dir.path()).unwrap();
    cache
        .put_file(Kind::Artifact, &k, b"mac", b"machine code")
        .unwrap();
    let v = cache.get_file(Kind::Artifact, &k).unwrap().unwrap();
    assert_eq!(v.value, b"mac");
    assert_eq!(std::fs::read(&v.path).unwrap(), b"machine code");
    assert_eq!(v.len, 12);
    let path = v.path;
    assert!(cache.verify(false).unwrap().is_empty());
    // Same length, other bytes: reads still see the file (the host authenticates it),
    // verification does not.
    std::fs::write(&path, b"MACHINE CODE").unwrap();
    let problems = cache.verify(false).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].entry, Some((Kind::Artifact, k)));
    // Another length: a miss.
    std::fs::write(&path, b"short").unwrap();
    assert_eq!(cache.get_file(Kind::Artifact, &k).unwrap(), None);
    assert_eq!(cache.verify(true).unwrap().len(), 1);
    assert!(!path.exists());
    assert!(cache.verify(false).unwrap().is_empty());
    // Leftovers of a writer killed mid-way: a temporary file, a file whose record never
    // came. Not damage; removed by a repair once they are old.
    let temp = path.with_file_name(".tmp-1-2-x");
    std::fs::write(&temp, b"partial").unwrap();
    std::fs::write(&path, b"orphan").unwrap();
    assert!(cache.verify(false).unwrap().is_empty());
    assert!(cache.verify(true).unwrap().is_empty());
    assert!(
        temp.exists() && path.exists(),
        "young: maybe a live writer's"
    );
    age(&temp);
    age(&path);
    assert!(cache.verify(true).unwrap().is_empty());
    assert!(!temp.exists() && !path.exists());
    assert_eq!(cache.get_file(Kind::Artifact, &k).unwrap(), None);
}

#[test]
fn the_store_of_the_previous_format_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("store");
    std::fs::create_dir_all(legacy.join("blobs")).unwrap();
    std::fs::write(legacy.join("conf"), "segment_size: 524288").unwrap();
    std::fs::write(legacy.join("db"), [0u8; 64]).unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    assert!(!legacy.exists());
    assert!(cache.is_empty().unwrap());
    // Something else named `store` is left alone.
    std::fs::create_dir(&legacy).unwrap();
    drop(cache);
    Cache::open(dir.path()).unwrap();
    assert!(legacy.exists());
}

#[test]
fn stale_leftovers_are_swept_anywhere_fresh_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let k = key("bodies");
    cache.put(Kind::Function, &k, b"a pack").unwrap();
    cache
        .put_file(Kind::Artifact, &key("art"), b"mac", b"code")
        .unwrap();
    let fan = cache.entry_path(Kind::Function, &k);
    let fan = fan.parent().unwrap();
    // A value renamed aside by a process killed before it removed it; a folder removed
    // aside at the top (an earlier format's); a write's temporary file beside artifacts.
    let aside = fan.join(".tmp-removed-1-2-3-x");
    std::fs::write(&aside, vec![0u8; 1000]).unwrap();
    let top = dir.path().join(".tmp-removed-entries");
    std::fs::create_dir_all(top.join("functions")).unwrap();
    std::fs::write(top.join("functions").join("v"), vec![0u8; 500]).unwrap();
    let temp = cache.file_dir(Kind::Artifact).join(".tmp-9-9-y");
    std::fs::write(&temp, vec![0u8; 200]).unwrap();
    let fresh = fan.join(".tmp-4-5-z");
    std::fs::write(&fresh, b"a live writer's").unwrap();
    for old in [&aside, &top, &temp] {
        age(old);
    }
    assert_eq!(cache.sweep_leftovers().unwrap(), 1000 + 500 + 200);
    assert!(!aside.exists() && !top.exists() && !temp.exists());
    assert!(fresh.exists(), "young: maybe a live writer's");
    assert_eq!(cache.get(Kind::Function, &k).unwrap().unwrap(), b"a pack");
    assert_eq!(cache.sweep_leftovers().unwrap(), 0);
}
