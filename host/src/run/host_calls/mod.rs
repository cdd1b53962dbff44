//! wprof's side of the host functions a module imports (WASI's). When the module is
//! profiled, each one it imports is replaced in the linker by a wrapper that measures the
//! call: wall time by wprof's clock, the program thread's on-CPU time by the kernel's
//! per-thread clock (so time blocked in I/O or asleep shows as the difference), and for the
//! I/O functions the bytes moved, as the host reported them to the program. A wrapper also
//! injects the faults `--inject` asks for ([`inject`]); otherwise it calls the real
//! function, through a trampoline that gives it the program's memory ([`trampoline`]).
//!
//! Where the figures go: every call counts in its import's totals (the profile's
//! `host_calls`); a call the probes bracketed also counts in the import's calling context,
//! which time mode's probe log and the inline modes' tree both name (see
//! [`HostAccount`] and [`crate::run::time::probe_log::ProbeLog::host`]). In time mode the
//! wrapper's own work is excluded from every time, as a hand-over of the probe log is.
//!
//! What it costs, per call to the host: a call through the trampoline and two readings of
//! wprof's clock, and for the functions that can wait two readings of the thread's CPU
//! clock (system calls, about 0.2 µs each here; [`never_waits`] lists the functions spared
//! them); nothing inside the module. `WPROF=0` links the real functions alone.

pub mod inject;
pub mod meter;
mod trampoline;

pub use trampoline::compile_with;

use std::mem::MaybeUninit;
use std::sync::{Arc, OnceLock};

use wasmtime::{AsContextMut, Caller, Extern, Func, Instance, Linker, Module, Store, ValRaw};

use crate::exit::Failure;
use crate::profile::HostCallRecord;
use crate::run::host_state::HostState;
use crate::settings::injection::{Injection, InjectionRecord};

use inject::Injector;
pub use inject::{FunctionInjectors, InjectedTrap};
use meter::{HostAccount, HostCall, Meter};

/// The modules WASI preview 1 functions are imported from.
const WASI_MODULES: [&str; 2] = ["wasi_snapshot_preview1", "wasi_unstable"];

/// For WASI's I/O functions, the parameter pointing at the `u32` where the host writes the
/// bytes it moved (`nread`, `nwritten`, `ro_datalen`, `so_datalen`).
fn bytes_parameter(name: &str) -> Option<usize> {
    match name {
        "fd_read" | "fd_write" => Some(3),
        "fd_pread" | "fd_pwrite" | "sock_recv" | "sock_send" => Some(4),
        _ => None,
    }
}

/// WASI's functions that never wait (no I/O, no sleep, no other thread): their calls are
/// taken as on CPU throughout, and the thread's CPU clock, a system call, is not read for
/// them (it would cost several times what a clock or an argument read costs).
fn never_waits(name: &str) -> bool {
    matches!(
        name,
        "args_get"
            | "args_sizes_get"
            | "environ_get"
            | "environ_sizes_get"
            | "clock_res_get"
            | "clock_time_get"
            | "random_get"
            | "fd_prestat_get"
            | "fd_prestat_dir_name"
            | "fd_fdstat_get"
            | "fd_fdstat_set_flags"
            | "fd_seek"
            | "fd_tell"
            | "proc_exit"
            | "proc_raise"
    )
}

/// One import replaced by a wrapper.
#[derive(Debug)]
struct Wrapped {
    /// Its function id.
    id: u32,
    /// `module::name`.
    target: String,
    injectors: Vec<Arc<Injector>>,
}

/// The wrappers of one run.
#[derive(Debug)]
pub struct HostCalls {
    wrapped: Vec<Wrapped>,
    /// Their way to the real functions (none without wrappers).
    route: Option<Arc<Route>>,
}

/// The way to the real functions, shared by a run's wrappers and made at the first call
/// (the program may call WASI from its start function, before its instance is returned).
#[derive(Debug, Default)]
struct Route {
    /// The real functions, in the order of the wrappers.
    reals: OnceLock<Vec<Func>>,
    /// The program's memory, and per real function the trampoline's function that calls
    /// it; `None` where no trampoline could be made.
    connected: OnceLock<Option<(Extern, Vec<Func>)>>,
}

