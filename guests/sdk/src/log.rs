//! Structured logs into the host's `tracing` output (the host adds the plugin and the
//! object or pod, so log only what is your own).
//!
//! ```no_run
//! use wasmlet_sdk::log::{self, Level};
//! log::info("listed config maps");
//! log::log(Level::Warn, "slow list", &[("items", "5000"), ("namespace", "prod")]);
//! if log::enabled(Level::Debug) {
//!     log::debug(&format!("costly detail {}", 42));
//! }
//! ```

use crate::bindings::log as raw;
use crate::host::with_host;

/// Severity of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Step-by-step detail, off unless the host's log filter asks for it.
    Trace,
    /// Detail useful when debugging a plugin.
    Debug,
    /// Normal operation worth a line.
    Info,
    /// Something unexpected that the plugin recovered from.
    Warn,
    /// A failure the user should look at.
    Error,
}

impl Level {
    fn to_raw(self) -> raw::Level {
        match self {
            Level::Trace => raw::Level::Trace,
            Level::Debug => raw::Level::Debug,
            Level::Info => raw::Level::Info,
            Level::Warn => raw::Level::Warn,
            Level::Error => raw::Level::Error,
        }
    }
}

/// Whether a record at `level` would be kept.
pub fn enabled(level: Level) -> bool {
    with_host(|h| h.log_enabled(level.to_raw()))
}

/// Writes one record with key/value `fields`.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    with_host(|h| h.log(level.to_raw(), message, &fields));
}

/// Writes `message` at [`Level::Trace`], without fields.
pub fn trace(message: &str) {
    log(Level::Trace, message, &[]);
}

/// Writes `message` at [`Level::Debug`], without fields.
pub fn debug(message: &str) {
    log(Level::Debug, message, &[]);
}

/// Writes `message` at [`Level::Info`], without fields.
pub fn info(message: &str) {
    log(Level::Info, message, &[]);
}

/// Writes `message` at [`Level::Warn`], without fields.
pub fn warn(message: &str) {
    log(Level::Warn, message, &[]);
}

/// Writes `message` at [`Level::Error`], without fields.
pub fn error(message: &str) {
    log(Level::Error, message, &[]);
}
