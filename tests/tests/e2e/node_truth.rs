//! A node that tells the truth about what it can run (issue 45, point 7), end to
//! end through the real binary, the built-in scheduler and `wasi-runner`:
//!
//! - the Node is `Ready=False`, reason `ProviderLoading`, from its registration
//!   until its provider plugin is loaded, and the scheduler binds nothing to it
//!   meanwhile (a NotReady node counts as carrying upstream's
//!   `node.kubernetes.io/not-ready` taint);
//! - pods without a memory limit are admitted, scheduled and budgeted by their
//!   requests: a 100-pod StatefulSet of tiny requests runs all 100, and a pod the
//!   node can never start is refused once (`OutOfmemory`), not crash-looped;
//! - a second provider plugin in the plugin directory is refused, naming both.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::workload_plane::{self, workload, workloads_dir};
use wasmlet_e2e::{Host, Plane, built_plugins, eventually, install_plugin, rv_of};

/// The Node's Ready condition: (status, reason).
fn ready(n: &Node) -> Option<(String, String)> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// The PodScheduled condition's message, while the pod waits for a node.
fn unschedulable(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
        .message
        .clone()
}

/// Point 7, first half: registration says NotReady (`ProviderLoading`), the
/// scheduler holds the pod back with upstream's not-ready taint reason, and
/// binds it only after the Node turned Ready. Two processes (the API server,
/// then the host with the node) so that the Node's very first version is
/// recorded. Failed before: the Node registered `Ready=True` (`KubeletReady`)
/// while its provider was nowhere loaded, and the pod was bound at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_not_ready_until_its_provider_loads_and_gets_no_pod_before() -> Result<()> {
    let node = "truthful-node";
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let nodes = workload_plane::record(Api::<Node>::all(client.clone())).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod_history = workload_plane::record(pods.clone()).await?;
    let mut spec = workload_plane::sleeper_spec();
    spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "early"}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;

    // The host with the scheduler and the node, its provider not installed yet.
    let seed = built_plugins().join(".precompiled");
    let modules = workloads_dir().display().to_string();
    let host = Host::start(
        &plane.kubeconfig(),
        &[
            "--mode",
            "all",
            "--builtins",
            "--builtin-plugins",
            "scheduler",
            "--node-name",
            node,
            "--kubelet-port",
            "0",
            "--allow-file-images",
            &modules,
            "--precompiled",
            &seed.display().to_string(),
        ],
    )
    .await?;
    // The scheduler saw the NotReady node and said why, in upstream's words.
    let why = eventually(
        Duration::from_secs(120),
        "the pod held back by the not-ready taint",
        || async {
            let p = pods.get("early").await.ok()?;
            unschedulable(&p).filter(|m| m.contains("node.kubernetes.io/not-ready"))
        },
    )
    .await
    .with_context(|| host.log())?;
    ensure!(
        why.contains("node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
        "{why}"
    );
    let first = nodes
        .snapshot()
        .into_iter()
        .find(|(_, n)| n.metadata.name.as_deref() == Some(node))
        .map(|(_, n)| n)
        .context("the Node's first version")?;
    ensure!(
        ready(&first) == Some(("False".into(), "ProviderLoading".into())),
        "registered as {:?}",
        ready(&first)
    );

    // The provider arrives: it loads, the Node turns Ready, the pod is bound and runs.
    install_plugin(&host.plugin_dir(), "wasi-runner")?;
    let api = Api::<Pod>::namespaced(client.clone(), "default");
    eventually(
        Duration::from_secs(120),
        "the early pod Running",
        || async {
            let p = api.get("early").await.ok()?;
            (phase(&p) == "Running").then_some(())
        },
    )
    .await
    .with_context(|| host.log())?;
    let seen: Vec<Node> = nodes
        .snapshot()
        .into_iter()
        .filter(|(_, n)| n.metadata.name.as_deref() == Some(node))
        .map(|(_, n)| n)
        .collect();
    let reasons: Vec<(String, String)> = seen.iter().filter_map(ready).collect();
    let ready_at = seen
        .iter()
        .find(|n| ready(n).is_some_and(|(s, _)| s == "True"))
        .map(rv_of)
        .with_context(|| format!("the Node never turned Ready: {reasons:?}"))?;
    ensure!(
        reasons
            .iter()
            .take_while(|(s, _)| s != "True")
            .all(|(s, r)| s == "False" && (r == "ProviderLoading" || r == "ProviderMissing")),
        "{reasons:?}"
    );
    let bound_at = pod_history
        .snapshot()
        .into_iter()
        .map(|(_, p)| p)
        .find(|p| {
            p.metadata.name.as_deref() == Some("early")
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        })
        .map(|p| rv_of(&p))
        .context("the pod's binding")?;
    ensure!(
        bound_at > ready_at,
        "bound at resourceVersion {bound_at}, before the Node was Ready at {ready_at}: {reasons:?}"
    );
    Ok(())
}

