//! `--format pprof`: the profile as pprof's `profile.proto`, gzip'd, for `go tool pprof`.
//!
//! One sample per context of the calling-context tree (a cost-mode profile with block
//! counts: one per context and source line of its function, the context's self cost split
//! over its function's lines in their proportions, so that `go tool pprof -lines` shows
//! each line's exact instructions): its stack (leaf first), with two values, `calls` (activations in that context) and the self time in nanoseconds (or the
//! self cost in instructions). pprof's *flat* column is then each function's self time and
//! its *cum* column the inclusive time: recursion is collapsed in the contexts, so a
//! function appears once per stack and is never counted twice. The cost is the default
//! sample type; `-sample_index=calls` shows calls. A profile with host calls has more
//! sample types, non-zero in imports' contexts: `host_wall` and `host_cpu` (nanoseconds in
//! the host, wall and the program thread's on-CPU; not in cost mode, which times nothing)
//! and `host_bytes` (bytes the I/O functions moved). A profile with allocations
//! (`--allocs`) has the four of Go's heap profiles, non-zero in allocators' contexts:
//! `alloc_objects` and `alloc_space` (blocks and bytes handed out), `inuse_objects` and
//! `inuse_space` (those still live when the program ended). A threaded program's samples
//! carry the label `thread` (`0` the program's first thread, others by the id
//! `thread-spawn` gave them): `go tool pprof -tags` lists the threads and
//! `-tagfocus=thread=^2$` shows one (a regular expression: a bare number
//! would be taken for a numeric label's range).
//!
//! The messages are written here with prost's derive, following the field numbers of
//! `profile.proto` in github.com/google/pprof.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use prost::Message;

use super::source::Symbols;
use super::stacks;
use crate::profile::Profile;

/// `Profile` (only the fields wprof writes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PprofProfile {
    /// What each sample value is.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The module.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// One location per function.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, index 0 being "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// How long the program ran (time mode).
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The kind of event a sample stands for.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events per sample.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free text, as string indices.
    #[prost(int64, repeated, packed = "true", tag = "13")]
    pub comment: Vec<i64>,
    /// The string index of the sample type shown by default.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a sample value's type and unit (string indices).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// e.g. "time".
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// e.g. "nanoseconds".
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack (leaf first) and its values.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, packed = "true", tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, packed = "true", tag = "2")]
    pub value: Vec<i64>,
    /// Labels (a threaded program's `thread`).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`: a key and a string value (string table indices).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
}

/// `Mapping`: the module.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The module's path (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// The module's blake3 (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations carry their functions: nothing to symbolize.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Functions carry source files.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Lines carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
}

/// `Location`: here, one per function.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The module's mapping.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The function's index in the module.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The function at this location.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `Line`: a function and a source line.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 if unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name shown (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Name in the module (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (string index), 0 if unknown.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First source line, 0 if unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The string table: each distinct string once, "" first.
#[derive(Debug, Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.intern("");
        s
    }

    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The message, before encoding.
