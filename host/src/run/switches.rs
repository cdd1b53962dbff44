//! Live probes: the switchboard over a running module's switch table (see
//! [`wprof_agent::SwitchTable`]), turned from any thread, and the log of what was turned
//! when, from which the profile's intervals come.
//!
//! The table is one byte per function id in the module's memory (0: probes on). A
//! function reads its byte at entry, so a change applies from each function's next
//! activation. Writes go through atomics to memory the compiled code reads without
//! synchronisation; the worst a race can do is apply a change one activation late.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use std::sync::Arc;

use wasmtime::Store;
use wprof_agent::{ProbeMode, SwitchTable};

use crate::profile::{LiveRecord, SwitchChange, SwitchedFunction};
use crate::run::host_state::{never_moves, HostState};

/// Live probes: which functions have switches, and who
/// turns them while the program runs.
pub struct Live {
    /// Per function id, its name (for the profile's record).
    pub names: Vec<String>,
    /// Per function id, whether it has switched probes.
    pub switchable: Vec<bool>,
    /// Called with the switchboard before the program starts: sets the switches' first
    /// state and starts whatever turns them; what it returns is dropped when the program
    /// ends, which must stop it.
    pub start: Box<dyn FnOnce(Arc<Switchboard>) -> Box<dyn std::any::Any>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("functions", &self.names.len())
            .finish_non_exhaustive()
    }
}

/// Live probes while the program runs: the board, whoever turns its switches, and the
/// functions' names for the record.
pub(crate) struct LiveRun {
    board: Arc<Switchboard>,
    running: Box<dyn std::any::Any>,
    names: Vec<String>,
}

impl LiveRun {
    /// Sets the switches of the module `instance` (instrumented for `mode`) and starts
    /// whoever turns them; `None` (after one warning) where they cannot be reached.
    pub(crate) fn start(
        store: &mut Store<HostState>,
        instance: &wasmtime::Instance,
        mode: ProbeMode,
        live: Live,
    ) -> Option<LiveRun> {
        let Some(board) = switchboard(store, instance, mode, live.switchable) else {
            crate::say!(
                "wprof: warning: the probes' switches cannot be reached on this host; every \
                 probe stays on"
            );
            return None;
        };
        let board = Arc::new(board);
        let running = (live.start)(board.clone());
        Some(LiveRun {
            board,
            running,
            names: live.names,
        })
    }

    /// The switches.
    pub(crate) fn board(&self) -> &Switchboard {
        &self.board
    }

    /// Stops whoever turns the switches (before the memory goes), and closes the board:
    /// what was switched when.
    pub(crate) fn close(self) -> LiveRecord {
        drop(self.running);
        let names = self.names;
        self.board
            .close(&|id| names.get(id as usize).cloned().unwrap_or_default())
    }
}

/// Live probes: the switchboard over the module's switch table, `None` where its memory
/// is missing or could move while the program runs.
fn switchboard(
    store: &mut Store<HostState>,
    instance: &wasmtime::Instance,
    mode: ProbeMode,
    switchable: Vec<bool>,
) -> Option<Switchboard> {
    let memory = instance.get_memory(&mut *store, SwitchTable::MEMORY)?;
    let functions = switchable.len() as u32;
    let base = SwitchTable::base(mode, functions) as usize;
    if !never_moves(&memory.ty(&*store)) || memory.data_size(&*store) < base + functions as usize {
        return None;
    }
    // SAFETY: in bounds (checked above); the memory never moves, and the board is closed
    // before the store goes (see `run`).
    Some(unsafe {
        Switchboard::new(
            memory.data_ptr(&*store).wrapping_add(base),
            functions,
            switchable,
        )
    })
}

/// A running module's switches, and what was done with them.
#[derive(Debug)]
pub struct Switchboard {
    /// Where the switches are, by function id: one table for a module, one per core
    /// module for a component; valid until [`Switchboard::close`].
    tables: Vec<Table>,
    /// Function ids: the tables cover some of `0..functions`.
    functions: u32,
    /// Which functions can be switched (defined, not left out by the selection).
    switchable: Vec<bool>,
    /// How many switchable functions have their probes on now (written under the lock).
    on: AtomicU32,
    started: Instant,
    state: Mutex<State>,
}

/// The switches of functions `first..first + len`, one byte each from `address`.
#[derive(Debug, Clone, Copy)]
struct Table {
    first: u32,
    len: u32,
    address: usize,
}

#[derive(Debug)]
struct State {
    closed: bool,
    /// Per function id, when its probes were turned off or on, in nanoseconds from the start,
    /// in order (empty for a function never turned).
    turned: Vec<Vec<u64>>,
    changes: Vec<SwitchChange>,
}

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turned {
    /// Functions whose switch changed.
    pub changed: u32,
    /// Functions the change was for (already in that state, or changed).
    pub matched: u32,
}

