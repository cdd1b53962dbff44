//! Every preview 1 function of a threaded program, wasmtime-wasi's own, called with the
//! shared context taken for the call alone (see [`super::shared`]): each is defined in
//! place of the bindings' own, and gives the context back as it returns, with a result, an
//! error, `proc_exit`'s exit or a trap alike ([`super::real::call`]).
//!
//! The bindings reach a store's context through a projection that can only lend it, and
//! say nothing when the call ends; wasmtime's call hook does, but enabling it made every
//! host call of every program slower, threaded or not (time mode's probes: fib 33 took
//! 0.389 s with it, 0.357 s without, see docs/measurements.md). These definitions cost a
//! threaded program's WASI calls what the bindings' own do, and nothing elsewhere.

use wasmtime::{Caller, Linker};

use super::real::MODULE;
use super::HoldsWasi;

/// Replaces every preview 1 function of the linker (WASI already in it) with one that
/// takes the shared context for the call alone.
pub(crate) fn link<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    super::real::replace(linker, define)
}

/// Defines each function, by its core signature, calling the bindings' function of the
/// same name: `wait` for those that are `async` in wasmtime-wasi (run to completion on its
/// runtime, as the synchronous bindings run them), `now` for the others.
macro_rules! define {
    ($linker:ident: $($how:ident $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        $linker.func_wrap(
            MODULE,
            stringify!($name),
            |mut caller: Caller<'_, T>, $($arg: $ty),*| -> wasmtime::Result<i32> {
                super::real::call(&mut caller, |ctx, memory| {
                    use wasmtime_wasi::p1::wasi_snapshot_preview1::$name;
                    define!(@$how $name(ctx, memory, $($arg),*))
                })
            },
        )?;
    )*};
    (@wait $name:ident($($arg:expr),* $(,)?)) => {
        wasmtime_wasi::runtime::in_tokio($name($($arg),*))
    };
    (@now $name:ident($($arg:expr),* $(,)?)) => {
        $name($($arg),*)
    };
}

fn define<T: HoldsWasi>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    define! { linker:
        now args_get(argv: i32, buf: i32);
        now args_sizes_get(argc: i32, size: i32);
        now environ_get(environ: i32, buf: i32);
        now environ_sizes_get(count: i32, size: i32);
        now clock_res_get(id: i32, resolution: i32);
        now clock_time_get(id: i32, precision: i64, time: i32);
        wait fd_advise(fd: i32, offset: i64, len: i64, advice: i32);
        now fd_allocate(fd: i32, offset: i64, len: i64);
        wait fd_close(fd: i32);
        wait fd_datasync(fd: i32);
        wait fd_fdstat_get(fd: i32, stat: i32);
        now fd_fdstat_set_flags(fd: i32, flags: i32);
        now fd_fdstat_set_rights(fd: i32, base: i64, inheriting: i64);
        wait fd_filestat_get(fd: i32, stat: i32);
        wait fd_filestat_set_size(fd: i32, size: i64);
        wait fd_filestat_set_times(fd: i32, atime: i64, mtime: i64, flags: i32);
        wait fd_pread(fd: i32, iovs: i32, len: i32, offset: i64, nread: i32);
        now fd_prestat_get(fd: i32, prestat: i32);
        now fd_prestat_dir_name(fd: i32, path: i32, len: i32);
        wait fd_pwrite(fd: i32, iovs: i32, len: i32, offset: i64, nwritten: i32);
        wait fd_read(fd: i32, iovs: i32, len: i32, nread: i32);
        wait fd_readdir(fd: i32, buf: i32, len: i32, cookie: i64, used: i32);
        wait fd_renumber(from: i32, to: i32);
        wait fd_seek(fd: i32, offset: i64, whence: i32, position: i32);
        wait fd_sync(fd: i32);
        now fd_tell(fd: i32, position: i32);
        wait fd_write(fd: i32, iovs: i32, len: i32, nwritten: i32);
        wait path_create_directory(fd: i32, path: i32, len: i32);
        wait path_filestat_get(fd: i32, flags: i32, path: i32, len: i32, stat: i32);
        wait path_filestat_set_times(
            fd: i32, flags: i32, path: i32, len: i32, atime: i64, mtime: i64, how: i32
        );
        wait path_link(
            old_fd: i32, flags: i32, old: i32, old_len: i32, new_fd: i32, new: i32, new_len: i32
        );
        wait path_open(
            fd: i32, dirflags: i32, path: i32, len: i32, oflags: i32, base: i64,
            inheriting: i64, fdflags: i32, opened: i32
        );
        wait path_readlink(fd: i32, path: i32, len: i32, buf: i32, buf_len: i32, used: i32);
        wait path_remove_directory(fd: i32, path: i32, len: i32);
        wait path_rename(fd: i32, old: i32, old_len: i32, new_fd: i32, new: i32, new_len: i32);
        wait path_symlink(old: i32, old_len: i32, fd: i32, new: i32, new_len: i32);
        wait path_unlink_file(fd: i32, path: i32, len: i32);
        wait poll_oneoff(subs: i32, events: i32, count: i32, nevents: i32);
        now proc_raise(signal: i32);
        now sched_yield();
        now random_get(buf: i32, len: i32);
        now sock_accept(fd: i32, flags: i32, accepted: i32);
        now sock_recv(fd: i32, iovs: i32, len: i32, flags: i32, nread: i32, out_flags: i32);
        now sock_send(fd: i32, iovs: i32, len: i32, flags: i32, nwritten: i32);
        now sock_shutdown(fd: i32, how: i32);
    }
    linker.func_wrap(
        MODULE,
        "proc_exit",
        |mut caller: Caller<'_, T>, code: i32| -> wasmtime::Result<()> {
            super::real::call(&mut caller, |ctx, memory| {
                use wasmtime_wasi::p1::wasi_snapshot_preview1::proc_exit;
                proc_exit(ctx, memory, code)
            })
        },
    )?;
    Ok(())
}
