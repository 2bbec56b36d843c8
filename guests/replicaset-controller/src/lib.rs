//! The built-in ReplicaSet controller (kube-controller-manager's
//! `replicaset` controller), a reconciler of ReplicaSets; built with the
//! `replication-controller` feature, its `replicationcontroller` controller,
//! a reconciler of ReplicationControllers (see [`kind`]).
//!
//! Each call claims the namespace's active pods (`claim`), creates from the
//! template or deletes (least valuable first, `rank`) until `spec.replicas`
//! pods are left, and writes the status (`status`). The host's expectations
//! (the manifest's `owns` Pods) hold a set back until the pod cache shows
//! every create and delete of its previous call, upstream's
//! `ControllerExpectations`: a stale cache never makes it overshoot. Creates
//! go in upstream's slow-start batches (1, 2, 4, ...; stop at the first
//! failure) and at most 500 per call (`burstReplicas`); events
//! `SuccessfulCreate`, `SuccessfulDelete`, `FailedCreate`, `FailedDelete`
//! and the `ReplicaFailure` condition are upstream's.
//!
//! Deviations from upstream: calls are sequential, so a batch is not sent in
//! parallel; adoption checks the cached ReplicaSet's `deletionTimestamp`
//! rather than a fresh read; a pod whose labels change so that no set
//! selects it is released only when its owner is next reconciled (its own
//! change requeues it, as upstream).

pub mod claim;
pub mod kept;
pub mod kind;
pub mod rank;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{controller_of, selector_is_empty};
use wasmlet_sdk::prelude::*;

use claim::{Claim, active, adopt_patch, claim, controller_ref, release_patch};

/// Upstream's `BurstReplicas`: creates or deletes per call.
const BURST: usize = 500;