impl Switchboard {
    /// The switchboard of a table at `table`, `functions` bytes long, of which the functions
    /// marked in `switchable` have probes to switch.
    ///
    /// # Safety
    ///
    /// `table..table + functions` must stay valid for writes, and never move, until
    /// [`Switchboard::close`] is called.
    pub unsafe fn new(table: *mut u8, functions: u32, switchable: Vec<bool>) -> Self {
        // SAFETY: as the caller promises.
        unsafe { Self::over(&[(0, functions, table)], switchable) }
    }

    /// The switchboard of several tables, each `(first, len, table)`: the switches of
    /// functions `first..first + len` from `table` on (a component's core modules, each
    /// with its own); of the functions marked in `switchable` (one per id), those in a
    /// table have probes to switch.
    ///
    /// # Safety
    ///
    /// Each `table..table + len` must stay valid for writes, and never move, until
    /// [`Switchboard::close`] is called.
    pub unsafe fn over(tables: &[(u32, u32, *mut u8)], mut switchable: Vec<bool>) -> Self {
        let tables: Vec<Table> = tables
            .iter()
            .map(|&(first, len, address)| Table {
                first,
                len,
                address: address as usize,
            })
            .collect();
        for (id, s) in switchable.iter_mut().enumerate() {
            let id = id as u32;
            *s &= tables
                .iter()
                .any(|t| (t.first..t.first + t.len).contains(&id));
        }
        let functions = switchable.len() as u32;
        let n = functions as usize;
        let on = switchable.iter().filter(|&&s| s).count() as u32;
        Switchboard {
            tables,
            functions,
            switchable,
            on: AtomicU32::new(on),
            started: Instant::now(),
            state: Mutex::new(State {
                closed: false,
                turned: vec![Vec::new(); n],
                changes: Vec::new(),
            }),
        }
    }

    /// Number of function ids.
    pub fn functions(&self) -> u32 {
        self.functions
    }

    /// Whether function `id` has probes that a switch turns.
    pub fn is_switchable(&self, id: u32) -> bool {
        self.switchable.get(id as usize).copied().unwrap_or(false)
    }

    /// Turns the probes of functions `ids` on or off, and logs it as `what` (the patterns,
    /// as given) from `source` (`start`, `ctl`, the configuration file). Functions that
    /// cannot be switched are skipped. Nothing happens once the program has ended.
    pub fn turn(&self, ids: &[u32], on: bool, what: &str, source: &str) -> Turned {
        let now = self.started.elapsed().as_nanos() as u64;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut turned = Turned {
            changed: 0,
            matched: 0,
        };
        if state.closed {
            return turned;
        }
        for &id in ids {
            if !self.is_switchable(id) {
                continue;
            }
            turned.matched += 1;
            // The table is the state; only this function, under the lock, writes it.
            if self.reads_off(id) != on {
                continue;
            }
            state.turned[id as usize].push(now);
            turned.changed += 1;
            let Some(byte) = self.byte(id) else {
                continue;
            };
            byte.store(u8::from(!on), Ordering::Relaxed);
            if on {
                self.on.fetch_add(1, Ordering::Relaxed);
            } else {
                self.on.fetch_sub(1, Ordering::Relaxed);
            }
        }
        if turned.changed == 0 {
            return turned;
        }
        state.changes.push(SwitchChange {
            at_ns: now,
            on,
            what: what.to_string(),
            source: source.to_string(),
            functions: turned.changed,
        });
        turned
    }

    /// Whether function `id`'s switch is off now, read from the table itself without a lock
    /// (for the sampling thread, while the program runs).
    pub fn reads_off(&self, id: u32) -> bool {
        self.byte(id)
            .is_some_and(|byte| byte.load(Ordering::Relaxed) != 0)
    }

    /// Function `id`'s switch, if a table has it.
    fn byte(&self, id: u32) -> Option<&AtomicU8> {
        let t = self
            .tables
            .iter()
            .find(|t| id >= t.first && id - t.first < t.len)?;
        // SAFETY: in the table, valid until `close`, which comes after the program (and
        // with it the sampling thread) has ended.
        Some(unsafe { &*((t.address + (id - t.first) as usize) as *const AtomicU8) })
    }

    /// Whether every function that has switchable probes has them off now (never for a
    /// module with none), read without a lock: the sampler then stops ticking, since
    /// nothing is being profiled.
    pub fn all_off(&self) -> bool {
        self.on.load(Ordering::Relaxed) == 0 && self.switchable.iter().any(|&s| s)
    }

