//! Live switching: turning a running program's probes on and off without a restart.
//!
//! With live probes (`--live`, see [`wprof_agent::SwitchTable`]) a run starts with the
//! switches its settings name off ([`crate::settings::RunSettings::off`]); then two things
//! turn them while the program runs, each on a thread of its own: [`control`], a socket in
//! the cache directory that `wprof ctl` talks to, and [`watch`], which reads the
//! configuration file again whenever it changes and applies the difference its `off` list
//! makes. Both go through the run's [`Switchboard`], which logs every change for the
//! profile.
//!
//! May use: `run` (the switchboard and the runner's hook), `config`.

pub mod control;
pub mod watch;

use std::path::PathBuf;
use std::sync::Arc;

use crate::run::runner::Live;
use crate::run::switches::Switchboard;
use crate::settings::FunctionPattern;

/// Function names and the names wprof shows for them (Go's, demangled), to find the ids
/// patterns match.
#[derive(Debug)]
pub struct Functions {
    names: Vec<String>,
    demangled: Vec<Option<String>>,
}

impl Functions {
    /// `names` in id order, and `shown` (see [`crate::go_symbols::shown_names`]).
    pub fn new(names: Vec<String>, shown: Vec<Option<String>>) -> Self {
        Functions {
            names,
            demangled: shown,
        }
    }

    /// The ids of the functions `patterns` match (every function when `patterns` is empty).
    pub fn matching(&self, patterns: &[FunctionPattern]) -> Vec<u32> {
        (0..self.names.len() as u32)
            .filter(|&id| {
                let (name, demangled) = (&self.names[id as usize], &self.demangled[id as usize]);
                patterns.is_empty()
                    || patterns
                        .iter()
                        .any(|p| p.matches(id, name, demangled.as_deref()))
            })
            .collect()
    }

    /// The name of function `id`.
    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

/// Patterns as one line, as the profile's log shows them.
pub fn describe(patterns: &[FunctionPattern]) -> String {
    if patterns.is_empty() {
        return "*".to_string();
    }
    patterns
        .iter()
        .map(FunctionPattern::text)
        .collect::<Vec<_>>()
        .join(",")
}

/// What a live run needs to know to set its switches up and let them be turned.
#[derive(Debug, Clone)]
pub struct LiveSetup {
    /// The module being run (the configuration file's `[[module]]` sections match it).
    pub module: PathBuf,
    /// The switches that start off.
    pub off: Vec<FunctionPattern>,
    /// Where `wprof ctl` finds the run's socket (see [`control::socket_path`]).
    pub control_dir: Option<PathBuf>,
    /// The configuration file to watch, if any (see [`crate::config::location`]).
    pub config: Option<PathBuf>,
    /// The probe mode, for `wprof ctl PID status`.
    pub mode: &'static str,
}

impl LiveSetup {
    /// The setup of a run with `settings`.
    pub fn of(settings: &crate::settings::RunSettings) -> Self {
        LiveSetup {
            module: settings.module.clone(),
            off: settings.off.clone(),
            control_dir: settings
                .cache_dir
                .clone()
                .or_else(crate::settings::default_cache_dir)
                .map(|dir| control::control_dir(&dir)),
            // The file read, or where one would be read, so that a file created meanwhile
            // counts.
            config: crate::config::location(),
            mode: settings.mode.name(),
        }
    }
}

/// The control socket of a live run with `settings`, opened before its module is
/// prepared (requests meanwhile are answered that it is preparing); `None` if the run is
/// not live, or (one warning) if the socket cannot be opened.
pub fn open_control(settings: &crate::settings::RunSettings) -> Option<control::Server> {
    if !settings.live || !settings.profiling {
        return None;
    }
    let setup = LiveSetup::of(settings);
    let dir = setup.control_dir.as_ref()?;
    control::Server::open(dir, &setup)
        .map_err(|e| {
            crate::say!(
                "wprof: warning: cannot open the control socket in {} ({e}); `wprof ctl` \
                 cannot reach this run",
                dir.display()
            )
        })
        .ok()
}

/// The runner's hook for a live run of a module whose functions are named `names` (shown
/// as `shown` where that differs) and have switches where `switchable` says; `control` is
/// the run's socket (see [`open_control`]), which the switches are handed to.
pub fn hook(
    setup: LiveSetup,
    control: Option<control::Server>,
    names: Vec<String>,
    shown: Vec<Option<String>>,
    switchable: Vec<bool>,
) -> Live {
    let functions = Arc::new(Functions::new(names.clone(), shown));
    Live {
        names,
        switchable,
        start: Box::new(move |board: Arc<Switchboard>| -> Box<dyn std::any::Any> {
            if !setup.off.is_empty() {
                let ids = functions.matching(&setup.off);
                board.turn(&ids, false, &describe(&setup.off), "start");
            }
            if let Some(control) = &control {
                control.ready(board.clone(), functions.clone());
            }
            let watcher = setup.config.as_ref().and_then(|path| {
                watch::Watcher::start(path, &setup.module, board.clone(), functions.clone())
                    .map_err(|e| {
                        crate::say!(
                            "wprof: warning: cannot watch {} ({e}); editing it does not turn \
                             the switches",
                            path.display()
                        )
                    })
                    .ok()
            });
            Box::new((control, watcher))
        }),
    }
}
