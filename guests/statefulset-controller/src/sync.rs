//! One sync of a set against the host: read the caches, plan, write the pods,
//! the status and the history (upstream's `syncStatefulSet`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use wasmlet_sdk::prelude::*;

use crate::history;
use crate::plan::{Counts, Op, Revision, Why, plan};
use crate::pod::{POD_INDEX_LABEL, POD_NAME_LABEL, name_of, until_available};
use crate::revision::template;

/// The condition a set with `volumeClaimTemplates` gets.
pub const UNSUPPORTED_REASON: &str = "VolumeClaimTemplatesUnsupported";
const UNSUPPORTED_TYPE: &str = "ReplicaFailure";

fn owned_by<'a>(
    uid: &'a str,
) -> impl Fn(&Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>) -> bool + 'a
{
    move |refs| {
        refs.as_ref().is_some_and(|rs| {
            rs.iter()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        })
    }
}

pub fn sync(set: &StatefulSet, ctx: &Context, now: jiff::Timestamp) -> Result<Action, Error> {
    if set.metadata.deletion_timestamp.is_some() {
        // The API server's garbage collector removes the pods.
        return Ok(Action::done());
    }
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let name = set.metadata.name.clone().unwrap_or_default();
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let client = ctx.client();
    let owned = owned_by(&uid);
    // Kept between calls by the warm instance: only changed pods are decoded.
    let pods: Vec<Arc<Pod>> = client
        .list_kept::<Pod>(&ListParams::namespaced(&ns))
        .map_err(|e| Error::transient("ListPods", e.to_string()))?
        .into_iter()
        .filter(|p| owned(&p.metadata.owner_references))
        .collect();
    let pods: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
    let spec = set.spec.clone().unwrap_or_default();
    if spec
        .volume_claim_templates
        .as_ref()
        .is_some_and(|v| !v.is_empty())
    {
        return unsupported(set, ctx, &pods);
    }

    let mut revisions: Vec<ControllerRevision> = client
        .list::<ControllerRevision>(&ListParams::namespaced(&ns))
        .map_err(|e| Error::transient("ListControllerRevisions", e.to_string()))?
        .into_iter()
        .filter(|r| owned(&r.metadata.owner_references))
        .collect();
    history::sort(&mut revisions);
    let mut collisions = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let (current, update) = history::current_and_update(client, set, &revisions, &mut collisions)?;
    let as_revision = |r: &ControllerRevision| -> Result<Revision, Error> {
        Ok(Revision {
            name: r.metadata.name.clone().unwrap_or_default(),
            template: template(r).ok_or_else(|| {
                Error::terminal(
                    "BadRevision",
                    format!(
                        "ControllerRevision {} holds no pod template",
                        r.metadata.name.as_deref().unwrap_or_default()
                    ),
                )
            })?,
        })
    };
    let (cur, upd) = (as_revision(&current)?, as_revision(&update)?);
    let p = plan(set, &pods, &cur, &upd, now);
    let mut counts = p.counts;
    let outcome = execute(set, ctx, &ns, &name, &p.ops, &mut counts);

    write_status(
        set,
        ctx,
        status_of(set, counts, &cur.name, &upd.name, collisions),
    )?;
    outcome?;
    if !revisions
        .iter()
        .any(|r| r.metadata.name == update.metadata.name)
    {
        revisions.push(update.clone());
    }
    let limit = spec.revision_history_limit.unwrap_or(10);
    for r in history::to_delete(&revisions, &pods, &cur.name, &upd.name, limit) {
        let rname = r.metadata.name.clone().unwrap_or_default();
        match client.delete::<ControllerRevision>(ns.as_str(), &rname, &DeleteParams::default()) {
            Ok(()) | Err(ClientError::NotFound) => {}
            Err(e) => {
                return Err(Error::transient(
                    "DeleteRevisionFailed",
                    format!("{rname}: {e}"),
                ));
            }
        }
    }
    // minReadySeconds: come back when the next ready pod becomes available.
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let wait = pods
        .iter()
        .filter_map(|p| until_available(p, min_ready, now))
        .min();
    Ok(match wait {
        Some(d) => Action::requeue(d + Duration::from_millis(100)),
        None => Action::await_change(),
    })
}

/// The most creates one `create-all` carries (the contract's limit).
const CREATE_BATCH: usize = 500;

