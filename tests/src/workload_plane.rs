//! `wasmlet up` as a small cluster for the workload-controller tests: the
//! built-in plugins (scheduler, wasi-runner, the controllers) and one node
//! whose pods really run the `sleeper` workload from `target/workloads`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use serde_json::{Value, json};

use crate::{Limits, Plane, eventually};

pub const NODE: &str = "workload-node";

pub fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .join("target")
        .join("workloads")
}

/// `file://…/NAME` of a module `scripts/build-workloads` built.
pub fn workload(name: &str) -> String {
    let path = workloads_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/build-workloads first",
        path.display()
    );
    format!("file://{}", path.display())
}

/// `wasmlet up --node-name workload-node EXTRA...` with the disruption,
/// ReplicaSet and Deployment controllers; returns once the node is registered
/// and every built-in is loaded.
pub async fn start(extra: &[&str]) -> Result<(Plane, kube::Client)> {
    start_with(
        "scheduler,wasi-runner,disruption-controller,replicaset-controller,deployment-controller",
        extra,
    )
    .await
}

/// [`start`] with the built-in plugins `builtins` (`--builtin-plugins`).
pub async fn start_with(builtins: &str, extra: &[&str]) -> Result<(Plane, kube::Client)> {
    start_limited_with(builtins, extra, Limits::default()).await
}

/// [`start_with`] inside `limits` (an attack's plane: past them it fails
/// its test instead of swapping the machine).
pub async fn start_limited_with(
    builtins: &str,
    extra: &[&str],
    limits: Limits,
) -> Result<(Plane, kube::Client)> {
    let modules = workloads_dir().display().to_string();
    let mut args = vec![
        "--node-name",
        NODE,
        "--allow-file-images",
        &modules,
        "--builtin-plugins",
        builtins,
    ];
    args.extend_from_slice(extra);
    let plane = Plane::start_up_limited(&args, &[], limits).await?;
    let client = plane.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = eventually(Duration::from_secs(60), "the wasmlet node", || async {
        nodes.get_opt(NODE).await.ok().flatten()
    })
    .await;
    if let Err(e) = ready {
        bail!("{e}; log:\n{}", plane.log());
    }
    // Each built-in compiles on the fresh data directory (seconds each in a
    // debug host, many more on a loaded machine): wait for them apart, so that
    // a test's bounds time what it checks, not the start. Only the plugin-set
    // check: a test may start the node without its provider on purpose.
    let loaded = eventually(
        Duration::from_secs(240),
        "every built-in loaded (/readyz/plugin-set)",
        || async {
            matches!(plane.http_get("/readyz/plugin-set").await, Ok((200, _))).then_some(())
        },
    )
    .await;
    if let Err(e) = loaded {
        let why = plane.http_get("/readyz/plugin-set").await.map(|r| r.1);
        bail!("{e}: {why:?}; log:\n{}", plane.log());
    }
    Ok((plane, client))
}

/// A pod spec running `sleeper` (forever, Ready once running), tolerating the
/// wasm node's taints, with a short grace period so deletions finish quickly.
pub fn sleeper_spec() -> Value {
    json!({
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
        "containers": [{"name": "main", "image": workload("sleeper.wasm")}],
    })
}

/// A pod template (`metadata.labels` + [`sleeper_spec`]).
pub fn sleeper_template(labels: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": sleeper_spec()})
}

/// The value of label `key` on `p` (empty when absent).
pub fn label(p: &Pod, key: &str) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .unwrap_or_default()
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every state of the objects `api` lists, in the order a watch delivers
/// them (deletions as `(true, object)`), recorded from before this returns.
pub struct History<K> {
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<(bool, K)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Clone> History<K> {
    pub fn snapshot(&self) -> Vec<(bool, K)> {
        self.seen.lock().unwrap().clone()
    }
}

impl<K> Drop for History<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts recording `api`'s watch; returns once the initial list is in.
pub async fn record<K>(api: Api<K>) -> Result<History<K>>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    use futures::StreamExt;
    use kube::runtime::watcher;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<(bool, K)>>> = Default::default();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        seen.lock().unwrap().push((false, o))
                    }
                    Ok(watcher::Event::Delete(o)) => seen.lock().unwrap().push((true, o)),
                    _ => {}
                }
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(30), rx).await??;
    Ok(History { seen, task })
}

/// Successful API requests of the write verbs, counted by the API server
/// (its own `/metrics`, kube-apiserver's `apiserver_request_total`).
pub async fn api_writes(client: &kube::Client) -> Result<f64> {
    Ok(api_writes_by(client).await?.values().sum())
}