impl Route {
    /// Connects to the program's `memory`, a memory or a shared memory (see
    /// [`trampoline`]); `store` is the program's.
    fn connect(&self, store: impl AsContextMut<Data = HostState>, memory: Extern) {
        self.connected.get_or_init(|| {
            let vias = trampoline::connect(store, memory.clone(), self.reals.get()?);
            if vias.is_none() {
                tracing::warn!("no trampoline: WASI's calls run without the program's memory");
            }
            Some((memory, vias?))
        });
    }

    /// The function that reaches real function `k` with the program's memory: the
    /// trampoline's (made now if the program calls before it is instantiated, from its
    /// start function); the real function itself without one.
    fn to(&self, k: usize, caller: &mut Caller<'_, HostState>) -> Func {
        if self.connected.get().is_none() {
            if let Some(memory) = caller.get_export("memory").filter(is_memory) {
                self.connect(&mut *caller, memory);
            }
        }
        self.connected
            .get()
            .and_then(Option::as_ref)
            .and_then(|(_, vias)| vias.get(k))
            .or_else(|| self.reals.get()?.get(k))
            .copied()
            .expect("every wrapper's real function is in the route")
    }

    /// The program's memory, once connected.
    fn memory(&self) -> Option<&Extern> {
        self.connected.get()?.as_ref().map(|(m, _)| m)
    }
}

/// Whether `export` is a memory, shared or not.
fn is_memory(export: &Extern) -> bool {
    matches!(export, Extern::Memory(_) | Extern::SharedMemory(_))
}

impl HostCalls {
    /// Replaces in `linker`, before the program is instantiated: with `measure`, every
    /// function `module` imports from WASI that the linker provides (counting its calls and
    /// bytes, and with `timed` its wall and CPU time too); and every import
    /// `injections` name (which the module must import and the linker provide, the action
    /// fitting its type). Several injections into one function are asked in the order
    /// given; the first that injects into a call ends it, so the others do not count it.
    pub fn install(
        linker: &mut Linker<HostState>,
        store: &mut Store<HostState>,
        module: &Module,
        injections: &[Injection],
        measure: bool,
        timed: bool,
    ) -> Result<HostCalls, Failure> {
        let route = Arc::new(Route::default());
        let mut wrapped: Vec<Wrapped> = Vec::new();
        let mut reals = Vec::new();
        let mut used = vec![false; injections.len()];
        let function_imports = module.imports().filter_map(|i| {
            let ty = i.ty().func()?.clone();
            Some((i, ty))
        });
        for (id, (import, ty)) in function_imports.enumerate() {
            let (from, name) = (import.module(), import.name());
            let target = format!("{from}::{name}");
            let mut injectors = Vec::new();
            for (k, injection) in injections.iter().enumerate() {
                if injection.module == from && injection.name == name {
                    used[k] = true;
                    let injector = Injector::new(injection, k, &ty).map_err(|why| {
                        Failure::input(format!("--inject {}: {why}", injection.spec))
                    })?;
                    injectors.push(Arc::new(injector));
                }
            }
            let measured = measure && WASI_MODULES.contains(&from);
            if !measured && injectors.is_empty() {
                continue;
            }
            let Ok(Extern::Func(real)) = linker.get(&mut *store, from, name) else {
                if let Some(injector) = injectors.first() {
                    return Err(Failure::input(format!(
                        "--inject {}: wprof provides no function {target} to inject into",
                        injector.record().spec
                    )));
                }
                // Not provided: instantiating says so, as without wprof.
                continue;
            };
            let wrapper = Wrapper {
                id: id as u32,
                k: reals.len(),
                route: route.clone(),
                injectors: injectors.clone(),
                measured,
                timed,
                cpu: !never_waits(name),
                bytes_at: bytes_parameter(name).filter(|_| measured),
                params: ty.params().len(),
            };
            linker.allow_shadowing(true);
            // SAFETY: the wrapper reads its parameters and writes its results as `ty`, the
            // import's own type, says (see `Wrapper::call`).
            let defined = unsafe {
                linker
                    .func_new_unchecked(from, name, ty, move |caller, args| {
                        wrapper.call(caller, args)
                    })
                    .map(|_| ())
            };
            linker.allow_shadowing(false);
            defined.map_err(|e| Failure::input(format!("cannot link {target}: {e}")))?;
            reals.push(real);
            wrapped.push(Wrapped {
                id: id as u32,
                target,
                injectors,
            });
        }
        if let Some(k) = used.iter().position(|&u| !u) {
            let injection = &injections[k];
            return Err(Failure::input(format!(
                "--inject {}: the module imports no function {}",
                injection.spec,
                injection.target()
            )));
        }
        let _ = route.reals.set(reals);
        let route = (!wrapped.is_empty()).then_some(route);
        Ok(HostCalls { wrapped, route })
    }

