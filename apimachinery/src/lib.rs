//! Kubernetes API machinery as plain functions over `serde_json::Value`.
//!
//! Everything here is pure: no I/O, no async. The embedded API server uses it to
//! serve requests, and the controller engine uses the selectors to filter caches.

#![warn(missing_docs)]

pub mod builtin;
pub mod goquote;
pub mod listtype;
pub mod log_options;
pub mod managedfields;
pub mod names;
pub mod patch;
pub mod rbac;
pub mod rbac_covers;
pub mod schema;
pub mod selector;
pub mod time;
