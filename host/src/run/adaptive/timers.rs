//! The module's timer bytes (see [`wprof_agent::TimerTable`]) and each function's budget of
//! timed activations, shared by the walker, which arms timers, and the stopwatch, which
//! disarms one as soon as its budget is spent.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// One byte per function id in the module's tree memory, and a budget per function.
pub struct Timers {
    table: *const AtomicU8,
    budgets: Box<[AtomicU32]>,
}

// SAFETY: the table is only touched with atomic operations, while the store owning the
// memory is alive (see `Timers::new`).
unsafe impl Send for Timers {}
unsafe impl Sync for Timers {}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timers")
            .field("functions", &self.budgets.len())
            .finish_non_exhaustive()
    }
}

impl Timers {
    /// The timers of a module with `functions` functions, whose function 0 byte is at
    /// `table`.
    ///
    /// # Safety
    ///
    /// `table .. table + functions` must stay valid memory of the module (a memory that
    /// never moves) for as long as these timers are used.
    pub unsafe fn new(table: *mut u8, functions: u32) -> Self {
        Timers {
            table: table.cast_const().cast(),
            budgets: (0..functions).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// A table over memory of the process's own, for tests.
    #[cfg(test)]
    pub fn owned(functions: u32) -> (Self, Box<[AtomicU8]>) {
        let bytes: Box<[AtomicU8]> = (0..functions).map(|_| AtomicU8::new(0)).collect();
        // SAFETY: the caller keeps the box (it is returned) as long as the timers.
        let timers = unsafe { Timers::new(bytes.as_ptr().cast_mut().cast(), functions) };
        (timers, bytes)
    }

    fn byte(&self, function: u32) -> Option<&AtomicU8> {
        // SAFETY: in bounds (checked against the budgets, one per function) and valid for
        // as long as `self` (see `new`).
        ((function as usize) < self.budgets.len())
            .then(|| unsafe { &*self.table.add(function as usize) })
    }

    /// Times the next `calls` activations of `function` (activations that enter from now
    /// on; `calls` at least 1).
    pub fn arm(&self, function: u32, calls: u32) {
        if let Some(byte) = self.byte(function) {
            self.budgets[function as usize].store(calls.max(1), Ordering::Relaxed);
            byte.store(1, Ordering::Relaxed);
        }
    }

    /// Stops timing `function`'s activations (those already timed still end timed).
    pub fn disarm(&self, function: u32) {
        if let Some(byte) = self.byte(function) {
            byte.store(0, Ordering::Relaxed);
            self.budgets[function as usize].store(0, Ordering::Relaxed);
        }
    }

    /// Whether `function`'s activations are timed.
    pub fn armed(&self, function: u32) -> bool {
        self.byte(function)
            .is_some_and(|b| b.load(Ordering::Relaxed) != 0)
    }

    /// A timed activation of `function` ended: the last of its budget disarms it.
    pub fn spend(&self, function: u32) {
        let Some(budget) = self.budgets.get(function as usize) else {
            return;
        };
        let before =
            budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1));
        if before == Ok(1) {
            if let Some(byte) = self.byte(function) {
                byte.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_budget_disarms() {
        let (timers, bytes) = Timers::owned(3);
        timers.arm(1, 2);
        assert!(timers.armed(1) && !timers.armed(0));
        assert_eq!(bytes[1].load(Ordering::Relaxed), 1);
        timers.spend(1);
        assert!(timers.armed(1));
        timers.spend(1);
        assert!(!timers.armed(1));
        // More activations that were already timed end later: nothing underflows.
        timers.spend(1);
        timers.arm(1, 1);
        assert!(timers.armed(1));
        timers.disarm(1);
        assert!(!timers.armed(1));
        // Ids past the table are ignored.
        timers.arm(7, 1);
        timers.spend(7);
        assert!(!timers.armed(7));
    }
}
