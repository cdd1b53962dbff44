//! The heap of a cold start: as few arenas as cores, and the freed memory given back to the
//! system between instrumenting and compiling.
//!
//! Instrumenting a large module allocates on every core (the bodies, the assembled module,
//! the values stored in the cache) and frees most of it before the compile starts. glibc
//! keeps what the instrumenting threads freed in those threads' arenas, where the compiling
//! threads (another pool, other arenas) never reuse it: on a 69 MB module 580 MB of freed
//! memory stayed resident through a compile that then peaked at 2.5 GB. Handing it back
//! first took the peak to 2.2 GB (2026-11-26, Yosys, `--no-cache`, `/usr/bin/time -f %M`,
//! two runs each way).

/// Returns the heap's free pages to the system (glibc's `malloc_trim`); nothing elsewhere.
pub fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases memory the allocator holds free; it is safe to
    // call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Keeps glibc to one heap arena per core (its default is eight per core). Instrumenting,
/// compiling and storing each run on threads of their own, and every thread that allocates
/// may get an arena of its own, whose freed memory only that arena reuses: on a 69 MB
/// module's cold start the peak went from 2.12–2.17 GB to 1.97–1.99 GB, in the same time
/// (2026-11-26, Yosys, release, two runs each way; the same limit through
/// `MALLOC_ARENA_MAX`). Call before any thread starts; a user's own `MALLOC_ARENA_MAX`
/// stands.
pub fn one_arena_per_core() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cores = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: `mallopt` sets one of the allocator's parameters; it is called before
        // any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores);
        }
    }
}
