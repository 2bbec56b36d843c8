//! Deletion: finalizers and deletionTimestamp, graceful pod deletion, the
//! garbage collector's cascades (background, foreground, orphan), namespace
//! deletion, and eviction against PodDisruptionBudgets.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::json;
use wasmlet_e2e::*;

const WAIT: Duration = Duration::from_secs(60);

async fn gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(WAIT, &format!("{name} to be deleted"), || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
}

/// Waits until the server's garbage collector has handled every write made
/// before this call. It handles events one at a time in revision order, and
/// deletes an object whose owner does not exist: once such a probe, written
/// now, is gone, everything written before it was handled, so whatever the
/// collector was going to do about it is done.
async fn collector_caught_up(client: &kube::Client, probe: &str) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let orphan: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": probe, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "never-existed",
            "uid": "00000000-0000-0000-0000-000000000000",
        }]}}))?;
    cms.create(&PostParams::default(), &orphan).await?;
    gone(&cms, probe).await
}

fn owned_by(name: &str, owner: &ConfigMap) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
    }]}}))
    .unwrap()
}

fn with_finalizer(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "finalizers": ["example.com/hold"]}}))
        .unwrap()
}

async fn drop_finalizers(api: &Api<ConfigMap>, name: &str) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn finalizers_hold_an_object_until_removed() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &with_finalizer("held"))
        .await?;
    let r = cms.delete("held", &DeleteParams::default()).await?;
    let marked = r.left().expect("the object is returned while it waits");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let got = cms.get("held").await?;
    assert!(
        got.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp not set"
    );
    assert_eq!(
        got.metadata.finalizers.as_deref(),
        Some(&["example.com/hold".to_string()][..])
    );
    // Other updates still work while it waits; a second delete changes nothing.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await?;
    cms.delete("held", &DeleteParams::default()).await?;
    assert!(cms.get("held").await?.metadata.deletion_timestamp.is_some());
    // Removing the last finalizer deletes it.
    drop_finalizers(&cms, "held").await?;
    expect_status(cms.get("held").await, 404, "NotFound");
    Ok(())
}

#[tokio::test]
async fn bound_pods_delete_gracefully_unbound_pods_at_once() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Unbound: gone at once.
    pods.create(&PostParams::default(), &pod("free")).await?;
    pods.delete("free", &DeleteParams::default()).await?;
    expect_status(pods.get("free").await, 404, "NotFound");

    // Bound to a node: marked, and stays until deleted with grace 0 (as a node agent does).
    let mut bound = pod("bound");
    bound.spec.as_mut().unwrap().node_name = Some("node-a".into());
    pods.create(&PostParams::default(), &bound).await?;
    pods.delete("bound", &DeleteParams::default()).await?;
    let p = pods.get("bound").await?;
    assert!(
        p.metadata.deletion_timestamp.is_some(),
        "no deletionTimestamp"
    );
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    // A shorter grace period shortens it.
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(5),
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(
        pods.get("bound")
            .await?
            .metadata
            .deletion_grace_period_seconds,
        Some(5)
    );
    // Still there once the server's collector has seen the deletion: nothing
    // deletes it but its node agent.
    collector_caught_up(&client, "probe").await?;
    assert!(pods.get_opt("bound").await?.is_some());
    // Its node agent reports status while the workloads stop: that write must not
    // delete it (only removing the last finalizer, or a grace of 0, does).
    let patch = serde_json::json!({"status": {"phase": "Running"}});
    pods.patch_status(
        "bound",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await?;
    assert!(
        pods.get_opt("bound").await?.is_some(),
        "a status write during the grace period deleted the pod"
    );
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    expect_status(pods.get("bound").await, 404, "NotFound");
    Ok(())
}