fn reconcile(set: Arc<kind::Set>, ctx: &Context) -> Result<Action, Error> {
    let rs = kind::as_replicaset(set);
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    let name = rs.metadata.name.clone().unwrap_or_default();
    let client = ctx.client();
    let Some(spec) = rs.spec.as_ref() else {
        return Ok(Action::done());
    };
    if selector_is_empty(Some(&spec.selector)) {
        // Validation refuses it; a set selecting everything would adopt every pod.
        return Ok(Action::done());
    }
    // Kept between calls by the warm instance, cut to what is read: only
    // changed pods are decoded.
    let all: Vec<Arc<Pod>> =
        kept::pods(client, &ns).map_err(|e| Error::transient("ListPods", e.to_string()))?;
    let mut pods: Vec<Pod> = vec![];
    for p in all.iter().filter(|p| active(p)) {
        let pod_name = p.metadata.name.clone().unwrap_or_default();
        match claim(&rs, p) {
            Claim::Owned => pods.push((**p).clone()),
            Claim::Ignore => {}
            Claim::Adopt => {
                match client.patch::<Pod>(
                    ns.as_str(),
                    &pod_name,
                    &Patch::strategic(adopt_patch(&rs, p)),
                ) {
                    Ok(adopted) => pods.push(adopted),
                    Err(ClientError::NotFound) => {}
                    Err(e) => {
                        return Err(Error::transient(
                            "AdoptFailed",
                            format!("adopting pod {pod_name}: {e}"),
                        ));
                    }
                }
            }
            Claim::Release => {
                match client.patch::<Pod>(
                    ns.as_str(),
                    &pod_name,
                    &Patch::strategic(release_patch(&rs, p)),
                ) {
                    Ok(_) | Err(ClientError::NotFound) => {}
                    Err(e) => {
                        return Err(Error::transient(
                            "ReleaseFailed",
                            format!("releasing pod {pod_name}: {e}"),
                        ));
                    }
                }
            }
        }
    }
    let now = Timestamp::now();
    let mut failure = None;
    if rs.metadata.deletion_timestamp.is_none() {
        failure = manage(&rs, &pods, ctx, &ns, now);
    }
    let counts = status::counts(&rs, &pods, now);
    let failed = failure
        .as_ref()
        .map(|(r, m): &(&str, String)| (*r, m.as_str()));
    if let Some(p) = status::patch(&rs, counts, failed, now) {
        match client.patch_status::<kind::Set>(ns.as_str(), &name, &Patch::merge(p)) {
            Ok(_) | Err(ClientError::NotFound) => {}
            Err(e) => return Err(Error::transient("StatusFailed", e.to_string())),
        }
    }
    if let Some((reason, message)) = failure {
        return Err(Error::transient(reason, message));
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if min_ready > 0 && counts.ready == counts.replicas && counts.available != counts.replicas {
        // Pods turn available with time alone: look again when they might.
        return Ok(Action::requeue(
            Duration::from_secs(u64::try_from(min_ready).unwrap_or(0)) + Duration::from_millis(500),
        ));
    }
    Ok(Action::done())
}

/// `manageReplicas`: the failure reason and message, if any create or delete failed.
fn manage(
    rs: &ReplicaSet,
    pods: &[Pod],
    ctx: &Context,
    ns: &str,
    now: Timestamp,
) -> Option<(&'static str, String)> {
    let client = ctx.client();
    let want = usize::try_from(rs.spec.as_ref()?.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    if pods.len() < want {
        let mut left = (want - pods.len()).min(BURST);
        let pod = match new_pod(rs, ns) {
            Ok(p) => p,
            Err(e) => return Some(("FailedCreate", e)),
        };
        let mut batch = 1;
        while left > 0 {
            // slowStartBatch: a batch's creates at once (`create-all`), the
            // next batch twice as large, none after one that failed.
            let n = batch.min(left);
            let answers = match client.create_all(std::iter::repeat_n(&pod, n)) {
                Ok(answers) => answers,
                Err(e) => return Some(("FailedCreate", e.to_string())),
            };
            let mut failed = None;
            for answer in answers {
                match answer {
                    Ok(created) => {
                        let _ = ctx.event(Event::normal("SuccessfulCreate", "Create").note(
                            format!("Created pod: {}", created.metadata.name.unwrap_or_default()),
                        ));
                    }
                    Err(e) => {
                        let _ = ctx.event(
                            Event::warning("FailedCreate", "Create")
                                .note(format!("Error creating: {e}")),
                        );
                        failed.get_or_insert(("FailedCreate", e.to_string()));
                    }
                }
            }
            if failed.is_some() {
                return failed;
            }
            left -= n;
            batch *= 2;
        }
    } else if pods.len() > want {
        let diff = (pods.len() - want).min(BURST);
        let related = related_pods(rs, pods, ctx, ns);
        for p in rank::pods_to_delete(pods, &related, diff, now) {
            let pod_name = p.metadata.name.clone().unwrap_or_default();
            match client.delete::<Pod>(ns, &pod_name, &DeleteParams::default()) {
                Ok(()) | Err(ClientError::NotFound) => {
                    let _ = ctx.event(
                        Event::normal("SuccessfulDelete", "Delete")
                            .note(format!("Deleted pod: {pod_name}")),
                    );
                }
                Err(e) => {
                    let _ = ctx.event(
                        Event::warning("FailedDelete", "Delete")
                            .note(format!("Error deleting: {e}")),
                    );
                    return Some(("FailedDelete", e.to_string()));
                }
            }
        }
    }
    None
}

/// `getIndirectlyRelatedPods`: the active pods of every set controlled by
/// this set's controller (just its own without one).
fn related_pods(rs: &ReplicaSet, pods: &[Pod], ctx: &Context, ns: &str) -> Vec<Pod> {
    // Only Deployments own ReplicaSets; nothing owns ReplicationControllers.
    let Some(owner) = controller_of(&rs.metadata).filter(|_| kind::OWNER.1 == "ReplicaSet") else {
        return pods.to_vec();
    };
    let sets: Vec<ReplicaSet> = ctx
        .client()
        .list(&ListParams::namespaced(ns))
        .unwrap_or_default();
    let uids: Vec<String> = sets
        .iter()
        .filter(|s| controller_of(&s.metadata).is_some_and(|r| r.uid == owner.uid))
        .filter_map(|s| s.metadata.uid.clone())
        .collect();
    let all: Vec<Arc<Pod>> = kept::pods(ctx.client(), ns).unwrap_or_default();
    all.iter()
        .filter(|p| active(p) && controller_of(&p.metadata).is_some_and(|r| uids.contains(&r.uid)))
        .map(|p| (**p).clone())
        .collect()
}

/// `GetPodFromTemplate`: the template's labels, annotations, finalizers and
/// spec, `generateName: NAME-`, owned by the set.
fn new_pod(rs: &ReplicaSet, ns: &str) -> Result<Pod, String> {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .ok_or_else(|| format!("the {} has no spec.template", kind::OWNER.1))?;
    let meta = template.metadata.clone().unwrap_or_default();
    let pod: Value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", rs.metadata.name.as_deref().unwrap_or_default()),
            "namespace": ns,
            "labels": meta.labels,
            "annotations": meta.annotations,
            "finalizers": meta.finalizers,
            "ownerReferences": [controller_ref(rs)],
        },
        "spec": template.spec,
    });
    serde_json::from_value(pod).map_err(|e| format!("the pod template does not make a pod: {e}"))
}

wasmlet_sdk::reconciler!(kind::Set, reconcile);
