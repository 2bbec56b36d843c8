//! wasmlet against kube-runtime, side by side (issue 16): the same Widget
//! reconciler (status `{summary: "size=N"}`) as a native kube-runtime 5.0
//! `Controller` and as a wasmlet wasm plugin (guests/testing/widget), each
//! against a fresh embedded plane (`wasmlet apiserver`, its own process), the
//! controller in its own process so its CPU and peak RSS are its own.
//!
//! Run: `scripts/build-guests && cargo bench -p wasmlet --bench versus`.
//! `BENCH_OBJECTS` (default 20000), `BENCH_CONCURRENCY` (default `1,16`),
//! `BENCH_ROUNDS` (default 1: every arm again per round, ratios taken within
//! a round and their median printed), `BENCH_ARMS` (default
//! `kube-runtime,kube-runtime+cond,wasmlet`; the second
//! also writes `observedGeneration` and a `Ready` condition, as the wasmlet
//! host does, so it does the same work), `BENCH_LATE` (objects created
//! 2 s and 10 s after the controller starts, default 10 each), `VERSUS_WRAP`
//! (a profiler command the wasmlet host runs under, e.g. `heaptrack -o FILE`),
//! `BENCH_TIMELINE` (set: every 250 ms of the first start, statuses written so
//! far and the controller's and plane's CPU seconds, to see where the first
//! seconds go).
//!
//! Per arm: seconds from the controller's start to every status written,
//! reconcile calls and PATCHes per object (counted after the controller has
//! been quiet for 2 s), controller CPU seconds (utime + stime, its compile
//! children's included and also shown apart: every arm starts with an empty
//! data dir, so the plugin is compiled each time) and peak RSS (VmHWM), the
//! plane's CPU, peak RSS and mean time to answer a status PATCH, and the late
//! objects' p99 latency.
//! Then the controller is started again on the now up-to-date objects: time to
//! re-verify every object once, p99 of objects created 2 s into that start,
//! and PATCHes per object meanwhile (an up-to-date object needs none).
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

#[path = "versus/native.rs"]
mod native;
#[path = "versus/probe.rs"]
mod probe;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

use native::{Widget, WidgetSpec};

const NS: &str = "bench";
const WASMLET: &str = env!("CARGO_BIN_EXE_wasmlet");

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arm {
    KubeRuntime,
    /// kube-runtime also writing `observedGeneration` and a `Ready` condition,
    /// as the wasmlet host does: the same work.
    KubeRuntimeConditions,
    Wasmlet,
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::KubeRuntime => "kube-runtime",
            Arm::KubeRuntimeConditions => "kube-runtime+cond",
            Arm::Wasmlet => "wasmlet",
        }
    }
}

struct Measured {
    arm: Arm,
    /// Which round of `BENCH_ROUNDS` (from 0).
    round: usize,
    concurrency: u16,
    seconds: f64,
    /// Seconds from the controller's start to the first status written.
    first_seconds: f64,
    reconciles_per_object: f64,
    patches_per_object: f64,
    cpu_at_done: f64,
    cpu: f64,
    /// Of `cpu`, the children's (a wasmlet host's one-time compile).
    compile_cpu: f64,
    rss_mib: f64,
    plane_cpu: f64,
    plane_rss_mib: f64,
    /// The plane's mean time to answer a Widget status PATCH
    /// (`apiserver_request_duration_seconds`), ms: at c=1 the rest of an
    /// object's time is the controller's.
    plane_patch_ms: f64,
    /// (seconds after start, p99 ms) of the late objects.
    late: Vec<(u64, f64)>,
    /// The controller restarted on the up-to-date objects.
    restart: Restart,
    /// The API server's requests by verb and resource, the bench's own included.
    requests: Vec<String>,
}

/// The second start of an arm's controller, every object already up to date:
/// how long until it has re-verified them all (one reconcile each), what an
/// object created 2 s after that start waits, and what it wrote meanwhile.
#[derive(Default)]
struct Restart {
    reverify_seconds: f64,
    late_p99_ms: f64,
    patches_per_object: f64,
}

