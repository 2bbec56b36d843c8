//! The built-in disruption controller (kube-controller-manager's
//! `disruption` controller), a reconciler of PodDisruptionBudgets.
//!
//! Each call recomputes one budget's status from the pods its selector picks
//! (the host's cache) and writes it with the resourceVersion it read, so a
//! concurrent eviction (which decrements `disruptionsAllowed` and records the
//! pod in `disruptedPods`) is never overwritten: the write conflicts and the
//! budget is computed again. Status fields, the `DisruptionAllowed` condition
//! (`SufficientPods` / `InsufficientPods` / `SyncFailed`) and the events
//! (`NoPods`, `UnmanagedPods`, `CalculateExpectedPodCountFailed`,
//! `NotDeleted`) are upstream's. A pod recorded in `disruptedPods` stops
//! counting as healthy for 2 minutes; after that, if it still exists, the
//! entry is dropped and the budget reconciled again at that time.
//!
//! `maxUnavailable` and percentage `minAvailable` count against the scale of
//! the pods' controllers: a ReplicaSet (or the Deployment that controls it), a
//! StatefulSet or a ReplicationController, read with `get`.
//!
//! Deviations from upstream: controllers of other kinds (upstream reads their
//! `scale` subresource) are reported as "found no controllers"; the pods'
//! `DisruptionTarget` condition is not cleaned up (the embedded Eviction API
//! does not set it); a pod whose labels change so that it no longer matches
//! requeues its former budget only at the host's periodic resync (the
//! `selector:` watch sees the pod's new labels only).

pub mod budget;
pub mod scale;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use wasmlet_sdk::controllers::selector_string;
use wasmlet_sdk::prelude::*;

fn reconcile(pdb: Arc<PodDisruptionBudget>, ctx: &Context) -> Result<Action, Error> {
    if pdb.metadata.deletion_timestamp.is_some() {
        return Ok(Action::done());
    }
    let ns = pdb.metadata.namespace.clone().unwrap_or_default();
    let name = pdb.metadata.name.clone().unwrap_or_default();
    let client = ctx.client();
    let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
    // Kept between calls by the warm instance: only changed pods are decoded.
    let pods: Vec<Arc<Pod>> = match selector_string(selector) {
        Some(sel) => client
            .list_kept(&ListParams::namespaced(&ns).labels(&sel))
            .map_err(|e| Error::transient("ListPods", e.to_string()))?,
        None => vec![],
    };
    if pods.is_empty() {
        let _ = ctx.event(Event::normal("NoPods", "Sync").note("No matching pods found"));
    }
    let now = Timestamp::now();
    let counts = match budget::expected_counts(&pdb, &pods, &mut scale::Lookup(client)) {
        Ok(c) => c,
        Err(why) => {
            let _ = ctx.event(
                Event::warning("CalculateExpectedPodCountFailed", "Sync").note(format!(
                    "Failed to calculate the number of expected pods: {why}"
                )),
            );
            let patch = status::fail_safe(&pdb, &why, now);
            write(client, &ns, &name, patch)?;
            return Err(Error::transient("CalculateExpectedPodCountFailed", why));
        }
    };
    if !counts.2.is_empty() {
        let _ = ctx.event(Event::warning("UnmanagedPods", "Sync").note(format!(
            "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
            selector_string(selector).unwrap_or_default()
        )));
    }
    let computed = budget::compute(&pdb, &pods, counts, now);
    for pod in &computed.expired {
        let _ = ctx.event(
            Event::warning("NotDeleted", "Sync")
                .regarding(ObjectRef::of::<Pod>(ns.as_str(), pod))
                .note(format!(
                    "Pod was expected by PDB {ns}/{name} to be deleted but it wasn't"
                )),
        );
    }
    if let Some(patch) = status::patch(&pdb, &computed, now) {
        write(client, &ns, &name, patch)?;
    }
    Ok(match computed.recheck {
        Some(at) => {
            let wait = at.duration_since(now).unsigned_abs() + Duration::from_secs(1);
            Action::requeue(wait)
        }
        None => Action::done(),
    })
}

/// A status write; a conflict (an eviction or another write got there first)
/// is retried soon by the host, on a cache that has the newer budget.
fn write(client: &Client, ns: &str, name: &str, patch: serde_json::Value) -> Result<(), Error> {
    match client.patch_status::<PodDisruptionBudget>(ns, name, &Patch::merge(patch)) {
        Ok(_) | Err(ClientError::NotFound) => Ok(()),
        Err(e @ ClientError::Conflict(_)) => Err(Error::transient("Conflict", e.to_string())),
        Err(e) => Err(Error::transient("StatusFailed", e.to_string())),
    }
}

wasmlet_sdk::reconciler!(PodDisruptionBudget, reconcile);
