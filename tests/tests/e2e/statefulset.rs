//! The built-in StatefulSet controller end to end: `wasmlet up` loads it (with
//! the scheduler and wasi-runner) from target/plugins, and its pods really run
//! (the `sleeper` workload) on the plane's own node. A watcher records every
//! pod event from before the set exists, so the ordering rules are checked on
//! what any client saw, not on the final state alone.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use wasmlet_e2e::workload_plane::{self, sleeper_spec};
use wasmlet_e2e::{Plane, eventually, kubectl_bin};

const REVISION: &str = "controller-revision-hash";

/// `wasmlet up` with the StatefulSet controller and its node Ready.
async fn plane(extra: &[&str]) -> Result<(Plane, kube::Client)> {
    workload_plane::start_with("scheduler,wasi-runner,statefulset-controller", extra).await
}

/// A set `name` of `replicas` sleepers (app=NAME), with `spec` merged in.
fn set(name: &str, replicas: i32, spec: Value) -> Result<StatefulSet> {
    let mut s = json!({
        "replicas": replicas,
        "serviceName": name,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": sleeper_spec(),
        },
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        s[k] = v.clone();
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name}, "spec": s,
    }))?)
}

/// One pod event as a watcher saw it.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    uid: String,
    revision: String,
    ready: bool,
    deleting: bool,
    gone: bool,
}

fn running_and_ready(p: &Pod) -> bool {
    let Some(s) = &p.status else { return false };
    s.phase.as_deref() == Some("Running")
        && s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn seen(p: &Pod, gone: bool) -> Seen {
    Seen {
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        revision: p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION))
            .cloned()
            .unwrap_or_default(),
        ready: running_and_ready(p),
        deleting: p.metadata.deletion_timestamp.is_some(),
        gone,
    }
}

/// Every event of the pods labelled app=`app`, recorded from before the set exists.
struct History {
    rows: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    async fn start(client: &kube::Client, app: &str) -> Result<History> {
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let rows: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cfg = watcher::Config::default().labels(&format!("app={app}"));
        let task = {
            let rows = rows.clone();
            let mut tx = Some(tx);
            tokio::spawn(async move {
                let mut s = watcher(api, cfg).boxed();
                while let Some(ev) = s.next().await {
                    let row = match ev {
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                            seen(&p, false)
                        }
                        Ok(watcher::Event::Delete(p)) => seen(&p, true),
                        _ => continue,
                    };
                    rows.lock().unwrap().push(row);
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .context("the pod watcher's initial list")??;
        Ok(History { rows, task })
    }

    fn rows(&self) -> Vec<Seen> {
        self.rows.lock().unwrap().clone()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pod names in the order they first appeared (each uid once).
fn creation_order(rows: &[Seen]) -> Vec<String> {
    let mut uids = BTreeSet::new();
    rows.iter()
        .filter(|r| uids.insert(r.uid.clone()))
        .map(|r| r.name.clone())
        .collect()
}

/// The pod names in the order their deletion began (each uid once).
fn deletion_order(rows: &[Seen]) -> Vec<String> {
    let mut uids = BTreeSet::new();
    rows.iter()
        .filter(|r| (r.deleting || r.gone) && uids.insert(r.uid.clone()))
        .map(|r| r.name.clone())
        .collect()
}

/// OrderedReady: no pod appears before every lower ordinal is live, Running and
/// Ready (as last seen then); checked over the whole history.
fn check_ordered_ready(set: &str, rows: &[Seen]) -> Result<()> {
    let mut live: BTreeMap<String, Seen> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        if !live.contains_key(&r.name) && !r.gone {
            let ord: i32 = r.name.rsplit_once('-').context("a pod name")?.1.parse()?;
            for lower in 0..ord {
                let l = live.get(&format!("{set}-{lower}"));
                ensure!(
                    l.is_some_and(|l| l.ready && !l.deleting),
                    "{} appeared (event {i}) while {set}-{lower} was {l:?}; history: {rows:#?}",
                    r.name
                );
            }
        }
        if r.gone {
            live.remove(&r.name);
        } else {
            live.insert(r.name.clone(), r.clone());
        }
    }
    Ok(())
}

/// No name ever had two live pods, and each pod was made once.
fn check_each_ordinal_once(rows: &[Seen]) -> Result<()> {
    let mut uids: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in rows {
        uids.entry(&r.name).or_default().insert(&r.uid);
    }
    let twice: Vec<_> = uids.iter().filter(|(_, u)| u.len() > 1).collect();
    ensure!(twice.is_empty(), "pods made more than once: {twice:?}");
    Ok(())
}

async fn live_pods(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    let lp = kube::api::ListParams::default().labels(&format!("app={app}"));
    pods.list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

fn ordinals(set: &str, range: std::ops::Range<i32>) -> BTreeSet<String> {
    range.map(|i| format!("{set}-{i}")).collect()
}

/// Waits until the set's status shows `ready` of `replicas` ready for the
/// current generation, with exactly those pods live; returns the set.
async fn settled(
    plane: &Plane,
    client: &kube::Client,
    name: &str,
    replicas: i32,
) -> Result<StatefulSet> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let r = eventually(
        Duration::from_secs(90),
        &format!("{name} settled at {replicas} ready"),
        || async {
            let s = sets.get(name).await.ok()?;
            let st = s.status.clone()?;
            let live = live_pods(&pods, name).await;
            (st.observed_generation == s.metadata.generation
                && st.replicas == replicas
                && st.ready_replicas == Some(replicas)
                && live.iter().filter(|p| running_and_ready(p)).count() == replicas as usize
                && names(&live) == ordinals(name, 0..replicas))
            .then_some(s)
        },
    )
    .await;
    r.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))
}

/// `kubectl rollout status statefulset/NAME`, run while the test goes on.
fn rollout_status(plane: &Plane, name: &str) -> tokio::task::JoinHandle<Result<String>> {
    let kubeconfig = plane.kubeconfig();
    let home = plane.data_dir().to_path_buf();
    let target = format!("statefulset/{name}");
    tokio::task::spawn_blocking(move || {
        let out = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["rollout", "status", &target, "--timeout=90s"])
            .env("HOME", home)
            .output()?;
        ensure!(out.status.success(), "kubectl rollout status: {out:?}");
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    })
}

async fn scale(client: &kube::Client, name: &str, replicas: i32) -> Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    sets.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    Ok(())
}