/// What the orchestrator's own watch has seen.
#[derive(Default, Clone)]
struct Progress {
    listed: bool,
    /// Objects (not late ones) whose status is written.
    done: usize,
    /// When the first of them was.
    first: Option<Instant>,
    /// Late objects whose status is written, and when.
    late_done: HashMap<String, Instant>,
}

fn written(w: &Widget) -> bool {
    let want = format!("size={}", w.spec.size);
    w.status.as_ref().and_then(|s| s.summary.as_deref()) == Some(want.as_str())
}

async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Starts `wasmlet apiserver` in `dir` and waits until it answers.
async fn start_plane(dir: &Path) -> anyhow::Result<(Child, kube::Client, PathBuf)> {
    let child = Command::new(WASMLET)
        .args(["apiserver", "--port", "0", "--data-dir"])
        .arg(dir)
        .env("WASMLET_LOG", "error")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting wasmlet apiserver")?;
    let kubeconfig = dir.join("kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if kubeconfig.exists()
            && let Ok(client) = client_for(&kubeconfig).await
            && client.apiserver_version().await.is_ok()
        {
            return Ok((child, client, kubeconfig));
        }
        anyhow::ensure!(Instant::now() < deadline, "the API server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn setup_objects(client: &kube::Client, crd_yaml: &str, n: usize) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_yaml::from_str(crd_yaml)?)
        .await?;
    let nsapi: Api<Namespace> = Api::all(client.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await?;
    let api: Api<Widget> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.list(&ListParams::default().limit(1)).await.is_err() {
        anyhow::ensure!(Instant::now() < deadline, "the Widget CRD is not served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let w = Widget::new(&format!("w{i}"), WidgetSpec { size: i as i64 });
                api.create(&PostParams::default(), &w).await
            }
        })
        .buffer_unordered(32)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(())
}

/// A task aborted when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follows every Widget's status from the orchestrator's own watch, until the
/// returned guard drops: an arm's watch must not outlive its plane, or it
/// retries against the dead plane while the next arm runs and takes CPU from it.
fn follow(client: &kube::Client) -> (tokio::sync::watch::Receiver<Progress>, AbortOnDrop) {
    let (tx, rx) = tokio::sync::watch::channel(Progress::default());
    let api: Api<Widget> = Api::namespaced(client.clone(), NS);
    let task = tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut s = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = s.next().await {
            let w = match ev {
                Ok(watcher::Event::InitDone) => {
                    tx.send_modify(|p| p.listed = true);
                    continue;
                }
                Ok(watcher::Event::Apply(w)) | Ok(watcher::Event::InitApply(w)) => w,
                _ => continue,
            };
            let name = w.metadata.name.clone().unwrap_or_default();
            if !written(&w) || !seen.insert(name.clone()) {
                continue;
            }
            let now = Instant::now();
            tx.send_modify(|p| {
                if name.starts_with("late") {
                    p.late_done.insert(name, now);
                } else {
                    p.done += 1;
                    p.first.get_or_insert(now);
                }
            });
        }
    });
    (rx, AbortOnDrop(task))
}

/// The controller process of `arm` and how to read its reconcile count.
struct Controller {
    child: Child,
    count: Arc<AtomicU64>,
    metrics: Option<tokio::sync::watch::Receiver<Option<String>>>,
}

impl Controller {
    async fn reconciles(&self) -> u64 {
        match &self.metrics {
            None => self.count.load(Ordering::Relaxed),
            Some(rx) => {
                let Some(addr) = rx.borrow().clone() else {
                    return 0;
                };
                match probe::scrape(&addr).await {
                    Ok(t) => probe::counter_sum(
                        &t,
                        "controller_runtime_reconcile_total",
                        &["controller=\"widget\""],
                    ) as u64,
                    Err(_) => 0,
                }
            }
        }
    }
}

