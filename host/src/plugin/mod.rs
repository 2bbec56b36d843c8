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

pub(crate) mod artifact;
pub(crate) mod bindings;
pub(crate) mod clusterrole;
pub(crate) mod distribution;
pub(crate) mod engine;
pub(crate) mod events;
pub(crate) mod http;
pub(crate) mod http_dns;
pub(crate) mod imports;
pub(crate) mod in_flight;
#[cfg(test)]
mod layers;
pub(crate) mod loaded;
pub(crate) mod manifest;
pub(crate) mod metrics;
pub(crate) mod observe;
pub(crate) mod outcome;
pub(crate) mod provider;
pub(crate) mod record;
pub(crate) mod remote;
pub(crate) mod sandbox;
pub(crate) mod set;
pub(crate) mod shadow;
pub(crate) mod tape;

pub(crate) use loaded::{CallError, Loaded};
pub(crate) use manifest::Manifest;
pub(crate) use set::{PluginEvent, PluginSet};
