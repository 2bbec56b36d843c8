//! wasmlet: Kubernetes controllers and node agents as sandboxed WebAssembly
//! components, with an embedded Kubernetes-compatible control plane.
//!
//! Read it top down; each layer uses only the ones below it:
//! - [`cli`]: the `wasmlet` command line, which builds and wires the rest;
//! - the embedded API server (storage, REST, watch, GC) is its own crate,
//!   `wasmlet_apiserver`, below all of these;
//! - [`controller`]: the controller engine (caches, workqueue, status,
//!   finalizers, leader election) and [`node`]: the node agent (Node, leases,
//!   pod state machines, WASI workloads, kubelet API);
//! - [`plugin`]: the plugin runtime (manifest, engine, sandboxed calls);
//! - [`cluster`]: cluster access (resolver, caches, reads and writes);
//! - [`datastore`]: PostgreSQL tables as a source of objects (schema, rows,
//!   the LISTEN/NOTIFY watcher), used by [`controller`];
//! - [`endpoints`] (metrics and health, checks in [`health`]), [`telemetry`] (logs and OTLP spans),
//!   and [`process_metrics`] (`process_*` from /proc/self); 0700 directories are
//!   `wasmlet_apiserver::private_dir`'s.
//!
//! Lock poisoning: every `std::sync` lock here guards a table whose updates
//! are single inserts, removals or assignments, so a panic while one is held
//! cannot leave it half-updated. A poisoned lock is therefore recovered with
//! `unwrap_or_else(|p| p.into_inner())`, never unwrapped: one panicking task
//! must not take every later caller (and the host) down with it.

pub mod builtins;
pub mod causes;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod data_lock;
pub mod datastore;
pub mod endpoints;
pub mod health;
pub mod node;
pub mod oci;
pub mod plugin;
pub mod process_metrics;
pub mod status_page;
pub mod telemetry;
