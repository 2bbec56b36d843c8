//! `apps/v1` DaemonSets: served as upstream serves them (discovery with `ds`
//! and category `all`, defaults, validation with an immutable selector,
//! strategic merge, the status subresource, kubectl's columns), and run by
//! the built-in daemonset-controller on two real node agents.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::workload_plane::{
    self, History, NODE, is_ready, label, record, sleeper_template, workloads_dir,
};
use wasmlet_e2e::{Host, Plane, eventually, expect_status, install_plugin};

fn ds_json(name: &str) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": {"kubernetes.io/os": "wasi"},
                "containers": [{"name": "main", "image": "example.com/agent:1"}]}}}})
}

/// The API surface alone (`wasmlet apiserver`, no controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonsets_are_served_as_upstream() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;

    let resources = plane.kubectl_ok(&["api-resources", "--api-group=apps", "-o", "wide"])?;
    let row = resources
        .lines()
        .find(|l| l.starts_with("daemonsets "))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        cells.get(1) == Some(&"ds")
            && cells.get(4) == Some(&"DaemonSet")
            && cells.last() == Some(&"all"),
        "{resources}"
    );

    let path = plane.data_dir().join("ds.json");
    std::fs::write(&path, ds_json("agent").to_string())?;
    plane.kubectl_ok(&["apply", "-f", path.to_str().unwrap()])?;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let ds = sets.get("agent").await?;
    let spec = ds.spec.clone().unwrap();
    let strategy = spec.update_strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = serde_json::to_value(strategy.rolling_update.unwrap())?;
    assert_eq!(rolling, json!({"maxUnavailable": 1, "maxSurge": 0}));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(ds.metadata.generation, Some(1));

    // A second apply of the same manifest changes nothing.
    plane.kubectl_ok(&["apply", "-f", path.to_str().unwrap()])?;
    let again = sets.get("agent").await?;
    assert_eq!(
        again.metadata.resource_version,
        ds.metadata.resource_version
    );

    // `kubectl get ds` columns, wide ones included.
    let wide = plane.kubectl_ok(&["get", "ds", "agent", "-o", "wide"])?;
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
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(
        lines[1][..7],
        ["agent", "0", "0", "0", "0", "0", "kubernetes.io/os=wasi"]
    );
    assert_eq!(lines[1][8..], ["main", "example.com/agent:1", "app=agent"]);

    // The status subresource: a status write keeps the spec, a main write
    // keeps the status.
    let status = json!({"status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2,
        "numberReady": 1, "numberMisscheduled": 0, "observedGeneration": 1}});
    sets.patch_status("agent", &PatchParams::default(), &Patch::Merge(status))
        .await?;
    let got = sets.get("agent").await?.status.unwrap();
    assert_eq!((got.desired_number_scheduled, got.number_ready), (2, 1));
    let row = plane.kubectl_ok(&["get", "ds", "agent", "--no-headers"])?;
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>()[..4],
        ["agent", "2", "2", "1"]
    );

    // Strategic merge: `kubectl set image` changes one container in place.
    plane.kubectl_ok(&["set", "image", "ds/agent", "main=example.com/agent:2"])?;
    let ds = sets.get("agent").await?;
    let containers = ds.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("example.com/agent:2"));
    assert_eq!(ds.metadata.generation, Some(2));
    assert_eq!(ds.status.map(|s| s.number_ready), Some(1));

    // The selector is immutable, and must match the template.
    let err = sets
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"matchLabels": {"app": "x"}},
                "template": {"metadata": {"labels": {"app": "x"}}}}})),
        )
        .await;
    let s = expect_status(err, 422, "Invalid");
    assert!(
        s.message.contains("spec.selector: Invalid value")
            && s.message.contains("field is immutable"),
        "{}",
        s.message
    );
    let mut bad = ds_json("bad");
    bad["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
    let err = sets
        .create(&PostParams::default(), &serde_json::from_value(bad)?)
        .await;
    let s = expect_status(err, 422, "Invalid");
    assert!(
        s.message.contains("does not match template"),
        "{}",
        s.message
    );

    let explain = plane.kubectl_ok(&["explain", "ds.spec.updateStrategy"])?;
    assert!(explain.contains("KIND:       DaemonSet"), "{explain}");
    let all = plane.kubectl_ok(&["get", "all"])?;
    assert!(all.contains("daemonset.apps/agent"), "{all}");
    Ok(())
}

