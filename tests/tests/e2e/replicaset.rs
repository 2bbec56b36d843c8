//! The built-in ReplicaSet controller end to end: `wasmlet up` with its
//! built-in plugins and sleeper pods that really run, with the caches held
//! back (the hidden `--debug-cache-delay-ms`) so only expectations keep the
//! controller from acting twice on what it already did.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::eventually;
use wasmlet_e2e::workload_plane::{self, History, record, sleeper_spec, sleeper_template};

fn owner_uid(p: &Pod) -> Option<String> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas) once
/// the status is for the set's generation.
fn counts(rs: &ReplicaSet) -> Option<(i32, i32, i32, i32)> {
    let st = rs.status.as_ref()?;
    (st.observed_generation == rs.metadata.generation).then_some((
        st.replicas,
        st.fully_labeled_replicas.unwrap_or(0),
        st.ready_replicas.unwrap_or(0),
        st.available_replicas.unwrap_or(0),
    ))
}

async fn wait_counts(
    sets: &Api<ReplicaSet>,
    want: (i32, i32, i32, i32),
    what: &str,
) -> Result<ReplicaSet> {
    let last = std::sync::Mutex::new(None);
    let got = eventually(Duration::from_secs(45), what, || async {
        let rs = sets.get("web").await.ok()?;
        *last.lock().unwrap() = rs.status.clone();
        (counts(&rs) == Some(want)).then_some(rs)
    })
    .await;
    got.map_err(|e| anyhow::anyhow!("{e}; last status {:?}", last.lock().unwrap()))
}

/// The most and fewest live (not deleting) pods owned by `uid` at any point
/// of the watch history, counted from the first time `from` was reached.
fn live_range(history: &History<Pod>, uid: &str, from: usize) -> (usize, usize) {
    let mut live: BTreeMap<String, bool> = BTreeMap::new();
    let (mut most, mut fewest, mut reached) = (0, usize::MAX, false);
    for (deleted, p) in history.snapshot() {
        let name = p.metadata.name.clone().unwrap_or_default();
        let alive = !deleted
            && p.metadata.deletion_timestamp.is_none()
            && owner_uid(&p).as_deref() == Some(uid);
        live.insert(name, alive);
        let n = live.values().filter(|a| **a).count();
        reached |= n >= from;
        most = most.max(n);
        if reached {
            fewest = fewest.min(n);
        }
    }
    (most, fewest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicaset_keeps_its_pods_exact_on_a_lagging_cache() -> Result<()> {
    let (_plane, client) = workload_plane::start(&["--debug-cache-delay-ms", "300"]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let history = record(pods.clone()).await?;
    // An orphan the set's selector picks: adopted, not duplicated.
    let orphan: Pod = serde_json::from_value(
        json!({"metadata": {"name": "orphan", "labels": {"app": "rs"}},
        "spec": sleeper_spec()}),
    )?;
    pods.create(&PostParams::default(), &orphan).await?;
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "rs"}},
            "template": sleeper_template(json!({"app": "rs", "tier": "x"}))},
    }))?;
    let rs = sets.create(&PostParams::default(), &rs).await?;
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    // The orphan lacks the template's tier label: 2 of 3 fully labelled.
    wait_counts(&sets, (3, 2, 3, 3), "three ready pods").await?;
    ensure!(
        owner_uid(&pods.get("orphan").await?).as_deref() == Some(uid.as_str()),
        "the orphan was adopted"
    );

    // A pod whose labels stop matching is released and replaced.
    pods.patch(
        "orphan",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await?;
    wait_counts(&sets, (3, 3, 3, 3), "the released pod replaced").await?;
    let released = pods.get("orphan").await?;
    ensure!(
        owner_uid(&released).is_none(),
        "released: {:?}",
        released.metadata.owner_references
    );

    // Scale up and down on the lagging cache.
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await?;
    wait_counts(&sets, (5, 5, 5, 5), "five ready pods").await?;
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    wait_counts(&sets, (2, 2, 2, 2), "two pods left").await?;
    let (most, fewest) = live_range(&history, &uid, 5);
    ensure!(most == 5, "at most 5 live pods were ever owned, saw {most}");
    ensure!(
        fewest == 2,
        "scaling 5 -> 2 never went below 2, saw {fewest}"
    );
    let owned = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() && owner_uid(p).as_deref() == Some(uid.as_str())
        })
        .count();
    ensure!(owned == 2, "{owned} live pods owned");
    Ok(())
}
