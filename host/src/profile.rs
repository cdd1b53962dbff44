//! The profile file: one JSON document, the schema `wprof report --format json` prints.
//! Field names are stable; new fields may be added.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::collector::{Collector, PS_PER_NS, ROOT};
use crate::instrument::{FunctionInfo, InstrumentationStats};

/// The current profile format.
pub const FORMAT_VERSION: u32 = 1;

/// The module that was profiled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRef {
    /// The path it was run from.
    pub path: String,
    /// blake3 of its bytes (hex).
    pub blake3: String,
}

/// One function that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionRecord {
    /// Index in the original module.
    pub id: u32,
    /// Display name (`module::field` for imports).
    pub name: String,
    /// `local` or `import`.
    pub kind: String,
    /// Activations.
    pub calls: u64,
    /// Time in the function itself.
    #[serde(rename = "self")]
    pub self_time: u64,
    /// Time in the function and its callees (each outermost activation once).
    pub inclusive: u64,
    /// Smallest self time of one activation (time mode only: the inline modes count
    /// per calling context, not per activation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_self: Option<u64>,
    /// Largest self time of one activation (time mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_self: Option<u64>,
}

/// One caller -> callee edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// The caller's id; `null` for the root (the engine calling `_start`).
    pub caller: Option<u32>,
    /// The callee's id.
    pub callee: u32,
    /// The call site: the call's offset from the start of the caller's body (with
    /// `--call-sites` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
    /// Calls along this edge.
    pub calls: u64,
    /// The callee's inclusive time caused by this caller.
    pub inclusive: u64,
}

/// One node of the calling-context tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextRecord {
    /// The node's index in `contexts`.
    pub id: u32,
    /// The parent node's index; `null` for the outermost functions.
    pub parent: Option<u32>,
    /// The function's id.
    pub function: u32,
    /// Activations in this context.
    pub calls: u64,
    /// Self time in this context.
    #[serde(rename = "self")]
    pub self_time: u64,
    /// Inclusive time in this context (outermost activations).
    pub inclusive: u64,
}

/// The probe overhead subtracted, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadRecord {
    /// Per activation, inside the activation's own time.
    pub inside_ns: f64,
    /// Per call, in the caller's time.
    pub outside_ns: f64,
}

impl Eq for OverheadRecord {}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The wprof that wrote it.
    pub tool: String,
    /// The module.
    pub module: ModuleRef,
    /// Probe mode (`time`, `sample` or `cost`).
    pub mode: String,
    /// Unit of `self`, `inclusive`, `total` and friends: `ns` or `instructions`.
    pub unit: String,
    /// The program's exit code (wprof's own exit code too).
    pub exit_code: i32,
    /// `exit` (returned or `proc_exit`) or `trap`.
    pub outcome: String,
    /// The trap message, if the program trapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trap: Option<String>,
    /// Wall time of the run from `_start` to the end, in nanoseconds. Absent in cost mode,
    /// whose profiles hold no time at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<u64>,
    /// Sum of the inclusive cost of the outermost frames, in `unit`.
    pub total: u64,
    /// How the instrumented module was produced.
    pub instrumentation: InstrumentationStats,
    /// Time mode: nanoseconds of wprof's own work during the run (handing probe events to
    /// the collector thread), excluded from every time and from `total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_ns: Option<u64>,
    /// The probe overhead subtracted from every frame, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_overhead: Option<OverheadRecord>,
    /// Every function that ran, by id.
    pub functions: Vec<FunctionRecord>,
    /// Every edge, in order of first call.
    pub edges: Vec<EdgeRecord>,
    /// The calling-context tree, parents before children (recursive cycles collapsed:
    /// see [`crate::context_tree`]).
    #[serde(default)]
    pub contexts: Vec<ContextRecord>,
    /// Sample mode: how the time was sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingRecord>,
}

