//! Running the real `wprof` binary in a scratch directory with its own cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The `wprof` binary under test.
pub fn wprof_bin() -> &'static str {
    env!("CARGO_BIN_EXE_wprof")
}

/// A sample module by file name.
pub fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../samples")
        .join(name)
}

/// A scratch working directory with a private cache directory.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.path("cache")
    }

    /// A `wprof` command in this directory, with `WPROF_*` variables cleared and the cache
    /// pointed here.
    pub fn wprof(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(wprof_bin());
        cmd.current_dir(self.dir.path())
            .args(args)
            .env_remove("WPROF")
            .env_remove("WPROF_OUT")
            .env_remove("WPROF_LOG")
            .env_remove("WPROF_CONFIG")
            .env_remove("WPROF_INCREMENTAL")
            .env("WPROF_CACHE_DIR", self.cache_dir())
            .env("XDG_CONFIG_HOME", self.path("config"))
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.wprof(args).output().unwrap()
    }

    /// Runs `wprof` and says how much CPU time it used per unit of wall-clock time (its
    /// children's user and system time, from `getrusage`). A single-threaded program that
    /// had a core to itself uses about 1 (wprof's sampler a little more); a loaded machine
    /// (tests side by side, a build beside them) shows far less.
    pub fn run_measured(&self, args: &[&str]) -> (Output, f64) {
        fn children_cpu_s() -> f64 {
            // SAFETY: `getrusage` fills the zeroed struct it is given and has no other
            // effect.
            let usage = unsafe {
                let mut usage: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
                usage
            };
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            seconds(usage.ru_utime) + seconds(usage.ru_stime)
        }
        let cpu_before = children_cpu_s();
        let started = std::time::Instant::now();
        let out = self.run(args);
        let wall = started.elapsed().as_secs_f64();
        (out, (children_cpu_s() - cpu_before) / wall.max(1e-9))
    }

    /// Reads a profile (JSON) written in this directory.
    /// A profile file's JSON, decompressed as any zstd reader would (`zstd -dc`).
    pub fn profile(&self, name: &str) -> Value {
        let file = std::fs::File::open(self.path(name))
            .unwrap_or_else(|e| panic!("no profile {name}: {e}"));
        let json = zstd::decode_all(file).unwrap_or_else(|e| panic!("{name} is not zstd: {e}"));
        serde_json::from_slice(&json).unwrap()
    }

    /// Writes a WAT module here as binary and returns its path.
    pub fn wat_module(&self, name: &str, wat: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
        path
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The record of the function named `name` in a profile.
pub fn function<'a>(profile: &'a Value, name: &str) -> &'a Value {
    profile["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no function {name} in profile"))
}