    /// After the program is instantiated: makes the trampoline to the real functions (see
    /// [`trampoline`]), unless the start function's calls made it. Without one (the
    /// program exports no unshared `memory`, or a type is not made of numbers), calls go to
    /// the real functions directly, as they do for functions that use no memory.
    pub fn connect(&self, store: &mut Store<HostState>, program: &Instance) {
        if let (Some(route), Some(memory)) = (
            self.route.as_ref(),
            program.get_export(&mut *store, "memory").filter(is_memory),
        ) {
            route.connect(store, memory);
        }
    }

    /// What `--inject` did, with what `functions` (the injections into the module's own
    /// functions) did, in the order of the specs.
    pub fn injections(&self, functions: Option<&FunctionInjectors>) -> Vec<InjectionRecord> {
        let mut records: Vec<(usize, InjectionRecord)> = functions
            .map(FunctionInjectors::records)
            .unwrap_or_default();
        for w in &self.wrapped {
            records.extend(w.injectors.iter().map(|i| (i.order(), i.record())));
        }
        records.sort_by_key(|(order, _)| *order);
        records.into_iter().map(|(_, r)| r).collect()
    }

    /// Every wrapped import the program called, with its figures from `account`.
    pub fn records(&self, account: &HostAccount) -> Vec<HostCallRecord> {
        self.wrapped
            .iter()
            .filter_map(|w| {
                let figures = *account.totals().get(w.id as usize)?;
                (figures.calls > 0).then(|| HostCallRecord {
                    function: w.id,
                    name: w.target.clone(),
                    figures,
                })
            })
            .collect()
    }
}

/// What one wrapper holds.
struct Wrapper {
    id: u32,
    /// Its place among the run's wrappers (and real functions, see [`Route`]).
    k: usize,
    route: Arc<Route>,
    injectors: Vec<Arc<Injector>>,
    measured: bool,
    /// Whether calls are timed (not in cost mode, whose profiles hold no time).
    timed: bool,
    /// Whether the thread's CPU clock is read (see [`never_waits`]).
    cpu: bool,
    /// The parameter pointing at the bytes moved, for a measured I/O function.
    bytes_at: Option<usize>,
    params: usize,
}

impl Wrapper {
    /// A call from the program: `args` holds the parameters, and takes the results.
    fn call(
        &self,
        mut caller: Caller<'_, HostState>,
        args: &mut [MaybeUninit<ValRaw>],
    ) -> wasmtime::Result<()> {
        for injector in &self.injectors {
            if let Some(result) = injector.call() {
                args[0].write(result?);
                return Ok(());
            }
        }
        // Result slots past the parameters start out unwritten.
        for slot in args.iter_mut().skip(self.params) {
            slot.write(ValRaw::i32(0));
        }
        // SAFETY: every slot is written (the parameters by the caller, the rest above), and
        // `ValRaw` has the layout of `MaybeUninit<ValRaw>`.
        let args: &mut [ValRaw] = unsafe { &mut *(std::ptr::from_mut(args) as *mut [ValRaw]) };
        let meter = Meter::new();
        // Time mode: from here on, wprof's own work (the first call may make the
        // trampoline) is left out of the times; it costs two more clock readings.
        let entered =
            (self.measured && self.timed && caller.data().log.is_some()).then(|| meter.now_ps());
        let function = self.route.to(self.k, &mut caller);
        if !self.measured {
            // SAFETY: `function` has the import's type, which `args` is laid out for.
            return unsafe { function.call_unchecked(&mut caller, args) };
        }
        let out = self.bytes_at.map(|i| args[i].get_u32());
        let started = self.timed.then(|| meter.start(self.cpu));
        // SAFETY: as above.
        let result = unsafe { function.call_unchecked(&mut caller, args) };
        let bytes = out.map(|at| match result {
            // errno 0: the count was written.
            Ok(()) if args[0].get_i32() == 0 => self.read_u32(&caller, at),
            _ => 0,
        });
        let call = match started {
            Some(started) => meter.finish(started, bytes),
            None => HostCall {
                wall_ns: 0,
                cpu_ns: 0,
                bytes,
            },
        };
        let node = caller
            .data()
            .host
            .as_ref()
            .and_then(HostAccount::arena)
            .and_then(|arena| meter::import_node(arena.data(&caller), self.id));
        let overhead_ps = entered.map_or(0, |entered| {
            meter
                .now_ps()
                .saturating_sub(entered)
                .saturating_sub(call.wall_ns * 1000)
        });
        let state = caller.data_mut();
        if let Some(account) = state.host.as_mut() {
            account.record(self.id, &call, node);
        }
        if let Some(log) = state.log.as_mut() {
            log.host(self.id, &call, overhead_ps);
        }
        result
    }

