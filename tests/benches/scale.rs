//! The scale benchmark (issue 32): how the cost of each pod grows with the
//! cluster. Run: `scripts/bench-scale` (builds a release `wasmlet` and the
//! plugins, then this), or by hand after it built them: `cargo test --bench
//! scale` (this binary is only the client; the plane is the release binary). `SCALE_PODS=100,1000,5000`
//! (the default) picks the sizes, `SCALE_ROLLOUT_PODS=1000` the rollout's
//! (0 skips it); `WASMLET_BIN` another binary.
//!
//! Per size, a fresh `wasmlet up` with the built-in controllers and one node
//! runs a `Parallel` StatefulSet of N `sleeper` pods (Ready as soon as they
//! run) from create to all Ready, and prints: the time, host CPU per pod,
//! calls and mean time per call of each built-in, API writes per pod, the
//! scheduler's placements per second (first to last binding on a watch),
//! and the host's peak RSS; then checks every binding against its node's
//! allocatable pods. Then a StatefulsetRollout of a set of the rollout size
//! goes to 100 % at `maxUnavailable: 10%`: its time and calls, and the most
//! pods ever unavailable on the watch history against the budget.
#![allow(clippy::unwrap_used)] // a bench: a failure should stop it loudly

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use wasmlet_e2e::workload_plane::{self, NODE, sleeper_spec};
use wasmlet_e2e::{Plane, eventually, metric, sroll};

/// The built-ins the StatefulSet runs use (the rollout adds its operator).
const BUILTINS: &str = "scheduler,wasi-runner,statefulset-controller,disruption-controller,\
                        replicaset-controller,deployment-controller";
const PLUGINS: &[&str] = &[
    "scheduler",
    "statefulset-controller",
    "disruption-controller",
    "replicaset-controller",
    "deployment-controller",
    "sroll-reconciler",
];

/// CPU seconds (user + system) and peak RSS (MiB) of process `pid`.
fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 14th
    // field of the line, the 12th after it.
    let after = stat.rsplit_once(')').map(|(_, s)| s).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let hz = 100.0; // USER_HZ on Linux
    let cpu = (ticks(11) + ticks(12)) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0);
    (cpu, hwm)
}

/// Each plugin's (calls, seconds in calls) from the host's metrics.
async fn calls(plane: &Plane) -> Result<BTreeMap<&'static str, (f64, f64)>> {
    let text = plane.metrics().await?;
    Ok(PLUGINS
        .iter()
        .map(|p| {
            let label = format!("plugin=\"{p}\"");
            let n = metric(&text, "wasmlet_plugin_calls_total", &label);
            let s = metric(&text, "wasmlet_plugin_call_seconds", &label);
            (*p, (n, s))
        })
        .collect())
}

fn pid(plane: &Plane) -> u32 {
    plane.child.as_ref().map(|c| c.id()).unwrap_or_default()
}

/// `(calls, mean ms)` per plugin that was called between `a` and `b`.
fn call_lines(
    a: &BTreeMap<&'static str, (f64, f64)>,
    b: &BTreeMap<&'static str, (f64, f64)>,
) -> String {
    b.iter()
        .filter_map(|(p, (n1, s1))| {
            let (n0, s0) = a.get(p).copied().unwrap_or_default();
            let n = n1 - n0;
            (n > 0.0).then(|| format!("{p} {n:.0} x {:.2} ms", (s1 - s0) / n * 1e3))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The node's flags: room for N pods, and a memory budget that covers N
/// sleepers at their limit (the default container limit, 256 MiB, would
/// stop the node at about 70 of them).
fn node_flags(n: usize) -> Vec<String> {
    vec![
        "--max-pods".into(),
        (n + 10).to_string(),
        "--workload-memory-budget".into(),
        format!("{}Mi", (n + 10) * 8),
    ]
}

/// [`sleeper_spec`] in its `pause` mode (prints once, then sleeps: upstream's
/// scale tests run pause containers, so what is measured is the control
/// plane's cost, not 10 log lines a second from each of 5,000 pods), limited
/// to 8 MiB (it needs about 1).
fn small_sleeper() -> serde_json::Value {
    let mut spec = sleeper_spec();
    spec["containers"][0]["args"] = json!(["pause"]);
    spec["containers"][0]["resources"] = json!({"limits": {"memory": "8Mi"}});
    spec
}

fn set(name: &str, n: usize) -> Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": n,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": small_sleeper()},
        },
    }))?)
}