fn start_controller(
    arm: Arm,
    concurrency: u16,
    kubeconfig: &Path,
    dir: &Path,
    plugins: &Path,
) -> anyhow::Result<Controller> {
    let mut cmd = match arm {
        Arm::KubeRuntime | Arm::KubeRuntimeConditions => {
            let mut c = Command::new(std::env::current_exe()?);
            c.env("VERSUS_ROLE", "kube-runtime")
                .env("KUBECONFIG", kubeconfig)
                .env("BENCH_CONCURRENCY", concurrency.to_string())
                .env(
                    "VERSUS_CONDITIONS",
                    if arm == Arm::KubeRuntimeConditions {
                        "1"
                    } else {
                        "0"
                    },
                );
            c
        }
        Arm::Wasmlet => {
            let pdir = dir.join("plugins");
            std::fs::create_dir_all(&pdir)?;
            let mut manifest: toml::Table =
                toml::from_str(&std::fs::read_to_string(plugins.join("widget.toml"))?)?;
            manifest
                .get_mut("limits")
                .and_then(|l| l.as_table_mut())
                .context("widget.toml has no [limits]")?
                .insert("concurrency".into(), i64::from(concurrency).into());
            std::fs::write(pdir.join("widget.toml"), toml::to_string(&manifest)?)?;
            std::fs::copy(plugins.join("widget.wasm"), pdir.join("widget.wasm"))?;
            // A profiler may wrap the host (`VERSUS_WRAP="heaptrack -o /tmp/h"`);
            // its CPU and RSS are then the wrapper's, not the host's.
            let wrap: Vec<String> = std::env::var("VERSUS_WRAP")
                .map(|w| w.split_whitespace().map(String::from).collect())
                .unwrap_or_default();
            let mut c = match wrap.split_first() {
                Some((prog, args)) => {
                    let mut c = Command::new(prog);
                    c.args(args).arg(WASMLET);
                    c
                }
                None => Command::new(WASMLET),
            };
            c.arg("run")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .arg("--plugins")
                .arg(&pdir)
                .arg("--data-dir")
                .arg(dir.join("host"))
                .args(["--metrics-addr", "127.0.0.1:0", "--resync-seconds", "86400"])
                .env("WASMLET_LOG", "error");
            c
        }
    };
    let mut child = cmd
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the {} controller", arm.name()))?;
    let count = Arc::new(AtomicU64::new(0));
    let (tx, rx) = tokio::sync::watch::channel(None);
    let mut lines = tokio::io::BufReader::new(child.stdout.take().context("no stdout")?).lines();
    {
        let count = count.clone();
        tokio::spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(n) = l.strip_prefix("reconciles ") {
                    count.store(n.trim().parse().unwrap_or(0), Ordering::Relaxed);
                } else if let Some(rest) = l.split_once("metrics on http://").map(|(_, r)| r) {
                    let addr = rest.trim_end_matches("/metrics").to_string();
                    let _ = tx.send(Some(addr));
                }
            }
        });
    }
    Ok(Controller {
        child,
        count,
        metrics: (arm == Arm::Wasmlet).then_some(rx),
    })
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]
}

