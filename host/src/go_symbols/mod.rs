//! Go's own symbol table in a Go module (`GOOS=wasip1 GOARCH=wasm`): function names as Go
//! prints them (`regexp.(*machine).add`, where the name section has
//! `regexp.__machine_.add`) and each function's file and line.
//!
//! Go emits no DWARF for wasm, but every Go program carries the table its runtime uses for
//! stack traces (the "pclntab", format of Go 1.20 and later) in its data segments, and a
//! `go:buildid` custom section that marks the module as Go's. A function's entry in the
//! table is its `PC_F`, `0x1000 + (index - imported functions)` (the Go linker's
//! `funcValueOffset`), or with Go 1.21 its whole program counter, `PC_F << 16`.
//!
//! Layout read here (Go's `runtime/runtime2.go` and `cmd/link/internal/ld/pcln.go`, for
//! 8-byte pointers): a header (magic `0xfffffff1`, two zero bytes, the pc quantum, the
//! pointer size, then eight pointer-sized words: function count, file count, text start,
//! and the offsets of the function-name table, the compilation-unit table, the file table,
//! the pc-value tables and the function table); the function table holds `(entry, offset)`
//! pairs of `u32`, each offset leading to a `_func` record (`entryOff`, `nameOff`, args,
//! deferreturn, `pcsp`, `pcfile`, `pcln`, `npcdata`, `cuOffset`, `startLine`, ...).

use std::collections::HashMap;

/// The magic number of the Go 1.20+ table (Go 1.21 was the first to target wasip1).
const MAGIC: u32 = 0xffff_fff1;
/// The Go linker's offset between a function's `PC_F` and its defined-function index.
const FUNC_VALUE_OFFSET: u32 = 0x1000;
/// The header: magic, two pad bytes, quantum, pointer size, and eight words.
const HEADER: usize = 8 + 8 * 8;
/// The most memory the data segments may span for the table to be looked for in them (a
/// 70 MB Go program's span a few tens of MiB; a damaged module's could be 4 GiB).
const MAX_SPAN: usize = 512 << 20;
/// The `_func` record's fields read here, all 4 bytes: entryOff, nameOff, args,
/// deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset, startLine.
const FUNC_RECORD: usize = 10 * 4;

/// One Go function: its name as Go prints it, and where it is defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFunction {
    /// `pkg.(*T).method`, `pkg.F.func1`, `pkg.G[...]`.
    pub name: String,
    /// The source file as Go records it (with `-trimpath`, `module/path/file.go`).
    pub file: Option<String>,
    /// The line of the function's `func` keyword (0 for functions without one).
    pub line: u32,
}

/// What a module's Go symbol table gave.
#[derive(Debug)]
pub enum GoTable {
    /// Not a Go module (no `go:buildid` section).
    NotGo,
    /// A Go module whose table wprof cannot read (another format, or damaged): why.
    Unreadable(String),
    /// The functions found, by function id (index in the module, imports first).
    Functions(HashMap<u32, GoFunction>),
}

/// Whether `bytes` is a Go module, and if so its functions.
pub fn read(bytes: &[u8]) -> GoTable {
    let functions = decoded(bytes).and_then(|decoded| {
        decoded
            .map(|(table, _, _)| {
                table
                    .records
                    .iter()
                    .map(|r| Ok((r.id, table.function(r)?)))
                    .collect::<Result<HashMap<_, _>, String>>()
            })
            .transpose()
    });
    match functions {
        Ok(Some(functions)) => GoTable::Functions(functions),
        Ok(None) => GoTable::NotGo,
        Err(why) => GoTable::Unreadable(why),
    }
}

/// The name wprof shows for function `id`, named `name` in the module, when it is not
/// that one: Go's (`go`, from [`read`]), else the demangled one.
pub fn shown_name(go: &HashMap<u32, GoFunction>, id: u32, name: &str) -> Option<String> {
    match go.get(&id) {
        Some(g) => (g.name != name).then(|| g.name.clone()),
        None => crate::demangle::demangle(name),
    }
}

/// For each of the module's functions (`names`, by id): [`shown_name`]. Patterns
/// (`--only`, `--exclude`, live switching) match either name.
pub fn shown_names(bytes: &[u8], names: &[String]) -> Vec<Option<String>> {
    let go = match read(bytes) {
        GoTable::Functions(go) => go,
        _ => HashMap::new(),
    };
    names
        .iter()
        .enumerate()
        .map(|(id, name)| shown_name(&go, id as u32, name))
        .collect()
}

/// Whether `bytes` is a Go module: its first section is Go's `go:buildid` (read without
/// going further).
pub fn is_go(bytes: &[u8]) -> bool {
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(wasmparser::Payload::Version { .. }) => {}
            Ok(wasmparser::Payload::CustomSection(c)) if c.name() == "go:buildid" => return true,
            Ok(wasmparser::Payload::CustomSection(_)) => {}
            _ => return false,
        }
    }
    false
}

