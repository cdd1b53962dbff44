//! An interpreted language's frames at a tick, read by the signal handler from the
//! interpreter's structures in the program's linear memory (see [`crate::languages`]) and
//! kept beside the tick's native frames until the reader takes them.
//!
//! A thread whose module is a known interpreter gets a [`LanguageWalk`] once its instance
//! is made ([`super::Session::walk_language`]): where the eval loop's state is kept (the
//! capture page) and the program's memory. At each tick the handler reads the state and
//! walks the language's stack from it, every read checked against the memory's size
//! ([`ProgramMemory`]), and keeps up to [`DEPTH`] frames, each one packed word.
//!
//! The memory grows while the program runs, and past its size nothing is mapped that may be
//! read. The size the handler trusts starts at the size the memory had when the walk was
//! set up and only grows: a read past it first asks the kernel whether the wasm page it
//! falls in is readable (`process_vm_readv` of its last byte from this very process, which
//! fails with `EFAULT` rather than faulting); if so, the memory has grown at least that
//! far, and the size trusted becomes that page's end. A memory never shrinks, and a 32-bit
//! memory of wprof's engine never moves (see `crate::run::host_state::never_moves`).

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::languages::memory::Memory;
use crate::languages::{cpython, lua, quickjs};
use crate::languages::{Interpreter, Language};

/// The most language frames a tick keeps: the innermost ones of a deeper stack.
pub const DEPTH: usize = 128;

/// Set in a slot's length when the walk did not reach the stack's base.
const TRUNCATED: usize = 1 << 20;

/// One tick's language frames.
pub(crate) struct LanguageSlot {
    /// The tick that wrote the slot (a tick taken before the walk was set up writes none).
    tick: AtomicU64,
    /// How many of `frames` the tick filled, plus [`TRUNCATED`].
    len: AtomicUsize,
    frames: [AtomicU64; DEPTH],
}

/// How a thread's ticks read its language's frames.
#[derive(Debug)]
pub struct LanguageWalk {
    interpreter: Interpreter,
    /// The eval loop's state, as its last entry kept it (in the capture page).
    state: *const u32,
    memory: ProgramMemory,
    /// Whether the memories are still there (see [`LanguageWalk::retire`]).
    alive: std::sync::atomic::AtomicBool,
    /// Readers reading the program's memory now.
    readers: std::sync::atomic::AtomicU32,
}

// SAFETY: the pointers are read with atomic loads, by the thread whose instance they
// belong to (its handler) and by its reader, while the instance lives (see
// `LanguageWalk::new`).
unsafe impl Send for LanguageWalk {}
unsafe impl Sync for LanguageWalk {}

