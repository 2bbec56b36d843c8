//! The plugin runtime: one wasmtime engine, plugins loaded from a directory,
//! sandboxed calls, hot swap with rollback.
//!
//! - [`manifest`]: `NAME.toml`, what a plugin may do;
//! - [`clusterrole`]: the RBAC a manifest needs on a real cluster;
//! - [`engine`]: the engine, the precompiled cache, the epoch ticker;
//! - [`artifact`]: the cache's permissions and sealed (HMAC) artifacts;
//! - [`loaded`]: one plugin version and its calls;
//! - [`outcome`]: what a call returned, as host types and as the host took it;
//! - [`tape`]: one call's imports and their answers, recorded or replayed;
//! - [`observe`]: the observer a call is handed (recording and shadowing
//!   watch live calls through it; imports run `loaded` → `observe` ←
//!   `record`, `shadow`);
//! - [`set`]: the directory, kept in sync, with hot swap;
//! - [`imports`]: the contract's host side, checked against the manifest;
//! - [`events`]: where `record-event` goes, truncated and rate-limited;
//! - [`http`]: the shared outbound client behind the `http` import;
//! - [`http_dns`]: its resolver, which refuses non-public addresses;
//! - [`record`]: calls recorded as JSON lines, and replayed from them;
//! - [`shadow`]: a candidate version judged on live calls, its writes held back.
//!
//! The cluster behind the `client` import is [`crate::cluster`].

pub mod artifact;
pub mod bindings;
pub mod clusterrole;
pub mod distribution;
pub mod engine;
pub mod events;
pub mod http;
pub mod http_dns;
pub mod imports;
#[cfg(test)]
mod layers;
pub mod loaded;
pub mod manifest;
pub mod metrics;
pub mod observe;
pub mod outcome;
pub mod provider;
pub mod record;
pub mod remote;
pub mod sandbox;
pub mod set;
pub mod shadow;
pub mod tape;

pub use loaded::{CallError, Loaded};
pub use manifest::Manifest;
pub use set::{PluginEvent, PluginSet};