fn execute(
    set: &StatefulSet,
    ctx: &Context,
    ns: &str,
    set_name: &str,
    ops: &[Op],
    counts: &mut Counts,
) -> Result<(), Error> {
    let client = ctx.client();
    let mut ops = ops.iter().peekable();
    while let Some(op) = ops.next() {
        match op {
            Op::Create(pod) => {
                // A run of creates goes as one batch, the host sending them
                // concurrently (upstream's slowStartBatch runs its creates in
                // goroutines): a Parallel set's pods wait one round trip.
                let mut batch = vec![pod.as_ref()];
                while batch.len() < CREATE_BATCH
                    && let Some(Op::Create(next)) = ops.peek()
                {
                    batch.push(next.as_ref());
                    ops.next();
                }
                let answers = client.create_all(batch.iter().copied())?;
                let mut failed = None;
                for (pod, answer) in batch.iter().zip(answers) {
                    let pname = pod.metadata.name.clone().unwrap_or_default();
                    match answer {
                        Ok(_) => {
                            let _ = ctx.event(Event::normal("SuccessfulCreate", "Create").note(
                                format!("create Pod {pname} in StatefulSet {set_name} successful"),
                            ));
                        }
                        Err(e) => {
                            let _ =
                                ctx.event(Event::warning("FailedCreate", "Create").note(format!(
                                    "create Pod {pname} in StatefulSet {set_name} failed error: {e}"
                                )));
                            failed.get_or_insert(Error::transient(
                                "FailedCreate",
                                format!("pod {pname}: {e}"),
                            ));
                        }
                    }
                }
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            Op::Delete { name, uid, why } => {
                let params = DeleteParams::default().uid(uid);
                match client.delete::<Pod>(ns, name, &params) {
                    Ok(()) => {
                        let _ = ctx.event(Event::normal("SuccessfulDelete", "Delete").note(
                            format!("delete Pod {name} in StatefulSet {set_name} successful"),
                        ));
                    }
                    // Already gone, or replaced by a newer pod of that name.
                    Err(ClientError::NotFound) | Err(ClientError::Conflict(_)) => {
                        if *why == Why::Update {
                            counts.current += 1;
                        }
                    }
                    Err(e) => {
                        let _ = ctx.event(Event::warning("FailedDelete", "Delete").note(format!(
                            "delete Pod {name} in StatefulSet {set_name} failed error: {e}"
                        )));
                        return Err(Error::transient("FailedDelete", format!("pod {name}: {e}")));
                    }
                }
            }
            Op::Relabel { name, ordinal } => {
                let patch = json!({"metadata": {"labels": {
                    POD_NAME_LABEL: name_of(set.metadata.name.as_deref().unwrap_or_default(), *ordinal),
                    POD_INDEX_LABEL: ordinal.to_string(),
                }}});
                match client.patch::<Pod>(ns, name, &Patch::merge(patch)) {
                    Ok(_) | Err(ClientError::NotFound) => {}
                    Err(e) => {
                        return Err(Error::transient("FailedUpdate", format!("pod {name}: {e}")));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The status upstream's `updateStatefulSetStatus` writes, as JSON.
fn status_of(set: &StatefulSet, c: Counts, current: &str, update: &str, collisions: i32) -> Value {
    let rolling = set
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate");
    let (mut cur_name, mut cur_count) = (current.to_string(), c.current);
    // completeRollingUpdate.
    if rolling && c.updated == c.replicas && c.ready == c.replicas {
        cur_name = update.to_string();
        cur_count = c.updated;
    }
    json!({
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "replicas": c.replicas,
        "readyReplicas": c.ready,
        "availableReplicas": c.available,
        "currentReplicas": cur_count,
        "updatedReplicas": c.updated,
        "currentRevision": cur_name,
        "updateRevision": update,
        "collisionCount": collisions,
    })
}

/// Patches the status when a field differs from what the set shows.
fn write_status(set: &StatefulSet, ctx: &Context, want: Value) -> Result<(), Error> {
    let have = set
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let differs = want
        .as_object()
        .is_some_and(|w| w.iter().any(|(k, v)| have.get(k).unwrap_or(&json!(0)) != v));
    if !differs {
        return Ok(());
    }
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let name = set.metadata.name.clone().unwrap_or_default();
    match ctx.client().patch_status::<StatefulSet>(
        ns.as_str(),
        &name,
        &Patch::merge(json!({"status": want})),
    ) {
        Ok(_) | Err(ClientError::NotFound) => Ok(()),
        Err(e) => Err(Error::transient(
            "StatusFailed",
            format!("StatefulSet {ns}/{name}: {e}"),
        )),
    }
}

/// A set with `volumeClaimTemplates`: the condition, an event once, no pods.
fn unsupported(set: &StatefulSet, ctx: &Context, pods: &[&Pod]) -> Result<Action, Error> {
    let message = "volumeClaimTemplates are not supported by wasmlet's StatefulSet controller \
                   (pods cannot have persistent volumes here): no pods are created";
    let known = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == UNSUPPORTED_TYPE
                    && c.status == "True"
                    && c.reason.as_deref() == Some(UNSUPPORTED_REASON)
            })
        });
    let mut status = json!({
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "replicas": pods.len(),
    });
    if !known {
        status["conditions"] = json!([{
            "type": UNSUPPORTED_TYPE, "status": "True", "reason": UNSUPPORTED_REASON,
            "message": message, "lastTransitionTime": jiff::Timestamp::now().to_string(),
        }]);
        let _ = ctx.event(Event::warning(UNSUPPORTED_REASON, "Create").note(message));
    }
    write_status(set, ctx, status)?;
    Ok(Action::await_change())
}
