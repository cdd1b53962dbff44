//! Watching the configuration file during a live run: whenever it changes, its `off` list
//! (the `[[module]]` section for the module, else the top level) is read again, and the
//! functions it adds turn off, those it drops turn on. Other settings apply to the next
//! run. A file that no longer reads is one warning, and the switches stay as they are.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::Functions;
use crate::run::switches::Switchboard;

/// A running watch; dropping it stops it.
pub struct Watcher {
    // Dropped first: its channel's end closes, which ends the thread.
    watcher: Option<notify::RecommendedWatcher>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

/// The `off` list the file at `path` gives the module at `module`, as ids, and the file's
/// text; `Err` with one line when it does not read.
fn off_in(
    path: &Path,
    module: &Path,
    functions: &Functions,
) -> Result<(BTreeSet<u32>, String), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        // Removed: nothing is off by the file.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((BTreeSet::new(), String::new()))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let file = crate::config::file::parse(path, &text).map_err(|e| e.to_string())?;
    let section = file.section_for(module);
    let patterns = file
        .knob(section, |k| k.off.as_ref())
        .map(|(p, _)| p)
        .unwrap_or_default();
    let ids = if patterns.is_empty() {
        BTreeSet::new()
    } else {
        functions.matching(&patterns).into_iter().collect()
    };
    Ok((ids, text))
}

impl Watcher {
    /// Watches the file at `path` for the run of the module at `module`.
    pub fn start(
        path: &Path,
        module: &Path,
        board: Arc<Switchboard>,
        functions: Arc<Functions>,
    ) -> notify::Result<Self> {
        use notify::Watcher as _;
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let (tx, rx) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            let _ = tx.send(event);
        })?;
        // The folder, not the file: editors replace a file by renaming another over it.
        watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
        let (module, shown) = (module.to_path_buf(), path.display().to_string());
        let mut last = off_in(&path, &module, &functions).unwrap_or_default();
        let thread = std::thread::Builder::new()
            .name("wprof-config-watch".into())
            .spawn(move || {
                let mut warned: Option<String> = None;
                while let Ok(event) = rx.recv() {
                    let event: notify::Event = match event {
                        Ok(e) => e,
                        Err(_) => continue,
                    };
                    if !concerns(&event, &path) {
                        continue;
                    }
                    // An editor's write is often several events: let them settle.
                    std::thread::sleep(Duration::from_millis(15));
                    while rx.try_recv().is_ok() {}
                    match off_in(&path, &module, &functions) {
                        Ok((ids, text)) => {
                            warned = None;
                            if text == last.1 {
                                continue;
                            }
                            apply(&board, &last.0, &ids, &functions, &shown);
                            last = (ids, text);
                        }
                        Err(why) => {
                            if warned.as_ref() != Some(&why) {
                                crate::say!("wprof: warning: {why}; the switches stay as they are");
                                warned = Some(why);
                            }
                        }
                    }
                }
            })?;
        Ok(Watcher {
            watcher: Some(watcher),
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.watcher.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `event` may have changed the file at `path`.
fn concerns(event: &notify::Event, path: &Path) -> bool {
    use notify::EventKind;
    matches!(
        event.kind,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
    ) && event
        .paths
        .iter()
        .any(|p| p.file_name() == path.file_name())
}

/// Turns off what `now` adds to `before`, and on what it drops.
fn apply(
    board: &Switchboard,
    before: &BTreeSet<u32>,
    now: &BTreeSet<u32>,
    functions: &Functions,
    source: &str,
) {
    let names = |ids: &[u32]| {
        let shown: Vec<&str> = ids.iter().take(5).map(|&id| functions.name(id)).collect();
        let more = ids.len().saturating_sub(shown.len());
        let mut s = shown.join(",");
        if more > 0 {
            s.push_str(&format!(",+{more}"));
        }
        s
    };
    let off: Vec<u32> = now.difference(before).copied().collect();
    let on: Vec<u32> = before.difference(now).copied().collect();
    if !off.is_empty() {
        board.turn(&off, false, &names(&off), source);
    }
    if !on.is_empty() {
        board.turn(&on, true, &names(&on), source);
    }
}
