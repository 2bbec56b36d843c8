//! `sroll-reconciler`: the StatefulsetRollout operator (rollouts.wasmlet.dev/v1,
//! `kubectl get sroll`) as a wasmlet reconciler, built into `wasmlet up`.
//!
//! **Users start with `guests/sroll-reconciler/README.md`** (this crate's
//! README): the CRD, a worked example with kubectl, the chat, Consul and
//! callback settings, and the version-leak caveat below.
//!
//! A StatefulsetRollout owns one `OnDelete` StatefulSet and moves
//! `ceil(replicas × percent / 100)` of its pods onto the new template by evicting
//! old-revision pods through the Eviction API, as many at a time as the
//! PodDisruptionBudget allows, never faster than `minPodEvictionIntervalSeconds`,
//! and only once the pods replaced so far are Running and Ready (and passing in
//! Consul when configured). Each pass reads the cluster, takes at most one action
//! ([`plan`]) and records the decision in `status.phase`; everything a pass needs is
//! in the status or the cluster, so a host killed at any moment resumes where it
//! stopped. `RolloutDone` and `RolloutFailed` are final until the spec (percent,
//! template, `rolloutIdentity`, ...) changes.
//!
//! The version leak of `OnDelete`: while a rollout is partial or paused, an
//! old-revision pod deleted for any other reason comes back on the new revision
//! (the StatefulSet controller recreates pods from its update revision);
//! `status.pods` and `status.updatedReplicas` report that truthfully.
//!
//! Rolling back means restoring the previous template (the set's update
//! revision becomes the old one and the same loop moves the pods back).
//! Lowering `percent` below what is already deployed does not move pods back
//! (a partial rollback would need the old template; README.md says how to
//! roll back).

pub mod api;
pub mod consul;
pub mod notify;
pub mod plan;
pub mod spec;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use wasmlet_sdk::controllers::selector_string;
use wasmlet_sdk::prelude::*;

use crate::api::StatefulsetRollout;
use crate::plan::{Act, Observed, Plan, phase};

/// The condition this reconciler reports (the host folds it into `Ready`).
pub const PROGRESSING: &str = "Progressing";

fn reconcile(sroll: Arc<StatefulsetRollout>, ctx: &Context) -> Result<Action, Error> {
    reconcile_at(&sroll, ctx, Timestamp::now())
}

/// One pass at time `now` (tests pass their own clock).
pub fn reconcile_at(
    sroll: &StatefulsetRollout,
    ctx: &Context,
    now: Timestamp,
) -> Result<Action, Error> {
    if sroll.metadata.deletion_timestamp.is_some() {
        return Ok(Action::done());
    }
    let ns = sroll.metadata.namespace.clone().unwrap_or_default();
    let client = ctx.client();
    let want = spec::desired(sroll).ok();
    let set_name = want
        .as_ref()
        .and_then(|w| w.set.metadata.name.clone())
        .unwrap_or_default();
    let set: Option<StatefulSet> = match &want {
        Some(_) => client.get_opt(ns.as_str(), &set_name)?,
        None => None,
    };
    let selector = want
        .as_ref()
        .and_then(|w| w.set.spec.as_ref())
        .and_then(|s| selector_string(Some(&s.selector)));
    // Pods kept between calls by the warm instance: only changed ones are decoded.
    let (pods, pdbs): (Vec<Arc<Pod>>, Vec<PodDisruptionBudget>) = match (&set, &selector) {
        (Some(_), Some(sel)) => (
            client.list_kept(&ListParams::namespaced(&ns).labels(sel))?,
            client.list(&ListParams::namespaced(&ns))?,
        ),
        _ => (Vec::new(), Vec::new()),
    };
    let mut observed = Observed {
        sroll,
        set: set.as_ref(),
        pods: &pods,
        pdbs: &pdbs,
        health: None,
        now,
    };
    let mut plan = plan::plan(&observed);
    // Consul is asked only when the decision needs it (a batch to judge).
    let health;
    if plan.needs_health
        && let Some(sd) = &sroll.spec.service_discovery
    {
        health = consul::health(sd);
        observed.health = Some(&health);
        plan = plan::plan(&observed);
    }
    execute(sroll, ctx, plan, now)
}