/// The sum of every function's self time (which a profile keeps equal to its total).
pub fn self_sum(profile: &Value) -> u64 {
    profile["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["self"].as_u64().unwrap())
        .sum()
}

pub fn calls(profile: &Value, name: &str) -> u64 {
    function(profile, name)["calls"].as_u64().unwrap()
}

/// Calls along the edge `caller -> callee` (by name; `None` for the root).
pub fn edge_calls(profile: &Value, caller: Option<&str>, callee: &str) -> u64 {
    let id = |name: &str| function(profile, name)["id"].clone();
    let caller_id = caller.map(id).unwrap_or(Value::Null);
    let callee_id = id(callee);
    profile["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["caller"] == caller_id && e["callee"] == callee_id)
        .map(|e| e["calls"].as_u64().unwrap())
        .sum()
}

/// Inclusive time (or cost) along the edges `caller -> callee` (by name), every call site's.
pub fn edge_inclusive(profile: &Value, caller: &str, callee: &str) -> u64 {
    let id = |name: &str| function(profile, name)["id"].clone();
    profile["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["caller"] == id(caller) && e["callee"] == id(callee))
        .map(|e| e["inclusive"].as_u64().unwrap())
        .sum()
}

/// The wasmtime CLI, if installed (`.ci/run` installs it; set
/// `WPROF_REQUIRE_WASMTIME_CLI=1` to make its absence a failure).
pub fn wasmtime_cli() -> Option<PathBuf> {
    let found = std::env::var_os("WASMTIME_CLI")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join("wasmtime"))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() && std::env::var_os("WPROF_REQUIRE_WASMTIME_CLI").is_some() {
        panic!("the wasmtime CLI is required (WPROF_REQUIRE_WASMTIME_CLI) but not found");
    }
    found
}

/// The reference for threaded programs, wasi-threads' implementation in the wasmtime CLI
/// 45 (`WASMTIME_THREADS_CLI`, which `.ci/run` installs); `None` when it is not set.
pub fn wasmtime_threads_cli() -> Option<PathBuf> {
    std::env::var_os("WASMTIME_THREADS_CLI")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
}

/// A WASI preview 1 command module wrapped with the preview 1 adapter into a WASI 0.2
/// command component, as `examples/componentize` does.
pub fn componentize(module: &std::path::Path) -> Vec<u8> {
    let module = std::fs::read(module).unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        )
        .unwrap()
        .encode()
        .unwrap()
}

/// `component` (a WASI 0.2 command) as a composition would hold it: nested in an outer
/// component named `name` that imports what it imports, instantiates it `times` times and
/// exports the first instance's `wasi:cli/run`. The outer component starts with the
/// inner's own types, imports and aliases (its leading sections, copied), so every import
/// type means what it meant.
pub fn nested_in(component: &[u8], name: &str, times: u32) -> Vec<u8> {
    use wasm_encoder::{ComponentExportKind as Kind, ComponentSectionId as Id, RawSection};
    use wasmparser::{Parser, Payload};
    let mut out = wasm_encoder::Component::new();
    let mut imports: Vec<(String, u32)> = Vec::new();
    let mut instances = 0u32;
    let mut run = None;
    // Nesting depth (parse_all walks into nested modules), and whether the leading
    // sections are still being copied.
    let (mut depth, mut leading) = (0u32, true);
    for payload in Parser::new(0).parse_all(component) {
        let payload = payload.unwrap();
        match &payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                depth += 1;
                leading = false;
                continue;
            }
            Payload::End(_) => {
                depth = depth.saturating_sub(1);
                continue;
            }
            _ if depth > 0 => continue,
            _ => {}
        }
        let (id, range) = match payload {
            Payload::ComponentExportSection(r) => {
                for export in r {
                    let name = export.unwrap().name.name;
                    if name.starts_with("wasi:cli/run@") {
                        run = Some(name.to_string());
                    }
                }
                continue;
            }
            _ if !leading => continue,
            Payload::ComponentTypeSection(r) => (Id::Type, r.range()),
            Payload::ComponentAliasSection(r) => {
                for alias in r.clone() {
                    if let wasmparser::ComponentAlias::InstanceExport {
                        kind: wasmparser::ComponentExternalKind::Instance,
                        ..
                    } = alias.unwrap()
                    {
                        instances += 1;
                    }
                }
                (Id::Alias, r.range())
            }
            Payload::ComponentImportSection(r) => {
                for import in r.clone() {
                    let import = import.unwrap();
                    if matches!(import.ty, wasmparser::ComponentTypeRef::Instance(_)) {
                        imports.push((import.name.name.to_string(), instances));
                        instances += 1;
                    }
                }
                (Id::Import, r.range())
            }
            _ => continue,
        };
        out.section(&RawSection {
            id: id as u8,
            data: &component[range],
        });
    }
    let run = run.expect("a command component");
    out.section(&RawSection {
        id: Id::Component as u8,
        data: component,
    });
    let mut made = wasm_encoder::ComponentInstanceSection::new();
    for _ in 0..times {
        made.instantiate(
            0,
            imports
                .iter()
                .map(|(n, i)| (n.as_str(), Kind::Instance, *i)),
        );
    }
    out.section(&made);
    let mut alias = wasm_encoder::ComponentAliasSection::new();
    alias.alias(wasm_encoder::Alias::InstanceExport {
        instance: instances,
        kind: Kind::Instance,
        name: &run,
    });
    out.section(&alias);
    let mut export = wasm_encoder::ComponentExportSection::new();
    export.export(&run, Kind::Instance, instances + times, None);
    out.section(&export);
    let mut names = wasm_encoder::ComponentNameSection::new();
    let mut map = wasm_encoder::NameMap::new();
    map.append(0, name);
    names.components(&map);
    out.section(&names);
    out.finish()
}

/// The data of function `name`'s page in the HTML report at `path` (its source view is
/// `ann`: `[line, time, text]` rows).
pub fn html_function_page(path: &Path, name: &str) -> Value {
    let html = std::fs::read_to_string(path).unwrap();
    let data = html
        .split_once(r#"<script id="data" type="application/json">"#)
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(json, _)| serde_json::from_str::<Value>(json).unwrap())
        .expect("the report's data");
    data["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no page of {name} in {data}"))
        .clone()
}
