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
//! beside it, for the cost of shadow mode to live work. `BENCH_ROUNDS`
//! (default 3) rounds run every arm once each, in a rotating order, and the
//! medians are compared: a shared machine's noise then falls on all arms.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use wasmlet::internals::Caches;
use wasmlet::internals::CallReport;
use wasmlet::internals::ControllerMetrics;
use wasmlet::internals::Leadership;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::RecordConfig;
use wasmlet::internals::{Call, Fixed, Reconciler, Source};
use wasmlet::internals::{Cluster, Resolver};
use wasmlet::internals::{Controller, ControllerConfig};
use wasmlet::internals::{Finalized, Reconciled};
use wasmlet::internals::{Manifest, PluginSet};
use wasmlet_apiserver::{ApiServer, Config};

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
/// This process's CPU time (all threads).
fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes `usage`, which outlives the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Waits (at most 30 s) until this process is quiet: under 5 % of a core
/// over 200 ms.
async fn settle() {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let before = process_cpu();
        tokio::time::sleep(Duration::from_millis(200)).await;
        if process_cpu().saturating_sub(before) < Duration::from_millis(10) {
            return;
        }
    }
}

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

/// The ways the same echo logic is run, each an arm of the benchmark.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arm {
    Fresh,
    Reused,
    Native,
    Recorded,
    Shadowed,
}

const ARMS: [Arm; 5] = [
    Arm::Fresh,
    Arm::Reused,
    Arm::Native,
    Arm::Recorded,
    Arm::Shadowed,
];

impl Arm {
    /// The arm's namespace (and plugin name suffix) in round `round`.
    fn namespace(self, round: usize) -> String {
        let arm = match self {
            Arm::Fresh => "wasm",
            Arm::Reused => "reuse",
            Arm::Native => "native",
            Arm::Recorded => "record",
            Arm::Shadowed => "shadow",
        };
        format!("{arm}-{round}")
    }

    fn label(self) -> &'static str {
        match self {
            Arm::Fresh => "wasm echo guest (fresh instance per call)",
            Arm::Reused => "wasm echo guest, reused instances",
            Arm::Native => "native echo, same host interface",
            Arm::Recorded => "wasm echo guest, every call recorded",
            Arm::Shadowed => "wasm echo guest, a shadow candidate beside it",
        }
    }
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
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let resolver = Arc::new(Resolver::new(client.clone()));
    let caches = Caches::new(resolver.clone());
    let api = Arc::new(Cluster::new(resolver, Some(caches.clone())));
    let dir = data.path().join("plugins");
    std::fs::create_dir_all(&dir)?;
    // One copy of the echo plugin per arm and round, each limited to a
    // namespace of its own, so every run starts on fresh objects.
    let manifest_text = std::fs::read_to_string(root.join("echo.toml"))?;
    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for round in 0..rounds {
        for arm in ARMS {
            let ns = arm.namespace(round);
            nsapi
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
                )
                .await?;
            let mut text = manifest_text.replace(
                "[reconciles]",
                &format!("[reconciles]\nnamespace = \"{ns}\""),
            );
            match arm {
                Arm::Reused => text = text.replace("[limits]", "[limits]\nreuse-instances = true"),
                Arm::Recorded => text.push_str("\n[record]\nmax-file-mib = 64\n"),
                _ => {}
            }
            let file = format!("echo-{ns}");
            std::fs::write(dir.join(format!("{file}.toml")), text)?;
            if arm != Arm::Native {
                std::fs::copy(root.join("echo.wasm"), dir.join(format!("{file}.wasm")))?;
            }
            if arm == Arm::Shadowed {
                std::fs::copy(
                    root.join("echo.wasm"),
                    dir.join(format!("{file}.shadow.wasm")),
                )?;
            }
        }
    }
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
        .get(&format!("echo-{}", Arm::Fresh.namespace(0)))
        .map(|p| p.manifest.limits.concurrency)
        .unwrap_or(0);

    // Rounds, each arm once per round in a rotating order, so that a noisy
    // moment of a shared machine falls on every arm alike; ratios are taken
    // within a round.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); ARMS.len()];
    let mut shadow = (0, 0, 0, 0);
    for round in 0..rounds {
        for i in 0..ARMS.len() {
            let a = (i + round) % ARMS.len();
            let arm = ARMS[a];
            let ns = arm.namespace(round);
            let name = format!("echo-{ns}");
            let source: Arc<dyn Source> = match arm {
                Arm::Native => Arc::new(Fixed(Arc::new(NativeEcho {
                    manifest: Manifest::load(&dir.join(format!("{name}.toml")))?,
                }))),
                _ => plugins.clone(),
            };
            rates[a].push(run(&client, &caches, &ns, n, &name, source).await?);
            // What an arm leaves running (the record writer's queue, the
            // shadow candidate's) must not be charged to the next arm.
            settle().await;
            if arm == Arm::Shadowed {
                let r = plugins.shadow_slot(&name).report();
                shadow.0 += r.same;
                shadow.1 += r.different;
                shadow.2 += r.error;
                shadow.3 += r.skipped;
            }
        }
    }
    let of = |a: Arm| &rates[ARMS.iter().position(|x| *x == a).unwrap_or(0)];
    // An even count's median is the mean of its two middle rounds.
    let median_of = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n => (v[(n - 1) / 2] + v[n / 2]) / 2.0,
        }
    };
    let median = |a: Arm| median_of(of(a).clone());
    // A ratio is taken within each round (its arms ran minutes apart at
    // most, under the same load), then the median over rounds.
    let ratio = |a: Arm, b: Arm| median_of(of(a).iter().zip(of(b)).map(|(x, y)| x / y).collect());
    println!(
        "end-to-end reconcile throughput (watch -> queue -> reconcile -> status patch), {n} objects, concurrency {concurrency}, {rounds} rounds (medians; every round's figures in brackets)"
    );
    for (a, arm) in ARMS.iter().enumerate() {
        let each: Vec<String> = rates[a].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "  {:<52} {:>6.0} reconciles/s [{}]",
            arm.label(),
            median(*arm),
            each.join(", ")
        );
    }
    println!(
        "  shadow candidate: {} same, {} different, {} error, {} skipped",
        shadow.0, shadow.1, shadow.2, shadow.3
    );
    println!("  ratios: the median of each round's ratio");
    println!(
        "  recorded / not recorded = {:.2} (goal >= 0.85)",
        ratio(Arm::Recorded, Arm::Fresh)
    );
    println!(
        "  shadowed / not shadowed = {:.2} (goal >= 0.9)",
        ratio(Arm::Shadowed, Arm::Fresh)
    );
    println!(
        "  wasm / native = {:.2} fresh instances, {:.2} reused (goal >= 0.8)",
        ratio(Arm::Fresh, Arm::Native),
        ratio(Arm::Reused, Arm::Native)
    );
    Ok(())
}