async fn run_arm(
    arm: Arm,
    concurrency: u16,
    n: usize,
    late: usize,
    plugins: &Path,
    ticks: f64,
) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir()?;
    let (mut plane, client, kubeconfig) = start_plane(&dir.path().join("plane")).await?;
    let plane_pid = plane.id().context("plane exited")?;
    setup_objects(
        &client,
        &std::fs::read_to_string(plugins.join("widget.crd.yaml"))?,
        n,
    )
    .await?;
    let (mut progress, _following) = follow(&client);
    progress.wait_for(|p| p.listed).await?;

    let start = Instant::now();
    let mut ctl = start_controller(arm, concurrency, &kubeconfig, dir.path(), plugins)?;
    let pid = ctl.child.id().context("controller exited")?;
    // Objects created once the controller runs: 2 s in (while it is still
    // busy with the initial objects, at N = 20000) and 10 s in.
    let late_created = {
        let api: Api<Widget> = Api::namespaced(client.clone(), NS);
        tokio::spawn(async move {
            let mut created = HashMap::new();
            for at in [2u64, 10] {
                tokio::time::sleep_until((start + Duration::from_secs(at)).into()).await;
                for i in 0..late {
                    let name = format!("late{at}-{i}");
                    let w = Widget::new(&name, WidgetSpec { size: i as i64 });
                    api.create(&PostParams::default(), &w).await?;
                    created.insert(name, (at, Instant::now()));
                }
            }
            anyhow::Ok(created)
        })
    };
    let _timeline = std::env::var_os("BENCH_TIMELINE").map(|_| {
        let progress = progress.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let done = progress.borrow().done;
                let cpu = probe::cpu_seconds(pid, ticks).unwrap_or(f64::NAN);
                let pcpu = probe::cpu_seconds(plane_pid, ticks).unwrap_or(f64::NAN);
                eprintln!(
                    "    {:>6.2} s  done {done:>6}  cpu {cpu:.2}  plane cpu {pcpu:.2}",
                    start.elapsed().as_secs_f64()
                );
                if done >= n {
                    break;
                }
            }
        })
    });
    let timeout = Duration::from_secs(3600);
    tokio::time::timeout(timeout, progress.wait_for(|p| p.done >= n))
        .await
        .context("timed out waiting for every status")??;
    let seconds = start.elapsed().as_secs_f64();
    let first_seconds = progress.borrow().first.map_or(f64::NAN, |t| {
        t.saturating_duration_since(start).as_secs_f64()
    });
    let cpu_at_done = probe::cpu_seconds(pid, ticks)?;
    let created = late_created.await??;
    tokio::time::timeout(
        Duration::from_secs(300),
        progress.wait_for(|p| p.late_done.len() >= created.len()),
    )
    .await
    .context("timed out waiting for the late objects")??;
    // Quiet: the reconcile count has not moved for 2 s.
    let (mut last, mut still) = (ctl.reconciles().await, Instant::now());
    let quiet_deadline = Instant::now() + Duration::from_secs(120);
    while still.elapsed() < Duration::from_secs(2) && Instant::now() < quiet_deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = ctl.reconciles().await;
        if now != last {
            (last, still) = (now, Instant::now());
        }
    }
    let objects = (n + created.len()) as f64;
    let plane_metrics = probe::scrape_plane(&client).await?;
    let patches = probe::counter_sum(
        &plane_metrics,
        "apiserver_request_total",
        &["verb=\"PATCH\"", "resource=\"widgets\""],
    );
    let p = progress.borrow().clone();
    let mut late_ms: HashMap<u64, Vec<f64>> = HashMap::new();
    for (name, (at, t0)) in &created {
        if let Some(t1) = p.late_done.get(name) {
            late_ms
                .entry(*at)
                .or_default()
                .push(t1.saturating_duration_since(*t0).as_secs_f64() * 1000.0);
        }
    }
    let mut late_p99: Vec<(u64, f64)> = late_ms.into_iter().map(|(k, v)| (k, p99(v))).collect();
    late_p99.sort_by_key(|(k, _)| *k);
    let mut m = Measured {
        arm,
        round: 0,
        concurrency,
        seconds,
        first_seconds,
        reconciles_per_object: last as f64 / objects,
        patches_per_object: patches / objects,
        cpu_at_done,
        cpu: probe::cpu_seconds(pid, ticks)?,
        compile_cpu: probe::children_cpu_seconds(pid, ticks)?,
        rss_mib: probe::peak_rss_mib(pid)?,
        plane_cpu: probe::cpu_seconds(plane_pid, ticks)?,
        plane_rss_mib: probe::peak_rss_mib(plane_pid)?,
        plane_patch_ms: {
            let patch = ["verb=\"PATCH\"", "resource=\"widgets\""];
            let of = |name| probe::counter_sum(&plane_metrics, name, &patch);
            of("apiserver_request_duration_seconds_sum") * 1000.0
                / of("apiserver_request_duration_seconds_count")
        },
        late: late_p99,
        restart: Restart::default(),
        requests: probe::requests_by_verb(&plane_metrics),
    };
    ctl.child.kill().await?;
    let _ = ctl.child.wait().await;
    let target = Target {
        arm,
        concurrency,
        kubeconfig: &kubeconfig,
        dir: dir.path(),
        plugins,
    };
    m.restart = restart(
        &target,
        &client,
        &progress,
        n + created.len(),
        late,
        patches,
    )
    .await?;
    plane.kill().await?;
    Ok(m)
}

/// Where and how an arm's controller runs.
struct Target<'a> {
    arm: Arm,
    concurrency: u16,
    kubeconfig: &'a Path,
    dir: &'a Path,
    plugins: &'a Path,
}

