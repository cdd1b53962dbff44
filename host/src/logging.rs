//! wprof's own logs: off unless `WPROF_LOG` (a tracing filter such as `debug` or
//! `wprof=trace`) asks for them, so the program's stderr stays clean. Logs go to stderr.

/// Installs the subscriber. Call once, before anything logs.
pub fn init() {
    let Ok(filter) = std::env::var("WPROF_LOG") else {
        return;
    };
    if filter.trim().is_empty() {
        return;
    }
    match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(filter) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_target(false)
                .try_init();
        }
        Err(e) => crate::say!("wprof: warning: ignoring WPROF_LOG={filter:?}: {e}"),
    }
}

/// Writes a line of wprof's own to stderr, as `eprintln!` does, except that a stderr that
/// is gone (a pipe whose reader has exited) loses the line instead of panicking: wprof's
/// exit code must stay the program's. Use it through [`crate::say!`].
pub fn say_line(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_fmt(args);
    if newline {
        let _ = stderr.write_all(b"\n");
    }
}

/// `eprintln!` that never panics (see [`logging::say_line`](crate::logging::say_line)).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::logging::say_line(format_args!($($arg)*), true)
    };
}

/// `eprint!` that never panics (see [`logging::say_line`](crate::logging::say_line)).
#[macro_export]
macro_rules! say_text {
    ($($arg:tt)*) => {
        $crate::logging::say_line(format_args!($($arg)*), false)
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_to_stderr_formats_as_eprintln() {
        // Nothing to observe but that it formats and returns.
        crate::say!("wprof: test line {}", 1);
        crate::say_text!("");
    }
}
