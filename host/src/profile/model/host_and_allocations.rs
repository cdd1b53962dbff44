//! The profile's records of what the host and the allocators did: the host's figures for
//! the functions it provides (WASI), per import and per calling context, and the blocks
//! allocators handed out.

use serde::{Deserialize, Serialize};

/// The blocks an allocator handed out in one context, or in a whole run: exact, every
/// block counted once, by the context that asked for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocFigures {
    /// Bytes asked for (a block's size as the program asked, not what the allocator
    /// rounded it to).
    pub bytes: u64,
    /// Blocks handed out.
    pub objects: u64,
    /// Of those, bytes not taken back when the program ended.
    pub live_bytes: u64,
    /// Of those, blocks not taken back when the program ended.
    pub live_objects: u64,
}

impl AllocFigures {
    /// Adds `other`'s figures.
    pub fn add(&mut self, other: &AllocFigures) {
        self.bytes += other.bytes;
        self.objects += other.objects;
        self.live_bytes += other.live_bytes;
        self.live_objects += other.live_objects;
    }
}

/// Allocation profiling (`--allocs`): the allocator functions and the run's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationsRecord {
    /// The functions profiled as the allocator (empty: none was found).
    pub allocators: Vec<AllocatorRecord>,
    /// Every block of the run (per context in `contexts`).
    #[serde(flatten)]
    pub totals: AllocFigures,
    /// Blocks taken back that wprof never saw handed out (by an allocator it does not
    /// know, or while its probes were off).
    pub unknown_frees: u64,
    /// Calls that handed out nothing (the allocator returned 0).
    pub failed: u64,
}

/// One allocator function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorRecord {
    /// Its function id.
    pub function: u32,
    /// Its name.
    pub name: String,
    /// What it does: `alloc`, `calloc`, `realloc`, `free` or `alloc_at`.
    pub kind: String,
    /// Calls it reported.
    pub calls: u64,
}

/// What the host did during calls to one of the functions it provides (WASI), measured
/// by wprof's wrapper of the function: the calls and bytes exactly, whatever the mode; the
/// times around each call in the probed modes, and in stack mode from its samples (the
/// ticks that found the thread in the function, on the CPU or waiting), as its functions'
/// times are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFigures {
    /// Calls measured.
    pub calls: u64,
    /// Wall-clock time in the host, in nanoseconds. Cost mode, whose profiles hold no
    /// time, measures none: 0, and absent from the file.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wall_ns: u64,
    /// The program thread's on-CPU time in the host, in nanoseconds: `wall_ns - cpu_ns`
    /// is time the thread spent off the CPU (blocked in I/O, sleeping, or waiting for it).
    /// Absent where `wall_ns` is.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_ns: u64,
    /// The I/O functions (`fd_read`, `fd_write`, `fd_pread`, `fd_pwrite`, `sock_recv`,
    /// `sock_send`): bytes read or written, as the host reported them to the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

pub(super) fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl HostFigures {
    /// Adds `other`'s figures.
    pub fn add(&mut self, other: &HostFigures) {
        self.calls += other.calls;
        self.wall_ns += other.wall_ns;
        self.cpu_ns += other.cpu_ns;
        if let Some(b) = other.bytes {
            *self.bytes.get_or_insert(0) += b;
        }
    }

    /// Time the thread was off the CPU during the calls.
    pub fn off_cpu_ns(&self) -> u64 {
        self.wall_ns.saturating_sub(self.cpu_ns)
    }
}

/// One host function the program imported, and everything the host did in its calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCallRecord {
    /// The import's function id.
    pub function: u32,
    /// `module::field`.
    pub name: String,
    /// Every call, whether or not a probe saw it (a call through a table, or from a
    /// function without probes, counts here and in no context).
    #[serde(flatten)]
    pub figures: HostFigures,
}