fn owned_by_ds(p: &Pod, uid: &str) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// The set's live (not deleting) pods by node.
async fn pods_by_node(pods: &Api<Pod>, uid: &str) -> Result<BTreeMap<String, Vec<Pod>>> {
    let mut out: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for p in pods.list(&ListParams::default()).await?.items {
        if owned_by_ds(&p, uid) && p.metadata.deletion_timestamp.is_none() {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            out.entry(node).or_default().push(p);
        }
    }
    Ok(out)
}

/// Waits until every node in `nodes` runs exactly one Ready pod of the set
/// (and no other node does) and the status says so for its generation.
async fn wait_one_ready_pod_per_node(
    plane: &Plane,
    sets: &Api<DaemonSet>,
    pods: &Api<Pod>,
    uid: &str,
    nodes: &[&str],
    what: &str,
) -> Result<BTreeMap<String, Vec<Pod>>> {
    let want: BTreeSet<String> = nodes.iter().map(|n| n.to_string()).collect();
    let n = i32::try_from(nodes.len())?;
    let last = std::sync::Mutex::new(String::new());
    let got = eventually(Duration::from_secs(90), what, || async {
        let by_node = pods_by_node(pods, uid).await.ok()?;
        let ds = sets.get("agent").await.ok()?;
        let st = ds.status.clone().unwrap_or_default();
        *last.lock().unwrap() = format!("{st:?}; pods on {:?}", by_node.keys().collect::<Vec<_>>());
        let placed = by_node.keys().cloned().collect::<BTreeSet<_>>() == want
            && by_node.values().all(|ps| ps.len() == 1 && is_ready(&ps[0]));
        let status = st.observed_generation == ds.metadata.generation
            && st.desired_number_scheduled == n
            && st.current_number_scheduled == n
            && st.number_ready == n
            && st.number_available == Some(n)
            && st.updated_number_scheduled == Some(n)
            && st.number_misscheduled == 0;
        (placed && status).then_some(by_node)
    })
    .await;
    got.map_err(|e| anyhow::anyhow!("{e}; last: {}; log:\n{}", last.lock().unwrap(), plane.log()))
}

/// The fewest nodes with a Ready, not deleting pod of the set at any point
/// of the watch history, from the first time `from` nodes had one.
fn fewest_serving_nodes(history: &History<Pod>, uid: &str, from: usize) -> usize {
    let mut serving: BTreeMap<String, Option<String>> = BTreeMap::new();
    let (mut fewest, mut reached) = (usize::MAX, false);
    for (deleted, p) in history.snapshot() {
        if !owned_by_ds(&p, uid) {
            continue;
        }
        let good = !deleted && p.metadata.deletion_timestamp.is_none() && is_ready(&p);
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        serving.insert(
            p.metadata.name.clone().unwrap_or_default(),
            good.then_some(node).flatten(),
        );
        let nodes: BTreeSet<&String> = serving.values().flatten().collect();
        reached |= nodes.len() >= from;
        if reached {
            fewest = fewest.min(nodes.len());
        }
    }
    fewest
}

