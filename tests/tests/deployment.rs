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
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=50s"])?;
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
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=50s"])?;
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
    let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=50s"])?;
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
