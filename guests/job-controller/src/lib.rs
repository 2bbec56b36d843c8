//! The built-in Job controller (kube-controller-manager's `job`
//! controller), a reconciler of batch/v1 Jobs.
//!
//! Each call reads the namespace's pods the Job controls, counts the
//! finished ones exactly once (`tracking`), decides what to do (`status`:
//! create up to parallelism and the completions left, delete when the Job
//! is suspended or finishing, wait out the failure back-off, the conditions
//! and times), does it, and writes the status when it changed. The host's
//! expectations (the manifest's `owns` Pods) hold a Job back until the pod
//! cache shows every create and delete of its previous call, so a stale
//! cache never makes it create twice. Creates go in upstream's slow-start
//! batches (1, 2, 4, ...; stop at the first failure), at most 500 per call,
//! and so do deletes and newly recorded finished pods: a call's work
//! follows the pods that exist and the batch, never `parallelism` or
//! `completions`. The pods are kept between calls cut to what is read
//! (`kept`).
//!
//! Indexed Jobs (`indexed`) give each pod its completion index and take
//! the lowest pending indexes, one pod per index at most, keeping
//! `status.completedIndexes`; their `succeeded` is the number of completed
//! indexes.
//!
//! Deviations from upstream: `podFailurePolicy`, `successPolicy` and
//! `backoffLimitPerIndex` are not acted on (an Indexed Job's failures all
//! count against `backoffLimit`, and `failedIndexes` is never set); active
//! pods with a duplicate or out-of-range index are not deleted (pods are
//! only made for free indexes, and the host's expectations keep a stale
//! cache from making two for one); orphan pods the selector picks
//! are not adopted; pods deleted while the Job is suspended or finishing
//! are not counted as failed; container restarts of `OnFailure` pods do
//! not count towards `backoffLimit`.

pub mod indexed;
pub mod kept;
pub mod status;
pub mod tracking;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{controller_of, pod_ready};
use wasmlet_sdk::prelude::*;

use status::{Observed, Plan};
use tracking::{FINALIZER, Outcome, outcome, tracked, uid};

/// Pod uids recorded in `uncountedTerminatedPods`: (succeeded, failed).
type Recorded = (BTreeSet<String>, BTreeSet<String>);

/// Upstream's `MaxPodCreateDeletePerSync`: creates (and deletes) per call.
const BURST: usize = 500;

