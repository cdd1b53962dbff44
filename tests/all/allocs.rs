//! Allocation profiling (`--allocs`): every block the allocator of `allocs.wasm` hands
//! out, exact by construction in every mode, by the context that asked; the summary, the
//! text report and pprof (read by `go tool pprof`) show them; the configuration file names
//! other allocators.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::*;
use crate::tools::pprof_top;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Per (caller, allocator): (bytes, objects, live bytes, live objects).
fn blocks_by_caller(p: &Value) -> BTreeMap<(String, String), [u64; 4]> {
    let names: std::collections::HashMap<u64, String> = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (u(&f["id"]), f["name"].as_str().unwrap().to_string()))
        .collect();
    let contexts = p["contexts"].as_array().unwrap();
    let mut out = BTreeMap::new();
    for c in contexts {
        let Some(a) = c.get("allocs") else { continue };
        let caller = &contexts[u(&c["parent"]) as usize];
        let key = (
            names[&u(&caller["function"])].clone(),
            names[&u(&c["function"])].clone(),
        );
        let figures = [
            u(&a["bytes"]),
            u(&a["objects"]),
            u(&a["live_bytes"]),
            u(&a["live_objects"]),
        ];
        let entry = out.entry(key).or_insert([0; 4]);
        for (e, f) in entry.iter_mut().zip(figures) {
            *e += f;
        }
    }
    out
}

/// What `allocs.c` says each of its functions does.
fn as_constructed() -> BTreeMap<(String, String), [u64; 4]> {
    [
        (("small_block", "malloc"), [2400, 100, 960, 40]),
        (("make_table", "c.malloc.calloc"), [10240, 10, 0, 0]),
        (("grow_buffer", "malloc"), [16, 1, 0, 0]),
        (("grow_buffer", "c.malloc.realloc"), [480, 4, 256, 1]),
        (("aligned_block", "c.malloc.posix_memalign"), [300, 3, 0, 0]),
        (("aligned_block", "c.malloc.aligned_alloc"), [192, 2, 0, 0]),
    ]
    .into_iter()
    .map(|((a, b), f)| ((a.to_string(), b.to_string()), f))
    .collect()
}

