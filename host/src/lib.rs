//! wasmlet: Kubernetes controllers and node agents as sandboxed WebAssembly
//! components, with an embedded Kubernetes-compatible control plane.
//!
//! Read it top down; each layer uses only the ones below it
//! (`tests/layers.rs` checks it):
//! - `cli`: the `wasmlet` command line, which builds and wires the rest;
//! - the embedded API server (storage, REST, watch, GC) is its own crate,
//!   `wasmlet_apiserver`, below all of these;
//! - `controller`: the controller engine (caches, workqueue, status,
//!   finalizers, leader election) and `node`: the node agent (Node, leases,
//!   pod state machines, WASI workloads, kubelet API);
//! - `plugin`: the plugin runtime (manifest, engine, sandboxed calls);
//! - `cluster`: cluster access (resolver, caches, reads and writes);
//! - `datastore`: PostgreSQL tables as a source of objects (schema, rows,
//!   the LISTEN/NOTIFY watcher), used by `controller`;
//! - `endpoints` (metrics and health, checks in `health`), `telemetry` (logs and OTLP spans),
//!   and `process_metrics` (`process_*` from /proc/self); 0700 directories are
//!   `wasmlet_apiserver::private_dir`'s.
//!
//! Lock poisoning: every `std::sync` lock here guards a table whose updates
//! are single inserts, removals or assignments, so a panic while one is held
//! cannot leave it half-updated. A poisoned lock is therefore recovered with
//! `unwrap_or_else(|p| p.into_inner())`, never unwrapped: one panicking task
//! must not take every later caller (and the host) down with it.

#![warn(unreachable_pub)]

mod builtins;
mod causes;
mod cli;
mod cluster;
mod controller;
mod data_lock;
mod datastore;
mod endpoints;
mod health;
mod node;
mod oci;
mod plugin;
mod process_metrics;
mod status_page;
mod telemetry;

// The public surface: the binary's entry. Everything else is `pub(crate)`
// (`unreachable_pub` holds it so), and what the host's integration tests,
// benches and fuzz targets reach is `internals`.
pub use cli::main;

/// Internals the integration tests, the benches and the fuzz targets reach
/// (not a stable API): the plugin runtime, the caches and cluster client,
/// the controller engine, the node agent and its workload manager.
#[doc(hidden)]
pub mod internals {
    // Each from the module that defines it, not through a module's own
    // re-exports (those are `pub(crate)`).
    pub use crate::cluster::cache::{CacheEvent, Caches, selects};
    pub use crate::cluster::client::Cluster;
    pub use crate::cluster::error::ClientError;
    pub use crate::cluster::named::NamedClusters;
    pub use crate::cluster::object::CachedObject;
    pub use crate::cluster::resolver::Resolver;
    pub use crate::controller::controller::{Controller, ControllerConfig};
    pub use crate::controller::leader::Leadership;
    pub use crate::controller::manager::Manager;
    pub use crate::controller::metrics::ControllerMetrics;
    pub use crate::controller::source::{Call, Fixed, Reconciler, Source};
    pub use crate::controller::status::{GuestResult, desired_status};
    pub use crate::controller::workqueue::fair::Tenant;
    pub use crate::node::NodeAgent;
    pub use crate::node::agent::NodeConfig;
    pub use crate::plugin::bindings::reconciler::ReconcilerPlugin;
    pub use crate::plugin::engine::{CompileError, PluginEngine};
    pub use crate::plugin::loaded::{Loaded, check_contract};
    pub use crate::plugin::manifest::{Manifest, PluginKind};
    pub use crate::plugin::metrics::PluginMetrics;
    pub use crate::plugin::outcome::call::CallError;
    pub use crate::plugin::outcome::{Finalized, GuestError, Reconciled};
    pub use crate::plugin::sandbox::{CallReport, State};
    pub use crate::plugin::set::crds::read_yaml_documents;
    pub use crate::plugin::set::{PluginEvent, PluginSet, RecordConfig};

    /// The node's workload manager and the records it takes and gives.
    pub mod workloads {
        pub use crate::node::workloads::WorkloadManager;
        pub use crate::node::workloads::engine::WorkloadEngine;
        pub use crate::node::workloads::logs::{MAX_LINE, parse_cri_line};
        pub use crate::node::workloads::run::KILLED_EXIT_CODE;
        pub use crate::node::workloads::types::{
            EmptyDir, FetchError, FetchProgress, FetchRequest, HostPath, LogTarget, ModuleRef,
            Mount, PullPolicy, RunState, SpawnSpec, VolumeFile, VolumeId, VolumeRequest,
            VolumeSource, WorkloadConfig, WorkloadError, WorkloadHandle, WorkloadStatus,
        };
        pub use crate::oci::PullSecret;
    }
}