fn transient(reason: &str) -> impl FnOnce(ClientError) -> Error + '_ {
    move |e| Error::transient(reason, e.to_string())
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn terminal(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

/// When a failed pod finished: its containers' latest end, else when it
/// was deleted.
fn failed_at(p: &Pod) -> Option<Timestamp> {
    let ended = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    ended.or_else(|| p.metadata.deletion_timestamp.as_ref().map(|t| t.0))
}

/// Removes the tracking finalizer from `pod` (gone already is fine).
fn release(ctx: &Context, ns: &str, job_uid: &str, pod: &Pod) -> Result<(), ClientError> {
    let Some(patch) = tracking::release_patch(pod) else {
        return Ok(());
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    match ctx.client().patch::<Pod>(ns, &name, &Patch::json(patch)) {
        Ok(_) | Err(ClientError::NotFound) => {
            tracking::remember_released(job_uid, &uid(pod));
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn reconcile(job: Arc<Job>, ctx: &Context) -> Result<Action, Error> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let job_uid = job.metadata.uid.clone().unwrap_or_default();
    let client = ctx.client();
    let Some(spec) = job.spec.as_ref() else {
        return Ok(Action::done());
    };
    // Kept between calls by the warm instance, cut to what is read: only
    // changed pods are decoded.
    let all: Vec<Arc<Pod>> = kept::pods(client, &ns).map_err(transient("ListPods"))?;
    let pods: Vec<&Pod> = all
        .iter()
        .map(|p| &**p)
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == job_uid))
        .collect();
    let still: HashSet<String> = pods.iter().filter(|p| tracked(p)).map(|p| uid(p)).collect();
    tracking::settle(&job_uid, &still);
    if job.metadata.deletion_timestamp.is_some() {
        // Its pods go with it (the garbage collector): nothing to count.
        for p in pods.iter().filter(|p| tracked(p)) {
            release(ctx, &ns, &job_uid, p).map_err(transient("ReleaseFailed"))?;
        }
        return Ok(Action::done());
    }
    let now = Timestamp::now();
    let mut current = (*job).clone();
    let (moved_s, moved_f, keep) = count(&mut current, &pods, ctx)?;
    let st = current.status.clone().unwrap_or_default();
    // Indexed: succeeded is the number of completed indexes (upstream).
    let completed = index_completions(&current)
        .map(|n| indexed::parse(st.completed_indexes.as_deref().unwrap_or(""), n));
    let succeeded = match &completed {
        Some(c) => i32::try_from(c.len()).unwrap_or(i32::MAX),
        None => st.succeeded.unwrap_or(0) + moved_s,
    };
    let mut obs = Observed {
        succeeded,
        failed: st.failed.unwrap_or(0) + moved_f,
        ..Observed::default()
    };
    let mut active: Vec<&Pod> = vec![];
    for p in &pods {
        if p.metadata.deletion_timestamp.is_some() {
            if !terminal(p) {
                obs.terminating += 1;
            }
        } else if !terminal(p) {
            active.push(p);
            if pod_ready(p) {
                obs.ready += 1;
            }
        }
        if phase(p) == "Failed" || (p.metadata.deletion_timestamp.is_some() && !terminal(p)) {
            obs.last_failure = obs.last_failure.max(failed_at(p));
        }
    }
    obs.active = i32::try_from(active.len()).unwrap_or(i32::MAX);
    let mut plan = status::plan(&current, &obs, now);
    // One pod per pending index: indexes of pods not yet finished (being
    // deleted too) are held, so an index never has two pods running.
    let indexes = index_completions(&current)
        .zip(completed.as_ref())
        .map(|(n, done)| {
            let held: BTreeSet<i32> = pods
                .iter()
                .filter(|p| !terminal(p))
                .filter_map(|p| indexed::index_of(p))
                .collect();
            indexed::pending(n, done, &held, plan.create.min(BURST))
        });
    let (created, deleted, failure) = act(&current, &plan, &active, indexes.as_deref(), ctx, &ns);
    for (warning, reason, note) in &plan.events {
        let e = if *warning {
            Event::warning(reason, "Sync")
        } else {
            Event::normal(reason, "Sync")
        };
        let _ = ctx.event(e.note(note.clone()));
    }
    obs.active += i32::try_from(created).unwrap_or(0) - i32::try_from(deleted).unwrap_or(0);
    obs.terminating += i32::try_from(deleted).unwrap_or(0);
    plan.completed_indexes = completed.map(|c| indexed::format(&c));
    write_status(&current, &plan, &obs, &keep, ctx, &ns, &name)?;
    if let Some((reason, message)) = failure {
        return Err(Error::transient(reason, message));
    }
    let mut requeue = plan.requeue;
    if let Some(ttl) = spec.ttl_seconds_after_finished
        && plan
            .conditions
            .iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    {
        let finished = plan
            .completion_time
            .as_deref()
            .or_else(|| {
                plan.conditions
                    .iter()
                    .find(|c| c["type"] == "Failed")
                    .and_then(|c| c["lastTransitionTime"].as_str())
            })
            .and_then(|t| t.parse::<Timestamp>().ok())
            .or_else(|| status::finish_time(&current))
            .unwrap_or(now);
        let expires = finished + SignedDuration::from_secs(i64::from(ttl));
        if expires <= now {
            // Foreground: the Job stays until its pods are gone, as upstream.
            return match client.delete::<Job>(
                ns.as_str(),
                &name,
                &DeleteParams::foreground().uid(&job_uid),
            ) {
                Ok(()) | Err(ClientError::NotFound) => Ok(Action::done()),
                Err(e) => Err(Error::transient("TTLDeleteFailed", e.to_string())),
            };
        }
        let left = expires.duration_since(now).unsigned_abs();
        requeue = Some(requeue.map_or(left, |r| r.min(left)));
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::done(),
    })
}

/// An Indexed Job's `completions` (the number of indexes); `None` for a
/// NonIndexed Job.
fn index_completions(job: &Job) -> Option<i32> {
    let spec = job.spec.as_ref()?;
    (spec.completion_mode.as_deref() == Some("Indexed")).then(|| spec.completions.unwrap_or(1))
}

/// Records newly finished pods, releases recorded ones: the succeeded and
/// failed pods now counted, and the uids left recorded (release failed).
fn count(job: &mut Job, pods: &[&Pod], ctx: &Context) -> Result<(i32, i32, Recorded), Error> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let job_uid = job.metadata.uid.clone().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let winding = status::winding_down(job);
    let failed_only = spec.pod_replacement_policy.as_deref() == Some("Failed");
    let (mut rec_s, mut rec_f) = tracking::uncounted(job);
    // Indexed: a succeeded pod's index joins `completedIndexes` in the same
    // write that records its uid, as upstream does, so neither is lost.
    let n = index_completions(job);
    let mut completed = n.map(|n| {
        let st = job.status.as_ref();
        indexed::parse(
            st.and_then(|s| s.completed_indexes.as_deref())
                .unwrap_or(""),
            n,
        )
    });
    let mut dropped = vec![];
    let mut new = false;
    for p in pods.iter().filter(|p| tracked(p)) {
        // Upstream's maxUncountedPods: the status never lists more than a
        // batch; the rest are recorded once these are released.
        if rec_s.len() + rec_f.len() >= BURST {
            break;
        }
        let u = uid(p);
        if rec_s.contains(&u) || rec_f.contains(&u) || tracking::released(&job_uid, &u) {
            continue;
        }
        match outcome(p, failed_only, winding) {
            Outcome::Running => {}
            Outcome::Succeeded => {
                if rec_s.insert(u) {
                    new = true;
                    if let (Some(done), Some(n), Some(i)) =
                        (completed.as_mut(), n, indexed::index_of(p))
                        && (0..n).contains(&i)
                    {
                        done.insert(i);
                    }
                }
            }
            Outcome::Failed => new |= rec_f.insert(u),
            Outcome::Dropped => dropped.push(*p),
        }
    }
    if new {
        // Guarded by the resourceVersion read: a stale Job is retried, never
        // written over.
        let mut patch = json!({"metadata": {"resourceVersion": job.metadata.resource_version},
            "status": {"uncountedTerminatedPods": {"succeeded": rec_s, "failed": rec_f}}});
        if let Some(done) = &completed {
            patch["status"]["completedIndexes"] = json!(indexed::format(done));
        }
        *job = ctx
            .client()
            .patch_status::<Job>(ns.as_str(), &name, &Patch::merge(patch))
            .map_err(transient("StatusFailed"))?;
    }
    let by_uid: HashMap<String, &Pod> = pods.iter().map(|p| (uid(p), *p)).collect();
    let release_or_keep = |set: BTreeSet<String>| -> Result<(i32, BTreeSet<String>), Error> {
        let (mut moved, mut keep) = (0, BTreeSet::new());
        for u in set {
            match by_uid.get(&u) {
                Some(p) if tracked(p) && !tracking::released(&job_uid, &u) => {
                    match release(ctx, &ns, &job_uid, p) {
                        Ok(()) => moved += 1,
                        Err(_) => {
                            keep.insert(u);
                        }
                    }
                }
                _ => moved += 1,
            }
        }
        Ok((moved, keep))
    };
    let (moved_s, keep_s) = release_or_keep(rec_s)?;
    let (moved_f, keep_f) = release_or_keep(rec_f)?;
    for p in dropped {
        release(ctx, &ns, &job_uid, p).map_err(transient("ReleaseFailed"))?;
    }
    Ok((moved_s, moved_f, (keep_s, keep_f)))
}