/// Starts the controller again over `objects` up-to-date objects; creates
/// `late` objects 2 s in; waits for one reconcile per object and the late
/// objects' statuses. `patches_before`: the plane's Widget PATCHes so far.
async fn restart(
    t: &Target<'_>,
    client: &kube::Client,
    progress: &tokio::sync::watch::Receiver<Progress>,
    objects: usize,
    late: usize,
    patches_before: f64,
) -> anyhow::Result<Restart> {
    let start = Instant::now();
    let mut ctl = start_controller(t.arm, t.concurrency, t.kubeconfig, t.dir, t.plugins)?;
    let api: Api<Widget> = Api::namespaced(client.clone(), NS);
    tokio::time::sleep_until((start + Duration::from_secs(2)).into()).await;
    let mut created = Vec::new();
    for i in 0..late {
        let name = format!("late-restart-{i}");
        let w = Widget::new(&name, WidgetSpec { size: i as i64 });
        api.create(&PostParams::default(), &w).await?;
        created.push((name, Instant::now()));
    }
    let deadline = start + Duration::from_secs(3600);
    let want = (objects + late) as u64;
    let reverified = loop {
        if ctl.reconciles().await >= want {
            break start.elapsed().as_secs_f64();
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out re-verifying");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut progress = progress.clone();
    tokio::time::timeout(
        Duration::from_secs(300),
        progress.wait_for(|p| created.iter().all(|(n, _)| p.late_done.contains_key(n))),
    )
    .await
    .context("timed out waiting for the objects created after the restart")??;
    let done = progress.borrow().late_done.clone();
    let waits = created
        .iter()
        .map(|(n, t0)| done[n].saturating_duration_since(*t0).as_secs_f64() * 1000.0)
        .collect();
    let patches = probe::counter_sum(
        &probe::scrape_plane(client).await?,
        "apiserver_request_total",
        &["verb=\"PATCH\"", "resource=\"widgets\""],
    );
    ctl.child.kill().await?;
    Ok(Restart {
        reverify_seconds: reverified,
        late_p99_ms: p99(waits),
        patches_per_object: (patches - patches_before - late as f64) / objects as f64,
    })
}

fn print_row(m: &Measured) {
    let late: Vec<String> = m
        .late
        .iter()
        .map(|(at, ms)| format!("late@{at}s p99 {ms:.0} ms"))
        .collect();
    println!(
        "  {:<17} c={:<2} {:>8.2} s (first status at {:.2} s)  reconciles/obj {:.2}  PATCH/obj {:.2}  cpu {:.2} s ({:.2} at done, {:.2} compiling)  rss {:.0} MiB  | plane cpu {:.2} s rss {:.0} MiB PATCH {:.2} ms  | {}",
        m.arm.name(),
        m.concurrency,
        m.seconds,
        m.first_seconds,
        m.reconciles_per_object,
        m.patches_per_object,
        m.cpu,
        m.cpu_at_done,
        m.compile_cpu,
        m.rss_mib,
        m.plane_cpu,
        m.plane_rss_mib,
        m.plane_patch_ms,
        late.join(", ")
    );
    println!(
        "  {:<17} c={:<2} restarted: all re-verified in {:.2} s, created 2 s in: p99 {:.0} ms, PATCH/obj {:.3}",
        m.arm.name(),
        m.concurrency,
        m.restart.reverify_seconds,
        m.restart.late_p99_ms,
        m.restart.patches_per_object,
    );
    println!(
        "  {:<17} c={:<2} API requests (the bench's own included): {}",
        m.arm.name(),
        m.concurrency,
        m.requests.join(", ")
    );
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

async fn orchestrate() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let late: usize = std::env::var("BENCH_LATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let concurrencies: Vec<u16> = env_list("BENCH_CONCURRENCY", "1,16")
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .context("BENCH_CONCURRENCY: comma-separated numbers")?;
    let arms: Vec<Arm> = env_list("BENCH_ARMS", "kube-runtime,kube-runtime+cond,wasmlet")
        .iter()
        .map(|s| match s.as_str() {
            "kube-runtime" => Ok(Arm::KubeRuntime),
            "kube-runtime+cond" => Ok(Arm::KubeRuntimeConditions),
            "wasmlet" => Ok(Arm::Wasmlet),
            other => Err(anyhow::anyhow!("BENCH_ARMS: unknown arm {other}")),
        })
        .collect::<Result<_, _>>()?;
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    anyhow::ensure!(
        plugins.join("widget.wasm").exists() && plugins.join("widget.crd.yaml").exists(),
        "run scripts/build-guests first (no widget.wasm / widget.crd.yaml in {})",
        plugins.display()
    );
    let ticks = probe::clock_ticks();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "versus: {n} Widgets (+{late} created 2 s and 10 s after start), concurrency {concurrencies:?}, {rounds} round(s), {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // Rounds run every arm again, arms one after another within a round, so
    // that a noisy stretch of a shared machine falls on every arm alike.
    let mut all = Vec::new();
    for round in 0..rounds {
        for &c in &concurrencies {
            for &arm in &arms {
                let mut m = run_arm(arm, c, n, late, &plugins, ticks)
                    .await
                    .with_context(|| format!("{} at concurrency {c}", arm.name()))?;
                m.round = round;
                print_row(&m);
                all.push(m);
            }
        }
    }
    for reference in [Arm::KubeRuntime, Arm::KubeRuntimeConditions] {
        print_ratios(&all, reference, &concurrencies);
    }
    Ok(())
}

/// The wasmlet arm's figures over `reference`'s, per concurrency both ran:
/// each ratio taken within a round, then their median (and range, over
/// several rounds).
fn print_ratios(all: &[Measured], reference: Arm, concurrencies: &[u16]) {
    let r = reference.name();
    let mut header = false;
    for &c in concurrencies {
        let pairs: Vec<(&Measured, &Measured)> = all
            .iter()
            .filter(|k| k.arm == reference && k.concurrency == c)
            .filter_map(|k| {
                let w = all
                    .iter()
                    .find(|w| w.arm == Arm::Wasmlet && w.concurrency == c && w.round == k.round)?;
                Some((k, w))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        if !std::mem::replace(&mut header, true) {
            println!(
                "ratios wasmlet / {r} (throughput: {r} seconds / wasmlet seconds; median of {} round(s), range in brackets):",
                pairs.len()
            );
        }
        let ratio = |f: &dyn Fn(&Measured, &Measured) -> f64| {
            let mut v: Vec<f64> = pairs.iter().map(|(k, w)| f(k, w)).collect();
            v.sort_by(f64::total_cmp);
            // An even count's median is the mean of its two middle rounds.
            let median = (v[(v.len() - 1) / 2] + v[v.len() / 2]) / 2.0;
            if v.len() == 1 {
                format!("{median:.2}x")
            } else {
                format!("{median:.2}x [{:.2}-{:.2}]", v[0], v[v.len() - 1])
            }
        };
        let (k, w) = pairs[0];
        println!(
            "  c={c:<2} throughput {}  cpu {} ({} without compiling)  rss {}  reconciles/obj {:.2} vs {:.2}  PATCH/obj {:.2} vs {:.2}  plane cpu {}  plane rss {}",
            ratio(&|k, w| k.seconds / w.seconds),
            ratio(&|k, w| w.cpu / k.cpu),
            ratio(&|k, w| (w.cpu - w.compile_cpu) / (k.cpu - k.compile_cpu)),
            ratio(&|k, w| w.rss_mib / k.rss_mib),
            w.reconciles_per_object,
            k.reconciles_per_object,
            w.patches_per_object,
            k.patches_per_object,
            ratio(&|k, w| w.plane_cpu / k.plane_cpu),
            ratio(&|k, w| w.plane_rss_mib / k.plane_rss_mib),
        );
        println!(
            "  c={c:<2} restarted: re-verify {}  created 2 s in p99 {:.0} vs {:.0} ms (round 1)",
            ratio(&|k, w| k.restart.reverify_seconds / w.restart.reverify_seconds),
            w.restart.late_p99_ms,
            k.restart.late_p99_ms,
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var("VERSUS_ROLE").as_deref() == Ok("kube-runtime") {
        let c = std::env::var("BENCH_CONCURRENCY")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let conditions = std::env::var("VERSUS_CONDITIONS").as_deref() == Ok("1");
        return native::run(c, conditions).await;
    }
    orchestrate().await
}