#[test]
fn every_mode_counts_the_blocks_as_constructed() {
    let s = Scratch::new();
    for mode in ["time", "sample", "cost", "adaptive"] {
        let file = format!("{mode}.wprof");
        let out = s
            .wprof(&["run", "--allocs", "--mode", mode, "-o", &file])
            .arg(sample("allocs.wasm"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "allocs: checksum=980337\n", "{mode}");
        assert!(
            stderr(&out).contains("wprof: allocations: 120 blocks, 13.3 KiB (malloc,"),
            "{mode}: {}",
            stderr(&out)
        );
        let p = s.profile(&file);
        assert_eq!(blocks_by_caller(&p), as_constructed(), "{mode}");
        let a = &p["allocations"];
        assert_eq!(
            (u(&a["objects"]), u(&a["bytes"])),
            (120, 13628),
            "{mode}: {a}"
        );
        assert_eq!(
            (
                u(&a["live_objects"]),
                u(&a["live_bytes"]),
                u(&a["unknown_frees"])
            ),
            (41, 1216, 0),
            "{mode}"
        );
        let reported: BTreeMap<&str, (u64, &str)> = a["allocators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap(),
                    (u(&r["calls"]), r["kind"].as_str().unwrap()),
                )
            })
            .collect();
        assert_eq!(reported["malloc"], (101, "alloc"), "{mode}");
        assert_eq!(reported["c.malloc.free"], (75, "free"), "{mode}");
        assert_eq!(
            reported["c.malloc.posix_memalign"],
            (3, "alloc_at"),
            "{mode}"
        );
        // The allocators' calls are counted as every function's.
        assert_eq!(calls(&p, "malloc"), 101, "{mode}");
    }
    // The text report's table.
    let o = s.run(&["report", "cost.wprof"]);
    let text = stdout(&o);
    assert!(
        text.contains("Allocations (blocks handed out")
            && text.lines().any(|l| l.contains("2.3 KiB")
                && l.contains("960 B")
                && l.ends_with("small_block > malloc")),
        "{text}"
    );
    // The HTML report's table.
    let o = s.run(&["report", "cost.wprof", "--format", "html", "-o", "a.html"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(s.path("a.html")).unwrap();
    assert!(
        html.contains("<h2 id=\"allocations\">")
            && html.contains("small_block &gt; malloc</a></td><td>2.3 KiB</td><td>100</td><td>960 B</td><td>40</td>"),
        "no allocations table"
    );
}

#[test]
fn without_allocs_there_are_none_and_the_bodies_are_shared() {
    let s = Scratch::new();
    let o = s.run(&[
        "run",
        "--mode",
        "sample",
        "-o",
        "plain.wprof",
        sample("allocs.wasm").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("allocations"));
    let p = s.profile("plain.wprof");
    assert!(p.get("allocations").is_none());
    assert!(p["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c.get("allocs").is_none()));
    // WPROF_ALLOCS turns it on; only the allocators' bodies differ from the run before.
    let o = s
        .wprof(&["run", "--mode", "sample", "-o", "on.wprof"])
        .arg(sample("allocs.wasm"))
        .env("WPROF_ALLOCS", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let p = s.profile("on.wprof");
    assert_eq!(u(&p["allocations"]["objects"]), 120);
    let stats = &p["instrumentation"];
    assert_eq!(u(&stats["functions_instrumented"]), 6, "{stats}");
}

#[test]
fn pprof_carries_go_heap_profile_sample_types() {
    let s = Scratch::new();
    let o = s
        .wprof(&["run", "--allocs", "-o", "a.wprof"])
        .arg(sample("allocs.wasm"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = s.run(&["report", "a.wprof", "--format", "pprof", "-o", "a.pb.gz"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let Some(space) = pprof_top(&s, "a.pb.gz", &["-sample_index=alloc_space", "-unit=B"]) else {
        return;
    };
    // Cumulative: what each function asked for; flat: the allocator's.
    assert_eq!(space["small_block"].1, 2400);
    assert_eq!(space["make_table"].1, 10240);
    assert_eq!(space["grow_buffer"].1, 496);
    assert_eq!(space["malloc"].0, 2416);
    let objects = pprof_top(&s, "a.pb.gz", &["-sample_index=alloc_objects"]).unwrap();
    assert_eq!(objects["small_block"].1, 100);
    let inuse = pprof_top(&s, "a.pb.gz", &["-sample_index=inuse_space", "-unit=B"]).unwrap();
    assert_eq!(inuse["small_block"].1, 960);
    assert_eq!(inuse["grow_buffer"].1, 256);
    assert!(!inuse.contains_key("make_table") || inuse["make_table"].1 == 0);
    let live = pprof_top(&s, "a.pb.gz", &["-sample_index=inuse_objects"]).unwrap();
    assert_eq!(live["small_block"].1, 40);
}

#[test]
fn the_configuration_file_names_the_allocator() {
    let s = Scratch::new();
    // Only malloc and free: the blocks of calloc, posix_memalign and aligned_alloc are
    // freed without wprof having seen them handed out.
    std::fs::write(
        s.path("wprof.toml"),
        "allocs = true\nallocators = [\"malloc=malloc\", \"free=c.malloc.free\"]\n",
    )
    .unwrap();
    let o = s.run(&[
        "run",
        "-o",
        "n.wprof",
        sample("allocs.wasm").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p = s.profile("n.wprof");
    let a = &p["allocations"];
    let names: Vec<&str> = a["allocators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["malloc", "c.malloc.free"]);
    assert_eq!(u(&a["unknown_frees"]), 15, "{a}");
    let o = s.run(&["config"]);
    assert!(
        stdout(&o).contains("malloc=malloc,free=c.malloc.free"),
        "{}",
        stdout(&o)
    );
    // A role wprof does not know: one line naming the file, line and key; exit 2.
    std::fs::write(
        s.path("wprof.toml"),
        "allocs = true\nallocators = [\"grab=x\"]\n",
    )
    .unwrap();
    let o = s.run(&[
        "run",
        "-o",
        "x.wprof",
        sample("allocs.wasm").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.lines().count() == 1
            && err.contains("wprof.toml:2: allocators:")
            && err.contains("\"grab\" is not a role"),
        "{err}"
    );
    assert!(!s.path("x.wprof").exists());
}

#[test]
fn a_component_counts_its_modules_blocks_as_the_module_does() {
    // allocs.c wrapped with the WASI preview 1 adapter.
    let component = componentize(&sample("allocs.wasm"));
    let s = Scratch::new();
    let path = s.path("allocs_component.wasm");
    std::fs::write(&path, component).unwrap();
    let expected: BTreeMap<(String, String), [u64; 4]> = as_constructed()
        .into_iter()
        .map(|((caller, allocator), f)| {
            ((format!("main!{caller}"), format!("main!{allocator}")), f)
        })
        .collect();
    for mode in ["time", "sample", "cost"] {
        let file = format!("{mode}.wprof");
        let out = s
            .wprof(&["run", "--allocs", "--mode", mode, "-o", &file])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert_eq!(stdout(&out), "allocs: checksum=980337\n", "{mode}");
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
        let p = s.profile(&file);
        // What the program asked for, by the contexts that asked (posix_memalign's
        // address read from the module's memory); the component's start-up may add its own.
        let mut found = blocks_by_caller(&p);
        found.retain(|key, _| expected.contains_key(key));
        assert_eq!(found, expected, "{mode}");
        let a = &p["allocations"];
        assert_eq!(u(&a["unknown_frees"]), 0, "{mode}");
        assert!(u(&a["objects"]) >= 120, "{mode}: {a}");
        let allocators: Vec<&str> = a["allocators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(
            allocators.contains(&"main!c.malloc.posix_memalign"),
            "{allocators:?}"
        );
    }
}
