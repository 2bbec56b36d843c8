//! The import check over the host crate: the top-level modules of
//! `host/src/` form layers, and an import (a `crate::`/`super::` path in a
//! source file, outside its test module and comments) may only go down. Two
//! modules of one layer may not import each other either, so no import
//! circle can form across the folders. ARCHITECTURE.md draws the same
//! picture; `plugin::layers` checks the files inside `plugin/`, and
//! `apiserver/tests/layers.rs` the API server (both read by `wasmlet-layers`).
//! Run against another tree with `CARGO_MANIFEST_DIR=DIR` on the built test
//! binary.
//!
//! A new top-level module or folder must be placed in [`LAYERS`]; `lib.rs`
//! and `main.rs` are the top and exempt.
#![allow(clippy::unwrap_used)] // a test: a failure should stop it loudly

use std::path::PathBuf;

/// The layers, bottom first: each entry lists the top-level modules (files
/// or folders of `src/`) of one layer.
const LAYERS: &[&[&str]] = &[
    // leaves: error text, the data directory's lock, PostgreSQL tables,
    // logs and spans, `process_*` metrics
    &[
        "causes",
        "data_lock",
        "datastore",
        "telemetry",
        "process_metrics",
    ],
    // registry credentials and clients; cluster access (resolver, caches,
    // `ClusterAccess`), which knows nothing of plugins
    &["oci", "cluster"],
    // the plugin runtime: manifest, engine, sandboxed calls, imports
    &["plugin"],
    // what runs plugins: the controller engine, the node agent, the
    // built-in plugin set, the host's health checks
    &["controller", "node", "builtins", "health"],
    // the status page over controllers, pods and plugins
    &["status_page"],
    // the process endpoints (metrics, health, status page)
    &["endpoints"],
    // the command line, which builds and wires everything
    &["cli"],
];

#[test]
fn imports_run_down_the_layers() {
    // The crate this was built from, unless the environment names another
    // tree (`cargo test` sets it; a runner may run the binary bare).
    let root = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    );
    let problems = wasmlet_layers::check(&root, LAYERS, &["lib", "main"]);
    assert!(
        problems.is_empty(),
        "imports must only go to a lower layer (bottom first: {LAYERS:?}):\n{}",
        problems.join("\n")
    );
}
