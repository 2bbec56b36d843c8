//! Named clusters (`--cluster NAME=KUBECONFIG`) against two embedded API
//! servers: each cluster has caches of its own, and a kind's watch there is
//! started by its first read (nothing else starts a named cluster's caches).
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use wasmlet::internals::{ClientError, NamedClusters};
use wasmlet_apiserver::testing::test_server;
use wasmlet_e2e::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_read_starts_the_kinds_watch_in_that_cluster_only() {
    let ((_da, _a, client_a), (_db, _b, client_b)) = (test_server().await, test_server().await);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "default"},
    }))
    .unwrap();
    let created = kube::Api::<ConfigMap>::namespaced(client_a.clone(), "default")
        .create(&Default::default(), &cm)
        .await
        .unwrap();
    let uid = created.metadata.uid.clone();

    let named = NamedClusters::new([("a".to_string(), client_a), ("b".to_string(), client_b)]);
    let (a, b) = (named.get("a").unwrap(), named.get("b").unwrap());
    assert!(named.get("c").is_none());
    let kind = a.resolve("v1", "ConfigMap").await.unwrap();
    // Nothing is cached before a read ...
    assert_eq!(a.cached_uid("v1", "ConfigMap", Some("default"), "x"), None);
    // ... the first read is answered (by the API server while the cache syncs) ...
    let got: serde_json::Value =
        serde_json::from_str(&a.get(&kind, Some("default"), "x").await.unwrap()).unwrap();
    assert_eq!(got["metadata"]["uid"].as_str(), uid.as_deref());
    // ... and starts the watch: the cache fills.
    eventually(
        Duration::from_secs(30),
        "cluster a's ConfigMap cache filling",
        || {
            std::future::ready(
                (a.cached_uid("v1", "ConfigMap", Some("default"), "x") == uid).then_some(()),
            )
        },
    )
    .await
    .unwrap();
    // Cluster b is another cluster: its own discovery, its own (empty) caches.
    let kind_b = b.resolve("v1", "ConfigMap").await.unwrap();
    assert_eq!(
        b.get(&kind_b, Some("default"), "x").await,
        Err(ClientError::NotFound)
    );
    assert_eq!(b.cached_uid("v1", "ConfigMap", Some("default"), "x"), None);
}

/// `clusters` joined the 0.1.0 worlds without breaking anyone only if a
/// guest that names no cluster does not import it (it would then need a host
/// that provides it): the SDK's calls name their cluster as a constant, so
/// only the binding they use survives. Every Rust plugin `scripts/build-guests`
/// built imports `clusters` exactly when its manifest grants a named cluster.
/// (componentize-py and -js guests import their whole world.)
#[test]
fn only_guests_that_name_a_cluster_import_clusters() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("target/plugins");
    // The seed scripts/test precompiled: 26 compiles in a debug host are a
    // minute and a half (each is compiled here when the seed lacks it).
    let cache = tempfile::tempdir().unwrap();
    let plugins = wasmlet::internals::PluginEngine::new(cache.path())
        .unwrap()
        .with_seeds(&[dir.join(".precompiled")]);
    let engine = &plugins.engine;
    let rust = rust_plugins(&root.join("guests"));
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/build-guests)", dir.display()))
    {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !rust.contains(&name) {
            continue;
        }
        let manifest = std::fs::read_to_string(path.with_extension("toml"))
            .unwrap_or_else(|e| panic!("{name}.toml: {e}"));
        let names_a_cluster = manifest.lines().any(|l| l.starts_with("[clusters."));
        let (component, _) = plugins.load(&path, &std::fs::read(&path).unwrap()).unwrap();
        let imports: Vec<String> = component
            .component_type()
            .imports(engine)
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(
            imports
                .iter()
                .any(|n| n.starts_with("wasmlet:plugin/clusters@")),
            names_a_cluster,
            "{name}: {imports:?}"
        );
        seen.push((name, names_a_cluster));
    }
    // The guests this is about, built: one that names a cluster, and others.
    for (name, names_a_cluster) in [
        ("configmap-summary", false),
        ("rowsummary", false),
        ("scheduler", false),
        ("project-controller", true),
    ] {
        assert!(
            seen.contains(&(name.to_string(), names_a_cluster)),
            "{name}.wasm missing from {}: run scripts/build-guests",
            dir.display()
        );
    }
}

/// The plugin names of the Rust guests under `dir`: each crate directory's
/// manifest (a `*.toml` beside its `Cargo.toml`), as `scripts/build-guests`
/// finds them.
fn rust_plugins(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    let is_crate = paths.iter().any(|p| p.ends_with("Cargo.toml"));
    for p in paths {
        if p.is_dir() && !p.ends_with("target") && !p.ends_with("node_modules") {
            out.extend(rust_plugins(&p));
        } else if is_crate
            && p.extension().is_some_and(|e| e == "toml")
            && !p.ends_with("Cargo.toml")
        {
            out.push(p.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}