pub fn build(profile: &Profile, symbols: &Symbols) -> PprofProfile {
    let mut strings = Strings::new();
    let calls_type = ValueType {
        r#type: strings.intern("calls"),
        unit: strings.intern("count"),
    };
    let cost_type = if profile.unit == "ns" {
        ValueType {
            r#type: strings.intern("time"),
            unit: strings.intern("nanoseconds"),
        }
    } else {
        ValueType {
            r#type: strings.intern(&profile.unit),
            unit: strings.intern("count"),
        }
    };
    let mapping = Mapping {
        id: 1,
        filename: strings.intern(&profile.module.path),
        build_id: strings.intern(&profile.module.blake3),
        has_functions: true,
        has_filenames: !symbols.sources.is_empty(),
        has_line_numbers: !symbols.sources.is_empty(),
    };
    // Function and location ids are the wasm function index + 1 (ids must not be 0).
    let mut function = Vec::with_capacity(profile.functions.len());
    let mut location = Vec::with_capacity(profile.functions.len());
    for f in &profile.functions {
        // pprof drops what is between `<` and `>` from a name shown (C++'s template
        // arguments): a script's `function <bench.lua:12>` (Lua's own form) would show as
        // `function `, so its brackets become parentheses; the system name keeps it whole.
        let name = match f.is_script() {
            true => strings.intern(&f.name.replace('<', "(").replace('>', ")")),
            false => strings.intern(&f.name),
        };
        let system_name = match symbols.raw_names.get(&f.id) {
            Some(raw) => strings.intern(raw),
            None if f.is_script() => strings.intern(&f.name),
            None => name,
        };
        let source = symbols.sources.get(&f.id);
        let filename = source.map_or(0, |s| strings.intern(&s.file));
        let line = source.map_or(0, |s| i64::from(s.line));
        function.push(Function {
            id: u64::from(f.id) + 1,
            name,
            system_name,
            filename,
            start_line: line,
        });
        location.push(Location {
            id: u64::from(f.id) + 1,
            mapping_id: 1,
            address: u64::from(f.id),
            line: vec![Line {
                function_id: u64::from(f.id) + 1,
                line,
            }],
        });
    }
    // With host calls: what the host did in an import's context (its times where the mode
    // measures time).
    let host_types: &[(&str, &str)] = match (profile.host_calls.is_empty(), profile.unit == "ns") {
        (true, _) => &[],
        (false, true) => &[
            ("host_wall", "nanoseconds"),
            ("host_cpu", "nanoseconds"),
            ("host_bytes", "bytes"),
        ],
        (false, false) => &[("host_bytes", "bytes")],
    };
    // With allocations: an allocator's blocks in its context, as Go's heap profiles.
    let alloc_types: &[(&str, &str)] = match profile.allocations {
        Some(_) => &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        None => &[],
    };
    let extra_types: Vec<(&str, &str)> = host_types.iter().chain(alloc_types).copied().collect();
    let mut sample_type = vec![calls_type, cost_type.clone()];
    for (ty, unit) in &extra_types {
        sample_type.push(ValueType {
            r#type: strings.intern(ty),
            unit: strings.intern(unit),
        });
    }
    // Cost mode with block counts: a location per source line of each function, the
    // leaf's self cost split over them (see `line_locations`).
    let by_line = line_locations(profile, symbols, &mut strings, &mut function, &mut location);
    let thread_key = profile.threads.is_some().then(|| strings.intern("thread"));
    let mut sample = Vec::new();
    for s in stacks(profile)
        .into_iter()
        .filter(|s| s.calls > 0 || s.self_time > 0 || s.host.is_some() || s.allocs.is_some())
    {
        let h = s.host.unwrap_or_default();
        let a = s.allocs.unwrap_or_default();
        let extra: Vec<i64> = extra_types
            .iter()
            .map(|(ty, _)| match *ty {
                "host_wall" => h.wall_ns,
                "host_cpu" => h.cpu_ns,
                "host_bytes" => h.bytes.unwrap_or(0),
                "alloc_objects" => a.objects,
                "alloc_space" => a.bytes,
                "inuse_objects" => a.live_objects,
                _ => a.live_bytes,
            } as i64)
            .collect();
        let callers: Vec<u64> = s
            .functions
            .iter()
            .rev()
            .skip(1)
            .map(|&id| u64::from(id) + 1)
            .collect();
        let leaf = *s.functions.last().expect("a context has a function");
        let label: Vec<Label> = s
            .thread
            .zip(thread_key)
            .map(|(t, key)| Label {
                key,
                str: strings.intern(&t.to_string()),
            })
            .into_iter()
            .collect();
        // The leaf's self cost by line, or whole at the function's location.
        let shares = match by_line.get(&leaf) {
            Some(lines) => split(s.self_time, lines),
            None => vec![(u64::from(leaf) + 1, s.self_time)],
        };
        for (k, (at, cost)) in shares.into_iter().enumerate() {
            // Calls, the host's figures and the blocks once per context.
            let first = k == 0;
            let mut value = vec![if first { s.calls as i64 } else { 0 }, cost as i64];
            value.extend(extra.iter().map(|&v| if first { v } else { 0 }));
            let mut location_id = vec![at];
            location_id.extend(&callers);
            sample.push(Sample {
                location_id,
                value,
                label: label.clone(),
            });
        }
    }
    let comment = vec![strings.intern(&format!(
        "{} profile by {} of {} ({} mode)",
        profile.unit, profile.tool, profile.module.path, profile.mode
    ))];
    let default_sample_type = cost_type.r#type;
    PprofProfile {
        period_type: Some(cost_type),
        sample_type,
        sample,
        mapping: vec![mapping],
        location,
        function,
        string_table: strings.table,
        duration_nanos: profile.wall_time.unwrap_or(0) as i64,
        period: 1,
        comment,
        default_sample_type,
    }
}

