//! Structured logs with `tracing`: text by default, JSON with `TROVE_LOG_FORMAT=json`.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // A subscriber already installed (tests start several apps) is fine.
    drop(result);
}
