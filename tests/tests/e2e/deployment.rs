//! The built-in Deployment controller end to end: `wasmlet up` with its
//! built-in plugins (scheduler, wasi-runner, ReplicaSet and Deployment
//! controllers), sleeper pods that really run, and the real kubectl's
//! `rollout status` and `rollout undo`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::eventually;
use wasmlet_e2e::workload_plane::{self, History, is_ready, record, sleeper_template};

fn template(version: &str) -> Value {
    let mut t = sleeper_template(json!({"app": "dep"}));
    t["spec"]["containers"][0]["env"] = json!([{"name": "VERSION", "value": version}]);
    t
}

fn version_of(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == "VERSION")?
        .value
        .clone()
}

/// Live (not deleting) pods and, of them, Ready ones, at every point of the
/// watch history from the first time `from` pods were ready.
fn ready_range(history: &History<Pod>, from: usize) -> (usize, usize) {
    let mut state: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    let (mut most_live, mut fewest_ready, mut reached) = (0, usize::MAX, false);
    for (deleted, p) in history.snapshot() {
        let live = !deleted && p.metadata.deletion_timestamp.is_none();
        state.insert(
            p.metadata.name.clone().unwrap_or_default(),
            (live, live && is_ready(&p)),
        );
        let live_n = state.values().filter(|s| s.0).count();
        let ready_n = state.values().filter(|s| s.1).count();
        reached |= ready_n >= from;
        if reached {
            most_live = most_live.max(live_n);
            fewest_ready = fewest_ready.min(ready_n);
        }
    }
    (most_live, fewest_ready)
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, Option<String>)> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_keeps_every_replica_available_and_undo_goes_back() -> Result<()> {
    let (plane, client) = workload_plane::start(&[]).await?;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "dep"}},
            "progressDeadlineSeconds": 120, "revisionHistoryLimit": 5,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template("1")},
    }))?;
    deps.create(&PostParams::default(), &d).await?;
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    let first = deps.get("web").await?;
    assert_eq!(
        condition(&first, "Available"),
        Some(("True".into(), Some("MinimumReplicasAvailable".into())))
    );
    assert_eq!(
        condition(&first, "Progressing"),
        Some(("True".into(), Some("NewReplicaSetAvailable".into())))
    );
    let first_sets = sets.list(&Default::default()).await?.items;
    ensure!(first_sets.len() == 1, "one ReplicaSet: {first_sets:?}");
    let first_rs = first_sets[0].metadata.name.clone().context("a name")?;

    // Roll a new template while recording every pod change.
    let history = record(pods.clone()).await?;
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": template("2")}})),
    )
    .await?;
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    let (most_live, fewest_ready) = ready_range(&history, 4);
    ensure!(
        fewest_ready >= 4,
        "only {fewest_ready} ready pods at some point of the rollout"
    );
    ensure!(most_live <= 5, "{most_live} live pods at once (maxSurge 1)");
    let rolled = deps.get("web").await?;
    let annotations = rolled.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("2")
    );
    let old: ReplicaSet = sets.get(&first_rs).await?;
    assert_eq!(
        old.spec.and_then(|s| s.replicas),
        Some(0),
        "the old set is scaled to zero and kept"
    );

    // Undo: back to the first template, on the first ReplicaSet.
    let out = plane.kubectl_ok(&["rollout", "undo", "deployment/web"])?;
    ensure!(out.contains("rolled back"), "{out}");
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    let back = deps.get("web").await?;
    assert_eq!(version_of(&back).as_deref(), Some("1"));
    let reused: ReplicaSet = sets.get(&first_rs).await?;
    assert_eq!(reused.spec.as_ref().and_then(|s| s.replicas), Some(4));
    let ra = reused.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ra.get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        ra.get("deployment.kubernetes.io/revision-history")
            .map(String::as_str),
        Some("1")
    );
    let live = eventually(
        Duration::from_secs(30),
        "only version-1 pods left",
        || async {
            let ps = pods.list(&Default::default()).await.ok()?.items;
            let live: Vec<&Pod> = ps
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            (live.len() == 4
                && live.iter().all(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("pod-template-hash"))
                        == reused.spec.as_ref().and_then(|s| {
                            s.template
                                .as_ref()?
                                .metadata
                                .as_ref()?
                                .labels
                                .as_ref()?
                                .get("pod-template-hash")
                        })
                }))
            .then_some(live.len())
        },
    )
    .await?;
    assert_eq!(live, 4);
    Ok(())
}

fn hash_of(p: &Pod) -> String {
    workload_plane::label(p, "pod-template-hash")
}

