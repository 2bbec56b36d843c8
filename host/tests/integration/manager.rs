//! The controller manager with real guests against the embedded API server:
//! a plugin whose kind's discovery hangs must not hold up any other plugin's
//! controller (the manager once held its lock across discovery).
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::client::{Body, ClientBuilder};
use serde_json::json;
use tokio::sync::Notify;
use tower::filter::AsyncFilterLayer;
use wasmlet::internals::Caches;
use wasmlet::internals::ControllerMetrics;
use wasmlet::internals::Leadership;
use wasmlet::internals::Manager;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::PluginSet;
use wasmlet::internals::{Cluster, Resolver};
use wasmlet_apiserver::testing::test_server;
use wasmlet_e2e::eventually;

const STALLED_GROUP: &str = "/apis/stall.example.com";

fn built(name: &str) -> std::path::PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/plugins")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/build-guests first",
        p.display()
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_stuck_in_discovery_does_not_hold_up_another() {
    let (data, server, plain) = test_server().await;
    let config = server.kube_config().await.unwrap();

    // The host's client: discovery of one group hangs until released, as
    // against an aggregated API server that stopped answering.
    let (stalled, mut stalled_seen) = tokio::sync::watch::channel(false);
    let stalled = Arc::new(stalled);
    let release = Arc::new(Notify::new());
    let (seen, gate) = (stalled.clone(), release.clone());
    let layer = AsyncFilterLayer::new(move |req: http::Request<Body>| {
        let (seen, gate) = (seen.clone(), gate.clone());
        async move {
            if req.uri().path().starts_with(STALLED_GROUP) {
                seen.send_replace(true);
                gate.notified().await;
            }
            Ok::<_, tower::BoxError>(req)
        }
    });
    // (The filter needs a cloneable inner service: kube's is boxed, so buffer it.)
    let stack = tower::ServiceBuilder::new()
        .layer(layer)
        .layer(tower::buffer::BufferLayer::new(64));
    let client = ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&stack)
        .build();

    let resolver = Arc::new(Resolver::new(client));
    let caches = Caches::new(resolver.clone());
    let cluster = Arc::new(Cluster::new(resolver, Some(caches.clone())));
    let plugins = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(&data.path().join("cache"))
        .unwrap()
        .with_seeds(
            &[Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/.precompiled")],
        );
    let set = PluginSet::new(engine, plugins.path(), Some(cluster));

    // First the plugin whose kind sits in the stalled group.
    std::fs::copy(built("echo.wasm"), plugins.path().join("stuck.wasm")).unwrap();
    std::fs::write(
        plugins.path().join("stuck.toml"),
        "[plugin]\nkind = \"reconciler\"\ncontract = \"0.1.0\"\n\n[reconciles]\napi-version = \"stall.example.com/v1\"\nkind = \"Thing\"\n",
    )
    .unwrap();
    assert!(set.scan().await.is_empty());
    let manager = Manager::new(
        set.clone(),
        caches,
        Default::default(),
        ControllerMetrics::new(),
        Leadership::new(true),
    );
    tokio::spawn(manager.clone().run());
    tokio::time::timeout(Duration::from_secs(60), stalled_seen.wait_for(|s| *s))
        .await
        .expect("the stuck plugin's discovery request never came")
        .unwrap();

    // Then a healthy plugin: it must start and reconcile while the other
    // one is still waiting on discovery.
    for f in [
        "configmap-summary.wasm",
        "configmap-summary.toml",
        "configsummary.crd.yaml",
    ] {
        std::fs::copy(built(f), plugins.path().join(f)).unwrap();
    }
    assert!(set.scan().await.is_empty());
    eventually(
        Duration::from_secs(60),
        "the healthy plugin's controller",
        || std::future::ready(manager.controller("configmap-summary").map(|_| ())),
    )
    .await
    .unwrap();

    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("examples.wasmlet.dev", "v1", "ConfigSummary"),
        "configsummaries",
    );
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(plain.clone(), "default", &ar);
    let obj = serde_json::from_value(json!({
        "apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
        "metadata": {"name": "s1", "namespace": "default"}, "spec": {}
    }))
    .unwrap();
    api.create(&Default::default(), &obj).await.unwrap();
    eventually(Duration::from_secs(60), "a status on s1", || async {
        let got = api.get("s1").await.ok()?;
        got.data
            .get("status")
            .is_some_and(|s| !s.is_null())
            .then_some(())
    })
    .await
    .unwrap();
    assert!(
        manager.controller("stuck").is_none(),
        "the stuck plugin's discovery was released early"
    );
    release.notify_waiters();
    server.shutdown();
}