/// A second provider plugin beside the node's is refused, naming both; the
/// node's own keeps running pods. Failed before: both loaded without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_provider_in_the_plugin_directory_is_refused_naming_both() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let dir = plane.plugin_dir();
    let built = built_plugins();
    std::fs::copy(
        built.join("wasi-runner.toml"),
        dir.join("other-runner.toml"),
    )?;
    std::fs::copy(
        built.join("wasi-runner.wasm"),
        dir.join(".other-runner.wasm"),
    )?;
    std::fs::rename(
        dir.join(".other-runner.wasm"),
        dir.join("other-runner.wasm"),
    )?;
    let why = eventually(
        Duration::from_secs(120),
        "/readyz/plugin-set naming the refused provider",
        || async {
            let (code, body) = plane.http_get("/readyz/plugin-set").await.ok()?;
            (code == 500 && body.contains("other-runner")).then_some(body)
        },
    )
    .await
    .with_context(|| plane.log())?;
    ensure!(
        why.contains("plugin other-runner is a second provider beside wasi-runner")
            && why.contains("--provider wasi-runner"),
        "{why}"
    );
    ensure!(
        plane
            .plugin_counter("load_failures", "other-runner")
            .await?
            == 1.0,
        "{}",
        plane.metrics().await?
    );
    // The node's provider still runs its pods.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "still-runs"},
        "spec": workload_plane::sleeper_spec(),
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    workload_plane::wait_pod(
        &plane,
        &pods,
        "still-runs",
        Duration::from_secs(120),
        "Running",
        |p| phase(p) == "Running",
    )
    .await?;
    Ok(())
}

/// Point 7, second half: 100 pods without memory limits, each requesting 1 MiB,
/// all run on one node, and a pod whose limit the node can never give is
/// refused once. The node's budget is set to 4 GiB here (the default is three
/// quarters of the machine's memory) so that the test does not depend on the
/// machine: 4 GiB holds 16 default caps of 256 MiB, and the 100 pods' requests
/// are 100 MiB. Failed before: each workload reserved the default cap from the
/// budget, so 16 ran and the rest, bound by the scheduler (which counts
/// requests), crash-looped with `StartError`; the over-limit pod crash-looped too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_pods_without_limits_run_and_an_impossible_one_is_refused_once() -> Result<()> {
    const REPLICAS: usize = 100;
    let (plane, client) = workload_plane::start_with(
        "scheduler,wasi-runner,statefulset-controller",
        &["--workload-memory-budget", "4Gi"],
    )
    .await?;
    let mut spec = workload_plane::sleeper_spec();
    spec["containers"][0]["args"] = json!(["pause"]);
    spec["containers"][0]["resources"] = json!({"requests": {"memory": "1Mi"}});
    let set: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "tiny"},
        "spec": {
            "replicas": REPLICAS,
            "podManagementPolicy": "Parallel",
            "serviceName": "tiny",
            "selector": {"matchLabels": {"app": "tiny"}},
            "template": {"metadata": {"labels": {"app": "tiny"}}, "spec": spec},
        },
    }))?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    sets.create(&PostParams::default(), &set).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().labels("app=tiny");
    let counts = |ps: &[Pod]| {
        let running = ps
            .iter()
            .filter(|p| phase(p) == "Running" && workload_plane::is_ready(p))
            .count();
        let restarted = ps
            .iter()
            .filter(|p| {
                serde_json::to_value(p.status.as_ref())
                    .ok()
                    .and_then(|s| s.pointer("/containerStatuses/0/restartCount").cloned())
                    .and_then(|c| c.as_i64())
                    .unwrap_or(0)
                    > 0
            })
            .count();
        (ps.len(), running, restarted)
    };
    let last = std::sync::Mutex::new((0, 0, 0));
    let all = eventually(
        Duration::from_secs(600),
        "all 100 pods Running and Ready",
        || async {
            let ps = pods.list(&lp).await.ok()?.items;
            let c = counts(&ps);
            *last.lock().unwrap() = c;
            ensure_no_restart(c.2)?;
            (c.1 == REPLICAS).then_some(c)
        },
    )
    .await;
    let (listed, running, restarted) = all.with_context(|| {
        let (l, r, x) = *last.lock().unwrap();
        format!(
            "listed {l}, running {r}, restarted {x}; log tail:\n{}",
            tail(&plane.log())
        )
    })?;
    ensure!(
        listed == REPLICAS && running == REPLICAS && restarted == 0,
        "{listed} {running} {restarted}"
    );
    // The StatefulSet controller counts them too (its status follows the pods).
    eventually(Duration::from_secs(120), "readyReplicas 100", || async {
        let set = sets.get("tiny").await.ok()?;
        (set.status?.ready_replicas == Some(REPLICAS as i32)).then_some(())
    })
    .await?;

    // A limit above the node's largest (--workload-max-memory, 2Gi by default):
    // the scheduler places it by its requests, the node refuses it once.
    let big: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "too-big"},
        "spec": {
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": workload("sleeper.wasm"),
                "resources": {"requests": {"memory": "1Mi"}, "limits": {"memory": "3Gi"}}}],
        },
    }))?;
    pods.create(&PostParams::default(), &big).await?;
    let p = workload_plane::wait_pod(
        &plane,
        &pods,
        "too-big",
        Duration::from_secs(120),
        "refused",
        |p| phase(p) == "Failed",
    )
    .await?;
    let s: Value = serde_json::to_value(p.status.as_ref())?;
    ensure!(s["reason"] == "OutOfmemory", "{s}");
    ensure!(
        s["message"]
            .as_str()
            .is_some_and(|m| m.contains("container main's memory limit")
                && m.contains("--workload-max-memory")),
        "{s}"
    );
    ensure!(
        s.pointer("/containerStatuses/0/state/running").is_none()
            && s.pointer("/containerStatuses/0/restartCount")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0,
        "the refused pod ran: {s}"
    );
    Ok(())
}

/// A pod that restarted means a workload failed to start or died: the
/// budget let the node down (the failure this test is about).
fn ensure_no_restart(restarted: usize) -> Option<()> {
    assert_eq!(
        restarted, 0,
        "pods restarted: a workload failed to start (the budget counted limits?)"
    );
    Some(())
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
