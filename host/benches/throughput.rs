//! End-to-end reconcile throughput, wasm vs native, side by side in one run
//! (run: `cargo bench -p wasmlet --bench throughput`; needs
//! `scripts/build-guests`; `BENCH_OBJECTS` scales it, default 2000).
//!
//! The same pipeline both times — embedded API server, shared watch cache,
//! workqueue, host-owned status patch — with the reconciler either the `echo`
//! wasm guest (a fresh instance per call) or the same logic as a native Rust
//! function behind the controller's `Reconciler` interface. A fourth arm runs
//! the wasm guest with its calls recorded (`[record]`), for recording's cost,
//! and a fifth with a shadow candidate (`NAME.shadow.wasm`, the same guest)
//! beside it, for the cost of shadow mode to live work.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use wasmlet::apiserver::{ApiServer, Config};
use wasmlet::cluster::cache::Caches;
use wasmlet::cluster::{Cluster, Resolver};
use wasmlet::controller::controller::{Controller, ControllerConfig};
use wasmlet::controller::leader::Leadership;
use wasmlet::controller::metrics::ControllerMetrics;
use wasmlet::controller::source::{Call, Fixed, Reconciler, Source};
use wasmlet::plugin::engine::PluginEngine;
use wasmlet::plugin::outcome::{Finalized, Reconciled};
use wasmlet::plugin::sandbox::CallReport;
use wasmlet::plugin::set::RecordConfig;
use wasmlet::plugin::{Manifest, PluginSet};

/// The echo guest's logic, natively.
struct NativeEcho {
    manifest: Manifest,
}

impl Reconciler for NativeEcho {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn declared_conditions(&self) -> &[String] {
        &[]
    }

    fn reconcile<'a>(&'a self, _key: &'a str, obj: &'a str) -> Call<'a, Reconciled> {
        Box::pin(async move {
            let v: Value = serde_json::from_str(obj).unwrap_or(Value::Null);
            let status = json!({"echo": v.get("spec").cloned().unwrap_or(Value::Null)});
            Ok((
                Ok(Reconciled {
                    status: Some(status),
                    conditions: vec![],
                    requeue_after: None,
                }),
                CallReport::default(),
            ))
        })
    }

    fn finalize<'a>(&'a self, _key: &'a str, _obj: &'a str) -> Call<'a, Finalized> {
        Box::pin(async move { Ok((Ok(Finalized::Done), CallReport::default())) })
    }
}