impl LanguageWalk {
    /// The walk of `interpreter`'s language whose eval loop's state is kept at `state`, in
    /// the memory whose data starts at `base` and holds `size` bytes now.
    ///
    /// # Safety
    ///
    /// `state` must be valid for 4-byte atomic loads and `base` must be the start of a
    /// linear memory of at least `size` bytes that never moves, both for as long as the
    /// walk is used.
    pub unsafe fn new(
        interpreter: Interpreter,
        state: *const u32,
        base: *const u8,
        size: usize,
    ) -> Self {
        LanguageWalk {
            interpreter,
            state,
            memory: ProgramMemory {
                base,
                known: AtomicUsize::new(size),
            },
            alive: std::sync::atomic::AtomicBool::new(true),
            readers: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// `read` of the program's memory, unless the memories are gone (`None`).
    pub fn with_memory<R>(&self, read: impl FnOnce(&ProgramMemory) -> R) -> Option<R> {
        // The reader counts itself, then looks; `retire` says so, then waits for the
        // readers counted: sequentially consistent on both sides, either this sees the
        // memories gone or `retire` waits for this.
        self.readers.fetch_add(1, Ordering::SeqCst);
        let out = self
            .alive
            .load(Ordering::SeqCst)
            .then(|| read(&self.memory));
        self.readers.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// Whether the memories are still there.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The memories are about to go: no tick walks them and no reader reads them once
    /// this returns (it waits for a reader reading now).
    pub(crate) fn retire(&self) {
        self.alive.store(false, Ordering::SeqCst);
        while self.readers.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// The interpreter walked.
    pub fn interpreter(&self) -> &Interpreter {
        &self.interpreter
    }

    /// The eval loop's state as its last entry kept it (0 before the first).
    pub fn entered(&self) -> u32 {
        // SAFETY: as promised to `new`.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.state.cast_mut()) }
            .load(Ordering::Relaxed)
    }

    /// The signal handler: walks the stack of tick `tick` into `slot`. Async-signal-safe:
    /// atomic loads and stores, and `process_vm_readv`.
    pub(crate) fn record(&self, slot: &LanguageSlot, tick: u64) {
        // `retire` runs on this thread: the memories are there while this runs, or were
        // retired before.
        if !self.alive.load(Ordering::Relaxed) {
            return;
        }
        let entered = self.entered();
        let mut len = 0;
        // Each frame packed into the slot, up to its room.
        let mut keep = |word: u64| {
            if len == DEPTH {
                return false;
            }
            slot.frames[len].store(word, Ordering::Relaxed);
            len += 1;
            true
        };
        let memory = &self.memory;
        let complete = match &self.interpreter.language {
            Language::Lua(layout) if entered != 0 => {
                match lua::running_state(layout, memory, entered) {
                    Some(state) => lua::walk_into(layout, memory, state, &mut |f| keep(f.pack())),
                    None => false,
                }
            }
            Language::QuickJs(layout, _) if entered != 0 => {
                quickjs::walk_into(layout, memory, entered, &mut |f| keep(f.pack()))
            }
            Language::Python(layout) if entered != 0 => {
                cpython::walk_into(layout, memory, entered, &mut |f| keep(f.pack()))
            }
            // The eval loop not entered yet.
            Language::Lua(_) | Language::QuickJs(..) | Language::Python(_) => true,
        };
        slot.len.store(
            len | if complete { 0 } else { TRUNCATED },
            Ordering::Relaxed,
        );
        slot.tick.store(tick, Ordering::Relaxed);
    }
}

/// The reader: the language frames of tick `tick` from its `slot`, into `frames`; `None`
/// if the tick walked none, else whether the walk was truncated. The caller checks
/// afterwards that the tick still owns its slot.
pub(crate) fn read(slot: &LanguageSlot, tick: u64, frames: &mut Vec<u64>) -> Option<bool> {
    frames.clear();
    if slot.tick.load(Ordering::Relaxed) != tick {
        return None;
    }
    let len = slot.len.load(Ordering::Relaxed);
    frames.extend(
        slot.frames[..(len & !TRUNCATED).min(DEPTH)]
            .iter()
            .map(|f| f.load(Ordering::Relaxed)),
    );
    Some(len & TRUNCATED != 0)
}

/// Whether tick `tick` still owns `slot` (a later tick may have taken it while it was
/// read).
pub(crate) fn owns(slot: &LanguageSlot, tick: u64) -> bool {
    slot.tick.load(Ordering::Relaxed) == tick
}

/// The program's linear memory, read without ever faulting (see the module's
/// documentation).
#[derive(Debug)]
pub struct ProgramMemory {
    base: *const u8,
    /// Bytes known to be readable from `base`.
    known: AtomicUsize,
}

/// The size of a wasm page: a memory's readable size is a multiple of it.
const WASM_PAGE: usize = 65536;

impl ProgramMemory {
    /// Whether the bytes up to `end` (exclusive) are readable, learning so from the kernel
    /// if they are past the size known.
    fn readable(&self, end: usize) -> bool {
        if end <= self.known.load(Ordering::Relaxed) {
            return true;
        }
        if end > 1 << 32 {
            return false;
        }
        let page_end = end.next_multiple_of(WASM_PAGE);
        if !readable_by_kernel(self.base.wrapping_add(page_end - 1)) {
            return false;
        }
        self.known.fetch_max(page_end, Ordering::Relaxed);
        true
    }
}

impl Memory for ProgramMemory {
    fn read(&self, at: u32, out: &mut [u8]) -> Option<()> {
        let end = (at as usize).checked_add(out.len())?;
        if !self.readable(end) {
            return None;
        }
        for (i, byte) in out.iter_mut().enumerate() {
            // SAFETY: inside the readable part of the memory (checked above), which never
            // moves or shrinks; the program's threads write it with the engine's own
            // accesses, never through a Rust reference.
            *byte = unsafe {
                AtomicU8::from_ptr(self.base.add(at as usize + i).cast_mut())
                    .load(Ordering::Relaxed)
            };
        }
        Some(())
    }
}

/// Whether the byte at `address` of this process can be read, asked of the kernel.
fn readable_by_kernel(address: *const u8) -> bool {
    #[cfg(target_os = "linux")]
    {
        let mut byte = 0u8;
        let local = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        let remote = libc::iovec {
            iov_base: address.cast_mut().cast(),
            iov_len: 1,
        };
        // SAFETY: reads one byte of this process into `byte`; a byte that is not
        // readable makes the call fail, it does not fault.
        unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == 1 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = address;
        false
    }
}

/// Each tick's language frames, slot by slot (zero until used: pages never touched by a
/// session that walks no language).
pub(crate) struct LanguageFrames(pub(crate) [LanguageSlot; super::SLOTS_KEPT]);

impl LanguageFrames {
    /// Marks every slot as written by no tick.
    pub(crate) fn forget(&self) {
        for slot in &self.0 {
            slot.tick.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_known_size_ask_the_kernel_and_never_fault() {
        // Two wasm pages readable, in a reservation of four: the rest is not.
        let size = 4 * WASM_PAGE;
        // SAFETY: a fresh anonymous mapping, unmapped at the end of the test.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: inside the mapping.
        unsafe { libc::mprotect(base, 2 * WASM_PAGE, libc::PROT_READ | libc::PROT_WRITE) };
        let memory = ProgramMemory {
            base: base.cast(),
            known: AtomicUsize::new(WASM_PAGE),
        };
        // SAFETY: inside the readable part.
        unsafe { *base.cast::<u8>().add(WASM_PAGE + 8) = 42 };
        assert_eq!(memory.u8(WASM_PAGE as u32 + 8), Some(42));
        assert_eq!(memory.known.load(Ordering::Relaxed), 2 * WASM_PAGE);
        assert_eq!(memory.u32(2 * WASM_PAGE as u32 - 2), None);
        assert_eq!(memory.u8(3 * WASM_PAGE as u32), None);
        assert_eq!(memory.known.load(Ordering::Relaxed), 2 * WASM_PAGE);
        // The memory grows: found at the next read past it.
        // SAFETY: inside the mapping.
        unsafe { libc::mprotect(base, 3 * WASM_PAGE, libc::PROT_READ | libc::PROT_WRITE) };
        assert_eq!(memory.u8(3 * WASM_PAGE as u32 - 1), Some(0));
        assert_eq!(memory.u32(u32::MAX - 1), None);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base, size) };
    }
}
