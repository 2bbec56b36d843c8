//! wasmlet: Kubernetes controllers and node agents as sandboxed WebAssembly
//! components, with an embedded Kubernetes-compatible control plane.
//!
//! - [`apiserver`]: the embedded API server (storage, REST, watch, GC).
//! - [`cli`]: the `wasmlet` command line.

pub mod apiserver;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod endpoints;
pub mod node;
pub mod plugin;