fn execute(
    sroll: &StatefulsetRollout,
    ctx: &Context,
    mut plan: Plan,
    now: Timestamp,
) -> Result<Action, Error> {
    let ns = sroll.metadata.namespace.clone().unwrap_or_default();
    let client = ctx.client();
    if let Some((reason, note)) = &plan.warning {
        let _ = ctx.event(Event::warning(reason, "Reconcile").note(note.clone()));
    }
    match std::mem::replace(&mut plan.act, Act::Nothing) {
        Act::Nothing => {}
        Act::CreateSet(set) => match client.create(&*set) {
            Ok(_) => {
                let _ = ctx.event(
                    Event::normal("StatefulSetCreated", "Create").note(plan.status.reason.clone()),
                );
            }
            Err(ClientError::Conflict(_)) => plan.requeue = Some(plan::POLL),
            Err(e) => return Err(e.into()),
        },
        Act::UpdateSet(set) => match client.update(&*set) {
            Ok(_) => {}
            Err(ClientError::Conflict(_)) => plan.requeue = Some(plan::POLL),
            Err(e) => return Err(e.into()),
        },
        Act::CreateBudget(pdb) => match client.create(&*pdb) {
            Ok(_) | Err(ClientError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        },
        Act::UpdateBudget(pdb) => match client.update(&*pdb) {
            Ok(_) => {
                let _ = ctx.event(
                    Event::normal("BudgetUpdated", "Update").note(plan.status.reason.clone()),
                );
            }
            Err(ClientError::Conflict(_)) => plan.requeue = Some(plan::POLL),
            Err(e) => return Err(e.into()),
        },
        Act::Evict(names) => {
            let mut evicted = Vec::new();
            for name in &names {
                match client.evict(&ns, name) {
                    Ok(()) | Err(ClientError::NotFound) => evicted.push(name.clone()),
                    // The budget (server side) says not now: wait, not an error.
                    Err(ClientError::TooManyRequests) | Err(ClientError::Conflict(_)) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            if evicted.is_empty() {
                plan.status.phase = phase::WAITING_FOR_BUDGET.into();
                plan.status.reason =
                    "the Eviction API refused (429): waiting for the budget".into();
                plan.progress.reason = phase::WAITING_FOR_BUDGET.into();
                plan.progress.message = plan.status.reason.clone();
            } else {
                plan.status.last_eviction_time = Some(now.to_string());
                plan.status.last_progress_time = Some(now.to_string());
                let _ = ctx.event(Event::normal("Evicted", "Evict").note(format!(
                    "evicted {} to move them to the new revision",
                    evicted.join(", ")
                )));
                plan.status.last_evicted = evicted;
            }
        }
    }
    if let Some(retry) = notify::sync(ctx, sroll, &mut plan.status, now) {
        plan.requeue = Some(plan.requeue.map_or(retry, |r| r.min(retry)));
    }
    if plan::is_final(&plan.status.phase)
        && let Some(wait) = notify::callback(ctx, sroll, &mut plan.status, now)
    {
        plan.requeue = Some(wait.max(Duration::from_millis(500)));
    }
    if plan.status.reconcile_after.is_none() {
        plan.status.reconcile_after = plan.requeue.map(|d| d.as_secs() as i64);
    }
    // Only a real change moves the timestamps: a pass that changes nothing
    // writes nothing (no status write, no watch event, no extra pass).
    let prev = sroll.status.clone().unwrap_or_default();
    let mut same = plan.status.clone();
    same.last_updated = prev.last_updated.clone();
    same.reconcile_after = prev.reconcile_after;
    same.observed_generation = prev.observed_generation;
    same.conditions = prev.conditions.clone();
    if same == prev {
        plan.status = same;
    }
    let cond = match plan.progress.status {
        Some(true) => Condition::is_true(PROGRESSING),
        Some(false) => Condition::is_false(PROGRESSING),
        None => Condition::unknown(PROGRESSING),
    }
    .reason(&plan.progress.reason)
    .message(plan.progress.message.clone());
    let action = match plan.requeue {
        Some(d) => Action::requeue(d),
        None => Action::done(),
    };
    Ok(action.status(plan.status).condition(cond))
}

wasmlet_sdk::reconciler!(StatefulsetRollout, reconcile, conditions = [PROGRESSING]);
