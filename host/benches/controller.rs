//! Controller engine figures, printed side by side (run:
//! `cargo bench -p wasmlet --bench controller`; needs `scripts/build-guests` first,
//! for `target/plugins/echo.{wasm,toml}`). Everything runs in this process on one
//! tokio runtime with 2 worker threads: the embedded API server
//! (`wasmlet_apiserver::ApiServer`) and the host (`Manager` + `Caches` + the `echo`
//! test guest, which makes no calls and returns status `{"echo": spec}`).
//!
//! 1. Seed 002's startup: `BENCH_OBJECTS` (default 200,000) ConfigSummaries already
//!    reconciled (status = exactly what echo + the host would write, so
//!    `observedGeneration = generation` and a reconcile costs no write) exist when
//!    the host starts. While that backlog drains, new objects are created at a
//!    steady rate; the latency from the create request to the first reconcile (its
//!    status, seen by a watch) is measured with priorities on, then with one FIFO
//!    (`ControllerConfig { priorities: false, .. }`), each on a freshly started host.
//! 2. Reconciles/s of the no-I/O guest at `limits.concurrency` 1, 4 and 16
//!    (`BENCH_TPUT_OBJECTS`, default 10,000, up-to-date objects, FIFO so all run).
//! 3. Cache memory per object: RSS growth while a fresh cache lists all the objects,
//!    divided by their number (the server's LIST path warmed up first, so its own
//!    buffers are already resident).
//!
//! The bench installs its own ConfigSummary CRD (same group and kind as the
//! example's) with `x-kubernetes-preserve-unknown-fields` spec and status: the
//! example's schema would prune echo's `status.echo`.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use wasmlet::internals::Caches;
use wasmlet::internals::ControllerConfig;
use wasmlet::internals::ControllerMetrics;
use wasmlet::internals::Leadership;
use wasmlet::internals::Manager;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::PluginSet;
use wasmlet::internals::{Cluster, Resolver};
use wasmlet::internals::{GuestResult, desired_status};
use wasmlet_apiserver::{ApiServer, Config};

const AV: &str = "examples.wasmlet.dev/v1";
const KIND: &str = "ConfigSummary";
const NS: &str = "default";

fn built_plugins() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    assert!(
        dir.join("echo.wasm").exists() && dir.join("echo.toml").exists(),
        "{} has no echo plugin: run scripts/build-guests first",
        dir.display()
    );
    dir
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// VmRSS of this process, KiB.
fn rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn summaries(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.wasmlet.dev", "v1", KIND),
        "configsummaries",
    );
    Api::namespaced_with(client.clone(), NS, &ar)
}

fn crd() -> CustomResourceDefinition {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "configsummaries.examples.wasmlet.dev"},
        "spec": {
            "group": "examples.wasmlet.dev", "scope": "Namespaced",
            "names": {"plural": "configsummaries", "singular": "configsummary", "kind": KIND, "listKind": "ConfigSummaryList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open, "status": open}}},
            }],
        },
    }))
    .unwrap()
}

fn spec(i: usize) -> Value {
    json!({"index": i, "tier": "gold", "owner": "team-a", "region": "eu-west-1", "replicas": 3, "note": "an ordinary small object"})
}

