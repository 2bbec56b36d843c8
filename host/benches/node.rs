//! Node agent figures (run: `cargo bench -p wasmlet --bench node`; needs
//! `scripts/build-guests` and `scripts/build-workloads` first; `BENCH_PODS`
//! scales it, default 200):
//!
//! - pod bound → `Running` patched, p50 and p99, with the module cached;
//! - pods started per second;
//! - RSS per running idle workload (the `sleeper` module), with its linear
//!   memory for comparison.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use wasmlet::internals::Cluster;
use wasmlet::internals::NodeAgent;
use wasmlet::internals::NodeConfig;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::PluginSet;
use wasmlet::internals::workloads::{WorkloadConfig, WorkloadEngine, WorkloadManager};
use wasmlet_apiserver::{ApiServer, Config};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": "bench",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": image}],
        }
    }))
    .expect("valid pod")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sleeper = root.join("target/workloads/sleeper.wasm").canonicalize()?;
    let runner = root.join("target/plugins/wasi-runner.wasm");
    anyhow::ensure!(
        runner.exists(),
        "run scripts/build-guests and scripts/build-workloads first"
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
    let plugins_dir = data.path().join("plugins");
    std::fs::create_dir_all(&plugins_dir)?;
    std::fs::copy(&runner, plugins_dir.join("wasi-runner.wasm"))?;
    std::fs::copy(
        root.join("target/plugins/wasi-runner.toml"),
        plugins_dir.join("wasi-runner.toml"),
    )?;
    let engine = PluginEngine::new(&data.path().join("cache"))?;
    let plugins = PluginSet::new(
        engine.clone(),
        &plugins_dir,
        Some(Arc::new(Cluster::uncached(client.clone()))),
    );
    let workloads = Arc::new(WorkloadManager::new(
        WorkloadConfig::new(data.path().join("node")),
        WorkloadEngine::new(&data.path().join("cache"))?,
    )?);
    plugins.set_workloads(workloads.clone());
    anyhow::ensure!(plugins.scan().await.is_empty(), "wasi-runner did not load");
    let mut config = NodeConfig::new("bench");
    config.kubelet_port = 0;
    let _agent = NodeAgent::start(
        client.clone(),
        config,
        plugins.clone(),
        "wasi-runner",
        workloads.clone(),
        None,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let image = format!("file://{}", sleeper.display());

    // Warm the module cache with one pod, so the figures are for a cached module.
    pods.create(&PostParams::default(), &pod("warm", &image))
        .await?;
    let wp = WatchParams::default().fields("metadata.name=warm");
    let mut s = pods.watch(&wp, "0").await?.boxed();
    while let Some(ev) = s.try_next().await? {
        if let WatchEvent::Modified(p) | WatchEvent::Added(p) = ev
            && p.status.and_then(|s| s.phase).as_deref() == Some("Running")
        {
            break;
        }
    }
    drop(s);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_mib();

    // Watch for Running, then create every pod as fast as the API takes them.
    let rv = pods
        .list(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods.watch(&WatchParams::default(), &rv).await?.boxed();
    let created: Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    {
        let pods = pods.clone();
        let created = created.clone();
        let image = image.clone();
        tokio::spawn(async move {
            for i in 0..n {
                let name = format!("p{i}");
                created.lock().unwrap().insert(name.clone(), Instant::now());
                if let Err(e) = pods
                    .create(&PostParams::default(), &pod(&name, &image))
                    .await
                {
                    eprintln!("create {name}: {e}");
                }
            }
        });
    }
    let mut latencies = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while latencies.len() < n && Instant::now() < deadline {
        let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(30), stream.try_next())
            .await?
            .map(Some)
            .map_err(|_| ())
            .or(Ok::<_, ()>(None))
        else {
            break;
        };
        let Some(ev) = ev else { break };
        if let WatchEvent::Modified(p) = ev {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.status.and_then(|s| s.phase).as_deref() == Some("Running")
                && seen.insert(name.clone())
                && let Some(t) = created.lock().unwrap().get(&name)
            {
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let took = start.elapsed();
    latencies.sort_by(f64::total_cmp);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = rss_mib();
    println!(
        "wasmlet node agent, 2-core machine, module cached (sleeper.wasm), pods created back to back"
    );
    println!(
        "pod created+bound -> Running patched: {} pods, p50 {:.1} ms, p99 {:.1} ms (goal p50 <= 50 ms)",
        latencies.len(),
        pct(&latencies, 0.5),
        pct(&latencies, 0.99)
    );
    println!(
        "pods started per second: {:.0} (goal >= 100/s)",
        latencies.len() as f64 / took.as_secs_f64()
    );
    let per = (rss_after - rss_before) / latencies.len().max(1) as f64;
    println!(
        "RSS: {rss_before:.0} MiB -> {rss_after:.0} MiB with {} idle workloads running: {per:.2} MiB per workload, linear memory included (goal <= 2 MiB beyond linear memory)",
        latencies.len()
    );
    Ok(())
}
