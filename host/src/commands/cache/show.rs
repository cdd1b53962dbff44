//! `wprof cache show`: a module's record, or one function's original and instrumented
//! code side by side, with the offset map and the probes marked. Prints text only: the
//! modules are disassembled, never compiled or run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use wprof_agent::{Instrumenter, ProbeImports, ProbeMode, ProbePlan};
use wprof_cache::{Cache, Kind, Lookup};

use super::{failed, CacheDirArg};
use crate::display::{format_size, format_time};
use crate::exit::Failure;
use crate::prepare::cache_model::{self, ModuleRecord};
use crate::prepare::cache_values::{self, FunctionEntry, ManifestFunction};
use crate::prepare::{compiled, counted, instrument};

/// Show a cached module, or one function's original and instrumented code side by side.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
MODULE is a number from `wprof cache ls`, a path (a file there is matched by its contents,
else the path as recorded), a file name or stem, or the first digits (4 or more) of the
module's blake3. FUNCTION is a function id (its index in the original module, as in
profiles), a name, or the first digits of its body's cache key.

Without FUNCTION: the module's record and its functions, with their body ranges in the
original and the instrumented module. With FUNCTION: both bodies as text, side by side,
each line with its file offset; an original instruction and its copy share a line (that
pair is the offset map), and lines marked `+` are what the agent added (probes).

Examples:
  wprof cache show 1
  wprof cache show samples/fib.wasm fib
  wprof cache show 3f2a9c 12

Exit status:
  0; 2 if the cache, the module or the function cannot be found or read.")]
pub struct ShowCommand {
    #[command(flatten)]
    dir: CacheDirArg,

    /// The module: number from `wprof cache ls`, path, file name, or digest prefix.
    #[arg(value_name = "MODULE")]
    module: String,

    /// The function: id, name, or key prefix.
    #[arg(value_name = "FUNCTION")]
    function: Option<String>,
}

/// Reads the module stored under hex `digest`, checked against it.
pub fn stored_module(cache: &Cache, digest: &str) -> Result<Option<Vec<u8>>, Failure> {
    let Some(key) = wprof_cache::key_from_hex(digest) else {
        return Ok(None);
    };
    Ok(match cache.peek(Kind::Module, &key).map_err(failed)? {
        Lookup::Valid(_) => cache_values::module_in(cache, &key),
        _ => None,
    })
}

impl ShowCommand {
    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let cache = self.dir.open_existing()?;
        let modules = cache_model::modules(&cache).map_err(failed)?;
        let module = cache_model::resolve(&modules, &self.module).map_err(Failure::input)?;
        let text = match &self.function {
            None => module_text(module),
            Some(spec) => {
                let f = cache_model::resolve_function(module, spec).map_err(Failure::input)?;
                function_text(&cache, module, f)?
            }
        };
        drop(cache);
        print!("{text}");
        Ok(0)
    }
}