/// Creates `names` (labels `wasmlet.dev/test=echo`, `bench=<group>`), 64 requests in
/// flight; with `reconciled`, each also gets the status echo + the host would write.
async fn populate(client: &kube::Client, group: &str, count: usize, reconciled: bool) -> Duration {
    let api = summaries(client);
    let started = Instant::now();
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut s = futures::stream::iter(0..count)
        .map(|i| {
            let (api, now) = (api.clone(), now.clone());
            let name = format!("{group}-{i}");
            async move {
                let spec = spec(i);
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": AV, "kind": KIND,
                    "metadata": {"name": name, "labels": {"wasmlet.dev/test": "echo", "bench": group}},
                    "spec": spec,
                }))
                .unwrap();
                let created = api.create(&PostParams::default(), &obj).await.expect("create");
                if reconciled {
                    let generation = created.metadata.generation.unwrap_or(1);
                    let result = GuestResult { status: Some(json!({"echo": spec})), ..Default::default() };
                    let status = desired_status(&json!({}), &result, &[], generation, &now);
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
                        .await
                        .expect("status");
                }
            }
        })
        .buffer_unordered(64);
    let mut done = 0usize;
    while s.next().await.is_some() {
        done += 1;
        if done.is_multiple_of(20_000) {
            eprintln!(
                "  … {done}/{count} {group} objects ({:.0}/s)",
                done as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    started.elapsed()
}

/// A host: plugins from `dir`, its own caches (or shared ones), a Manager.
struct Host {
    manager: Arc<Manager>,
    task: tokio::task::JoinHandle<()>,
    caches: Arc<Caches>,
    metrics: ControllerMetrics,
    started: Instant,
}

async fn start_host(
    client: &kube::Client,
    dir: &Path,
    components: &Path,
    config: ControllerConfig,
    caches: Option<Arc<Caches>>,
) -> Host {
    let caches = caches.unwrap_or_else(|| Caches::new(Arc::new(Resolver::new(client.clone()))));
    let cluster = Arc::new(Cluster::new(
        caches.resolver().clone(),
        Some(caches.clone()),
    ));
    let plugins = PluginSet::new(PluginEngine::new(components).unwrap(), dir, Some(cluster));
    let errors = plugins.scan().await;
    assert!(errors.is_empty(), "plugins failed to load: {errors:?}");
    let metrics = ControllerMetrics::new();
    let manager = Manager::new(
        plugins,
        caches.clone(),
        config,
        metrics.clone(),
        Leadership::new(true),
    );
    let started = Instant::now();
    let task = tokio::spawn(manager.clone().run());
    while manager.controller("echo").is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Host {
        manager,
        task,
        caches,
        metrics,
        started,
    }
}

impl Host {
    async fn synced(&self) -> Duration {
        self.caches
            .existing(AV, KIND)
            .expect("the echo controller's cache")
            .wait_synced()
            .await;
        self.started.elapsed()
    }

    fn reconciles(&self) -> u64 {
        self.metrics
            .encode()
            .lines()
            .filter(|l| {
                l.starts_with("controller_runtime_reconcile_total{")
                    && l.contains("controller=\"echo\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Some(c) = self.manager.controller("echo") {
            c.queue.shutdown();
        }
        drop(self.manager);
        // Let aborted tasks unwind before the next host starts.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A plugin directory holding echo with its manifest edited.
fn plugin_dir(root: &Path, name: &str, concurrency: usize, selector: &str) -> PathBuf {
    let src = built_plugins();
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let toml = std::fs::read_to_string(src.join("echo.toml"))
        .unwrap()
        .replace("concurrency = 16", &format!("concurrency = {concurrency}"))
        .replace(
            "label-selector = \"wasmlet.dev/test=echo\"",
            &format!("label-selector = \"{selector}\""),
        );
    assert!(
        toml.contains(&format!("concurrency = {concurrency}")) && toml.contains(selector),
        "echo.toml changed shape"
    );
    std::fs::write(dir.join("echo.toml"), toml).unwrap();
    std::fs::copy(src.join("echo.wasm"), dir.join("echo.wasm")).unwrap();
    dir
}

struct Latency {
    samples: Vec<f64>,
    /// When the startup backlog was fully drained (reconciles ≥ backlog), from host start.
    drained: Option<Duration>,
    synced: Duration,
}

/// Starts a host over the backlog, creates `rate`/s new objects for `window`, and
/// measures create → first status (ms) for each.
#[allow(clippy::too_many_arguments)]
async fn latency_run(
    client: &kube::Client,
    dir: &Path,
    components: &Path,
    priorities: bool,
    group: &str,
    backlog: usize,
    rate: usize,
    window: Duration,
) -> Latency {
    let api = summaries(client);
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let (api, seen) = (api.clone(), seen.clone());
        let rv = api
            .list(
                &ListParams::default()
                    .labels(&format!("bench={group}"))
                    .limit(1),
            )
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let group = group.to_string();
        tokio::spawn(async move {
            let mut s = api
                .watch(
                    &WatchParams::default().labels(&format!("bench={group}")),
                    &rv,
                )
                .await
                .unwrap()
                .boxed();
            while let Some(ev) = s.next().await {
                if let Ok(WatchEvent::Modified(o) | WatchEvent::Added(o)) = ev
                    && o.data.pointer("/status/observedGeneration").is_some()
                {
                    seen.lock()
                        .unwrap()
                        .entry(o.metadata.name.clone().unwrap())
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    let config = ControllerConfig {
        priorities,
        ..Default::default()
    };
    let host = start_host(client, dir, components, config, None).await;
    let synced = host.synced().await;

    let count = (rate as f64 * window.as_secs_f64()) as usize;
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let creator = {
        let (api, created, group) = (api.clone(), created.clone(), group.to_string());
        tokio::spawn(async move {
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for i in 0..count {
                let at = t0 + Duration::from_secs_f64(i as f64 / rate as f64);
                tokio::time::sleep_until(at.into()).await;
                let (api, created, group) = (api.clone(), created.clone(), group.clone());
                let name = format!("{group}-{i}");
                tasks.push(tokio::spawn(async move {
                    let obj: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": AV, "kind": KIND,
                        "metadata": {"name": name, "labels": {"wasmlet.dev/test": "echo", "bench": group}},
                        "spec": spec(i),
                    }))
                    .unwrap();
                    created.lock().unwrap().insert(name, Instant::now());
                    api.create(&PostParams::default(), &obj).await.expect("create");
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        })
    };
    let mut drained = None;
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        if drained.is_none() && host.reconciles() >= backlog as u64 {
            drained = Some(host.started.elapsed());
        }
        if creator.is_finished() && seen.lock().unwrap().len() >= count {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new objects not reconciled within an hour"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    creator.await.unwrap();
    watch.abort();
    host.stop().await;
    let created = created.lock().unwrap();
    let seen = seen.lock().unwrap();
    let mut samples: Vec<f64> = created
        .iter()
        .map(|(n, t)| seen[n].saturating_duration_since(*t).as_secs_f64() * 1e3)
        .collect();
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Latency {
        samples,
        drained,
        synced,
    }
}

fn line(label: &str, l: &Latency) -> String {
    let s = &l.samples;
    format!(
        "{label:<22} p50 {:>9.1} ms   p99 {:>9.1} ms   max {:>9.1} ms   (n={}; cache synced after {:.1} s; backlog drained {})",
        pct(s, 0.5),
        pct(s, 0.99),
        s.last().copied().unwrap_or(f64::NAN),
        s.len(),
        l.synced.as_secs_f64(),
        l.drained
            .map(|d| format!("after {:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "not within the run".into()),
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench());
}

async fn bench() {
    let objects = env_usize("BENCH_OBJECTS", 200_000);
    let tput_objects = env_usize("BENCH_TPUT_OBJECTS", 10_000);
    let rate = env_usize("BENCH_RATE", 20);
    let window = Duration::from_secs(env_usize("BENCH_WINDOW_SECS", 15) as u64);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let work = tempfile::tempdir().unwrap();
    let components = work.path().join("components");

    println!(
        "wasmlet controller engine benchmark ({cores} CPUs; API server and host in one process, 2 tokio workers)"
    );
    println!(
        "startup backlog: {objects} up-to-date objects; new objects at {rate}/s for {window:?}; throughput set: {tput_objects}"
    );

    let server = ApiServer::start(Config {
        data_dir: work.path().join("plane"),
        listen: "127.0.0.1:0".parse().unwrap(),
        history: 10_000,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = kube::Client::try_from(server.kube_config().await.unwrap()).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd())
        .await
        .unwrap();
    let api = summaries(&client);
    for _ in 0..500 {
        if api.list(&ListParams::default().limit(1)).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let took = populate(&client, "old", objects, true).await;
    println!(
        "setup: {objects} reconciled objects (create + /status) in {:.1} s ({:.0} objects/s, 64 in flight)",
        took.as_secs_f64(),
        objects as f64 / took.as_secs_f64()
    );
    let took = populate(&client, "tput", tput_objects, true).await;
    println!(
        "setup: {tput_objects} throughput objects in {:.1} s",
        took.as_secs_f64()
    );
    let backlog = objects + tput_objects;
    let sample = api.get("old-0").await.unwrap();
    let mut bare = sample.clone();
    bare.metadata.managed_fields = None;
    println!(
        "object size: {} bytes of JSON as served ({} without managedFields)",
        serde_json::to_string(&sample).unwrap().len(),
        serde_json::to_string(&bare).unwrap().len()
    );

    // Warm the server's LIST path so its transient buffers are already in the RSS.
    let mut warm = 0;
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api.list(&lp).await.unwrap();
        warm += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(warm, backlog);

    // Writes to the old objects while hosts run (should be zero: they are up to date).
    let writes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let write_watch = {
        let writes = writes.clone();
        let api = api.clone();
        let rv = api
            .list(&ListParams::default().limit(1))
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        tokio::spawn(async move {
            let mut s = api
                .watch(&WatchParams::default(), &rv)
                .await
                .unwrap()
                .boxed();
            while let Some(ev) = s.next().await {
                if let Ok(WatchEvent::Modified(o)) = ev
                    && o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("old-") || n.starts_with("tput-"))
                {
                    writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
    };

    // --- (3) first: one cache listing every object, on its own --------------------------
    // Kept for (2), so its list is not part of the throughput figures.
    let rss_before = rss_kib();
    let shared = Caches::new(Arc::new(Resolver::new(client.clone())));
    let listed = Instant::now();
    shared.cache(AV, KIND).await.unwrap().wait_synced().await;
    let list_took = listed.elapsed();
    let cache_kib = rss_kib() - rss_before;

    // --- (1) latency while the startup backlog drains --------------------------------
    let echo_dir = plugin_dir(work.path(), "echo-16", 16, "wasmlet.dev/test=echo");
    let prio = latency_run(
        &client,
        &echo_dir,
        &components,
        true,
        "new-prio",
        backlog,
        rate,
        window,
    )
    .await;
    let fifo = latency_run(
        &client,
        &echo_dir,
        &components,
        false,
        "new-fifo",
        backlog,
        rate,
        window,
    )
    .await;
    println!();
    println!(
        "(1) create → first reconcile while {backlog} up-to-date objects drain (echo, concurrency 16):"
    );
    println!("{}", line("priorities (seed 002)", &prio));
    println!("{}", line("one FIFO", &fifo));
    let ratio = pct(&fifo.samples, 0.99) / pct(&prio.samples, 0.99);
    println!(
        "    p99 with priorities ≤ 1 s: {}; FIFO p99 / priorities p99 = {ratio:.0}× (goal ≥ 100×: {})",
        if pct(&prio.samples, 0.99) <= 1000.0 {
            "yes"
        } else {
            "NO"
        },
        if ratio >= 100.0 { "yes" } else { "NO" }
    );

    // --- (2) reconciles/s of the no-I/O guest ----------------------------------------
    println!();
    println!(
        "(2) reconciles/s, echo (no I/O), {tput_objects} up-to-date objects, one FIFO, cache already synced:"
    );
    for c in [1, 4, 16] {
        let dir = plugin_dir(
            work.path(),
            &format!("tput-{c}"),
            c,
            "wasmlet.dev/test=echo,bench=tput",
        );
        let config = ControllerConfig {
            priorities: false,
            ..Default::default()
        };
        let host = start_host(&client, &dir, &components, config, Some(shared.clone())).await;
        let t0 = Instant::now();
        while host.reconciles() < tput_objects as u64 {
            assert!(
                t0.elapsed() < Duration::from_secs(1800),
                "throughput run stalled at {}",
                host.reconciles()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = t0.elapsed();
        println!(
            "    concurrency {c:>2}: {:>7.0} reconciles/s ({tput_objects} in {:.2} s)",
            tput_objects as f64 / took.as_secs_f64(),
            took.as_secs_f64()
        );
        host.stop().await;
    }
    drop(shared);

    // --- (3) cache memory -------------------------------------------------------------
    println!();
    println!(
        "(3) cache memory: RSS +{:.1} MiB while a fresh cache listed {backlog} objects (in {:.1} s) = {:.2} KiB per object",
        cache_kib / 1024.0,
        list_took.as_secs_f64(),
        cache_kib / backlog as f64
    );
    write_watch.abort();
    println!(
        "    status writes to the {backlog} up-to-date objects during all runs: {} (an up-to-date object costs no write)",
        writes.load(std::sync::atomic::Ordering::Relaxed)
    );
    server.shutdown();
}