/// Changes the template (an annotation), which makes a new revision.
async fn new_template(client: &kube::Client, name: &str, value: &str) -> Result<()> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    sets.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"template": {"metadata": {"annotations": {"test/version": value}}}}}),
        ),
    )
    .await?;
    Ok(())
}

fn revision_of(p: &Pod) -> String {
    workload_plane::label(p, REVISION)
}

#[tokio::test]
async fn ordered_ready_comes_up_in_order_and_scales_up_and_down_by_ordinal() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let history = History::start(&client, "web").await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    sets.create(&PostParams::default(), &set("web", 5, json!({}))?)
        .await?;
    let status = rollout_status(&plane, "web");
    let s = settled(&plane, &client, "web", 5).await?;
    let out = status.await??;
    assert!(out.contains("roll out complete"), "{out}");
    let st = s.status.clone().unwrap();
    assert_eq!(st.current_revision, st.update_revision);
    assert_eq!(
        (
            st.current_replicas,
            st.updated_replicas,
            st.available_replicas
        ),
        (Some(5), Some(5), Some(5))
    );
    assert_eq!(st.collision_count, Some(0));
    let rev = st.update_revision.clone().unwrap();
    // The revision exists, is owned by the set, and is what the pods carry.
    let revs: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let r = revs.get(&rev).await?;
    assert_eq!(r.revision, 1);
    assert_eq!(
        r.metadata.owner_references.as_ref().unwrap()[0].uid,
        s.metadata.uid.clone().unwrap()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for p in live_pods(&pods, "web").await {
        let name = p.metadata.name.clone().unwrap();
        let labels = p.metadata.labels.clone().unwrap();
        assert_eq!(labels[REVISION], rev);
        assert_eq!(labels["statefulset.kubernetes.io/pod-name"], name);
        assert_eq!(
            labels["apps.kubernetes.io/pod-index"],
            name.rsplit_once('-').unwrap().1
        );
        let spec = p.spec.clone().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("StatefulSet", Some(true))
        );
    }
    let rows = history.rows();
    assert_eq!(
        creation_order(&rows),
        ["web-0", "web-1", "web-2", "web-3", "web-4"]
    );
    assert!(
        rows.iter().all(|r| r.revision == rev),
        "every pod is made at the one revision: {rows:#?}"
    );

    scale(&client, "web", 8).await?;
    settled(&plane, &client, "web", 8).await?;
    let created = creation_order(&history.rows());
    assert_eq!(created[5..], ["web-5", "web-6", "web-7"]);

    scale(&client, "web", 3).await?;
    settled(&plane, &client, "web", 3).await?;
    let rows = history.rows();
    assert_eq!(
        deletion_order(&rows),
        ["web-7", "web-6", "web-5", "web-4", "web-3"]
    );
    check_ordered_ready("web", &rows)?;
    check_each_ordinal_once(&rows)?;
    Ok(())
}