/// One Ready pod per node, a node joining gets one, a template change rolls
/// node by node (never both nodes down: watched), `kubectl rollout status`
/// returns, and a node removed loses its pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_runs_one_pod_per_node_and_rolls_node_by_node() -> Result<()> {
    let (plane, client) =
        workload_plane::start_with("scheduler,wasi-runner,daemonset-controller", &[]).await?;
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut template = sleeper_template(json!({"app": "agent"}));
    template["spec"]["terminationGracePeriodSeconds"] = json!(1);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template},
    }))?;
    let ds = sets.create(&PostParams::default(), &ds).await?;
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let one = wait_one_ready_pod_per_node(&plane, &sets, &pods, &uid, &[NODE], "a pod on the node")
        .await?;
    let first = &one[NODE][0];
    ensure!(
        label(first, "pod-template-generation") == "1",
        "{:?}",
        first.metadata.labels
    );
    let hash1 = label(first, "controller-revision-hash");
    ensure!(!hash1.is_empty(), "{:?}", first.metadata.labels);
    // Placed through the scheduler: the pod names its node by affinity.
    let affinity = serde_json::to_value(&first.spec.as_ref().unwrap().affinity)?;
    assert_eq!(
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchFields"][0],
        json!({"key": "metadata.name", "operator": "In", "values": [NODE]})
    );

    // A second node agent joins: it gets a pod.
    let modules = workloads_dir().display().to_string();
    let mut second = Host::start(
        &plane.kubeconfig(),
        &[
            "--mode",
            "node",
            "--node-name",
            "node-b",
            "--kubelet-port",
            "0",
            "--allow-file-images",
            &modules,
        ],
    )
    .await?;
    install_plugin(&second.plugin_dir(), "wasi-runner")?;
    wait_one_ready_pod_per_node(
        &plane,
        &sets,
        &pods,
        &uid,
        &[NODE, "node-b"],
        "a pod on each node",
    )
    .await?;
    let row = plane.kubectl_ok(&["get", "ds", "agent", "--no-headers"])?;
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>()[..7],
        ["agent", "2", "2", "2", "2", "2", "<none>"]
    );

    // A template change rolls node by node: maxUnavailable 1 of 2 nodes.
    let history = record(pods.clone()).await?;
    plane.kubectl_ok(&["set", "env", "ds/agent", "VERSION=2"])?;
    let out = plane.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    let two = wait_one_ready_pod_per_node(
        &plane,
        &sets,
        &pods,
        &uid,
        &[NODE, "node-b"],
        "the update on each node",
    )
    .await?;
    for ps in two.values() {
        let hash = label(&ps[0], "controller-revision-hash");
        ensure!(
            hash != hash1 && label(&ps[0], "pod-template-generation") == "2",
            "{:?}",
            ps[0].metadata.labels
        );
    }
    let fewest = fewest_serving_nodes(&history, &uid, 2);
    ensure!(
        fewest == 1,
        "the update left {fewest} of 2 nodes serving at its worst (maxUnavailable 1)"
    );
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let owned = revisions
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
        .map(|r| r.revision)
        .collect::<BTreeSet<_>>();
    assert_eq!(owned, BTreeSet::from([1, 2]));
    let history_out = plane.kubectl_ok(&["rollout", "history", "ds/agent"])?;
    ensure!(
        history_out.contains("\n1 ") && history_out.contains("\n2 "),
        "{history_out}"
    );

    // `kubectl rollout undo` goes back to the first template: its revision
    // is renumbered 3 and the pods roll back to its hash.
    plane.kubectl_ok(&["rollout", "undo", "ds/agent"])?;
    let out = plane.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    let back = wait_one_ready_pod_per_node(
        &plane,
        &sets,
        &pods,
        &uid,
        &[NODE, "node-b"],
        "the undo on each node",
    )
    .await?;
    for ps in back.values() {
        ensure!(
            label(&ps[0], "controller-revision-hash") == hash1,
            "{:?}",
            ps[0].metadata.labels
        );
    }
    let numbers = eventually(
        Duration::from_secs(30),
        "revision 1 renumbered 3",
        || async {
            let owned = revisions
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|r| {
                    r.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.uid == uid)
                })
                .map(|r| r.revision)
                .collect::<BTreeSet<_>>();
            (owned == BTreeSet::from([2, 3])).then_some(owned)
        },
    )
    .await;
    numbers?;

    // The second node goes away: its pod goes, the set wants one again.
    ensure!(
        second.interrupt(Duration::from_secs(30)).await?,
        "node-b did not stop"
    );
    Api::<Node>::all(client.clone())
        .delete("node-b", &Default::default())
        .await?;
    eventually(Duration::from_secs(60), "node-b's pod deleted", || async {
        let by_node = pods_by_node(&pods, &uid).await.ok()?;
        let st = sets.get("agent").await.ok()?.status?;
        (!by_node.contains_key("node-b") && st.desired_number_scheduled == 1).then_some(())
    })
    .await?;
    Ok(())
}

