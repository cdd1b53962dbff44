//! The kernel's accounting of a finished benchmark process (`wait4`): how it ended, the CPU
//! time of all its threads, its peak memory and how often its threads gave up the processor
//! (voluntary context switches: a thread waiting for another, or for the disk).

use std::process::Child;

use crate::exit::Failure;

/// What the kernel counted for one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Its exit code; `None` if a signal ended it.
    pub code: Option<i32>,
    /// User plus system CPU time of all its threads, nanoseconds.
    pub cpu_ns: u64,
    /// The largest resident set it had, bytes.
    pub peak_rss: u64,
    /// Voluntary context switches of all its threads.
    pub voluntary_switches: u64,
}

/// Waits for `child` (its pipes drained or closed by the caller) and reads its usage.
pub fn wait(child: Child) -> Result<Usage, Failure> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for (the `Child` is dropped unwaited
    // below, which neither waits nor kills); both pointers are to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    drop(child);
    if waited != pid {
        return Err(Failure::input(format!(
            "cannot wait for a benchmark process: {}",
            std::io::Error::last_os_error()
        )));
    }
    let ns = |t: libc::timeval| {
        (t.tv_sec.max(0) as u64) * 1_000_000_000 + (t.tv_usec.max(0) as u64) * 1_000
    };
    Ok(Usage {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        cpu_ns: ns(usage.ru_utime) + ns(usage.ru_stime),
        // Linux reports kilobytes.
        peak_rss: (usage.ru_maxrss.max(0) as u64) * 1024,
        voluntary_switches: usage.ru_nvcsw.max(0) as u64,
    })
}
