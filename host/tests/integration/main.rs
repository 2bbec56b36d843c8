//! The host crate's integration tests as one test binary: each module is
//! what used to be its own `host/tests/NAME.rs`.

mod layers;
mod manager;
mod named_clusters;
mod own_writes;
mod plugin_runtime;
mod pull_credentials;
mod pull_limits;
mod volume_escape;
mod workload_limits;
mod workloads;
