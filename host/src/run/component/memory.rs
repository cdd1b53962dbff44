//! Linear memories wprof makes for the engine of a component's run, so that it can find the
//! instrumented modules' tree memories: wasmtime keeps a component's core instances to
//! itself (no core export reaches the host), but every memory it creates comes from the
//! engine's memory creator, in the order the component instantiates its core modules.
//!
//! [`Recorder`] makes each memory as wasmtime's own would be on Linux: the whole
//! reservation wasmtime asks for mapped without access, the accessible part read-write,
//! the guard after it left unmapped-in-effect (no access), growth in place. While a thread
//! records (see [`record`]), it notes each memory's base and size; [`crate::run::component`]
//! picks the tree memories out by position and checks their sizes.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

/// A memory made while recording: where it is and how big it is now.
#[derive(Debug, Clone)]
pub struct MadeMemory {
    /// Its first byte; the memory never moves.
    pub base: usize,
    /// Its accessible size in bytes, kept up to date as it grows.
    pub size: Arc<AtomicUsize>,
    /// Its minimum size in bytes, as the module declared it.
    pub minimum: usize,
}

impl MadeMemory {
    /// The tree read while the program runs, if this memory is a module's tree memory,
    /// bounded by its size as it grows.
    ///
    /// # Safety
    ///
    /// The view must not be used once the memory is dropped (its size cell, shared by the
    /// memory and this record, lives at least as long).
    pub unsafe fn live_tree(&self) -> crate::run::adaptive::live_tree::LiveTree {
        use crate::run::adaptive::live_tree::{LiveTree, TreeSize};
        // SAFETY: the memory never moves and holds the bytes its size cell says, which it
        // updates once grown; the caller keeps it, and so the cell, alive while the view
        // is used.
        unsafe { LiveTree::new(self.base as *const u8, TreeSize::Tracked(&*self.size)) }
    }
}

thread_local! {
    static RECORDING: RefCell<Option<Vec<MadeMemory>>> = const { RefCell::new(None) };
}

/// Runs `f`, returning what it returns and the memories the engine made on this thread
/// meanwhile, in order.
pub fn record<T>(f: impl FnOnce() -> T) -> (T, Vec<MadeMemory>) {
    RECORDING.with(|r| *r.borrow_mut() = Some(Vec::new()));
    let out = f();
    let made = RECORDING
        .with(|r| r.borrow_mut().take())
        .unwrap_or_default();
    (out, made)
}

/// The memory creator of a component's engine (see the module's documentation).
#[derive(Debug, Default)]
pub struct Recorder;

unsafe impl MemoryCreator for Recorder {
    fn new_memory(
        &self,
        _ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        let page = page_size();
        let capacity = reserved_size_in_bytes
            .or(maximum)
            .unwrap_or(minimum)
            .max(minimum)
            .next_multiple_of(page);
        let total = capacity
            .checked_add(guard_size_in_bytes.next_multiple_of(page))
            .ok_or("memory too large")?;
        // SAFETY: a fresh anonymous mapping, nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total.max(page),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot reserve {total} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut memory = HostMemory {
            base: base.cast(),
            mapped: total.max(page),
            capacity,
            size: Arc::new(AtomicUsize::new(0)),
            maximum,
        };
        memory.make_accessible(minimum).map_err(|e| e.to_string())?;
        RECORDING.with(|r| {
            if let Some(made) = r.borrow_mut().as_mut() {
                made.push(MadeMemory {
                    base: memory.base as usize,
                    size: memory.size.clone(),
                    minimum,
                });
            }
        });
        Ok(Box::new(memory))
    }
}

/// An engine configured as [`crate::run::engine::config`] says, its memories made by a
/// [`Recorder`] (and initialized by copying, which wasmtime requires of memories it does not
/// make itself).
pub fn engine() -> anyhow::Result<wasmtime::Engine> {
    let mut config = crate::run::engine::config();
    config
        .with_host_memory(Arc::new(Recorder))
        .memory_init_cow(false);
    crate::run::engine::engine(config)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096).max(4096)
}

/// One memory: a reservation whose first `size` bytes are accessible.
struct HostMemory {
    base: *mut u8,
    mapped: usize,
    capacity: usize,
    size: Arc<AtomicUsize>,
    maximum: Option<usize>,
}

// SAFETY: the mapping is owned by this value; wasmtime serializes access to it.
unsafe impl Send for HostMemory {}
// SAFETY: as above; `&self` methods only read the base and sizes.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    fn make_accessible(&mut self, new_size: usize) -> anyhow::Result<()> {
        let old = self.size.load(Ordering::Relaxed);
        if new_size > self.capacity || self.maximum.is_some_and(|m| new_size > m) {
            anyhow::bail!("cannot grow a memory to {new_size} bytes");
        }
        let page = page_size();
        let from = old.next_multiple_of(page);
        let to = new_size.next_multiple_of(page);
        if to > from {
            // SAFETY: [from, to) lies inside this memory's own mapping.
            let rc = unsafe {
                libc::mprotect(
                    self.base.add(from).cast(),
                    to - from,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if rc != 0 {
                anyhow::bail!("cannot grow a memory: {}", std::io::Error::last_os_error());
            }
        }
        self.size.store(new_size, Ordering::Release);
        Ok(())
    }
}

unsafe impl LinearMemory for HostMemory {
    fn byte_size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }

    fn byte_capacity(&self) -> usize {
        self.capacity
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        self.make_accessible(new_size)
            .map_err(|e| wasmtime::Error::msg(e.to_string()))
    }

    fn as_ptr(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new_memory`, which nothing uses now.
        unsafe {
            libc::munmap(self.base.cast(), self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_are_recorded_in_order_and_grow_in_place() {
        let engine = engine().unwrap();
        let module = wasmtime::Module::new(
            &engine,
            wat::parse_str(
                r#"(module (memory 1) (memory (export "m") 2)
                    (func (export "grow") (result i32) i32.const 3 memory.grow 1)
                    (data (memory 1) (i32.const 5) "wprof"))"#,
            )
            .unwrap(),
        )
        .unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let (instance, made) = record(|| wasmtime::Instance::new(&mut store, &module, &[]));
        let instance = instance.unwrap();
        assert_eq!(made.len(), 2);
        assert_eq!(made[0].minimum, 65536);
        assert_eq!(made[1].minimum, 2 * 65536);
        let memory = instance.get_memory(&mut store, "m").unwrap();
        assert_eq!(memory.data_ptr(&store) as usize, made[1].base);
        let grow = instance
            .get_typed_func::<(), i32>(&mut store, "grow")
            .unwrap();
        assert_eq!(grow.call(&mut store, ()).unwrap(), 2);
        assert_eq!(made[1].size.load(Ordering::Acquire), 5 * 65536);
        assert_eq!(memory.data_ptr(&store) as usize, made[1].base);
        // SAFETY: in bounds of the memory, which the store keeps alive.
        let text = unsafe { std::slice::from_raw_parts((made[1].base + 5) as *const u8, 5) };
        assert_eq!(text, b"wprof");
        // Not recording: nothing noted, and the next recording starts empty.
        wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let (_, made) = record(|| ());
        assert!(made.is_empty());
    }
}
