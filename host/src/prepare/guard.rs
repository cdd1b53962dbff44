//! Panics inside wprof's own preparation (the agent, the cache) never reach the user's
//! program: they are caught, without the default hook's report on stderr, and become one
//! warning and an uninstrumented run.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// How many [`quietly`] calls this thread is inside: only the outermost swaps the hook.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f`; a panic in it is `Err` with its message, and prints nothing. Calls nest.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let outermost = DEPTH.with(|d| {
        d.set(d.get() + 1);
        d.get() == 1
    });
    let previous = outermost.then(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        previous
    });
    let result = catch_unwind(AssertUnwindSafe(f));
    if let Some(previous) = previous {
        std::panic::set_hook(previous);
    }
    DEPTH.with(|d| d.set(d.get() - 1));
    result.map_err(|payload| message(payload.as_ref()))
}

/// A caught panic's message.
pub fn message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string())
}

/// The test hook: `WPROF_TEST_PANIC_IN=NAME` makes preparing function NAME panic, as an
/// agent bug would (not a setting: the tests' way to reach this path).
pub fn test_panic(function: &str) {
    if std::env::var("WPROF_TEST_PANIC_IN").is_ok_and(|n| n == function) {
        panic!("test panic in {function}");
    }
}

/// The test hook: `WPROF_TEST_SLOW_PREPARE_MS=N` makes preparing a module take N ms
/// longer, as a large module's would (not a setting: the tests' way to reach a run that is
/// still preparing).
pub fn test_slow_prepare() {
    if let Some(ms) = std::env::var("WPROF_TEST_SLOW_PREPARE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_its_message_and_the_hook_comes_back() {
        assert_eq!(quietly(|| 7), Ok(7));
        assert_eq!(
            quietly(|| -> u32 { panic!("boom") }),
            Err("boom".to_string())
        );
        let n = 3;
        assert_eq!(
            quietly(|| -> u32 { panic!("{n} booms") }),
            Err("3 booms".to_string())
        );
        // Nested: the inner one catches, the outer one goes on.
        let outer = quietly(|| quietly(|| -> u32 { panic!("inner") }));
        assert_eq!(outer, Ok(Err("inner".to_string())));
    }
}
