//! The import check: the API server's modules form layers, and an import
//! (a `crate::`/`super::` path in a source file, outside its tests) may only
//! go down. Two modules of one layer may not import each other either, so no
//! import circle can form across them. Run against another tree with
//! `CARGO_MANIFEST_DIR=DIR` on the built test binary.
//!
//! A new top-level module or folder must be placed in [`LAYERS`]; the items
//! of `lib.rs` itself (`ApiState`, the wiring) are the top and exempt.
#![allow(clippy::unwrap_used)] // a test: a failure should stop it loudly

use std::path::PathBuf;

/// The layers, bottom first: each entry lists the top-level modules (files
/// or folders of `src/`) of one layer.
const LAYERS: &[&[&str]] = &[
    // leaves: plain data and helpers
    &[
        "cause",
        "meta",
        "query",
        "events",
        "private_dir",
        "codec",
        "store",
        "metrics",
        "connections",
        "cancel",
    ],
    // CEL rules of custom resources (the registry's types hold them)
    &["cel_rules"],
    // the kinds served
    &["registry"],
    // API errors as `Status`
    &["status"],
    // per-kind helpers the write path calls; the printers and discovery
    &[
        "crd",
        "defaults",
        "services",
        "watch_quota",
        "resourcequota",
        "inflight",
        "printers",
        "discovery",
    ],
    // Admission that mutates new pods: LimitRange (quantities from `resourcequota`, the QoS
    // class from `defaults`) and Priority (a class resolved into `priority`)
    &["limitranger", "priority"],
    &["validation"],
    &["strategy"],
    // create/update/patch/delete: the write path, with `Admit` for the checks above it
    &["resources"],
    // who may do what (and the user-dependent admission checks), the in-plane control loops
    &["auth", "controllers"],
    // the `pods/log` proxy (authenticates to kubelets with the plane's CA)
    &["logs"],
    &["openapi"],
    &["openapi_v2"],
    // the HTTP surface
    &["rest", "health"],
    // a throwaway server for tests (the `testing` feature)
    &["testing"],
];

#[test]
fn imports_run_down_the_layers() {
    // The crate this was built from, unless the environment names another
    // tree (`cargo test` sets it; a runner may run the binary bare).
    let root = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    );
    let problems = wasmlet_layers::check(&root, LAYERS, &["lib"]);
    assert!(
        problems.is_empty(),
        "imports must only go to a lower layer (bottom first: {LAYERS:?}):\n{}",
        problems.join("\n")
    );
}