fn summaries(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.wasmlet.dev", "v1", "ConfigSummary"),
        "configsummaries",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates `n` objects in `ns`, then runs a controller over them and returns
/// reconciles (with their status patch) per second.
async fn run(
    client: &kube::Client,
    caches: &Arc<Caches>,
    ns: &str,
    n: usize,
    name: &str,
    source: Arc<dyn Source>,
) -> anyhow::Result<f64> {
    let api = summaries(client, ns);
    let sem = Arc::new(Semaphore::new(64));
    let mut tasks = Vec::new();
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
                "metadata": {"name": format!("o{i}"), "labels": {"wasmlet.dev/test": "echo"}},
                "spec": {"keyPrefix": format!("prefix-{i}")},
            }))?;
            api.create(&PostParams::default(), &obj).await?;
            drop(permit);
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Count objects whose status the controller wrote.
    let done = Arc::new(tokio::sync::Notify::new());
    let counter = {
        let api = api.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut seen = HashSet::new();
            let mut s = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(o)) = s.next().await {
                // The example CRD's schema prunes `status.echo`; the host's
                // observedGeneration marks the reconcile and its status patch.
                if o.data
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
                    == o.metadata.generation
                {
                    seen.insert(o.metadata.name.clone().unwrap_or_default());
                    if seen.len() == n {
                        done.notify_one();
                        return;
                    }
                }
            }
        })
    };
    let start = Instant::now();
    let config = ControllerConfig {
        priorities: true,
        ..Default::default()
    };
    let leading = Leadership::new(true);
    let (_c, tasks) = Controller::start(
        name,
        source,
        caches.clone(),
        config,
        ControllerMetrics::new(),
        leading,
    )
    .await?;
    tokio::time::timeout(Duration::from_secs(600), done.notified()).await?;
    let took = start.elapsed();
    drop(tasks);
    counter.abort();
    Ok(n as f64 / took.as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    anyhow::ensure!(
        root.join("echo.wasm").exists(),
        "run scripts/build-guests first"
    );
    let data = tempfile::tempdir()?;
    let server = ApiServer::start(Config {
        data_dir: data.path().into(),
        listen: ([127, 0, 0, 1], 0).into(),
        history: 100_000,
        ..Default::default()
    })
    .await?;
    let client = kube::Client::try_from(server.kube_config().await?)?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let crd = serde_yaml::from_str(&std::fs::read_to_string(
        root.join("configsummary.crd.yaml"),
    )?)?;
    crds.create(&PostParams::default(), &crd).await?;
    for ns in ["wasm", "reuse", "native", "record", "shadow"] {
        let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        nsapi
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    let resolver = Arc::new(Resolver::new(client.clone()));
    let caches = Caches::new(resolver.clone());
    let api = Arc::new(Cluster::new(resolver, Some(caches.clone())));
    let dir = data.path().join("plugins");
    std::fs::create_dir_all(&dir)?;
    // The echo manifest, limited to one namespace per run.
    let manifest_text = std::fs::read_to_string(root.join("echo.toml"))?;
    for (ns, file) in [
        ("wasm", "echo-wasm"),
        ("reuse", "echo-reuse"),
        ("native", "echo-native"),
        ("record", "echo-record"),
        ("shadow", "echo-shadow"),
    ] {
        let mut text = manifest_text.replace(
            "[reconciles]",
            &format!("[reconciles]\nnamespace = \"{ns}\""),
        );
        if ns == "reuse" {
            text = text.replace("[limits]", "[limits]\nreuse-instances = true");
        }
        if ns == "record" {
            text.push_str("\n[record]\nmax-file-mib = 64\n");
        }
        std::fs::write(dir.join(format!("{file}.toml")), text)?;
    }
    std::fs::copy(root.join("echo.wasm"), dir.join("echo-wasm.wasm"))?;
    std::fs::copy(root.join("echo.wasm"), dir.join("echo-reuse.wasm"))?;
    std::fs::copy(root.join("echo.wasm"), dir.join("echo-record.wasm"))?;
    std::fs::copy(root.join("echo.wasm"), dir.join("echo-shadow.wasm"))?;
    std::fs::copy(root.join("echo.wasm"), dir.join("echo-shadow.shadow.wasm"))?;
    let plugins = PluginSet::new(
        PluginEngine::new(&data.path().join("cache"))?,
        &dir,
        Some(api.clone()),
    );
    plugins.set_recording(RecordConfig {
        dir: data.path().join("records"),
        plugins: vec![],
    });
    let failures = plugins.scan().await;
    anyhow::ensure!(failures.is_empty(), "echo did not load: {failures:?}");
    let concurrency = plugins
        .get("echo-wasm")
        .map(|p| p.manifest.limits.concurrency)
        .unwrap_or(0);
    let native = NativeEcho {
        manifest: Manifest::load(&dir.join("echo-native.toml"))?,
    };

    let wasm = run(&client, &caches, "wasm", n, "echo-wasm", plugins.clone()).await?;
    let reuse = run(&client, &caches, "reuse", n, "echo-reuse", plugins.clone()).await?;
    let recorded = run(
        &client,
        &caches,
        "record",
        n,
        "echo-record",
        plugins.clone(),
    )
    .await?;
    let shadowed = run(
        &client,
        &caches,
        "shadow",
        n,
        "echo-shadow",
        plugins.clone(),
    )
    .await?;
    let shadow = plugins.shadow_slot("echo-shadow").report();
    let native = run(
        &client,
        &caches,
        "native",
        n,
        "echo-native",
        Arc::new(Fixed(Arc::new(native))),
    )
    .await?;
    println!(
        "end-to-end reconcile throughput (watch -> queue -> reconcile -> status patch), {n} objects, concurrency {concurrency}, 2-core machine"
    );
    println!("  wasm echo guest (fresh instance per call): {wasm:.0} reconciles/s");
    println!("  wasm echo guest, reused instances:         {reuse:.0} reconciles/s");
    println!("  native echo, same host interface:          {native:.0} reconciles/s");
    println!("  wasm echo guest, every call recorded:      {recorded:.0} reconciles/s");
    println!(
        "  wasm echo guest, a shadow candidate beside it: {shadowed:.0} reconciles/s (candidate: {} same, {} different, {} error, {} skipped)",
        shadow.same, shadow.different, shadow.error, shadow.skipped
    );
    println!(
        "  recorded / not recorded = {:.2} (goal >= 0.85)",
        recorded / wasm
    );
    println!(
        "  shadowed / not shadowed = {:.2} (goal >= 0.9)",
        shadowed / wasm
    );
    println!(
        "  wasm / native = {:.2} fresh instances, {:.2} reused (goal >= 0.8)",
        wasm / native,
        reuse / native
    );
    Ok(())
}