#[tokio::test]
async fn background_cascade_deletes_dependents() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[]))
        .await?;
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &owned_by(&format!("dep-{i}"), &owner),
        )
        .await?;
    }
    // A grandchild of a dependent goes too.
    let dep0 = cms.get("dep-0").await?;
    cms.create(&PostParams::default(), &owned_by("grandchild", &dep0))
        .await?;
    cms.create(&PostParams::default(), &configmap("bystander", &[]))
        .await?;

    cms.delete("owner", &DeleteParams::background()).await?;
    expect_status(cms.get("owner").await, 404, "NotFound");
    for n in ["dep-0", "dep-1", "dep-2", "grandchild"] {
        gone(&cms, n).await?;
    }
    assert!(cms.get_opt("bystander").await?.is_some());
    // A dependent created with an owner uid that does not exist is collected too.
    cms.create(
        &PostParams::default(),
        &owned_by("orphaned-at-birth", &owner),
    )
    .await?;
    gone(&cms, "orphaned-at-birth").await?;
    Ok(())
}

#[tokio::test]
async fn foreground_cascade_keeps_owner_until_dependents_are_gone() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[]))
        .await?;
    cms.create(&PostParams::default(), &owned_by("dep", &owner))
        .await?;
    let mut held = owned_by("held-dep", &owner);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await?;

    cms.delete("owner", &DeleteParams::foreground()).await?;
    // The free dependent goes; the held one waits on its finalizer.
    gone(&cms, "dep").await?;
    // The collector deletes dependents one after another: the held one may be
    // marked a moment after the free one is gone.
    let h = eventually(
        Duration::from_secs(60),
        "held-dep marked for deletion",
        || async {
            let h = cms.get("held-dep").await.ok()?;
            h.metadata.deletion_timestamp.is_some().then_some(h)
        },
    )
    .await;
    assert!(h.is_ok(), "the dependent was not deleted");
    // Meanwhile the owner stays, marked, with the foregroundDeletion finalizer.
    let o = cms.get("owner").await?;
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(
        o.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string())
    );
    drop_finalizers(&cms, "held-dep").await?;
    gone(&cms, "held-dep").await?;
    gone(&cms, "owner").await?;
    Ok(())
}

#[tokio::test]
async fn orphan_keeps_dependents_and_drops_their_owner_references() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[]))
        .await?;
    let other = cms
        .create(&PostParams::default(), &configmap("other-owner", &[]))
        .await?;
    cms.create(&PostParams::default(), &owned_by("dep", &owner))
        .await?;
    // Two owners: only the deleted one's reference goes.
    let mut two = owned_by("dep-two-owners", &owner);
    two.metadata.owner_references.as_mut().unwrap().push(
        owned_by("x", &other)
            .metadata
            .owner_references
            .unwrap()
            .remove(0),
    );
    cms.create(&PostParams::default(), &two).await?;

    cms.delete("owner", &DeleteParams::orphan()).await?;
    gone(&cms, "owner").await?;
    let d = cms.get("dep").await?;
    assert!(
        d.metadata.owner_references.unwrap_or_default().is_empty(),
        "ownerReferences kept"
    );
    assert!(d.metadata.deletion_timestamp.is_none());
    let d2 = cms.get("dep-two-owners").await?;
    let refs: Vec<String> = d2
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(refs, ["other-owner"]);
    // Still there once the collector has seen the owner go (it does not come
    // back for them).
    collector_caught_up(&client, "probe").await?;
    let d = cms.get("dep").await?;
    assert!(
        d.metadata.deletion_timestamp.is_none()
            && d.metadata.owner_references.unwrap_or_default().is_empty(),
        "the collector came back for an orphan"
    );
    assert!(cms.get_opt("dep-two-owners").await?.is_some());
    Ok(())
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_contents_then_itself() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "doomed"}}))?,
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "doomed", &ar);
    for i in 0..5 {
        cms.create(&PostParams::default(), &configmap(&format!("c{i}"), &[]))
            .await?;
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await?;
    }
    widgets
        .create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})),
        )
        .await?;
    cms.create(&PostParams::default(), &with_finalizer("held"))
        .await?;
    // A bystander in another namespace.
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &configmap("c0", &[]))
        .await?;

    nss.delete("doomed", &DeleteParams::default()).await?;
    // Everything that can go goes; the namespace waits for the held object.
    gone(&cms, "c4").await?;
    gone(&pods, "p4").await?;
    gone(&widgets, "w").await?;
    let ns = nss.get("doomed").await?;
    assert!(ns.metadata.deletion_timestamp.is_some());
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    // No new content in a terminating namespace: 403 Forbidden.
    expect_status(
        cms.create(&PostParams::default(), &configmap("late", &[]))
            .await,
        403,
        "Forbidden",
    );
    drop_finalizers(&cms, "held").await?;
    gone(&nss, "doomed").await?;
    assert!(cms.list(&Default::default()).await?.items.is_empty());
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), "default")
            .get_opt("c0")
            .await?
            .is_some()
    );
    Ok(())
}