fn module_text(m: &ModuleRecord) -> String {
    let mut out = String::new();
    let man = &m.manifest;
    let u = m.usage.clone().unwrap_or_default();
    let _ = writeln!(out, "module #{}  {}", m.index, m.path());
    let _ = writeln!(out, "  module blake3       {}", man.module_digest);
    let _ = writeln!(
        out,
        "  original            {} ({})",
        format_size(man.original_size),
        if m.original_stored {
            "stored"
        } else {
            "not stored"
        }
    );
    let _ = writeln!(out, "  instrumented blake3 {}", man.instrumented_digest);
    let _ = writeln!(
        out,
        "  instrumented        {} ({})",
        format_size(man.instrumented_size),
        if m.module_stored { "stored" } else { "missing" }
    );
    let _ = writeln!(
        out,
        "  manifest            {}",
        wprof_cache::hex(&m.manifest_key)
    );
    let _ = writeln!(
        out,
        "  probes              {} mode{}, agent format {}",
        man.mode,
        if man.call_sites { ", call sites" } else { "" },
        man.agent_version
    );
    let _ = writeln!(
        out,
        "  compiled code       {}",
        if m.compiled.is_empty() {
            "none".to_string()
        } else {
            format!("wasmtime {}", m.compiled.join(", "))
        }
    );
    let _ = writeln!(
        out,
        "  used                first {} UTC, last {} UTC, {} hits",
        format_time(u.first_use),
        format_time(u.last_use),
        u.hits
    );
    let _ = writeln!(
        out,
        "\nfunctions: {} defined, {} imported",
        m.local_functions(),
        man.functions.len() - m.local_functions()
    );
    let _ = writeln!(
        out,
        "{:>6}  {:<32} {:>21} {:>21}  key",
        "id", "name", "original body", "instrumented body"
    );
    let range = |r: Option<(u32, u32)>| match r {
        Some((a, b)) => format!("{a:#x}..{b:#x} ({})", b - a),
        None => "-".to_string(),
    };
    for f in &man.functions {
        let _ = writeln!(
            out,
            "{:>6}  {:<32} {:>21} {:>21}  {}",
            f.id,
            if f.kind == "import" {
                format!("{} [import]", f.name)
            } else {
                f.name.clone()
            },
            range(f.original_body),
            range(f.instrumented_body),
            f.key.map_or("-".to_string(), |k| wprof_cache::hex(&k[..8]))
        );
    }
    out
}

/// Lines of a module's text with their offsets, for lines whose offset is in `range`.
fn lines_in(wasm: &[u8], range: (u32, u32)) -> Result<Vec<(u32, String)>, Failure> {
    let mut storage = String::new();
    let lines = wasmprinter::Config::new()
        .offsets_and_lines(wasm, &mut storage)
        .map_err(|e| Failure::input(format!("cannot print the module: {e}")))?;
    Ok(lines
        .filter_map(|(offset, text)| {
            let offset = offset? as u32;
            (range.0 <= offset && offset < range.1)
                .then(|| (offset, text.trim_end().trim_start().to_string()))
        })
        .collect())
}

/// The offset map of a function, absolute on both sides: from its cached entry, else by
/// instrumenting the stored original again (the agent is pure; nothing runs).
fn offset_map(
    cache: &Cache,
    m: &ModuleRecord,
    f: &ManifestFunction,
    original: Option<&[u8]>,
) -> Option<Vec<(u32, u32)>> {
    let (orig, inst) = (f.original_body?, f.instrumented_body?);
    let plan = ProbePlan {
        mode: ProbeMode::ALL
            .into_iter()
            .find(|mode| mode.name() == m.manifest.mode)
            .unwrap_or_default(),
        call_sites: m.manifest.call_sites,
        selection: None,
        live: m.manifest.live,
        short_max: m.manifest.short_max,
        coverage: m.manifest.coverage,
        // The allocators' roles (a body depends on its own role only).
        allocators: Some(std::sync::Arc::new(wprof_agent::Allocators {
            spec: [0; 32],
            roles: m
                .manifest
                .functions
                .iter()
                .filter_map(|f| Some((f.id, wprof_agent::AllocRole::from_bytes(f.allocator?)?)))
                .collect(),
        })),
        injections: None,
        capture: None,
    };
    // The lineage's pack holds the bodies of the module's latest version.
    let lineage = compiled::lineage(Path::new(&m.manifest.path), &plan.body_digest());
    let from_entry = f
        .key
        .and_then(|k| match cache.peek(Kind::Function, &lineage) {
            Ok(Lookup::Valid(v)) => {
                let bodies = instrument::unpack_bodies(&v, |original| {
                    cache_values::module_in(cache, original).map(std::borrow::Cow::Owned)
                })?;
                FunctionEntry::decode(bodies.get(&k)?)
            }
            _ => None,
        })
        .map(|e| (e.body.offsets, e.body.probed_at));
    let (relative, probed_at) = match from_entry {
        Some(o) => o,
        None => {
            let instrumenter = Instrumenter::new(original?, &plan).ok()?;
            let defined = f.id.checked_sub(instrumenter.imported_function_count())?;
            let body = instrumenter.instrument_function(defined).ok()?;
            (body.offsets, body.probed_at)
        }
    };
    // A live function's probed copy follows its own body in the entry's bytes, and lies
    // elsewhere in the module.
    let place = |n: u32| match (probed_at, f.probed_body) {
        (Some(at), Some(copy)) if n >= at => Some(copy.0 + (n - at)),
        (Some(_), None) => None,
        _ => Some(inst.0 + n),
    };
    relative
        .into_iter()
        .map(|(o, n)| Some((orig.0 + o, place(n)?)))
        .collect()
}

