//! One WASI context for all the threads of a program, as wasi-threads prescribes: a
//! descriptor one thread opens is valid in every other, and they share the preopened
//! directories, the environment and stdio.
//!
//! wasmtime-wasi's preview 1 context is one value that each call borrows mutably for as
//! long as the call runs. A single-threaded program owns it ([`Wasi::Own`]); a threaded
//! program's threads each hold a [`Wasi::Shared`] handle on one context behind a lock. A
//! thread takes the lock when a WASI function asks its store for the context (the linker's
//! projection, [`Wasi::ctx`]) and gives it back when the host function returns to wasm:
//! wasmtime tells each store so through its call hook ([`Wasi::returned_to_wasm`]), for a
//! result, an error, `proc_exit` and a trap alike. So the lock is held for one call at a
//! time and never while wasm runs; a thread that waits for another in wasm
//! (`memory.atomic.wait`) holds nothing.
//!
//! A call that waits holds the context while it waits, which would make every other
//! thread's WASI calls wait behind a sleeping one: the sleeps (`poll_oneoff` on clocks
//! alone, what `nanosleep` and `usleep` make) and polls of stdin are answered without it
//! (see [`super::sleep`]), a read of stdin waits for input without it (see
//! [`super::stdin`]), and a write to stdout or stderr is made without it (see
//! [`super::stdout`]), so a reader that leaves the pipe full holds up only the writer. A
//! `poll_oneoff` on other descriptors still waits with the context held.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use wasmtime_wasi::p1::WasiP1Ctx;

/// A thread's way to the program's WASI context.
// One per store: its size does not matter, and an owned context is reached without an
// indirection on every call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Wasi {
    /// The program's only thread owns it.
    Own(WasiP1Ctx),
    /// One of the threads of a threaded program.
    Shared(Lease),
}

impl Wasi {
    /// The context, for the WASI call now running on this thread (the projection the
    /// linker's WASI functions are linked with): a shared one is locked until the call
    /// returns to wasm.
    pub(crate) fn ctx(&mut self) -> &mut WasiP1Ctx {
        match self {
            Wasi::Own(ctx) => ctx,
            Wasi::Shared(lease) => lease.ctx(),
        }
    }

    /// The store's host function returned to wasm: a shared context held for it is given
    /// back.
    pub(crate) fn returned_to_wasm(&mut self) {
        if let Wasi::Shared(lease) = self {
            lease.give_back();
        }
    }

    /// Whether descriptor `fd` (0, 1 or 2) is the process's stdin, stdout or stderr: a
    /// threaded program's that inherited the process's stdio and has not closed or
    /// renumbered it.
    pub(crate) fn is_process_stdio(&self, fd: i32) -> bool {
        match (self, u32::try_from(fd)) {
            (Wasi::Shared(lease), Ok(fd @ 0..=2)) => {
                lease.context.process_stdio.load(Ordering::Relaxed) & (1 << fd) != 0
            }
            _ => false,
        }
    }

    /// The program closes or renumbers descriptor `fd`: if it is 0, 1 or 2, it is no
    /// longer taken for the process's stdin, stdout or stderr.
    pub(crate) fn stdio_moved(&self, fd: i32) {
        if let (Wasi::Shared(lease), Ok(fd @ 0..=2)) = (self, u32::try_from(fd)) {
            lease
                .context
                .process_stdio
                .fetch_and(!(1 << fd), Ordering::Relaxed);
        }
    }

    /// Shares the context among the threads of a threaded program: this thread's handle,
    /// and one to copy for each thread it spawns. `inherits_stdio`: its descriptors 0, 1
    /// and 2 are the process's stdin, stdout and stderr.
    pub(crate) fn share(ctx: WasiP1Ctx, inherits_stdio: bool) -> (Wasi, SharedWasi) {
        let shared = SharedWasi(Arc::new(Context {
            lock: Lock::default(),
            ctx: UnsafeCell::new(ctx),
            process_stdio: AtomicU8::new(if inherits_stdio { 0b111 } else { 0 }),
        }));
        (Wasi::Shared(shared.lease()), shared)
    }
}

