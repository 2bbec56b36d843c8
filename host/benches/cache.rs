//! Host cache figures, printed side by side (run:
//! `cargo bench -p wasmlet --bench cache`).
//!
//! 1. **Decoding a watch event**: a Widget's MODIFIED event after its status
//!    write (two `managedFields` entries, a `Ready` condition), µs per event
//!    as the cache reads it (`CachedObject`: metadata without
//!    `managedFields`, the rest kept as text) and as a `DynamicObject`
//!    (everything built, as a kube-runtime controller over dynamic objects
//!    reads it).
//! 2. **Reads of one namespace.** The embedded API server runs in this
//!    process; `BENCH_NAMESPACES` (default 100) namespaces hold
//!    `BENCH_PER_NAMESPACE` (default 200) ConfigMaps each, half of them
//!    labelled `app=web`. A guest's `list` in its namespace and a `selector:`
//!    map (a changed Pod requeues the ReplicaSets beside it) read one
//!    namespace. Timed per read, on the same synced cache, in one run:
//! - **indexed**: `KindCache::list(Some(ns), app=web)`, through the store's
//!   namespace index;
//! - **scan**: every cached object filtered by namespace and selector, as
//!   those reads were done before the index.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams, WatchEvent};
use wasmlet::internals::{CachedObject, Resolver};
use wasmlet::internals::{Caches, selects};
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};
use wasmlet_apiserver::{ApiServer, Config};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A Widget's watch event after the wasmlet host wrote its status.
const EVENT: &str = r#"{"type":"MODIFIED","object":{"apiVersion":"bench.wasmlet.dev/v1","kind":"Widget","metadata":{"name":"w-12345","namespace":"bench","uid":"6b0d3c39-4a7e-4a53-9d5e-0c0a1c1e2f33","resourceVersion":"123456","generation":1,"creationTimestamp":"2026-11-26T10:00:00Z","managedFields":[{"manager":"versus","operation":"Update","apiVersion":"bench.wasmlet.dev/v1","time":"2026-11-26T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:size":{}}}},{"manager":"wasmlet","operation":"Update","apiVersion":"bench.wasmlet.dev/v1","time":"2026-11-26T10:00:01Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{},"f:conditions":{},"f:observedGeneration":{},"f:summary":{}}},"subresource":"status"}]},"spec":{"size":12345},"status":{"summary":"size=12345","observedGeneration":1,"conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"","lastTransitionTime":"2026-11-26T10:00:01Z","observedGeneration":1}]}}}"#;

/// µs per decode of [`EVENT`] as a `WatchEvent<K>`, best of 3 rounds.
fn decode_us<K: serde::de::DeserializeOwned>(rounds: usize) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..rounds {
                let e: WatchEvent<K> = serde_json::from_str(std::hint::black_box(EVENT)).unwrap();
                std::hint::black_box(e);
            }
            t.elapsed().as_secs_f64() / rounds as f64 * 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

// Two workers, as the other in-process benches run the plane and host.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env_usize("BENCH_EVENTS", 100_000);
    let cached = decode_us::<CachedObject>(events);
    let dynamic = decode_us::<DynamicObject>(events);
    println!(
        "(1) decoding a Widget's watch event ({} bytes, 2 managedFields entries):",
        EVENT.len()
    );
    println!("  CachedObject:  {cached:>6.2} µs");
    println!("  DynamicObject: {dynamic:>6.2} µs");
    println!("  DynamicObject / CachedObject: {:.2}×", dynamic / cached);
    println!();

    let namespaces = env_usize("BENCH_NAMESPACES", 100);
    let per = env_usize("BENCH_PER_NAMESPACE", 200);
    let reads = env_usize("BENCH_READS", 2000);
    let work = tempfile::tempdir().unwrap();
    let server = ApiServer::start(Config {
        data_dir: work.path().join("plane"),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = kube::Client::try_from(server.kube_config().await.unwrap()).unwrap();

    let setup = Instant::now();
    let nsapi: Api<Namespace> = Api::all(client.clone());
    for n in 0..namespaces {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("ns-{n}")),
                ..Default::default()
            },
            ..Default::default()
        };
        nsapi.create(&PostParams::default(), &ns).await.unwrap();
    }
    let mut created =
        futures::stream::iter((0..namespaces).flat_map(|n| (0..per).map(move |i| (n, i))))
            .map(|(n, i)| {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("ns-{n}"));
                async move {
                    let app = if i % 2 == 0 { "web" } else { "db" };
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(format!("cm-{i}")),
                            labels: Some([("app".to_string(), app.to_string())].into()),
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    api.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
            .buffer_unordered(64);
    while created.next().await.is_some() {}
    let total = namespaces * per;
    println!(
        "(2) cache reads of one namespace: {namespaces} namespaces × {per} ConfigMaps = {total} cached objects (set up in {:.1} s)",
        setup.elapsed().as_secs_f64()
    );

    let caches = Caches::new(std::sync::Arc::new(Resolver::new(client.clone())));
    let cache = caches.cache("v1", "ConfigMap").await.unwrap();
    cache.wait_synced().await;
    let web = LabelSelector::parse("app=web").unwrap();
    let all = FieldSelector::parse("").unwrap();

    // µs per read of each namespace in turn, through `read`; every read must
    // find that namespace's `app=web` objects and nothing else.
    let per_read = |read: &dyn Fn(&str) -> usize| {
        let t = Instant::now();
        let found: usize = (0..reads)
            .map(|r| read(&format!("ns-{}", r % namespaces)))
            .sum();
        assert_eq!(found, reads * per.div_ceil(2), "a read found other objects");
        t.elapsed().as_secs_f64() / reads as f64
    };
    let indexed = per_read(&|ns| cache.list(Some(ns), &web, &all).len());
    let scan = per_read(&|ns| {
        cache
            .store
            .state()
            .into_iter()
            .filter(|o| o.metadata.namespace.as_deref() == Some(ns))
            .filter(|o| selects(&web, o))
            .count()
    });

    println!("  indexed: {:>9.1} µs per read", indexed * 1e6);
    println!("  scan:    {:>9.1} µs per read", scan * 1e6);
    println!("  scan / indexed: {:.0}×", scan / indexed);
    server.shutdown();
}
