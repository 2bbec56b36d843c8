//! A guest panic's message reaches the user. A panic in wasm traps the
//! instance, and all the host sees of a trap is `unreachable` with a
//! backtrace of unnamed frames; so, before the trap, a panic hook logs the
//! message and where it happened with the field [`PANIC_FIELD`], and the
//! host reports that text as the call's failure (in `Ready`, the Event and
//! its own log) instead of the trap.
//!
//! Installed by the exports the SDK's macros generate, on wasm only: natively
//! (`cargo test` with the fake host) the standard hook keeps printing.

/// The log field that marks a record as the panic's message (the host's
/// `PANIC_FIELD`).
pub const PANIC_FIELD: &str = "wasmlet.panic";

/// Installs the hook once per instance.
#[doc(hidden)]
pub fn install() {
    #[cfg(target_arch = "wasm32")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| std::panic::set_hook(Box::new(|info| hand_over(&describe(info)))));
    }
}

/// `FILE:LINE:COLUMN: MESSAGE`, as the standard hook says it.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn describe(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>");
    match info.location() {
        Some(l) => format!("{}:{}:{}: {message}", l.file(), l.line(), l.column()),
        None => message.to_string(),
    }
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn hand_over(text: &str) {
    crate::log::log(crate::log::Level::Error, text, &[(PANIC_FIELD, "1")]);
}