/// The context of a threaded program, shared by its threads; each thread borrows it through
/// a [`Lease`].
#[derive(Clone)]
pub(crate) struct SharedWasi(Arc<Context>);

impl SharedWasi {
    /// A handle for one more thread.
    pub(crate) fn lease(&self) -> Lease {
        Lease {
            context: self.0.clone(),
            held: false,
        }
    }
}

impl std::fmt::Debug for SharedWasi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedWasi")
    }
}

/// The shared context and its lock.
struct Context {
    lock: Lock,
    ctx: UnsafeCell<WasiP1Ctx>,
    /// Bit `fd` set while descriptor `fd` (0, 1, 2) is the process's stdin, stdout or
    /// stderr (see [`super::stdio`]).
    process_stdio: AtomicU8,
}

// SAFETY: the context is reached only through `Lease::ctx`, by the thread holding the lock;
// `WasiP1Ctx` is `Send`, so handing it from thread to thread under the lock is sound.
unsafe impl Sync for Context {}

/// One thread's handle on the shared context.
pub(crate) struct Lease {
    context: Arc<Context>,
    /// Whether this thread holds the lock (for the call now running).
    held: bool,
}

impl Lease {
    fn ctx(&mut self) -> &mut WasiP1Ctx {
        if !self.held {
            self.context.lock.acquire();
            self.held = true;
        }
        // SAFETY: this thread holds the lock until `give_back`, which needs `&mut self`
        // and so ends the borrow returned here first.
        unsafe { &mut *self.context.ctx.get() }
    }

    fn give_back(&mut self) {
        if std::mem::take(&mut self.held) {
            self.context.lock.release();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A call that never returned to wasm (wprof unwinding from a defect of its own).
        self.give_back();
    }
}

/// A lock that is not tied to a guard's lifetime, so that it can be taken in one host
/// callback and released in another: a word for the uncontended case (one atomic
/// exchange each way) and a condition variable for threads that wait.
#[derive(Default)]
struct Lock {
    /// [`FREE`], [`TAKEN`], or [`WAITED`] (taken, and a thread may be waiting).
    state: AtomicU32,
    waiting: Mutex<()>,
    woken: Condvar,
}

const FREE: u32 = 0;
const TAKEN: u32 = 1;
const WAITED: u32 = 2;

impl Lock {
    fn acquire(&self) {
        if self
            .state
            .compare_exchange(FREE, TAKEN, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // Marked as waited for before sleeping: whoever releases then takes `waiting`,
        // which this thread holds until it sleeps, so the wake-up cannot be missed.
        while self.state.swap(WAITED, Ordering::Acquire) != FREE {
            waiting = self.woken.wait(waiting).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn release(&self) {
        if self.state.swap(FREE, Ordering::Release) == WAITED {
            let _waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            self.woken.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn the_lock_lets_one_thread_in_at_a_time() {
        let lock = Arc::new(Lock::default());
        let inside = Arc::new(AtomicU32::new(0));
        let entries = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (lock, inside, entries) = (lock.clone(), inside.clone(), entries.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        lock.acquire();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        entries.fetch_add(1, Ordering::Relaxed);
                        std::hint::spin_loop();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        lock.release();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(entries.load(Ordering::Relaxed), 16_000);
        assert_eq!(lock.state.load(Ordering::Relaxed), FREE);
    }

    #[test]
    fn a_lease_gives_back_what_it_took_and_only_that() {
        let ctx = wasmtime_wasi::WasiCtxBuilder::new().build_p1();
        let (mut first, shared) = Wasi::share(ctx, false);
        let mut second = shared.lease();
        let _ = first.ctx();
        let _ = first.ctx(); // the same call asking again does not wait for itself
        assert_eq!(shared.0.lock.state.load(Ordering::Relaxed), TAKEN);
        second.give_back(); // held nothing: changes nothing
        assert_eq!(shared.0.lock.state.load(Ordering::Relaxed), TAKEN);
        first.returned_to_wasm();
        assert_eq!(shared.0.lock.state.load(Ordering::Relaxed), FREE);
        let _ = second.ctx();
        drop(second);
        assert_eq!(shared.0.lock.state.load(Ordering::Relaxed), FREE);
    }
}