/// When each pod was first seen bound, recorded by a watch from before the
/// set exists.
fn bindings(
    client: &kube::Client,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let task = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut s = watcher(pods, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(p)) = s.next().await {
                if p.spec.and_then(|s| s.node_name).is_some() {
                    let name = p.metadata.name.unwrap_or_default();
                    seen.lock()
                        .unwrap()
                        .entry(name)
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    (seen, task)
}

struct Figures {
    n: usize,
    cpu_per_pod_ms: f64,
}

async fn statefulset(n: usize) -> Result<Figures> {
    let flags = node_flags(n);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (plane, client) = workload_plane::start_with(BUILTINS, &flags).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    // Every built-in loaded and idle before the clock starts.
    eventually(Duration::from_secs(120), "the built-ins loaded", || async {
        let c = calls(&plane).await.ok()?;
        let text = plane.metrics().await.ok()?;
        (PLUGINS[..5]
            .iter()
            .all(|p| text.contains(&format!("plugin=\"{p}\"")))
            && !c.is_empty())
        .then_some(())
    })
    .await?;
    let (bound, watch) = bindings(&client);
    let pid = pid(&plane);
    let (cpu0, _) = usage(pid);
    let c0 = calls(&plane).await?;
    let w0 = workload_plane::api_writes(&client).await?;
    let t0 = workload_plane::api_write_seconds(&client).await?;
    let start = Instant::now();
    sets.create(&PostParams::default(), &set("scale", n)?)
        .await?;
    let ready = eventually(Duration::from_secs(3600), "all pods ready", || async {
        let st = sets.get("scale").await.ok()?.status?;
        (st.ready_replicas == Some(n as i32)).then_some(())
    })
    .await;
    let took = start.elapsed();
    if let Err(e) = ready {
        bail!("{e}; log:\n{}", plane.log());
    }
    let (cpu1, peak) = usage(pid);
    let c1 = calls(&plane).await?;
    let w1 = workload_plane::api_writes(&client).await?;
    let t1 = workload_plane::api_write_seconds(&client).await?;
    watch.abort();
    let times: Vec<Instant> = bound.lock().unwrap().values().copied().collect();
    let placements = match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) if b > a => times.len() as f64 / (*b - *a).as_secs_f64(),
        _ => f64::NAN,
    };
    check_bindings(&client).await?;
    let cpu_per_pod_ms = (cpu1 - cpu0) / n as f64 * 1e3;
    println!(
        "N={n}: all Ready in {:.1} s; host CPU {:.1} s ({cpu_per_pod_ms:.1} ms per pod); \
         {:.1} API writes per pod; scheduler {placements:.0} placements/s; peak RSS {peak:.0} MiB",
        took.as_secs_f64(),
        cpu1 - cpu0,
        (w1 - w0) / n as f64,
    );
    println!("  calls: {}", call_lines(&c0, &c1));
    println!("  API writes (plane's time): {}", write_lines(&t0, &t1));
    Ok(Figures { n, cpu_per_pod_ms })
}

/// The writes served between `before` and `after`, most first, each with
/// its mean time in the plane (the request's time, not the client's).
fn write_lines(
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
) -> String {
    let mut d: Vec<(f64, f64, &String)> = after
        .iter()
        .map(|(k, (n, s))| {
            let (n0, s0) = before.get(k).copied().unwrap_or_default();
            (n - n0, s - s0, k)
        })
        .filter(|(n, _, _)| *n > 0.0)
        .collect();
    d.sort_by(|a, b| b.0.total_cmp(&a.0));
    d.iter()
        .take(6)
        .map(|(n, s, k)| format!("{k} {n} x {:.2} ms", s / n * 1e3))
        .collect::<Vec<_>>()
        .join(", ")
}