/// Per function with per-line costs ([`Symbols::lines`]): its line locations, each with
/// the function's instructions on that line (and the function's own location for what has
/// no line). Code inlined from another file gets a function of that name in that file.
fn line_locations(
    profile: &Profile,
    symbols: &Symbols,
    strings: &mut Strings,
    functions: &mut Vec<Function>,
    locations: &mut Vec<Location>,
) -> HashMap<u32, Vec<(u64, u64)>> {
    let mut out = HashMap::new();
    let mut next_function = functions.iter().map(|f| f.id).max().unwrap_or(0) + 1;
    let mut next_location = locations.iter().map(|l| l.id).max().unwrap_or(0) + 1;
    for f in &profile.functions {
        let Some(lines) = symbols.lines.get(&f.id) else {
            continue;
        };
        let main = symbols.sources.get(&f.id).map(|s| s.file.as_str());
        let mut in_file: HashMap<&str, u64> = HashMap::new();
        let mut shares = Vec::new();
        for ((file, n), cost) in &lines.lines {
            let function_id = if Some(file.as_str()) == main {
                u64::from(f.id) + 1
            } else {
                *in_file.entry(file.as_str()).or_insert_with(|| {
                    let id = next_function;
                    next_function += 1;
                    let name = strings.intern(&f.name);
                    functions.push(Function {
                        id,
                        name,
                        system_name: name,
                        filename: strings.intern(file),
                        start_line: 0,
                    });
                    id
                })
            };
            let id = next_location;
            next_location += 1;
            locations.push(Location {
                id,
                mapping_id: 1,
                address: u64::from(f.id),
                line: vec![Line {
                    function_id,
                    line: i64::from(*n),
                }],
            });
            shares.push((id, *cost));
        }
        if lines.unlined > 0 {
            shares.push((u64::from(f.id) + 1, lines.unlined));
        }
        if !shares.is_empty() {
            out.insert(f.id, shares);
        }
    }
    out
}

/// `cost` split over `shares` (location, weight) in proportion to the weights, in whole
/// units that add up to `cost` (the remainder goes to the heaviest). A function's
/// contexts each split this way add up, line by line, to the function's own counts.
fn split(cost: u64, shares: &[(u64, u64)]) -> Vec<(u64, u64)> {
    if shares.iter().all(|s| s.1 == 0) {
        return shares
            .first()
            .map(|s| vec![(s.0, cost)])
            .unwrap_or_default();
    }
    let weights: Vec<u64> = shares.iter().map(|s| s.1).collect();
    let parts = split_weights(cost, &weights);
    shares.iter().map(|s| s.0).zip(parts).collect()
}

/// `cost` split in proportion to `weights`, in whole units that add up to `cost` (the
/// remainder to the heaviest); all to the first when every weight is 0.
pub fn split_weights(cost: u64, weights: &[u64]) -> Vec<u64> {
    let total: u64 = weights.iter().sum();
    if total == 0 {
        let mut out = vec![0; weights.len()];
        if let Some(first) = out.first_mut() {
            *first = cost;
        }
        return out;
    }
    let mut out: Vec<u64> = weights
        .iter()
        .map(|&w| (u128::from(cost) * u128::from(w) / u128::from(total)) as u64)
        .collect();
    let given: u64 = out.iter().sum();
    if let Some(heaviest) = (0..weights.len()).max_by_key(|&i| weights[i]) {
        out[heaviest] += cost - given;
    }
    out
}

/// The gzip'd protobuf bytes.
pub fn render(profile: &Profile, symbols: &Symbols) -> anyhow::Result<Vec<u8>> {
    let bytes = build(profile, symbols).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes)
        .and_then(|_| gz.finish())
        .context("failed to compress the pprof profile")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_profile;

    #[test]
    fn round_trips_through_gzip_and_protobuf() {
        let p = sample_profile();
        let gz = render(&p, &Symbols::default()).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
        let m = PprofProfile::decode(&bytes[..]).unwrap();
        assert_eq!(m.string_table[0], "");
        assert_eq!(m.sample.len(), 4);
        // `_start;a;b:x`, leaf first.
        assert_eq!(m.sample[2].location_id, vec![3, 2, 1]);
        assert_eq!(m.sample[2].value, vec![2, 30]);
        let ty = &m.string_table[m.sample_type[1].r#type as usize];
        assert_eq!(ty, "instructions");
        assert_eq!(
            m.string_table[m.default_sample_type as usize],
            "instructions"
        );
    }
}
