//! `wprof instrument`: fill the cache ahead of time — instrument and compile modules, run
//! nothing — so the next `wprof run` starts warm; with `--watch DIR`, keep doing it as
//! modules in DIR are rebuilt.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::commands::run::probe_settings::ProbeArgs;
use crate::exit::Failure;
use crate::prepare::instrument;
use crate::prepare::session::{warn, CacheSession};

/// Instrument and compile modules into the cache without running them (optionally watching
/// a directory for rebuilt modules).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Does what `wprof run` does before `_start` — load, instrument (reusing every cached
function), compile (storing the authenticated compiled code) — and nothing after. Use the
same probe settings as the runs you want warm (--mode, --call-sites, --coverage, --allocs,
--only/--exclude, --live/--off, --short-max, or their WPROF_* variables).

With --watch DIR, every *.wasm in DIR is prepared first, then each one created or changed
in DIR is prepared again once it has been quiet for 200 ms (a module caught half-written is
reported and taken when it is complete). It runs until interrupted.

Without modules or --watch, the modules of the configuration file's `[[module]]` sections
that give a `path` are prepared, each with its section's settings: instrument at deploy time,
run warm (see `wprof config --help`).

Examples:
  wprof instrument app.wasm
  wprof instrument --mode cost build/*.wasm
  wprof instrument --watch build/

Exit status:
  0 if every module was prepared; 2 if one could not be (unreadable, not a WASI command,
  the cache unusable), after trying the others.")]
pub struct InstrumentCommand {
    /// The cache directory [default: $XDG_CACHE_HOME/wprof, else ~/.cache/wprof].
    #[arg(long, value_name = "DIR", env = "WPROF_CACHE_DIR")]
    cache_dir: Option<PathBuf>,

    /// The probe plan of the runs to prepare for.
    #[command(flatten)]
    probes: ProbeArgs,

    /// Keep no compiled function for the module's next version, as `wprof run
    /// --no-incremental` (also `WPROF_INCREMENTAL=0`, or `[cache] incremental = false`):
    /// the probed modes' choice; stack mode keeps none either way.
    #[arg(long)]
    no_incremental: bool,

    /// Keep watching DIR: prepare every .wasm file created or changed in it.
    #[arg(long, value_name = "DIR")]
    watch: Option<PathBuf>,

    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,

    /// How the command line gave each flag (filled after parsing).
    #[arg(skip)]
    pub given: crate::commands::GivenArgs,

    /// Modules to prepare (`.wasm`, or `.wat` text) [default: the configuration file's
    /// `[[module]]` sections with `path = "..."`].
    #[arg(value_name = "APP.wasm")]
    modules: Vec<PathBuf>,
}

impl InstrumentCommand {
    fn cache_dir(&self) -> Result<PathBuf, Failure> {
        self.cache_dir
            .clone()
            .or_else(crate::settings::default_cache_dir)
            .ok_or_else(|| {
                Failure::input("no cache directory: give --cache-dir or set WPROF_CACHE_DIR")
            })
    }

    /// Loads, instruments and compiles one module into the cache; one line on stdout.
    /// With `incremental`, each compiled function is kept for the module's next version.
    fn prepare(
        &self,
        engine: &wasmtime::Engine,
        incremental: bool,
        path: &Path,
    ) -> Result<(), Failure> {
        let start = Instant::now();
        let loaded = crate::prepare::loader::load(path, engine)?;
        let dir = self.cache_dir()?;
        let mut cache = CacheSession::open(Some(&dir));
        if !cache.is_enabled() {
            return Err(Failure::input(format!(
                "cannot prepare {}: the cache in {} cannot be used",
                path.display(),
                dir.display()
            )));
        }
        let progress = crate::progress::Progress::on_terminal(self.quiet);
        // The plan `wprof run` would resolve for this module.
        let file = crate::config::installed();
        let probes =
            self.probes
                .resolve(&self.given, file, file.and_then(|f| f.section_for(path)))?;
        if probes.mode.0.walks_stacks() {
            // Compiled whole: no incremental cache, whose keys Cranelift would compute for
            // nothing.
            let whole = crate::run::engine::new_engine()?;
            return self.prepare_counted(&whole, &loaded, &mut cache, path, start);
        }
        let mut prepared = instrument::prepare(
            &loaded,
            path,
            &probes.plan(),
            &instrument::FunctionRules {
                filter: &probes.filter.0,
                allocators: &probes.allocators.0,
                left_out: None,
            },
            &mut cache,
            &progress,
        )
        .map_err(|e| Failure::input(format!("cannot instrument {}: {e}", path.display())))?;
        crate::prepare::heap::give_back_freed();
        progress.step("compiling", None);
        let compiled = crate::prepare::compile::compile(
            engine,
            &mut prepared,
            &loaded,
            &mut cache,
            incremental,
        );
        progress.finish();
        compiled.map_err(|e| {
            Failure::input(format!(
                "the instrumented {} does not compile: {}",
                path.display(),
                e.to_string().lines().next().unwrap_or_default()
            ))
        })?;
        drop(cache);
        if !self.quiet {
            let s = prepared.stats;
            println!(
                "{}: {} functions, {} instrumented now, {} from the cache; compiled code {} ({:.1} ms)",
                path.display(),
                s.functions_total,
                s.functions_instrumented,
                s.functions_from_cache,
                if s.compiled_from_cache {
                    "from the cache"
                } else {
                    "stored"
                },
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    }

    /// Stack mode: compiles the module with its entry counters into the cache (what a
    /// stack-mode run takes from it); one line on stdout.
    fn prepare_counted(
        &self,
        engine: &wasmtime::Engine,
        loaded: &crate::prepare::loader::LoadedModule,
        cache: &mut CacheSession,
        path: &Path,
        start: Instant,
    ) -> Result<(), Failure> {
        crate::prepare::loader::validate(loaded, path, engine)?;
        let progress = crate::progress::Progress::on_terminal(self.quiet);
        progress.step("compiling", None);
        let compiled = crate::prepare::counted::compile_counted(engine, loaded, path, cache)
            .map(|(compiled, _)| compiled);
        progress.finish();
        let compiled = compiled.map_err(|e| {
            Failure::input(format!(
                "cannot add call counters to {} (stack mode): {}",
                path.display(),
                e.to_string().lines().next().unwrap_or_default()
            ))
        })?;
        if !self.quiet {
            println!(
                "{}: stack mode, entry counters; compiled code {} ({:.1} ms)",
                path.display(),
                if compiled.functions.is_none() {
                    "from the cache"
                } else {
                    "stored"
                },
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    }

    /// Runs the command; returns the exit code.
    pub fn execute(&self) -> Result<i32, Failure> {
        let (incremental, _) = crate::commands::run::settings::incremental(self.no_incremental)?;
        let engine = if incremental {
            crate::prepare::compiled::new_engine_caching()?
        } else {
            crate::run::engine::new_engine()?
        };
        let mut failed = false;
        let modules = if self.modules.is_empty() && self.watch.is_none() {
            let named = crate::config::installed()
                .map(|f| f.module_paths())
                .unwrap_or_default();
            if named.is_empty() {
                return Err(Failure::input(
                    "no modules to prepare: give APP.wasm, --watch DIR, or `[[module]] path = \"...\"` \
                     sections in the configuration file",
                ));
            }
            named
        } else {
            self.modules.clone()
        };
        for path in &modules {
            if let Err(e) = self.prepare(&engine, incremental, path) {
                crate::say!("wprof: error: {e}");
                failed = true;
            }
        }
        if let Some(dir) = &self.watch {
            self.watch(&engine, incremental, dir)?;
        }
        Ok(if failed {
            crate::exit::USAGE_OR_INPUT
        } else {
            0
        })
    }

    fn watch(
        &self,
        engine: &wasmtime::Engine,
        incremental: bool,
        dir: &Path,
    ) -> Result<(), Failure> {
        use notify::Watcher;
        if !dir.is_dir() {
            return Err(Failure::input(format!(
                "cannot watch {}: not a directory",
                dir.display()
            )));
        }
        let (tx, rx) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = tx.send(event);
        })
        .map_err(|e| Failure::input(format!("cannot watch {}: {e}", dir.display())))?;
        watcher
            .watch(dir, notify::RecursiveMode::NonRecursive)
            .map_err(|e| Failure::input(format!("cannot watch {}: {e}", dir.display())))?;
        // What is there already, then what changes.
        let mut initial: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Failure::input(format!("cannot list {}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_module(p))
            .collect();
        initial.sort();
        for path in initial {
            self.prepare_watched(engine, incremental, &path);
        }
        if !self.quiet {
            crate::say!(
                "wprof: watching {} for new and changed modules",
                dir.display()
            );
        }
        let quiet = Duration::from_millis(200);
        let mut pending: BTreeSet<PathBuf> = BTreeSet::new();
        loop {
            let event = if pending.is_empty() {
                match rx.recv() {
                    Ok(e) => Ok(e),
                    // The watcher is gone: nothing more will come.
                    Err(_) => return Ok(()),
                }
            } else {
                rx.recv_timeout(quiet).map_err(|_| ())
            };
            match event {
                Ok(Ok(event)) => {
                    let event: notify::Event = event;
                    if matches!(
                        event.kind,
                        notify::EventKind::Create(_) | notify::EventKind::Modify(_)
                    ) {
                        pending.extend(event.paths.into_iter().filter(|p| is_module(p)));
                    }
                }
                Ok(Err(e)) => warn(format_args!("watching {}: {e}", dir.display())),
                // Quiet for a while: prepare what changed.
                Err(()) => {
                    for path in std::mem::take(&mut pending) {
                        if path.is_file() {
                            self.prepare_watched(engine, incremental, &path);
                        }
                    }
                }
            }
        }
    }

    fn prepare_watched(&self, engine: &wasmtime::Engine, incremental: bool, path: &Path) {
        if let Err(e) = self.prepare(engine, incremental, path) {
            warn(format_args!("{e}; skipped until it changes again"));
        }
    }
}

fn is_module(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wasm" || e == "wat")
        && !path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
}