fn deployment(name: &str, replicas: i32, strategy: Value, version: &str) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "dep"}},
            "progressDeadlineSeconds": 120, "strategy": strategy,
            "template": template(version)},
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_removes_every_old_pod_before_the_first_new_one() -> Result<()> {
    let (plane, client) = workload_plane::start(&[]).await?;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d = deployment("re", 3, json!({"type": "Recreate"}), "1")?;
    deps.create(&PostParams::default(), &d).await?;
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/re", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");

    let history = record(pods.clone()).await?;
    let old_hash = hash_of(&pods.list(&Default::default()).await?.items[0]);
    deps.patch(
        "re",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": template("2")}})),
    )
    .await?;
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/re", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");

    // At no point of the history do pods of both templates exist (an old pod
    // exists until its DELETED event, terminating or not).
    let mut existing: BTreeMap<String, String> = BTreeMap::new();
    let mut new_seen = 0;
    for (deleted, p) in history.snapshot() {
        let name = p.metadata.name.clone().unwrap_or_default();
        if deleted {
            existing.remove(&name);
        } else {
            existing.insert(name, hash_of(&p));
        }
        let old = existing.values().filter(|h| **h == old_hash).count();
        let new = existing.len() - old;
        new_seen = new_seen.max(new);
        ensure!(
            old == 0 || new == 0,
            "{old} old and {new} new pods at once: {existing:?}"
        );
    }
    ensure!(new_seen == 3, "the new template's 3 pods: {new_seen}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_deployment_rolls_nothing_until_resumed() -> Result<()> {
    let (plane, client) = workload_plane::start(&[]).await?;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    deps.create(&PostParams::default(), &deployment("p", 2, strategy, "1")?)
        .await?;
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/p", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");

    plane.kubectl_ok(&["rollout", "pause", "deployment/p"])?;
    deps.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": template("2")}})),
    )
    .await?;
    // The controller has seen the new template once it reports this
    // generation, and says it is paused.
    let seen = eventually(Duration::from_secs(30), "the pause observed", || async {
        let d = deps.get("p").await.ok()?;
        let observed = d.status.as_ref()?.observed_generation;
        (observed == d.metadata.generation
            && condition(&d, "Progressing").and_then(|c| c.1).as_deref()
                == Some("DeploymentPaused"))
        .then_some(d)
    })
    .await?;
    let listed = sets.list(&Default::default()).await?.items;
    ensure!(
        listed.len() == 1,
        "a paused Deployment made a new ReplicaSet: {:?}",
        listed.iter().map(|s| &s.metadata.name).collect::<Vec<_>>()
    );
    ensure!(version_of(&seen).as_deref() == Some("2"));

    plane.kubectl_ok(&["rollout", "resume", "deployment/p"])?;
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/p", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    ensure!(sets.list(&Default::default()).await?.items.len() == 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_past_its_progress_deadline_says_so() -> Result<()> {
    let (plane, client) = workload_plane::start(&[]).await?;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    // Pods of a module that exits at once never become ready.
    let mut t = template("1");
    t["spec"]["containers"][0]["image"] = json!(workload_plane::workload("exitcode.wasm"));
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "stuck"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dep"}},
            "progressDeadlineSeconds": 5, "template": t},
    }))?;
    deps.create(&PostParams::default(), &d).await?;
    let d = eventually(Duration::from_secs(60), "the deadline reported", || async {
        let d = deps.get("stuck").await.ok()?;
        (condition(&d, "Progressing")
            == Some(("False".into(), Some("ProgressDeadlineExceeded".into()))))
        .then_some(d)
    })
    .await?;
    ensure!(
        d.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
            == 0
    );
    // kubectl reads the same condition and fails (at once: its own timeout
    // would be another error).
    let out = plane.kubectl(&["rollout", "status", "deployment/stuck", "--timeout=120s"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("exceeded its progress deadline"),
        "{err}"
    );
    Ok(())
}

/// Benchmark, not a test (ignored; run it on purpose, ideally with a release
/// binary: `WASMLET_BIN=target/release/wasmlet cargo test --test e2e
/// -- deployment::bench_ --ignored --nocapture`): a Deployment of `DEPLOY_BENCH_PODS` (default
/// 500) sleepers from create to Available with every replica updated and
/// ready, with the Deployment and ReplicaSet controllers' calls and every API
/// write the plane served meanwhile (the node agent's included).
#[tokio::test]
#[ignore = "benchmark: prints figures, asserts nothing about time"]
async fn bench_deployment_to_available() -> Result<()> {
    let n = workload_plane::bench_size("DEPLOY_BENCH_PODS", 500) as i32;
    let room = (n + 10).to_string();
    let (plane, client) = workload_plane::start(&["--max-pods", &room]).await?;
    let calls = || async {
        let d = workload_plane::plugin_calls(&plane, "deployment-controller").await?;
        let r = workload_plane::plugin_calls(&plane, "replicaset-controller").await?;
        anyhow::Ok((d, r))
    };
    let (d0, r0) = calls().await?;
    let w0 = workload_plane::api_writes(&client).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let start = std::time::Instant::now();
    deployments
        .create(
            &PostParams::default(),
            &deployment("bench", n, json!({"type": "RollingUpdate"}), "v1")?,
        )
        .await?;
    eventually(
        Duration::from_secs(1800),
        "the deployment available",
        || async {
            let d = deployments.get("bench").await.ok()?;
            let st = d.status.as_ref()?;
            let available = condition(&d, "Available").is_some_and(|(s, _)| s == "True");
            (available && st.updated_replicas == Some(n) && st.available_replicas == Some(n))
                .then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let took = start.elapsed();
    let (d1, r1) = calls().await?;
    let w1 = workload_plane::api_writes(&client).await?;
    println!(
        "deployment bench: {n} replicas apply -> Available in {:.2} s; {} deployment-controller \
         and {} replicaset-controller calls; {} API writes",
        took.as_secs_f64(),
        d1 - d0,
        r1 - r0,
        w1 - w0,
    );
    Ok(())
}
