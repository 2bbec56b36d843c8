//! The built-in Deployment controller (kube-controller-manager's
//! `deployment` controller), a reconciler of Deployments.
//!
//! Each call claims the Deployment's ReplicaSets (`sets`), finds or creates
//! the set for the current template (named `NAME-HASH`, labelled
//! `pod-template-hash`), scales sets as the strategy says (`rollout`:
//! RollingUpdate within maxSurge / maxUnavailable, Recreate, proportional
//! scaling of a changed replica count, nothing new while `paused`), deletes
//! old sets beyond `revisionHistoryLimit`, and writes the status (`status`:
//! counts, `Available`, `Progressing` with `progressDeadlineSeconds`). The
//! revision annotations on the sets (`deployment.kubernetes.io/revision`,
//! `revision-history`, `desired-replicas`, `max-replicas`) are upstream's,
//! so `kubectl rollout status`, `history` and `undo` work. The ReplicaSet
//! controller turns the sets into pods; the host's expectations hold a
//! Deployment back until the set cache shows its own writes.
//!
//! Deviations from upstream: the pod-template hash is FNV-32a of the
//! template's JSON, not of Go's printed struct, so names differ from a real
//! cluster's (sets are matched by template, never by hash); the revision
//! annotation is written on the Deployment with a metadata patch rather than
//! in the status update; the deprecated `rollbackTo` is not supported; when
//! scaling old sets down, each set's available count is clamped to its size
//! (a status that still counts pods being removed never allows more); a pod
//! change requeues a Deployment through the `selector:` watch.

pub mod rollout;
pub mod sets;
pub mod status;
pub mod util;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{selector_is_empty, selector_string};
use wasmlet_sdk::prelude::*;

use sets::Run;
use status::{PROGRESSING, condition, get, set};

fn reconcile(d: Arc<Deployment>, ctx: &Context) -> Result<Action, Error> {
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let now = Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| Timestamp::now());
    let Some(spec) = d.spec.as_ref() else {
        return Ok(Action::done());
    };
    let current = d.status.clone().unwrap_or_default();
    if selector_is_empty(Some(&spec.selector)) {
        let _ = ctx.event(
            Event::warning("SelectingAll", "Sync")
                .note("This deployment is selecting all pods. A non-empty selector is required."),
        );
        if current.observed_generation < d.metadata.generation {
            let mut st = current.clone();
            st.observed_generation = d.metadata.generation;
            write_status(ctx, &ns, &name, &current, &st)?;
        }
        return Ok(Action::done());
    }
    let mut run = Run {
        d: &d,
        ctx,
        ns: ns.clone(),
        now,
        status: current.clone(),
        revision: None,
        sets: vec![],
    };
    run.claim()?;
    let paused = spec.paused.unwrap_or(false);
    let result = if d.metadata.deletion_timestamp.is_some() {
        let new = run.find_new();
        Plan::StatusOnly(new)
    } else {
        check_paused(&mut run, paused);
        if paused {
            let new = run.new_set(false)?;
            run.scale_all(new)?;
            run.cleanup(new)?;
            Plan::StatusOnly(new)
        } else {
            let new = run.find_new();
            if run.is_scaling_event(new) {
                let new = run.new_set(false)?;
                run.scale_all(new)?;
                Plan::StatusOnly(new)
            } else if util::is_rolling(&d) {
                Plan::Rollout(run.rolling()?)
            } else {
                let pods: Vec<Pod> = match selector_string(Some(&spec.selector)) {
                    Some(sel) => ctx
                        .client()
                        .list(&ListParams::namespaced(&ns).labels(&sel))
                        .map_err(|e| Error::transient("ListPods", e.to_string()))?,
                    None => vec![],
                };
                Plan::Rollout(run.recreate(&pods)?)
            }
        }
    };
    if let Some(rev) = run.revision.take() {
        let patch = json!({"metadata": {"annotations": {util::REVISION: rev}}});
        match ctx
            .client()
            .patch::<Deployment>(ns.as_str(), &name, &Patch::merge(patch))
        {
            Ok(_) | Err(ClientError::NotFound) => {}
            Err(e) => return Err(Error::transient("UpdateRevision", e.to_string())),
        }
    }
    let all: Vec<_> = run.sets.iter().collect();
    let (st, recheck) = match result {
        Plan::StatusOnly(new) => {
            let new_rs = new.map(|i| &run.sets[i]);
            (status::calculate(&d, &all, new_rs, &run.status, now), None)
        }
        Plan::Rollout(new) => {
            let new_rs = new.map(|i| &run.sets[i]);
            let failure = status::replica_failure(&all, new_rs);
            status::rollout(&d, &all, new_rs, &run.status, failure, now)
        }
    };
    write_status(ctx, &ns, &name, &current, &st)?;
    Ok(match recheck {
        Some(after) => Action::requeue(after),
        None => Action::done(),
    })
}

enum Plan {
    /// Only the counts and `Available` (deleting, paused, or scaling).
    StatusOnly(Option<usize>),
    /// A rollout step: `Progressing` too.
    Rollout(Option<usize>),
}

/// `checkPausedConditions`.
fn check_paused(run: &mut Run, paused: bool) {
    if util::progress_deadline(run.d).is_none() {
        return;
    }
    let reason = get(&run.status, PROGRESSING).and_then(|c| c.reason.clone());
    let reason = reason.as_deref();
    if paused && reason != Some("DeploymentPaused") {
        set(
            &mut run.status,
            condition(
                PROGRESSING,
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused",
                run.now,
            ),
        );
    } else if !paused && reason == Some("DeploymentPaused") {
        set(
            &mut run.status,
            condition(
                PROGRESSING,
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed",
                run.now,
            ),
        );
    }
}

/// Writes `st` unless it equals `current` (every field, so a zero clears).
fn write_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    current: &DeploymentStatus,
    st: &DeploymentStatus,
) -> Result<(), Error> {
    let norm = |s: &DeploymentStatus| {
        let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.retain(|_, x| x != &json!(0) && !x.is_null());
        }
        v
    };
    if norm(current) == norm(st) {
        return Ok(());
    }
    let g = |v: Option<i32>| v.unwrap_or(0);
    let mut body = json!({
        "observedGeneration": st.observed_generation,
        "replicas": g(st.replicas),
        "updatedReplicas": g(st.updated_replicas),
        "readyReplicas": g(st.ready_replicas),
        "availableReplicas": g(st.available_replicas),
        "unavailableReplicas": g(st.unavailable_replicas),
        "conditions": st.conditions.clone().unwrap_or_default(),
    });
    if let Some(c) = st.collision_count {
        body["collisionCount"] = json!(c);
    }
    match ctx
        .client()
        .patch_status::<Deployment>(ns, name, &Patch::merge(json!({"status": body})))
    {
        Ok(_) | Err(ClientError::NotFound) => Ok(()),
        Err(e) => Err(Error::transient("StatusFailed", e.to_string())),
    }
}

wasmlet_sdk::reconciler!(Deployment, reconcile);