/// No node holds more pods than its allocatable `pods`, and every pod is on
/// a node that exists.
async fn check_bindings(client: &kube::Client) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let mut on: HashMap<String, usize> = HashMap::new();
    for p in pods.list(&ListParams::default()).await?.items {
        if let Some(n) = p.spec.and_then(|s| s.node_name) {
            *on.entry(n).or_default() += 1;
        }
    }
    for (name, count) in on {
        let node = nodes.get(&name).await?;
        let allocatable: usize = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("pods").map(|q| q.0.clone()))
            .and_then(|q| q.parse().ok())
            .unwrap_or(0);
        ensure!(
            count <= allocatable,
            "node {name} holds {count} pods, allocatable {allocatable}"
        );
    }
    Ok(())
}

async fn rollout(n: usize) -> Result<()> {
    let flags = node_flags(n);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let builtins = format!("{BUILTINS},sroll-reconciler");
    let (plane, client) = workload_plane::start_with(&builtins, &flags).await?;
    sroll::wait_served(&client).await?;
    let api = sroll::api(&client);
    let template = |version: &str| {
        let mut t = sroll::template("big", version);
        t["spec"]["containers"][0]["args"] = json!(["pause"]);
        t["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "8Mi"}});
        t
    };
    let spec = |version: &str| {
        json!({"spec": {
            "replicas": n,
            "serviceName": "big",
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "big"}},
            "template": template(version),
        }})
    };
    let slow = Duration::from_secs(3600);
    api.create(
        &PostParams::default(),
        &sroll::rollout(
            "big",
            100,
            template("1"),
            json!({"statefulset": spec("1"), "maxUnavailable": "10%"}),
        )?,
    )
    .await?;
    sroll::wait_status(&plane, &api, "big", "first version up", slow, |s| {
        s["phase"] == "RolloutDone"
    })
    .await?;
    let history = workload_plane::record(Api::<Pod>::namespaced(client.clone(), "default")).await?;
    let c0 = calls(&plane).await?;
    let start = Instant::now();
    sroll::edit(&api, "big", json!({"statefulset": spec("2")})).await?;
    let st = sroll::wait_status(&plane, &api, "big", "rolled to version 2", slow, |s| {
        s["phase"] == "RolloutDone" && s["updatedReplicas"] == n
    })
    .await?;
    let took = start.elapsed();
    let c1 = calls(&plane).await?;
    let most = sroll::max_unavailable(&history.snapshot(), "big", n);
    let budget = n.div_ceil(10);
    println!(
        "rollout of {n} pods to 100 % at maxUnavailable 10 %: {:.1} s; at most {most} \
         unavailable (budget {budget}); {}",
        took.as_secs_f64(),
        st["phase"],
    );
    println!("  calls: {}", call_lines(&c0, &c1));
    ensure!(
        most <= budget,
        "{most} pods unavailable at once, budget {budget}"
    );
    Ok(())
}

fn sizes(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if std::env::var_os("WASMLET_BIN").is_none() {
        let bin = root.join("target/release/wasmlet");
        ensure!(
            bin.exists(),
            "{} is missing: run scripts/bench-scale (or cargo build --release --bin wasmlet)",
            bin.display()
        );
        // SAFETY: no other thread exists yet (the runtime starts below).
        unsafe { std::env::set_var("WASMLET_BIN", bin) };
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!(
            "scale bench ({} cores), node {NODE}",
            std::thread::available_parallelism()?
        );
        let mut figures = vec![];
        for n in sizes("SCALE_PODS", "100,1000,5000") {
            figures.push(statefulset(n).await?);
        }
        if let (Some(small), Some(large)) = (figures.first(), figures.last())
            && large.n > small.n
        {
            println!(
                "host CPU per pod at N={} / at N={}: {:.2}x (goal <= 1.5x)",
                large.n,
                small.n,
                large.cpu_per_pod_ms / small.cpu_per_pod_ms
            );
        }
        for n in sizes("SCALE_ROLLOUT_PODS", "1000") {
            if n > 0 {
                rollout(n).await?;
            }
        }
        Ok(())
    })
}
