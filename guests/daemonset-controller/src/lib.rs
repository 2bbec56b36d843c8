//! The built-in DaemonSet controller (kube-controller-manager's `daemonset`
//! controller), a reconciler of DaemonSets.
//!
//! Each call reads the nodes and the set's pods, plans (`plan`): a pod for
//! every node the template fits ([`nodes`]) that has none, no pod where it no
//! longer belongs, one pod per node (the oldest stays), failed pods replaced;
//! with `RollingUpdate`, old-revision pods deleted while at most
//! `maxUnavailable` of the nodes that should run one are without an available
//! pod (the manage pass then recreates them from the current template), or,
//! with `maxSurge` ([`surge`]), each node's new pod created beside the old
//! one, the old one deleted once the new one is available, at most
//! `maxSurge` nodes at once;
//! `OnDelete` leaves old pods until the user deletes them. New pods carry the
//! `controller-revision-hash` and `pod-template-generation` labels, the
//! daemon tolerations and a required node affinity on `metadata.name`, so the
//! scheduler binds each to its node. The current template is kept as a
//! ControllerRevision ([`revision`]); the status is upstream's
//! `updateDaemonSetStatus`. The host's expectations (the manifest's `owns`
//! Pods) hold a set back until the pod cache shows its previous creates and
//! deletes, so a lagging cache never double-creates.
//!
//! Deviations from upstream: orphan pods matching the selector are not
//! adopted; revisions beyond `revisionHistoryLimit` are not pruned; failed
//! pods are replaced without upstream's back-off; a node's pods are deleted
//! by this controller when the node is gone (upstream leaves it to pod GC).

pub mod nodes;
pub mod plan;
pub mod revision;
pub mod surge;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};
use wasmlet_sdk::controllers::selector_is_empty;
use wasmlet_sdk::prelude::*;

/// How long a set waits when nothing else wakes it: a Node change ends the
/// wait early (the manifest's `waiting` watch), a pod change requeues it.
const IDLE: Duration = Duration::from_secs(300);

/// The controller reference a DaemonSet puts on its pods and revisions.
pub fn owner(ds: &DaemonSet) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": ds.metadata.name, "uid": ds.metadata.uid,
        "controller": true, "blockOwnerDeletion": true})
}

fn reconcile(ds: Arc<DaemonSet>, ctx: &Context) -> Result<Action, Error> {
    if ds.metadata.deletion_timestamp.is_some() {
        // The API server's garbage collector removes the pods.
        return Ok(Action::done());
    }
    let Some(spec) = ds.spec.as_ref() else {
        return Ok(Action::done());
    };
    if selector_is_empty(Some(&spec.selector)) {
        // Validation refuses it.
        return Ok(Action::done());
    }
    let ns = ds.metadata.namespace.clone().unwrap_or_default();
    let name = ds.metadata.name.clone().unwrap_or_default();
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let client = ctx.client();
    let nodes: Vec<Node> = client
        .list(&ListParams::all())
        .map_err(|e| Error::transient("ListNodes", e.to_string()))?;
    let pods: Vec<Arc<Pod>> = client
        .list_kept(&ListParams::namespaced(&ns))
        .map_err(|e| Error::transient("ListPods", e.to_string()))?;
    let pods: Vec<&Pod> = pods
        .iter()
        .map(|p| &**p)
        .filter(|p| plan::owned_by(p, &uid))
        .collect();
    let hash = revision::hash(&ds);
    ensure_revision(&ds, &hash, ctx, &ns, &uid)?;
    let now = Timestamp::now();
    let p = plan::plan(&ds, &hash, &nodes, &pods, now);

    let mut failure = None;
    for node in &p.create {
        let pod = plan::new_pod(&ds, &hash, node);
        match client.create(&pod) {
            Ok(created) => {
                let _ = ctx.event(Event::normal("SuccessfulCreate", "Create").note(format!(
                    "Created pod: {}",
                    created.metadata.name.unwrap_or_default()
                )));
            }
            Err(e) => {
                let _ = ctx.event(
                    Event::warning("FailedCreate", "Create").note(format!("Error creating: {e}")),
                );
                failure = Some((
                    "FailedCreate",
                    format!("creating the pod for node {node}: {e}"),
                ));
                break;
            }
        }
    }
    for (pod_name, pod_uid, why) in &p.delete {
        if *why == plan::Why::Failed {
            let _ = ctx.event(Event::warning("FailedDaemonPod", "Delete").note(format!(
                "Found failed daemon pod {ns}/{pod_name}, will try to kill it"
            )));
        }
        match client.delete::<Pod>(
            ns.as_str(),
            pod_name.as_str(),
            &DeleteParams::default().uid(pod_uid),
        ) {
            Ok(()) | Err(ClientError::NotFound) => {
                let _ = ctx.event(
                    Event::normal("SuccessfulDelete", "Delete")
                        .note(format!("Deleted pod: {pod_name}")),
                );
            }
            Err(e) => {
                failure = Some(("FailedDelete", format!("deleting pod {pod_name}: {e}")));
                break;
            }
        }
    }
    if let Some(patch) = plan::status_patch(&ds, &p.counts) {
        match client.patch_status::<DaemonSet>(ns.as_str(), &name, &Patch::merge(patch)) {
            Ok(_) | Err(ClientError::NotFound) => {}
            Err(e) => return Err(Error::transient("StatusFailed", e.to_string())),
        }
    }
    if let Some((reason, message)) = failure {
        return Err(Error::transient(reason, message));
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if min_ready > 0 && (p.counts.ready != p.counts.available || p.recheck) {
        // Pods turn available with time alone: look again when they might.
        return Ok(Action::requeue(
            Duration::from_secs(u64::try_from(min_ready).unwrap_or(0)) + Duration::from_millis(500),
        ));
    }
    Ok(Action::requeue(IDLE))
}

/// The current template's ControllerRevision exists and has the highest
/// number (a rollback to an older template renumbers it, as upstream).
fn ensure_revision(
    ds: &DaemonSet,
    hash: &str,
    ctx: &Context,
    ns: &str,
    uid: &str,
) -> Result<(), Error> {
    let client = ctx.client();
    let revisions: Vec<ControllerRevision> = client
        .list::<ControllerRevision>(&ListParams::namespaced(ns))
        .map_err(|e| Error::transient("ListControllerRevisions", e.to_string()))?
        .into_iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    let max = revisions.iter().map(|r| r.revision).max().unwrap_or(0);
    let current = revisions.iter().find(|r| {
        r.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(revision::HASH_LABEL))
            .is_some_and(|h| h == hash)
    });
    match current {
        Some(r) if r.revision == max => Ok(()),
        Some(r) => {
            let name = r.metadata.name.clone().unwrap_or_default();
            client
                .patch::<ControllerRevision>(ns, &name, &Patch::merge(json!({"revision": max + 1})))
                .map(|_| ())
                .map_err(|e| Error::transient("RevisionFailed", format!("renumbering {name}: {e}")))
        }
        None => match client.create(&revision::new_revision(ds, hash, max + 1)) {
            // A conflict: made already, the cache not showing it yet.
            Ok(_) | Err(ClientError::Conflict(_)) => Ok(()),
            Err(e) => Err(Error::transient("RevisionFailed", e.to_string())),
        },
    }
}

wasmlet_sdk::reconciler!(DaemonSet, reconcile);
