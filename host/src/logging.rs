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
        Err(e) => eprintln!("wprof: warning: ignoring WPROF_LOG={filter:?}: {e}"),
    }
}