    /// The `u32` at `at` in the program's memory (0 where out of bounds or unknown).
    fn read_u32(&self, caller: &Caller<'_, HostState>, at: u32) -> u32 {
        let at = at as usize;
        let word = match self.route.memory() {
            Some(Extern::Memory(m)) => m
                .data(caller)
                .get(at..at + 4)
                .map(|b| [b[0], b[1], b[2], b[3]]),
            Some(Extern::SharedMemory(m)) => shared_word(m.data(), at),
            _ => None,
        };
        word.map_or(0, u32::from_le_bytes)
    }
}

/// The four bytes at `at` of a shared memory's `cells`, which other threads may be writing:
/// read with atomic loads (one of the word where it is aligned, else one per byte, which
/// may then come from different writes, as the program's own unaligned loads would),
/// never with plain ones, which would race with the writers. `None` out of bounds.
fn shared_word(cells: &[std::cell::UnsafeCell<u8>], at: usize) -> Option<[u8; 4]> {
    use std::sync::atomic::{AtomicU32, Ordering};
    let cells = cells.get(at..at.checked_add(4)?)?;
    let first = cells[0].get();
    if (first as usize).is_multiple_of(4) {
        // SAFETY: four bytes in bounds of the memory, which lives as long as `cells`;
        // aligned; every access of another thread to them is the engine's (atomic or
        // racy wasm loads and stores), never a Rust reference.
        let word = unsafe { AtomicU32::from_ptr(first.cast()) }.load(Ordering::Relaxed);
        return Some(word.to_le_bytes());
    }
    let mut word = [0u8; 4];
    crate::run::wasi::memory::read(cells, 0, &mut word)?;
    Some(word)
}

#[cfg(test)]
mod tests {
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use super::shared_word;

    #[test]
    fn a_shared_memorys_word_is_read_whole_while_another_thread_writes_it() {
        // Four aligned words seen as the bytes a shared memory gives, one of them written
        // over and over by another thread.
        let words: Box<[AtomicU32; 4]> = Box::new([const { AtomicU32::new(0) }; 4]);
        words[1].store(0x1111_1111, Ordering::Relaxed);
        // SAFETY: the words' bytes, alive for the test; every access to them is atomic.
        let cells: &[UnsafeCell<u8>] =
            unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), 16) };
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut value = 0x1111_1111;
                while !stop.load(Ordering::Relaxed) {
                    value ^= 0x3333_3333;
                    words[1].store(value, Ordering::Relaxed);
                }
            });
            for _ in 0..100_000 {
                let word = u32::from_le_bytes(shared_word(cells, 4).unwrap());
                assert!(matches!(word, 0x1111_1111 | 0x2222_2222), "{word:#x}");
            }
            stop.store(true, Ordering::Relaxed);
        });
        // Unaligned: byte by byte; past the end: nothing.
        words[2].store(0x0403_0201, Ordering::Relaxed);
        words[3].store(0x0807_0605, Ordering::Relaxed);
        assert_eq!(shared_word(cells, 10), Some([3, 4, 5, 6]));
        assert_eq!(shared_word(cells, 13), None);
        assert_eq!(shared_word(cells, usize::MAX - 1), None);
    }
}
