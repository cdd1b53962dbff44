//! The thread timer that interrupts a thread being sampled: on Linux (x86-64, AArch64), a
//! POSIX timer on the monotonic clock whose expiries send `SIGPROF` to the thread that made
//! it; elsewhere none (sessions then fall back to reading the cell alone).

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub use linux::ThreadTimer;
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub use none::ThreadTimer;

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod linux {
    use std::time::Duration;

    /// `timer_settime` of timer `id` for one expiry `nanoseconds` from now (`flags` 0; 0
    /// disarms it) or at that time (`TIMER_ABSTIME`); false if the kernel refused.
    /// Async-signal-safe.
    fn settime(id: usize, flags: libc::c_int, nanoseconds: u64) -> bool {
        let value = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (nanoseconds / 1_000_000_000) as libc::time_t,
                tv_nsec: (nanoseconds % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: timer_settime is async-signal-safe; the id came from timer_create, and a
        // stale one (the session ended) fails with EINVAL and changes nothing.
        unsafe {
            libc::timer_settime(id as libc::timer_t, flags, &value, std::ptr::null_mut()) == 0
        }
    }

    /// A POSIX timer on the monotonic clock whose expiries send `SIGPROF` to the thread
    /// that made it. Armed for one tick at a time, by that thread (its handler), so the
    /// kernel keeps it on the core the thread runs on.
    #[derive(Debug, Clone, Copy)]
    pub struct ThreadTimer {
        /// The kernel's timer id (a `timer_t`, kept as a number: it is not a pointer into
        /// this process's memory).
        id: usize,
    }

    impl ThreadTimer {
        /// Makes the calling thread's timer, not armed yet, whose signals carry `value`
        /// (how the handler tells them from other `SIGPROF`s); `None` if the system
        /// refuses.
        pub fn create(period: Duration, value: usize) -> Option<ThreadTimer> {
            if period.is_zero() {
                return None;
            }
            // SAFETY: plain libc calls on a zeroed, then filled, sigevent; `id` is written
            // by timer_create before it is read.
            unsafe {
                let mut event: libc::sigevent = std::mem::zeroed();
                event.sigev_notify = libc::SIGEV_THREAD_ID;
                event.sigev_signo = libc::SIGPROF;
                event.sigev_notify_thread_id = libc::gettid();
                event.sigev_value = libc::sigval {
                    sival_ptr: value as *mut libc::c_void,
                };
                let mut id: libc::timer_t = std::ptr::null_mut();
                if libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut id) != 0 {
                    return None;
                }
                Some(ThreadTimer { id: id as usize })
            }
        }

        /// The kernel's id of it, for [`ThreadTimer::arm_at`].
        pub fn id(self) -> usize {
            self.id
        }

        /// Arms timer `id` for one tick at `monotonic_ns` on the monotonic clock (at once
        /// if that has passed); false if the kernel refused. Async-signal-safe (the signal
        /// handler re-arms with it, so the kernel arms it on the target thread's core).
        pub fn arm_at(id: usize, monotonic_ns: u64) -> bool {
            settime(id, libc::TIMER_ABSTIME, monotonic_ns)
        }

        /// Whether timer `id` is disarmed (its last tick came and nothing armed it since).
        /// Async-signal-safe.
        pub fn idle(id: usize) -> bool {
            // SAFETY: timer_gettime is async-signal-safe and writes the itimerspec given;
            // a stale id fails with EINVAL, and the timer is then taken for armed.
            unsafe {
                let mut value: libc::itimerspec = std::mem::zeroed();
                libc::timer_gettime(id as libc::timer_t, &mut value) == 0
                    && value.it_value.tv_sec == 0
                    && value.it_value.tv_nsec == 0
            }
        }

        /// Arms it for one tick after `period` (the signal handler arms each next one), or
        /// disarms it; false if the kernel refused.
        pub fn set(self, period: Option<Duration>) -> bool {
            let nanoseconds = period.map_or(0, |p| p.as_nanos().clamp(1, u64::MAX.into()) as u64);
            settime(self.id, 0, nanoseconds)
        }

        /// Deletes it: no tick comes after this returns (one already sent may still be
        /// taken, and finds no session).
        pub fn delete(self) {
            // SAFETY: the id came from timer_create; called once, when the session ends.
            unsafe {
                libc::timer_delete(self.id as libc::timer_t);
            }
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod none {
    use std::time::Duration;

    /// No thread timers here: the sampler sends each signal.
    #[derive(Debug, Clone, Copy)]
    pub struct ThreadTimer;

    impl ThreadTimer {
        pub fn create(_: Duration, _: usize) -> Option<ThreadTimer> {
            None
        }
        pub fn idle(_: usize) -> bool {
            false
        }
        pub fn id(self) -> usize {
            0
        }
        pub fn arm_at(_: usize, _: u64) -> bool {
            false
        }
        pub fn set(self, _: Option<Duration>) -> bool {
            false
        }
        pub fn delete(self) {}
    }
}