#[tokio::test]
async fn on_delete_replaces_only_a_deleted_pod_and_at_the_update_revision() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let spec = json!({"podManagementPolicy": "Parallel", "updateStrategy": {"type": "OnDelete"}});
    sets.create(&PostParams::default(), &set("od", 3, spec)?)
        .await?;
    let before = settled(&plane, &client, "od", 3).await?;
    let old_rev = before.status.unwrap().update_revision.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uids = |ps: &[Pod]| -> BTreeMap<String, (String, String)> {
        ps.iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap(),
                    (p.metadata.uid.clone().unwrap(), revision_of(p)),
                )
            })
            .collect()
    };
    let old = uids(&live_pods(&pods, "od").await);

    new_template(&client, "od", "2").await?;
    let new_rev = eventually(Duration::from_secs(30), "a new update revision", || async {
        let st = sets.get("od").await.ok()?.status?;
        let u = st.update_revision?;
        (u != old_rev && st.current_revision.as_deref() == Some(old_rev.as_str())).then_some(u)
    })
    .await?;
    pods.delete("od-1", &DeleteParams::default()).await?;
    let back = eventually(
        Duration::from_secs(60),
        "od-1 back at the update revision",
        || async {
            let p = pods.get("od-1").await.ok()?;
            (p.metadata.uid != Some(old["od-1"].0.clone()) && running_and_ready(&p)).then_some(p)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    assert_eq!(revision_of(&back), new_rev);
    let st = eventually(
        Duration::from_secs(30),
        "the status counts the update",
        || async {
            let st = sets.get("od").await.ok()?.status?;
            (st.updated_replicas == Some(1) && st.ready_replicas == Some(3)).then_some(st)
        },
    )
    .await?;
    assert_eq!(st.current_replicas, Some(2));
    assert_eq!(st.current_revision.as_deref(), Some(old_rev.as_str()));
    // The others were never touched.
    let now = uids(&live_pods(&pods, "od").await);
    for n in ["od-0", "od-2"] {
        assert_eq!(now[n], old[n], "{n} was replaced");
    }
    Ok(())
}

#[tokio::test]
async fn rolling_update_with_partition_3_updates_only_ordinals_3_and_up() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let spec = json!({"podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 3}}});
    sets.create(&PostParams::default(), &set("part", 5, spec)?)
        .await?;
    let before = settled(&plane, &client, "part", 5).await?;
    let old_rev = before.status.unwrap().update_revision.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let old: BTreeMap<String, String> = live_pods(&pods, "part")
        .await
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.uid.clone().unwrap(),
            )
        })
        .collect();

    new_template(&client, "part", "2").await?;
    let status = rollout_status(&plane, "part");
    let st = eventually(
        Duration::from_secs(60),
        "ordinals 3 and 4 updated",
        || async {
            let s = sets.get("part").await.ok()?;
            let st = s.status?;
            (st.updated_replicas == Some(2)
                && st.ready_replicas == Some(5)
                && st.update_revision.as_deref() != Some(old_rev.as_str()))
            .then_some(st)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let new_rev = st.update_revision.clone().unwrap();
    let out = status.await??;
    assert!(
        out.contains("partitioned roll out complete: 2 new pods have been updated"),
        "{out}"
    );
    for p in live_pods(&pods, "part").await {
        let name = p.metadata.name.clone().unwrap();
        let ord: i32 = name.rsplit_once('-').unwrap().1.parse()?;
        if ord >= 3 {
            assert_eq!(revision_of(&p), new_rev, "{name}");
            assert_ne!(p.metadata.uid.as_ref(), Some(&old[&name]), "{name}");
        } else {
            assert_eq!(revision_of(&p), old_rev, "{name}");
            assert_eq!(
                p.metadata.uid.as_ref(),
                Some(&old[&name]),
                "{name} was replaced"
            );
        }
    }
    assert_eq!(st.current_revision.as_deref(), Some(old_rev.as_str()));
    assert_eq!(st.current_replicas, Some(3));
    Ok(())
}

/// Every pod event reaches the controller's caches 1 s late: without the
/// host's expectations the controller would act on a cache that lacks the pod
/// it just made (making it again, or the next ordinal before it is ready).
#[tokio::test]
async fn a_lagging_cache_never_duplicates_or_skips_an_ordinal() -> Result<()> {
    let (plane, client) = plane(&["--debug-cache-delay-ms", "1000"]).await?;
    let history = History::start(&client, "lag").await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    sets.create(&PostParams::default(), &set("lag", 4, json!({}))?)
        .await?;
    settled(&plane, &client, "lag", 4).await?;
    scale(&client, "lag", 2).await?;
    settled(&plane, &client, "lag", 2).await?;
    let rows = history.rows();
    assert_eq!(creation_order(&rows), ["lag-0", "lag-1", "lag-2", "lag-3"]);
    assert_eq!(deletion_order(&rows), ["lag-3", "lag-2"]);
    check_ordered_ready("lag", &rows)?;
    check_each_ordinal_once(&rows)?;
    // Nor did a create fail because the pod already existed.
    let m = plane.metrics().await?;
    let failed = wasmlet_e2e::metric(
        &m,
        "controller_runtime_reconcile_errors_total",
        "controller=\"statefulset-controller\"",
    );
    assert_eq!(failed, 0.0, "reconcile errors:\n{}", plane.log());
    Ok(())
}

#[tokio::test]
async fn a_set_with_volume_claim_templates_gets_a_condition_an_event_and_no_pods() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let spec = json!({"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]});
    sets.create(&PostParams::default(), &set("vct", 2, spec)?)
        .await?;
    let cond = eventually(
        Duration::from_secs(30),
        "the ReplicaFailure condition",
        || async {
            let st = sets.get("vct").await.ok()?.status?;
            st.conditions?
                .into_iter()
                .find(|c| c.type_ == "ReplicaFailure")
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    assert_eq!(cond.status, "True");
    assert_eq!(
        cond.reason.as_deref(),
        Some("VolumeClaimTemplatesUnsupported")
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let note = eventually(Duration::from_secs(30), "the Warning event", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("VolumeClaimTemplatesUnsupported"))
            .and_then(|e| e.note)
    })
    .await?;
    assert!(note.contains("volumeClaimTemplates"), "{note}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(live_pods(&pods, "vct").await.is_empty());
    Ok(())
}

/// Benchmark, not a test (ignored; run it on purpose, ideally with a release
/// binary: `WASMLET_BIN=target/release/wasmlet cargo test --release --test
/// statefulset -- --ignored --nocapture`): a Parallel set of `STS_BENCH_PODS`
/// (default 500) sleepers from create to all Running and Ready, with the
/// controller's reconcile calls and every API write the plane served meanwhile
/// (the node agent's status writes included).
#[tokio::test]
#[ignore = "benchmark: prints figures, asserts nothing about time"]
async fn bench_parallel_statefulset_to_all_ready() -> Result<()> {
    let n = workload_plane::bench_size("STS_BENCH_PODS", 500) as i32;
    let room = (n + 10).to_string();
    let (plane, client) = plane(&["--max-pods", &room]).await?;
    let c0 = workload_plane::plugin_calls(&plane, "statefulset-controller").await?;
    let w0 = workload_plane::api_writes(&client).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let spec = json!({"podManagementPolicy": "Parallel"});
    let start = std::time::Instant::now();
    sets.create(&PostParams::default(), &set("bench", n, spec)?)
        .await?;
    eventually(Duration::from_secs(1800), "all pods ready", || async {
        let st = sets.get("bench").await.ok()?.status?;
        (st.ready_replicas == Some(n)).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let took = start.elapsed();
    let c1 = workload_plane::plugin_calls(&plane, "statefulset-controller").await?;
    let w1 = workload_plane::api_writes(&client).await?;
    println!(
        "statefulset bench: {n} Parallel pods apply -> all Running and Ready in {:.2} s; \
         {} reconcile calls; {} API writes",
        took.as_secs_f64(),
        c1 - c0,
        w1 - w0,
    );
    Ok(())
}

/// Each ControllerRevision carries the set's annotations as upstream's
/// controller copies them, so `kubectl rollout history` shows each change's
/// `kubernetes.io/change-cause` (it showed `<none>`).
#[tokio::test]
async fn rollout_history_shows_each_changes_cause() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let mut s = set("hist", 0, json!({}))?;
    s.metadata.annotations = Some([("kubernetes.io/change-cause".into(), "first".into())].into());
    sets.create(&PostParams::default(), &s).await?;
    let history = |want: &'static str| {
        let plane = &plane;
        async move {
            eventually(Duration::from_secs(60), want, || async {
                let out = plane
                    .kubectl_ok(&["rollout", "history", "statefulset/hist"])
                    .ok()?;
                out.contains(want).then_some(out)
            })
            .await
        }
    };
    history("first").await?;
    sets.patch(
        "hist",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {"kubernetes.io/change-cause": "second"}},
            "spec": {"template": {"metadata": {"annotations": {"v": "2"}}}},
        })),
    )
    .await?;
    let out = history("second").await?;
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("first") || l.contains("second"))
        .collect();
    ensure!(
        lines.len() == 2 && lines[0].starts_with('1') && lines[1].starts_with('2'),
        "revision 1 is the first change, 2 the second:\n{out}"
    );
    Ok(())
}
