//! Logs through `tracing`, to standard error (journald stores it under
//! systemd), human-readable or one JSON object per line.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber. `RUST_LOG`, when set, overrides the
/// configured level. Calling it twice keeps the first subscriber.
pub fn init(cfg: &LogConfig) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::builder().parse_lossy(v),
        // The config module validated the directive already.
        _ => EnvFilter::builder().parse_lossy(&cfg.level),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not for the journal.
        .with_ansi(std::io::stderr().is_terminal())
        // A closed stderr (the log pipe gone) loses the lines and nothing
        // else: by default the subscriber reports a failed write with
        // `eprintln!`, which panics when stderr is closed.
        .log_internal_errors(false)
        .with_thread_names(true);
    let _ = match cfg.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
}