/// Successful writes the plane has served so far, by verb and resource
/// (`PATCH pods/status`), from `apiserver_request_total`.
pub async fn api_writes_by(
    client: &kube::Client,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let text = plane_metrics(client).await?;
    let mut by = std::collections::BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let (Some(what), Some(code), Some(n)) = (write_of(l), metric_label(l, "code"), value(l))
        else {
            continue;
        };
        if code.starts_with('2') {
            *by.entry(what).or_insert(0.0) += n;
        }
    }
    Ok(by)
}

/// Requests of `verb` (`GET`, `LIST`, ...) on `resource` (`secrets`) the plane
/// has answered so far, whatever the code (`apiserver_request_total`).
pub async fn api_requests(client: &kube::Client, verb: &str, resource: &str) -> Result<f64> {
    let text = plane_metrics(client).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            metric_label(l, "verb").as_deref() == Some(verb)
                && metric_label(l, "resource").as_deref() == Some(resource)
        })
        .filter_map(value)
        .sum())
}

/// The plane's time serving writes so far, by verb and resource: (count,
/// seconds) from `apiserver_request_duration_seconds`, all answers.
pub async fn api_write_seconds(
    client: &kube::Client,
) -> Result<std::collections::BTreeMap<String, (f64, f64)>> {
    let text = plane_metrics(client).await?;
    let mut by = std::collections::BTreeMap::<String, (f64, f64)>::new();
    for (series, slot) in [
        ("apiserver_request_duration_seconds_count{", 0),
        ("apiserver_request_duration_seconds_sum{", 1),
    ] {
        for l in text.lines().filter(|l| l.starts_with(series)) {
            let (Some(what), Some(n)) = (write_of(l), value(l)) else {
                continue;
            };
            let e = by.entry(what).or_default();
            if slot == 0 { e.0 += n } else { e.1 += n }
        }
    }
    Ok(by)
}

async fn plane_metrics(client: &kube::Client) -> Result<String> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(req).await?)
}

/// A label's value in a metrics line.
fn metric_label(l: &str, name: &str) -> Option<String> {
    let from = l.find(&format!("{name}=\""))? + name.len() + 2;
    Some(l[from..].split('"').next()?.to_owned())
}

/// A metrics line's sample value.
fn value(l: &str) -> Option<f64> {
    l.rsplit(' ').next()?.parse().ok()
}

/// `VERB resource[/subresource]` of a request series, if it is a write.
fn write_of(l: &str) -> Option<String> {
    let verb = metric_label(l, "verb")?;
    if !["POST", "PUT", "PATCH", "DELETE"].contains(&verb.as_str()) {
        return None;
    }
    let mut what = metric_label(l, "resource").unwrap_or_default();
    if let Some(sub) = metric_label(l, "subresource").filter(|s| !s.is_empty()) {
        what = format!("{what}/{sub}");
    }
    Some(format!("{verb} {what}"))
}

/// What `after` counts more than `before`, largest first, as `N KEY` items.
pub fn growth(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> String {
    let mut d: Vec<(f64, &String)> = after
        .iter()
        .map(|(k, v)| (v - before.get(k).copied().unwrap_or(0.0), k))
        .filter(|(n, _)| *n > 0.0)
        .collect();
    d.sort_by(|a, b| b.0.total_cmp(&a.0));
    d.iter()
        .map(|(n, k)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reconcile calls of plugin `plugin` so far (the host's metrics).
pub async fn plugin_calls(plane: &Plane, plugin: &str) -> Result<f64> {
    plane.plugin_counter("calls", plugin).await
}

/// A benchmark's size: `var` from the environment, else `default`.
pub fn bench_size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Polls pod `name` until `pred` holds, for up to `timeout`; on time-out the
/// error carries the last status seen and the tail of the plane's log.
pub async fn wait_pod(
    plane: &Plane,
    api: &Api<Pod>,
    name: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Pod) -> bool,
) -> Result<Pod> {
    let last = std::sync::Mutex::new(None::<Pod>);
    let (seen, pred) = (&last, &pred);
    let what = format!("pod {name}: {what}");
    let found = eventually(timeout, &what, move || async move {
        let p = api.get_opt(name).await.ok().flatten()?;
        if pred(&p) {
            return Some(p);
        }
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
        None
    })
    .await;
    found.map_err(|e| {
        let status = last
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .and_then(|p| p.status)
            .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default());
        let log = plane.log();
        let lines: Vec<&str> = log.lines().collect();
        anyhow::anyhow!(
            "{e}\nlast status: {}\nlog:\n{}",
            status.unwrap_or_else(|| "(no pod)".into()),
            lines[lines.len().saturating_sub(80)..].join("\n")
        )
    })
}