/// Creates and deletes as `plan` says (an Indexed Job: one pod for each of
/// `indexes`): (created, deleted, first failure).
fn act(
    job: &Job,
    plan: &Plan,
    active: &[&Pod],
    indexes: Option<&[i32]>,
    ctx: &Context,
    ns: &str,
) -> (usize, usize, Option<(&'static str, String)>) {
    let client = ctx.client();
    let mut doomed: Vec<&Pod> = active.to_vec();
    if !plan.delete_active {
        // The newest go first.
        doomed.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
        doomed.truncate(plan.delete_extra);
    }
    // Upstream's MaxPodCreateDeletePerSync: the rest go in the next call,
    // which each delete's pod event brings.
    doomed.truncate(BURST);
    let mut deleted = 0;
    for p in doomed {
        let pod_name = p.metadata.name.clone().unwrap_or_default();
        match client.delete::<Pod>(ns, &pod_name, &DeleteParams::default().uid(&uid(p))) {
            Ok(()) | Err(ClientError::NotFound) => {
                deleted += 1;
                let _ = ctx.event(
                    Event::normal("SuccessfulDelete", "Delete")
                        .note(format!("Deleted pod: {pod_name}")),
                );
            }
            Err(e) => {
                let _ = ctx.event(
                    Event::warning("FailedDelete", "Delete").note(format!("Error deleting: {e}")),
                );
                return (0, deleted, Some(("FailedDelete", e.to_string())));
            }
        }
    }
    let mut left = indexes.map_or(plan.create, <[i32]>::len).min(BURST);
    if left == 0 {
        return (0, deleted, None);
    }
    let template = match new_pod(job, ns) {
        Ok(p) => p,
        Err(e) => return (0, deleted, Some(("FailedCreate", e))),
    };
    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    let (mut created, mut batch) = (0, 1);
    while left > 0 {
        // slowStartBatch: a batch's creates at once (`create-all`), the next
        // twice as large, none after one that failed.
        let n = batch.min(left);
        let mut pods = Vec::with_capacity(n);
        for k in created..created + n {
            let mut pod = template.clone();
            if let Some(&i) = indexes.and_then(|ix| ix.get(k)) {
                indexed::assign(&mut pod, job_name, i);
            }
            match serde_json::from_value::<Pod>(pod) {
                Ok(p) => pods.push(p),
                Err(e) => {
                    let e = format!("the pod template does not make a pod: {e}");
                    return (created, deleted, Some(("FailedCreate", e)));
                }
            }
        }
        let answers = match client.create_all(&pods) {
            Ok(answers) => answers,
            Err(e) => return (created, deleted, Some(("FailedCreate", e.to_string()))),
        };
        let mut failed = None;
        for answer in answers {
            match answer {
                Ok(made) => {
                    created += 1;
                    let _ = ctx.event(Event::normal("SuccessfulCreate", "Create").note(format!(
                        "Created pod: {}",
                        made.metadata.name.unwrap_or_default()
                    )));
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
            return (created, deleted, failed);
        }
        left -= n;
        batch *= 2;
    }
    (created, deleted, None)
}

/// The template's labels, annotations and spec, `generateName: NAME-`,
/// controlled by the Job and tracked by its finalizer (as JSON: an Indexed
/// Job's pods get their index on top).
fn new_pod(job: &Job, ns: &str) -> Result<Value, String> {
    let template = job
        .spec
        .as_ref()
        .map(|s| &s.template)
        .ok_or_else(|| "the Job has no spec.template".to_string())?;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    finalizers.push(FINALIZER.to_string());
    let pod: Value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", job.metadata.name.as_deref().unwrap_or_default()),
            "namespace": ns,
            "labels": meta.labels,
            "annotations": meta.annotations,
            "finalizers": finalizers,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                "name": job.metadata.name, "uid": job.metadata.uid,
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": template.spec,
    });
    // Checked once here, so that a bad template fails before any create.
    serde_json::from_value::<Pod>(pod.clone())
        .map(|_| pod)
        .map_err(|e| format!("the pod template does not make a pod: {e}"))
}

/// Writes the status `plan` and `obs` describe, when it differs.
fn write_status(
    job: &Job,
    plan: &Plan,
    obs: &Observed,
    keep: &Recorded,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<(), Error> {
    let mut want = json!({
        "active": obs.active,
        "ready": obs.ready,
        "terminating": obs.terminating,
        "succeeded": obs.succeeded,
        "failed": obs.failed,
        "conditions": plan.conditions,
        "uncountedTerminatedPods": {"succeeded": keep.0, "failed": keep.1},
    });
    if let Some(c) = &plan.completed_indexes {
        want["completedIndexes"] = json!(c);
    }
    if let Some(t) = &plan.start_time {
        want["startTime"] = json!(t);
    }
    if let Some(t) = &plan.completion_time {
        want["completionTime"] = json!(t);
    }
    let have = serde_json::to_value(job.status.clone().unwrap_or_default()).unwrap_or_default();
    let same = want.as_object().into_iter().flatten().all(|(k, v)| {
        let h = have.get(k).cloned().unwrap_or(Value::Null);
        match k.as_str() {
            // Absent and zero, absent and empty read alike.
            "active" | "ready" | "terminating" | "succeeded" | "failed" => {
                h.as_i64().unwrap_or(0) == v.as_i64().unwrap_or(0)
            }
            "conditions" => {
                h.as_array().map_or(0, Vec::len) == 0 && v.as_array().map_or(0, Vec::len) == 0
                    || h == *v
            }
            "uncountedTerminatedPods" => {
                let n = |x: &Value, f: &str| x[f].as_array().map_or(0, Vec::len);
                n(&h, "succeeded") + n(&h, "failed") == 0 && n(v, "succeeded") + n(v, "failed") == 0
                    || h == *v
            }
            // Empty is dropped when stored (Go's omitempty).
            "completedIndexes" => h.as_str().unwrap_or("") == v.as_str().unwrap_or(""),
            // The same instant may be written in another form.
            "startTime" | "completionTime" => {
                let t = |x: &Value| x.as_str().and_then(|s| s.parse::<Timestamp>().ok());
                t(&h) == t(v)
            }
            _ => h == *v,
        }
    });
    if same {
        return Ok(());
    }
    let patch = json!({"metadata": {"resourceVersion": job.metadata.resource_version},
        "status": want});
    match ctx
        .client()
        .patch_status::<Job>(ns, name, &Patch::merge(patch))
    {
        Ok(_) | Err(ClientError::NotFound) => Ok(()),
        Err(e) => Err(Error::transient("StatusFailed", e.to_string())),
    }
}

wasmlet_sdk::reconciler!(Job, reconcile);
