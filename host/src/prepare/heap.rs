//! Giving the heap's freed memory back to the system between instrumenting and compiling.
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