fn pdb(allowed: i32) -> serde_json::Value {
    json!({"status": {
        "disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1 - allowed.min(0) , "expectedPods": 1,
        "observedGeneration": 1,
    }})
}

#[tokio::test]
async fn eviction_respects_pod_disruption_budgets() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    // No retries: kube's default policy would retry the 429s.
    let client = plane.client_without_retries().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "budget"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}))?,
    )
    .await?;
    pdbs.patch_status("budget", &PatchParams::default(), &Patch::Merge(pdb(0)))
        .await?;
    let mut p = pod("running");
    p.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    pods.create(&PostParams::default(), &p).await?;
    // Running and Ready: the budget decides (an unready pod may go when the
    // budget is met anyway, see below).
    let running_ready = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(
        "running",
        &PatchParams::default(),
        &Patch::Merge(running_ready),
    )
    .await?;

    // No disruption allowed: 429 with upstream's message, the pod stays.
    let s = expect_status(
        pods.evict("running", &EvictParams::default()).await,
        429,
        "TooManyRequests",
    );
    assert_eq!(
        s.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert!(
        s.details
            .unwrap()
            .causes
            .iter()
            .any(|c| c.reason == "DisruptionBudget")
    );
    assert!(pods.get_opt("running").await?.is_some());

    // One allowed: admitted, the budget spent, the pod deleted.
    pdbs.patch_status("budget", &PatchParams::default(), &Patch::Merge(pdb(1)))
        .await?;
    let s = pods.evict("running", &EvictParams::default()).await?;
    assert!(s.is_success(), "{s:?}");
    expect_status(pods.get("running").await, 404, "NotFound");
    let b = pdbs.get("budget").await?;
    let st = b.status.unwrap();
    assert_eq!(st.disruptions_allowed, 0);
    assert!(
        st.disrupted_pods
            .unwrap_or_default()
            .contains_key("running")
    );

    // A pod that is not running is evicted without a budget check (budget at 0 again).
    let mut pending = pod("pending");
    pending.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    pods.create(&PostParams::default(), &pending).await?;
    assert_eq!(
        pods.get("pending").await?.status.unwrap().phase.as_deref(),
        Some("Pending")
    );
    pods.evict("pending", &EvictParams::default()).await?;
    expect_status(pods.get("pending").await, 404, "NotFound");
    assert_eq!(
        pdbs.get("budget")
            .await?
            .status
            .unwrap()
            .disruptions_allowed,
        0
    );
    // A running pod that is not ready is no disruption to a budget that has
    // its healthy pods: evicted without spending the budget (still at 0).
    let mut unready = pod("unready");
    unready.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    pods.create(&PostParams::default(), &unready).await?;
    pods.patch_status(
        "unready",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await?;
    pods.evict("unready", &EvictParams::default()).await?;
    expect_status(pods.get("unready").await, 404, "NotFound");
    // Unless the budget is short of healthy pods itself.
    pdbs.patch_status(
        "budget",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"currentHealthy": 0}})),
    )
    .await?;
    let mut short = pod("short");
    short.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    pods.create(&PostParams::default(), &short).await?;
    pods.patch_status(
        "short",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await?;
    expect_status(
        pods.evict("short", &EvictParams::default()).await,
        429,
        "TooManyRequests",
    );
    // Evicting a pod that does not exist: 404.
    expect_status(
        pods.evict("nope", &EvictParams::default()).await,
        404,
        "NotFound",
    );
    Ok(())
}

#[tokio::test]
async fn delete_collection_by_label() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, app) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}}))?,
        )
        .await?;
    }
    let r = cms
        .delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels("app=a"),
        )
        .await?;
    let deleted: Vec<String> = r
        .left()
        .expect("the deleted list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(deleted, ["a1", "a2"]);
    let left: Vec<String> = cms
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(left, ["b1"]);
    Ok(())
}