    /// Whether function `id`'s probes are off now.
    pub fn is_off(&self, id: u32) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        !state.closed && self.reads_off(id)
    }

    /// How many functions have their probes off now.
    pub fn off_count(&self) -> u32 {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.closed {
            return 0;
        }
        (0..self.functions).filter(|&id| self.reads_off(id)).count() as u32
    }

    /// The program ended: no switch is written any more, and the log becomes the profile's
    /// record, `names` naming the functions.
    pub fn close(&self, names: &dyn Fn(u32) -> String) -> LiveRecord {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let end_ns = self.started.elapsed().as_nanos() as u64;
        state.closed = true;
        let mut switched = Vec::new();
        for (id, turned) in state.turned.iter().enumerate() {
            if turned.is_empty() {
                continue;
            }
            // Every function starts on; each entry in `turned` flips it.
            let mut on = Vec::new();
            let mut from = Some(0);
            for &t in turned {
                let t = t.min(end_ns);
                match from.take() {
                    Some(start) => {
                        if t > start {
                            on.push([start, t]);
                        }
                    }
                    None => from = Some(t),
                }
            }
            if let Some(start) = from {
                if end_ns > start {
                    on.push([start, end_ns]);
                }
            }
            switched.push(SwitchedFunction {
                name: names(id as u32),
                on_ns: on.iter().map(|[a, b]| b - a).sum(),
                on,
            });
        }
        LiveRecord {
            changes: std::mem::take(&mut state.changes),
            switched,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turning_writes_the_bytes_and_logs_intervals() {
        let mut table = vec![0u8; 4];
        // Function 3 is not switchable (an import, or left out).
        let board =
            unsafe { Switchboard::new(table.as_mut_ptr(), 4, vec![true, true, true, false]) };
        let t = board.turn(&[1, 2, 3], false, "f*", "ctl");
        assert_eq!(
            t,
            Turned {
                changed: 2,
                matched: 2
            }
        );
        assert!(board.is_off(1) && !board.is_off(0) && !board.is_off(3));
        assert!(board.reads_off(1) && !board.reads_off(0) && !board.reads_off(9));
        assert_eq!(board.off_count(), 2);
        // Already off: matched, not changed.
        assert_eq!(board.turn(&[1], false, "g", "ctl").changed, 0);
        std::thread::sleep(std::time::Duration::from_millis(2));
        board.turn(&[1], true, "g", "config");
        let record = board.close(&|id| format!("f{id}"));
        // Nothing moves after the end.
        assert_eq!(board.turn(&[0], false, "*", "ctl").changed, 0);
        assert_eq!(table, vec![0, 0, 1, 0]);
        // The change that changed nothing is not logged.
        assert_eq!(record.changes.len(), 2);
        assert_eq!(record.changes[0].functions, 2);
        let f1 = record.switched.iter().find(|s| s.name == "f1").unwrap();
        // On, off for ~2 ms, on again until the end.
        assert_eq!(f1.on.len(), 2);
        assert!(f1.on[1][0] - f1.on[0][1] >= 2_000_000);
        let f2 = record.switched.iter().find(|s| s.name == "f2").unwrap();
        assert_eq!(f2.on.len(), 1);
        assert!(record.switched.iter().all(|s| s.name != "f0"));
    }

    #[test]
    fn a_board_over_several_tables_turns_each_functions_own_byte() {
        // Functions 0..3 in one table, 5..7 in another; 3 and 4 in none.
        let mut first = vec![0u8; 3];
        let mut second = vec![0u8; 2];
        let board = unsafe {
            Switchboard::over(
                &[(0, 3, first.as_mut_ptr()), (5, 2, second.as_mut_ptr())],
                vec![true; 7],
            )
        };
        assert!(!board.is_switchable(3) && !board.is_switchable(4));
        let t = board.turn(&[1, 3, 4, 6], false, "x", "ctl");
        assert_eq!(t.changed, 2);
        assert!(board.reads_off(1) && board.reads_off(6) && !board.reads_off(5));
        assert_eq!(board.off_count(), 2);
        board.close(&|id| id.to_string());
        assert_eq!((first, second), (vec![0, 1, 0], vec![0, 1]));
    }

    #[test]
    fn all_off_is_every_switchable_function_off() {
        let mut table = vec![0u8; 3];
        let board = unsafe { Switchboard::new(table.as_mut_ptr(), 3, vec![true, false, true]) };
        assert!(!board.all_off());
        board.turn(&[0, 1], false, "a", "ctl");
        assert!(!board.all_off());
        board.turn(&[2], false, "b", "ctl");
        assert!(board.all_off());
        // Turning one that is off again changes nothing.
        board.turn(&[2], false, "b", "ctl");
        assert!(board.all_off());
        board.turn(&[0], true, "a", "ctl");
        assert!(!board.all_off());
        // A module with nothing to switch is never all off.
        let mut none = vec![0u8; 1];
        let board = unsafe { Switchboard::new(none.as_mut_ptr(), 1, vec![false]) };
        board.turn(&[0], false, "*", "ctl");
        assert!(!board.all_off());
    }
}
