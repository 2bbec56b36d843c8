//! `v1` ReplicationControllers: served as upstream serves them (discovery
//! with `rc` and category `all`, defaults, validation, strategic merge, the
//! scale subresource, kubectl's columns), and run by the built-in ReplicaSet
//! controller as upstream's ReplicaSet controller runs them.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::workload_plane::{self, History, record, sleeper_spec, sleeper_template};
use wasmlet_e2e::{Plane, eventually, expect_status};

fn rc_json(name: &str, replicas: i32) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "example.com/app:1"}]}}}})
}

/// The API surface alone (`wasmlet apiserver`, no controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_controllers_are_served_as_upstream() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;

    // Discovery: the short name and the `all` category.
    let resources = plane.kubectl_ok(&["api-resources", "--api-group=", "-o", "wide"])?;
    let row = resources
        .lines()
        .find(|l| l.starts_with("replicationcontrollers "))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        cells.get(1) == Some(&"rc")
            && cells.get(4) == Some(&"ReplicationController")
            && cells.last() == Some(&"all"),
        "{resources}"
    );

    // Defaults: the selector and labels from the template.
    let path = plane.data_dir().join("rc.json");
    std::fs::write(&path, rc_json("web", 2).to_string())?;
    plane.kubectl_ok(&["create", "-f", path.to_str().unwrap()])?;
    let rcs: Api<ReplicationController> = Api::default_namespaced(client.clone());
    let rc = rcs.get("web").await?;
    let spec = rc.spec.clone().unwrap();
    assert_eq!(
        spec.selector,
        Some([("app".to_string(), "web".to_string())].into())
    );
    assert_eq!(rc.metadata.labels, spec.selector);
    assert_eq!(rc.metadata.generation, Some(1));

    // `kubectl get rc` columns, wide ones included.
    let wide = plane.kubectl_ok(&["get", "rc", "web", "-o", "wide"])?;
    let lines: Vec<Vec<&str>> = wide
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(lines[1][..4], ["web", "2", "0", "0"]);
    assert_eq!(lines[1][5..], ["main", "example.com/app:1", "app=web"]);

    // The scale subresource, through kubectl and kube-rs.
    plane.kubectl_ok(&["scale", "rc", "web", "--replicas=3"])?;
    let scale = rcs.get_scale("web").await?;
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(
        scale.status.and_then(|s| s.selector).as_deref(),
        Some("app=web")
    );
    assert_eq!(rcs.get("web").await?.metadata.generation, Some(2));

    // Strategic merge: a new container joins the list by name.
    let patched = rcs
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "side", "image": "example.com/side:1"}]}}}})),
        )
        .await?;
    let names: Vec<String> = patched
        .spec
        .unwrap()
        .template
        .unwrap()
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["side", "main"]);

    // Validation: a selector the template does not match is refused.
    let mut bad = rc_json("bad", 1);
    bad["spec"]["selector"] = json!({"app": "other"});
    let err = rcs
        .create(&PostParams::default(), &serde_json::from_value(bad)?)
        .await;
    let status = expect_status(err, 422, "Invalid");
    assert!(
        status
            .message
            .contains("spec.template.metadata.labels: Invalid value"),
        "{}",
        status.message
    );
    // `kubectl explain` reads its published schema.
    let explain = plane.kubectl_ok(&["explain", "rc.spec.selector"])?;
    assert!(
        explain.contains("KIND:       ReplicationController"),
        "{explain}"
    );
    // `kubectl get all` lists it (category `all`).
    let all = plane.kubectl_ok(&["get", "all"])?;
    assert!(all.contains("replicationcontroller/web"), "{all}");
    Ok(())
}

fn owner(p: &Pod) -> Option<(String, String)> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| (r.kind.clone(), r.uid.clone()))
}

/// (replicas, readyReplicas, availableReplicas) once the status is for the
/// RC's generation.
fn counts(rc: &ReplicationController) -> Option<(i32, i32, i32)> {
    let st = rc.status.as_ref()?;
    (st.observed_generation == rc.metadata.generation).then_some((
        st.replicas,
        st.ready_replicas.unwrap_or(0),
        st.available_replicas.unwrap_or(0),
    ))
}

