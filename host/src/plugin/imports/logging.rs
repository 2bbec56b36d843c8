//! The `log` import: guest log lines into the host's tracing, tagged with
//! the plugin and the object.

use crate::plugin::bindings::reconciler::wasmlet::plugin::log;
use crate::plugin::sandbox::State;

impl State {
    pub(super) fn enabled_live(&self, level: log::Level) -> bool {
        match level {
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
        }
    }

    pub(super) fn log_live(
        &self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) {
        // Guest field names are dynamic; tracing fields are static, so they
        // travel as one `fields` value.
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let (plugin, key) = (&self.plugin.name, &self.key);
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "plugin", %plugin, %key, %fields, "{message}")
            }
            log::Level::Debug => {
                tracing::debug!(target: "plugin", %plugin, %key, %fields, "{message}")
            }
            log::Level::Info => {
                tracing::info!(target: "plugin", %plugin, %key, %fields, "{message}")
            }
            log::Level::Warn => {
                tracing::warn!(target: "plugin", %plugin, %key, %fields, "{message}")
            }
            log::Level::Error => {
                tracing::error!(target: "plugin", %plugin, %key, %fields, "{message}")
            }
        }
    }
}