/// What decoding needs from the module.
struct GoModule<'a> {
    imported: u32,
    defined: u32,
    /// Each defined function's body, as file offsets.
    bodies: Vec<std::ops::Range<usize>>,
    /// Active segments of memory 0 at constant addresses: `(address, bytes)`, sorted.
    segments: Vec<(u32, &'a [u8])>,
}

/// The parts of a Go module the table is read from; `None` if it is not a Go module. The
/// Go linker writes `go:buildid` before every other section, so any other module is known
/// after its first section.
fn scan(bytes: &[u8]) -> wasmparser::Result<Option<GoModule<'_>>> {
    let mut is_go = false;
    let mut module = GoModule {
        imported: 0,
        defined: 0,
        bodies: Vec::new(),
        segments: Vec::new(),
    };
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload? {
            wasmparser::Payload::CustomSection(c) if c.name() == "go:buildid" => is_go = true,
            wasmparser::Payload::Version { .. } | wasmparser::Payload::CustomSection(_) => {}
            _ if !is_go => return Ok(None),
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import?.ty, wasmparser::TypeRef::Func(_)) {
                        module.imported += 1;
                    }
                }
            }
            wasmparser::Payload::FunctionSection(reader) => module.defined = reader.count(),
            wasmparser::Payload::CodeSectionEntry(body) => module.bodies.push(body.range()),
            wasmparser::Payload::DataSection(reader) => {
                for data in reader {
                    let segment = crate::languages::memory::active_segment(&data?);
                    module.segments.extend(segment);
                }
            }
            _ => {}
        }
    }
    module.segments.sort_by_key(|(address, _)| *address);
    Ok(is_go.then_some(module))
}

/// The data segments' bytes as they initialise memory, from the first segment's address
/// to the last one's end (the linker leaves runs of zeros out of its segments, even
/// inside the table), and the offset of the table's header in them.
fn table_image(module: &GoModule<'_>) -> Result<(Vec<u8>, usize), String> {
    let Some(base) = module
        .segments
        .first()
        .map(|(address, _)| *address as usize)
    else {
        return Err("it has no data".to_string());
    };
    let end = module
        .segments
        .iter()
        .map(|(address, data)| *address as usize + data.len())
        .max()
        .unwrap_or(base);
    if end - base > MAX_SPAN {
        return Err(format!("its data spans more than {} MiB", MAX_SPAN >> 20));
    }
    let mut image = vec![0u8; end - base];
    for (address, data) in &module.segments {
        let at = *address as usize - base;
        image[at..at + data.len()].copy_from_slice(data);
    }
    let magic = MAGIC.to_le_bytes();
    let header = image
        .windows(8)
        .position(|w| w[..4] == magic && w[4..6] == [0, 0] && w[7] == 8)
        .ok_or_else(|| {
            let older = image.windows(8).any(|w| {
                let m = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                (0xffff_fff0..=0xffff_fffb).contains(&m) && w[4..6] == [0, 0]
            });
            if older {
                "its symbol table is not in the format of Go 1.20 and later".to_string()
            } else {
                "no Go symbol table found in its data".to_string()
            }
        })?;
    Ok((image, header))
}

/// Bounds-checked little-endian reads from the table.
struct Table<'a>(&'a [u8]);

impl Table<'_> {
    fn u32_at(&self, at: usize) -> Result<u32, String> {
        self.0
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("the symbol table ends before offset {at}"))
    }

    fn word_at(&self, at: usize) -> Result<usize, String> {
        let b = self
            .0
            .get(at..at + 8)
            .ok_or_else(|| format!("the symbol table ends before offset {at}"))?;
        let word = u64::from_le_bytes(b.try_into().expect("eight bytes"));
        usize::try_from(word).map_err(|_| format!("offset {word} is out of range"))
    }

    /// The NUL-terminated string at `at`.
    fn str_at(&self, at: usize) -> Result<&str, String> {
        let rest = self
            .0
            .get(at..)
            .ok_or_else(|| format!("a name at offset {at} is past the table"))?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("the name at offset {at} has no end"))?;
        std::str::from_utf8(&rest[..len]).map_err(|_| format!("the name at {at} is not UTF-8"))
    }
}

/// One function's record in the table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    /// Its function id in the module.
    pub(super) id: u32,
    name: u32,
    /// Offsets of its file and line tables among the pc-value tables (0: none).
    pub(super) pcfile: u32,
    pub(super) pcln: u32,
    /// Its compilation unit's first file in the unit table (`u32::MAX`: none).
    unit: u32,
    /// The line of its `func`.
    line: u32,
}

/// A Go module's table, decoded enough to answer names, files and lines.
pub(super) struct Decoded {
    /// The table's bytes (from its header to the end of the data).
    image: Vec<u8>,
    names: usize,
    units: usize,
    files: usize,
    values: usize,
    /// Every function of the table, in its order.
    pub(super) records: Vec<Record>,
}