/// The most pods of the set alive (not deleting) at once in the history.
fn most_live_pods(history: &History<Pod>, uid: &str) -> usize {
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut most = 0;
    for (deleted, p) in history.snapshot() {
        if !owned_by_ds(&p, uid) {
            continue;
        }
        let name = p.metadata.name.clone().unwrap_or_default();
        if deleted || p.metadata.deletion_timestamp.is_some() {
            live.remove(&name);
        } else {
            live.insert(name);
        }
        most = most.max(live.len());
    }
    most
}

/// `maxSurge: 1, maxUnavailable: 0` on two nodes: a template change brings
/// each node's new pod up beside the old one before the old one goes, so
/// both nodes serve throughout (watched) and at most one extra pod exists;
/// validation refuses surge together with unavailability, as upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_with_max_surge_rolls_without_taking_a_node_down() -> Result<()> {
    let (plane, client) =
        workload_plane::start_with("scheduler,wasi-runner,daemonset-controller", &[]).await?;
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut template = sleeper_template(json!({"app": "agent"}));
    template["spec"]["terminationGracePeriodSeconds"] = json!(1);
    let mut ds = json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template,
            "updateStrategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}},
    });
    let err = sets
        .create(&PostParams::default(), &serde_json::from_value(ds.clone())?)
        .await;
    let s = expect_status(err, 422, "Invalid");
    ensure!(
        s.message
            .contains("spec.updateStrategy.rollingUpdate.maxSurge")
            && s.message
                .contains("may not be set when maxUnavailable is non-zero"),
        "{}",
        s.message
    );
    ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = json!(0);
    let ds = sets
        .create(&PostParams::default(), &serde_json::from_value(ds)?)
        .await?;
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let modules = workloads_dir().display().to_string();
    let _second = {
        let second = Host::start(
            &plane.kubeconfig(),
            &[
                "--mode",
                "node",
                "--node-name",
                "node-b",
                "--kubelet-port",
                "0",
                "--allow-file-images",
                &modules,
            ],
        )
        .await?;
        install_plugin(&second.plugin_dir(), "wasi-runner")?;
        second
    };
    let before = wait_one_ready_pod_per_node(
        &plane,
        &sets,
        &pods,
        &uid,
        &[NODE, "node-b"],
        "a pod on each node",
    )
    .await?;
    let hash1 = label(&before[NODE][0], "controller-revision-hash");

    let history = record(pods.clone()).await?;
    plane.kubectl_ok(&["set", "env", "ds/agent", "VERSION=2"])?;
    let out = plane.kubectl_ok(&["rollout", "status", "ds/agent", "--timeout=120s"])?;
    ensure!(out.contains("successfully rolled out"), "{out}");
    let after = wait_one_ready_pod_per_node(
        &plane,
        &sets,
        &pods,
        &uid,
        &[NODE, "node-b"],
        "the update on each node",
    )
    .await?;
    for ps in after.values() {
        ensure!(
            label(&ps[0], "controller-revision-hash") != hash1
                && label(&ps[0], "pod-template-generation") == "2",
            "{:?}",
            ps[0].metadata.labels
        );
    }
    let fewest = fewest_serving_nodes(&history, &uid, 2);
    ensure!(
        fewest == 2,
        "the update left {fewest} of 2 nodes serving at its worst (maxSurge 1, maxUnavailable 0)"
    );
    let most = most_live_pods(&history, &uid);
    ensure!(
        most == 3,
        "{most} pods of the set alive at once at most; want 3 (2 nodes + maxSurge 1)"
    );
    Ok(())
}