/// The offset map of a counted body's `lines`: each line of the original's code with the
/// offset it came from; the counters' lines have none.
fn counter_map(
    counters: &wprof_agent::entry_counts::CounterOffsets,
    lines: &[(u32, String)],
) -> Vec<(u32, u32)> {
    lines
        .iter()
        .filter(|(at, _)| !counters.is_added(*at as usize))
        .filter_map(|&(at, _)| Some((counters.original_offset(at as usize)? as u32, at)))
        .collect()
}

fn function_text(cache: &Cache, m: &ModuleRecord, f: &ManifestFunction) -> Result<String, Failure> {
    let (Some(orig_range), Some(inst_range)) = (f.original_body, f.instrumented_body) else {
        return Err(Failure::input(format!(
            "function {} `{}` is an import: it has no body",
            f.id, f.name
        )));
    };
    let original = stored_module(cache, &m.manifest.module_digest)?;
    let instrumented = stored_module(cache, &m.manifest.instrumented_digest)?.ok_or_else(|| {
        Failure::input(format!(
            "module #{}: the instrumented module is not in the cache",
            m.index
        ))
    })?;
    // Stack mode's map is told by where its counters are, for the lines shown.
    let counters = (m.manifest.mode == counted::MODE).then(|| {
        m.manifest
            .counter_offsets
            .as_deref()
            .and_then(wprof_agent::entry_counts::CounterOffsets::decode)
    });
    let map = match counters {
        Some(_) => None,
        None => offset_map(cache, m, f, original.as_deref()),
    };
    let left = match &original {
        Some(bytes) => lines_in(bytes, orig_range)?,
        None => Vec::new(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "function {} `{}` of module #{} {} ({} mode{}{})",
        f.id,
        f.name,
        m.index,
        m.path(),
        m.manifest.mode,
        if m.manifest.call_sites {
            ", call sites"
        } else {
            ""
        },
        if m.manifest.live { ", live" } else { "" }
    );
    let bodies = [
        ("instrumented body", Some(inst_range)),
        ("probed copy", f.probed_body),
    ];
    for (what, range) in bodies {
        let Some(range) = range else { continue };
        let _ = writeln!(
            out,
            "original body {:#x}..{:#x} ({} bytes) -> {what} {:#x}..{:#x} ({} bytes)",
            orig_range.0,
            orig_range.1,
            orig_range.1 - orig_range.0,
            range.0,
            range.1,
            range.1 - range.0
        );
        if original.is_none() {
            let _ = writeln!(
                out,
                "(the original module is not in the cache: right side only)"
            );
        }
        let right = lines_in(&instrumented, range)?;
        let map = match &counters {
            Some(counters) => counters.as_ref().map(|c| counter_map(c, &right)),
            None => map.clone(),
        };
        side_by_side(&mut out, m, left.clone(), (range, right), map.as_deref());
        out.push('\n');
    }
    out.pop();
    Ok(out)
}

/// The original's lines `left` beside the lines `right` of the instrumented body at
/// `range`, paired through `map` (original offset, instrumented offset; without it, probes
/// are not marked).
fn side_by_side(
    out: &mut String,
    m: &ModuleRecord,
    mut left: Vec<(u32, String)>,
    (range, mut right): ((u32, u32), Vec<(u32, String)>),
    map: Option<&[(u32, u32)]>,
) {
    // The `(func ...` line and the closing `)` frame both bodies: shown as a pair, never
    // as added code.
    let frame = |lines: &mut Vec<(u32, String)>| {
        let head =
            (lines.first().is_some_and(|(_, t)| t.starts_with("(func"))).then(|| lines.remove(0));
        let tail = (lines.last().is_some_and(|(_, t)| t == ")")).then(|| lines.pop());
        (head, tail.flatten())
    };
    let (left_head, left_tail) = frame(&mut left);
    let (right_head, right_tail) = frame(&mut right);

    let imports = m
        .manifest
        .functions
        .iter()
        .filter(|f| f.kind == "import")
        .count() as u32;
    let probe_name = |text: &str| -> Option<&'static str> {
        let target: u32 = text.strip_prefix("call ")?.trim().parse().ok()?;
        let i = target.checked_sub(imports)?;
        ProbeImports::NAMES.get(i as usize).copied()
    };

    if map.is_none() {
        let _ = writeln!(out, "(no offset map available: probes are not marked)");
    }
    let width = left
        .iter()
        .map(|(_, t)| t.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(12, 60);
    let _ = writeln!(
        out,
        "\n  {:>8}  {:<width$} | {:>8}  instrumented",
        "offset", "original", "offset"
    );
    let cut = |t: &str| -> String {
        if t.chars().count() > width {
            let mut s: String = t.chars().take(width - 1).collect();
            s.push('…');
            s
        } else {
            t.to_string()
        }
    };
    let image: HashMap<u32, u32> = map
        .map(|m| m.iter().map(|&(o, n)| (n, o)).collect())
        .unwrap_or_default();
    let framed = |out: &mut String, l: &Option<(u32, String)>, r: &Option<(u32, String)>| {
        let (lo, lt) = l.clone().map_or((String::new(), String::new()), |(o, t)| {
            (format!("{o:#x}"), cut(&t))
        });
        let (ro, rt) = r.clone().map_or((String::new(), String::new()), |(o, t)| {
            (format!("{o:#x}"), t)
        });
        let _ = writeln!(out, "  {lo:>8}  {lt:<width$} | {ro:>8}  {rt}");
    };
    framed(out, &left_head, &right_head);
    let mut left_at = 0;
    let mut added = 0;
    for (offset, text) in &right {
        let counterpart = image.get(offset).copied();
        if let Some(orig) = counterpart {
            // Original lines before this one that have no copy (e.g. locals).
            while left_at < left.len() && left[left_at].0 < orig {
                let (o, t) = &left[left_at];
                let _ = writeln!(out, "  {o:>#8x}  {:<width$} |", cut(t));
                left_at += 1;
            }
        }
        let pair = counterpart.and_then(|orig| {
            (left_at < left.len() && left[left_at].0 == orig).then(|| {
                left_at += 1;
                &left[left_at - 1]
            })
        });
        let note = probe_name(text)
            .map(|n| format!("   ;; probe: wprof.{n}"))
            .unwrap_or_default();
        match pair {
            Some((o, t)) => {
                let _ = writeln!(
                    out,
                    "  {o:>#8x}  {:<width$} | {offset:>#8x}  {text}",
                    cut(t)
                );
            }
            None if map.is_some() && counterpart.is_none() => {
                added += 1;
                let _ = writeln!(
                    out,
                    "+ {:>8}  {:<width$} | {offset:>#8x}  {text}{note}",
                    "", ""
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {:>8}  {:<width$} | {offset:>#8x}  {text}{note}",
                    "", ""
                );
            }
        }
    }
    for (o, t) in &left[left_at..] {
        let _ = writeln!(out, "  {o:>#8x}  {:<width$} |", cut(t));
    }
    framed(out, &left_tail, &right_tail);
    if let Some(map) = map {
        let _ = writeln!(
            out,
            "\n{} original instructions mapped; {added} lines added by the agent (marked +)",
            map.iter()
                .filter(|&&(_, n)| (range.0..range.1).contains(&n))
                .count()
        );
    }
}