/// How the program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// Exit code.
    pub exit_code: i32,
    /// Trap message, if it trapped.
    pub trap: Option<String>,
    /// Wall time from `_start` to the end.
    pub wall_time: u64,
    /// Sample mode: how time was sampled.
    pub sampling: Option<SamplingRecord>,
}

/// Sample mode: how the time of a profile was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplingRecord {
    /// The period asked for, in nanoseconds (readings can come later on a busy machine).
    pub period_ns: u64,
    /// Readings taken: the number of intervals the time was split into.
    pub readings: u64,
}

impl Profile {
    /// Builds the profile of a finished run (all frames closed).
    pub fn from_run(
        module: ModuleRef,
        functions: &[FunctionInfo],
        stats: InstrumentationStats,
        mode: wprof_agent::ProbeMode,
        collector: &Collector,
        ending: Ending,
    ) -> Self {
        let cost = mode == wprof_agent::ProbeMode::Cost;
        // Only time mode sees activations one by one.
        let per_activation = !mode.counts_inline();
        // The collector counts picoseconds in time mode; profiles show nanoseconds.
        let scale = if cost { 1 } else { PS_PER_NS as i64 };
        let clamp = |v: i64| (v / scale).max(0) as u64;
        let unscale = |v: u64| v / scale as u64;
        let name_of = |id: u32| {
            functions
                .get(id as usize)
                .map(|f| (f.name.clone(), f.kind.clone()))
                .unwrap_or_else(|| (format!("func[{id}]"), "local".to_string()))
        };
        let records = collector
            .functions()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.calls > 0)
            .map(|(id, t)| {
                let (name, kind) = name_of(id as u32);
                FunctionRecord {
                    id: id as u32,
                    name,
                    kind,
                    calls: t.calls,
                    self_time: clamp(t.self_time),
                    inclusive: clamp(t.inclusive),
                    min_self: per_activation.then(|| unscale(t.min_self)),
                    max_self: per_activation.then(|| unscale(t.max_self)),
                }
            })
            .collect();
        let edges = collector
            .edges()
            .iter()
            .map(|e| EdgeRecord {
                caller: (e.caller != ROOT).then_some(e.caller),
                callee: e.callee,
                site: e.site,
                calls: e.calls,
                inclusive: clamp(e.inclusive),
            })
            .collect();
        // Node 0 is the root; its children are the outermost functions.
        let contexts = collector
            .contexts()
            .nodes()
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, n)| ContextRecord {
                id: i as u32 - 1,
                parent: (n.parent != 0).then(|| n.parent - 1),
                function: n.function,
                calls: n.calls,
                self_time: clamp(n.self_time),
                inclusive: clamp(n.inclusive),
            })
            .collect();
        Profile {
            format_version: FORMAT_VERSION,
            tool: format!("wprof {}", env!("CARGO_PKG_VERSION")),
            module,
            mode: mode.name().to_string(),
            unit: if cost { "instructions" } else { "ns" }.to_string(),
            exit_code: ending.exit_code,
            outcome: if ending.trap.is_some() {
                "trap"
            } else {
                "exit"
            }
            .to_string(),
            trap: ending.trap,
            wall_time: (!cost).then_some(ending.wall_time),
            total: clamp(collector.root_inclusive()),
            instrumentation: stats,
            excluded_ns: (mode == wprof_agent::ProbeMode::Time)
                .then(|| collector.excluded() / PS_PER_NS),
            probe_overhead: (mode == wprof_agent::ProbeMode::Time
                && collector.overhead() != Default::default())
            .then(|| {
                let o = collector.overhead();
                OverheadRecord {
                    inside_ns: o.inside as f64 / PS_PER_NS as f64,
                    outside_ns: o.outside as f64 / PS_PER_NS as f64,
                }
            }),
            functions: records,
            edges,
            contexts,
            sampling: ending.sampling,
        }
    }

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

    /// The record of function `id`, if it ran.
    pub fn function(&self, id: u32) -> Option<&FunctionRecord> {
        self.functions
            .binary_search_by_key(&id, |f| f.id)
            .ok()
            .map(|i| &self.functions[i])
    }
}