impl Decoded {
    fn table(&self) -> Table<'_> {
        Table(&self.image)
    }

    /// File `index` of compilation unit `unit`.
    pub(super) fn file(&self, unit: u32, index: i64) -> Result<String, String> {
        let table = self.table();
        let index = usize::try_from(index).map_err(|_| format!("file index {index}"))?;
        let slot = self.units + 4 * (unit as usize + index);
        Ok(table
            .str_at(self.files + table.u32_at(slot)? as usize)?
            .to_string())
    }

    /// The pc-value table at `offset`: `(end, value)` rows, `value` holding from the
    /// previous row's end (from 0) to `end`, both counted from the function's entry.
    pub(super) fn rows(&self, offset: u32) -> Result<Vec<(u32, i64)>, String> {
        let bytes = self
            .image
            .get(self.values + offset as usize..)
            .unwrap_or(&[]);
        let mut reader = wasmparser::BinaryReader::new(bytes, 0);
        let bad = |_| format!("the pc-value table at {offset} cannot be read");
        let (mut value, mut pc, mut rows) = (-1i64, 0u32, Vec::new());
        loop {
            let raw = reader.read_var_u64().map_err(bad)?;
            if raw == 0 && !rows.is_empty() {
                return Ok(rows);
            }
            value += (raw >> 1) as i64 ^ -((raw & 1) as i64);
            pc = pc.saturating_add(reader.read_var_u32().map_err(bad)?);
            rows.push((pc, value));
            if rows.len() > 1 << 20 {
                return Err(format!("the pc-value table at {offset} does not end"));
            }
        }
    }

    /// The unit of a record, if it has one.
    pub(super) fn unit(record: &Record) -> Option<u32> {
        (record.unit != u32::MAX).then_some(record.unit)
    }

    fn function(&self, record: &Record) -> Result<GoFunction, String> {
        let name = self
            .table()
            .str_at(self.names + record.name as usize)?
            .to_string();
        let file = match (record.pcfile, Self::unit(record)) {
            (0, _) | (_, None) => None,
            (pcfile, Some(unit)) => match self.rows(pcfile)?.first() {
                Some(&(_, first)) => Some(self.file(unit, first)?),
                None => None,
            },
        };
        Ok(GoFunction {
            name,
            file,
            line: if (record.line as i32) > 0 {
                record.line
            } else {
                0
            },
        })
    }
}

/// The table of a Go module, each defined function's body (file offsets) and the number
/// of imported functions (`None`: not a Go module).
pub(super) type DecodedModule = (Decoded, Vec<std::ops::Range<usize>>, u32);

/// See [`DecodedModule`].
pub(super) fn decoded(bytes: &[u8]) -> Result<Option<DecodedModule>, String> {
    let module = match scan(bytes) {
        Ok(Some(m)) => m,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("the module cannot be read: {e}")),
    };
    let decoded = decode_table(&module)?;
    Ok(Some((decoded, module.bodies, module.imported)))
}

fn decode_table(module: &GoModule<'_>) -> Result<Decoded, String> {
    let (mut image, header) = table_image(module)?;
    image.drain(..header);
    let table = Table(&image);
    let word = |k: usize| table.word_at(8 + 8 * k);
    let (count, names, units, files, values, functab) =
        (word(0)?, word(3)?, word(4)?, word(5)?, word(6)?, word(7)?);
    if image.len() < HEADER || count as u64 > u64::from(module.defined) {
        return Err(format!(
            "its symbol table lists {count} functions, the module defines {}",
            module.defined
        ));
    }
    let mut records = Vec::with_capacity(count);
    for k in 0..count {
        let entry = table.u32_at(functab + 8 * k)?;
        let record = functab + table.u32_at(functab + 8 * k + 4)? as usize;
        let field = |i: usize| table.u32_at(record + 4 * i);
        if image.len() < record + FUNC_RECORD {
            return Err(format!("function {k}'s record is past the table"));
        }
        // Go 1.21 records the entry's whole pc (`PC_F << 16`), later versions `PC_F`.
        let pc_f = if entry >> 16 >= FUNC_VALUE_OFFSET {
            entry >> 16
        } else {
            entry
        };
        let Some(index) = pc_f
            .checked_sub(FUNC_VALUE_OFFSET)
            .filter(|&i| i < module.defined)
        else {
            return Err(format!(
                "function {k}'s entry {entry:#x} is not a wasm function"
            ));
        };
        records.push(Record {
            id: module.imported + index,
            name: field(1)?,
            pcfile: field(5)?,
            pcln: field(6)?,
            unit: field(8)?,
            line: field(9)?,
        });
    }
    Ok(Decoded {
        image,
        names,
        units,
        files,
        values,
        records,
    })
}

#[cfg(test)]
mod tests;
