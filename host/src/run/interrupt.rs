//! Asking the thread that runs the program where it is: sample mode's sampler thread sends it
//! `SIGPROF`, and a handler running on that thread records the interrupted program counter
//! and the module's current-node cell, the two facts that say which function runs and in
//! which calling context.
//!
//! The handler does nothing but atomic loads and stores into static answer slots, so it is
//! async-signal-safe. It is installed once per process, with `SA_RESTART` (an interrupted
//! system call resumes) and `SA_ONSTACK` (it runs on the signal stack wasmtime gives every
//! thread that enters wasm, so a program deep in recursion cannot overflow its stack), and
//! stays installed: a late signal finds no session and returns.
//!
//! One run at a time per process can be sampled this way ([`Session::begin`] says `None`
//! to the others, which then fall back to reading the cell alone), as on a platform other
//! than Linux on x86-64 or AArch64, or when something else already handles `SIGPROF`.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The cell the handler reads (null outside a session).
static CELL: AtomicPtr<u32> = AtomicPtr::new(std::ptr::null_mut());
/// The request the handler answers: the sampler sets it before sending the signal.
static REQUEST: AtomicU64 = AtomicU64::new(0);
/// Answers by request number modulo their count.
static ANSWERS: [Answer; ANSWER_SLOTS] = [const { Answer::new() }; ANSWER_SLOTS];
/// Held by the one session that owns the handler's statics.
static OWNER: Mutex<()> = Mutex::new(());

const ANSWER_SLOTS: usize = 64;

/// Where the thread was when it took a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Where {
    /// The interrupted program counter.
    pub pc: usize,
    /// The value of the current-node cell at that moment.
    pub cell: u32,
}

struct Answer {
    /// The request answered (0: none yet). Written last, read first and last (a seqlock).
    request: AtomicU64,
    pc: AtomicUsize,
    cell: AtomicU32,
}

impl Answer {
    const fn new() -> Self {
        Answer {
            request: AtomicU64::new(0),
            pc: AtomicUsize::new(0),
            cell: AtomicU32::new(0),
        }
    }
}

/// The right to interrupt the thread that began it, for as long as it lives. Not `Send`:
/// it is dropped on the thread it targets, so no signal can be handled while it ends.
#[derive(Debug)]
pub struct Session {
    target: Target,
    _owner: MutexGuard<'static, ()>,
}

/// What the sampler thread needs to interrupt the target and read its answers.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    thread: libc::pthread_t,
}

impl Session {
    /// Installs the handler if needed and makes the calling thread the target, with `cell`
    /// the address of the current-node cell. `None` where interrupting is unsupported, or
    /// while another session of this process is alive.
    ///
    /// # Safety
    ///
    /// `cell` must stay valid for 4-byte atomic loads until the session is dropped.
    pub unsafe fn begin(cell: *const u32) -> Option<Session> {
        let owner = OWNER.try_lock().ok()?;
        if !handler::install() {
            return None;
        }
        REQUEST.store(0, Ordering::Relaxed);
        for answer in &ANSWERS {
            answer.request.store(0, Ordering::Relaxed);
        }
        CELL.store(cell.cast_mut(), Ordering::Release);
        Some(Session {
            // SAFETY: pthread_self has no preconditions.
            target: Target {
                thread: unsafe { libc::pthread_self() },
            },
            _owner: owner,
        })
    }

    /// The handle the sampler thread uses.
    pub fn target(&self) -> Target {
        self.target
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        CELL.store(std::ptr::null_mut(), Ordering::Release);
    }
}

impl Target {
    /// Asks the target where it is, as request number `request` (counting from 1). False
    /// if the signal could not be sent.
    pub fn ask(&self, request: u64) -> bool {
        REQUEST.store(request, Ordering::Release);
        // SAFETY: the target is alive: its session, which it drops itself, outlives the
        // sampler thread (the run joins it first).
        unsafe { libc::pthread_kill(self.thread, libc::SIGPROF) == 0 }
    }

    /// The answer to request `request`, if it has come.
    pub fn answer(&self, request: u64) -> Option<Where> {
        let slot = &ANSWERS[request as usize % ANSWER_SLOTS];
        if slot.request.load(Ordering::Acquire) != request {
            return None;
        }
        let found = Where {
            pc: slot.pc.load(Ordering::Relaxed),
            cell: slot.cell.load(Ordering::Relaxed),
        };
        std::sync::atomic::fence(Ordering::Acquire);
        (slot.request.load(Ordering::Relaxed) == request).then_some(found)
    }
}

/// Records an answer to the current request: what the handler does.
fn record(pc: usize) {
    let cell = CELL.load(Ordering::Acquire);
    if cell.is_null() {
        return;
    }
    let request = REQUEST.load(Ordering::Acquire);
    let slot = &ANSWERS[request as usize % ANSWER_SLOTS];
    // SAFETY: non-null only during a session, whose creator promised the cell is valid;
    // the session is dropped on this very thread, never while this handler runs.
    let value = unsafe { AtomicU32::from_ptr(cell).load(Ordering::Relaxed) };
    slot.request.store(0, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    slot.pc.store(pc, Ordering::Relaxed);
    slot.cell.store(value, Ordering::Relaxed);
    slot.request.store(request, Ordering::Release);
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod handler {
    use std::sync::OnceLock;

    /// Installs the `SIGPROF` handler once; false if it cannot be, or if another handler
    /// was there first.
    pub fn install() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        *INSTALLED.get_or_init(|| {
            // SAFETY: plain libc calls on zeroed, then filled, sigaction structures.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction != libc::SIG_DFL
                {
                    return false;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) == 0
            }
        })
    }

    extern "C" fn on_signal(_: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
        if context.is_null() {
            return;
        }
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
        let pc = unsafe { program_counter(&*context.cast::<libc::ucontext_t>()) };
        super::record(pc);
    }

    #[cfg(target_arch = "x86_64")]
    fn program_counter(context: &libc::ucontext_t) -> usize {
        context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize
    }

    #[cfg(target_arch = "aarch64")]
    fn program_counter(context: &libc::ucontext_t) -> usize {
        context.uc_mcontext.pc as usize
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod handler {
    pub fn install() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_answers_with_its_program_counter_and_cell() {
        let cell = Box::new(AtomicU32::new(1234));
        let stop = std::sync::atomic::AtomicBool::new(false);
        let supported = cfg!(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        ));
        // Another test of this process may hold the handler for a moment.
        // SAFETY: the box outlives the session, which ends before the end of this test.
        let begin = || unsafe { Session::begin(cell.as_ptr()) };
        let mut session = begin();
        for _ in 0..500 {
            if session.is_some() || !supported {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            session = begin();
        }
        let Some(session) = session else {
            assert!(!supported, "no session on a platform that supports them");
            return;
        };
        let target = session.target();
        let answer = std::thread::scope(|s| {
            let asker = s.spawn(|| {
                let mut found = None;
                for request in 1..=1000u64 {
                    assert!(target.ask(request));
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    if let Some(w) = target.answer(request) {
                        found = Some(w);
                        break;
                    }
                }
                stop.store(true, Ordering::Release);
                found
            });
            // Busy on this (the target) thread until asked enough.
            while !stop.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            asker.join().unwrap()
        });
        drop(session);
        let answer = answer.expect("the handler answered");
        assert_eq!(answer.cell, 1234);
        assert_ne!(answer.pc, 0);
    }
}