async fn wait_counts(
    rcs: &Api<ReplicationController>,
    want: (i32, i32, i32),
    what: &str,
) -> Result<ReplicationController> {
    let last = std::sync::Mutex::new(None);
    let got = eventually(Duration::from_secs(60), what, || async {
        let rc = rcs.get("web").await.ok()?;
        *last.lock().unwrap() = rc.status.clone();
        (counts(&rc) == Some(want)).then_some(rc)
    })
    .await;
    got.map_err(|e| anyhow::anyhow!("{e}; last status {:?}", last.lock().unwrap()))
}

/// The most and fewest live pods the RC `uid` controlled at any point of the
/// watch history, counted from the first time `from` was reached.
fn live_range(history: &History<Pod>, uid: &str, from: usize) -> (usize, usize) {
    let mut live: BTreeMap<String, bool> = BTreeMap::new();
    let (mut most, mut fewest, mut reached) = (0, usize::MAX, false);
    for (deleted, p) in history.snapshot() {
        let alive = !deleted
            && p.metadata.deletion_timestamp.is_none()
            && owner(&p).is_some_and(|(_, u)| u == uid);
        live.insert(p.metadata.name.clone().unwrap_or_default(), alive);
        let n = live.values().filter(|a| **a).count();
        reached |= n >= from;
        most = most.max(n);
        if reached {
            fewest = fewest.min(n);
        }
    }
    (most, fewest)
}

/// The built-in replicationcontroller-controller (the ReplicaSet
/// controller's code) on a lagging cache: pods made from the template and
/// owned by the RC, an orphan adopted through the RC's label-map selector,
/// `kubectl scale rc` up and down never overshooting, `kubectl get rc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replication_controller_keeps_its_pods_and_scales_with_kubectl() -> Result<()> {
    let (plane, client) = workload_plane::start_with(
        "scheduler,wasi-runner,replicationcontroller-controller",
        &["--debug-cache-delay-ms", "300"],
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "default");
    let history = record(pods.clone()).await?;
    // An orphan the RC's selector picks: adopted, not duplicated.
    let orphan: Pod = serde_json::from_value(
        json!({"metadata": {"name": "orphan", "labels": {"app": "web"}}, "spec": sleeper_spec()}),
    )?;
    pods.create(&PostParams::default(), &orphan).await?;
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"app": "web"},
            "template": sleeper_template(json!({"app": "web", "tier": "x"}))},
    }))?;
    let rc = rcs.create(&PostParams::default(), &rc).await?;
    let uid = rc.metadata.uid.clone().unwrap_or_default();
    // The orphan lacks the template's tier label: 1 of 2 fully labelled.
    let rc = wait_counts(&rcs, (2, 2, 2), "two ready pods").await?;
    let labelled = rc.status.and_then(|s| s.fully_labeled_replicas);
    assert_eq!(labelled, Some(1));
    assert_eq!(
        owner(&pods.get("orphan").await?),
        Some(("ReplicationController".to_string(), uid.clone())),
        "the orphan was adopted by the RC"
    );

    plane.kubectl_ok(&["scale", "rc", "web", "--replicas=4"])?;
    wait_counts(&rcs, (4, 4, 4), "four ready pods").await?;
    let row = plane.kubectl_ok(&["get", "rc", "web", "--no-headers"])?;
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>()[..4],
        ["web", "4", "4", "4"]
    );

    plane.kubectl_ok(&["scale", "rc", "web", "--replicas=1"])?;
    let done = wait_counts(&rcs, (1, 1, 1), "one pod left").await;
    done.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let (most, fewest) = live_range(&history, &uid, 4);
    ensure!(most == 4, "at most 4 live pods were ever owned, saw {most}");
    ensure!(
        fewest == 1,
        "scaling 4 -> 1 never went below 1, saw {fewest}"
    );
    let owned: Vec<Pod> = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() && owner(p).is_some_and(|(_, u)| u == uid)
        })
        .collect();
    ensure!(owned.len() == 1, "{} live pods owned", owned.len());
    // The pod left is named for the RC, from its template.
    let name = owned[0].metadata.name.clone().unwrap_or_default();
    ensure!(name.starts_with("web-") || name == "orphan", "{name}");
    Ok(())
}
