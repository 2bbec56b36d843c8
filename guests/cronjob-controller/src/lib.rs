//! The built-in CronJob controller (kube-controller-manager's `cronjob`
//! controller, v2), a reconciler of batch/v1 CronJobs.
//!
//! Each call reads the namespace's Jobs the CronJob controls, brings
//! `status.active` and `lastSuccessfulTime` up to date, deletes finished
//! Jobs beyond the history limits (oldest first), then (`decide`) creates
//! the Job of the latest due time, named `NAME-<minutes since the epoch>`
//! so that a repeated call never makes it twice, and requeues itself for
//! the next scheduled time (`schedule`). The host's expectations (the
//! manifest's `owns` Jobs) hold a CronJob back until the Job cache shows
//! its creates.
//!
//! Deviations from upstream: without `timeZone` the schedule is read in
//! UTC; croner also accepts its `L`, `W` and `#` extensions; Jobs of the
//! CronJob's selector that it does not control are not adopted; under
//! `concurrencyPolicy: Allow` a new Job beside `decide::PILE_UP` or more
//! active ones comes with a `TooManyActiveJobs` Warning, which upstream
//! does not have (Jobs that never end otherwise pile up one per run
//! silently; a ResourceQuota on `count/jobs.batch` is what stops them).

pub mod decide;
pub mod schedule;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use serde_json::{Value, json};
use wasmlet_sdk::controllers::controller_of;
use wasmlet_sdk::prelude::*;

fn has_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn finished(job: &Job) -> bool {
    has_condition(job, "Complete") || has_condition(job, "Failed")
}

fn reference(job: &Job) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "name": job.metadata.name,
        "namespace": job.metadata.namespace, "uid": job.metadata.uid,
        "resourceVersion": job.metadata.resource_version})
}

fn reconcile(cj: Arc<CronJob>, ctx: &Context) -> Result<Action, Error> {
    let ns = cj.metadata.namespace.clone().unwrap_or_default();
    let name = cj.metadata.name.clone().unwrap_or_default();
    let cj_uid = cj.metadata.uid.clone().unwrap_or_default();
    let client = ctx.client();
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::done());
    }
    let Some(spec) = cj.spec.as_ref() else {
        return Ok(Action::done());
    };
    let jobs: Vec<Job> = client
        .list(&ListParams::namespaced(&ns))
        .map_err(|e| Error::transient("ListJobs", e.to_string()))?;
    let mut ours: Vec<Job> = jobs
        .into_iter()
        .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.uid == cj_uid))
        .collect();
    ours.sort_by_key(|j| j.metadata.creation_timestamp.clone());
    let now = Timestamp::now();
    let d = decide::decide(&cj, ours.iter().filter(|j| !finished(j)).count(), now);
    for (warning, reason, note) in &d.events {
        let e = if *warning {
            Event::warning(reason, "Sync")
        } else {
            Event::normal(reason, "Sync")
        };
        let _ = ctx.event(e.note(note.clone()));
    }
    if d.replace {
        for j in ours.iter().filter(|j| !finished(j)) {
            let job_name = j.metadata.name.clone().unwrap_or_default();
            delete_job(ctx, &ns, j)?;
            let _ = ctx.event(
                Event::normal("SuccessfulDelete", "Delete").note(format!("Deleted job {job_name}")),
            );
        }
        ours.retain(finished);
    }
    let mut last_schedule = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0);
    if let Some(at) = d.create {
        let job = new_job(&cj, &ns, at)?;
        let job_name = job.metadata.name.clone().unwrap_or_default();
        match client.create(&job) {
            Ok(made) => {
                let _ = ctx.event(
                    Event::normal("SuccessfulCreate", "Create")
                        .note(format!("Created job {job_name}")),
                );
                ours.push(made);
            }
            // 409 on create: made by an earlier call whose status write was lost.
            Err(ClientError::Conflict(_)) => {}
            Err(e) => {
                let _ = ctx.event(
                    Event::warning("FailedCreate", "Create")
                        .note(format!("Error creating job: {e}")),
                );
                return Err(Error::transient("FailedCreate", e.to_string()));
            }
        }
        last_schedule = Some(at);
    }
    prune_history(ctx, &ns, spec, &mut ours)?;
    write_status(&cj, &ours, last_schedule, ctx, &ns, &name)?;
    Ok(match d.requeue {
        Some(after) => Action::requeue(after),
        None => Action::done(),
    })
}

fn delete_job(ctx: &Context, ns: &str, job: &Job) -> Result<(), Error> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    match ctx
        .client()
        .delete::<Job>(ns, &name, &DeleteParams::background().uid(&uid))
    {
        Ok(()) | Err(ClientError::NotFound) => Ok(()),
        Err(e) => Err(Error::transient("DeleteFailed", e.to_string())),
    }
}

/// Deletes the oldest finished Jobs beyond `successfulJobsHistoryLimit`
/// and `failedJobsHistoryLimit` (`ours` is oldest first).
fn prune_history(
    ctx: &Context,
    ns: &str,
    spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    ours: &mut Vec<Job>,
) -> Result<(), Error> {
    for (cond, limit) in [
        ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
        ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let done: Vec<Job> = ours
            .iter()
            .filter(|j| has_condition(j, cond))
            .cloned()
            .collect();
        let extra = done
            .len()
            .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
        for j in done.iter().take(extra) {
            delete_job(ctx, ns, j)?;
            let _ = ctx.event(Event::normal("SuccessfulDelete", "Delete").note(format!(
                "Deleted job {}",
                j.metadata.name.as_deref().unwrap_or_default()
            )));
            ours.retain(|o| o.metadata.uid != j.metadata.uid);
        }
    }
    Ok(())
}

/// `getJobFromTemplate2`: the template's labels, annotations and spec,
/// the scheduled time as an annotation, controlled by the CronJob.
fn new_job(cj: &CronJob, ns: &str, at: Timestamp) -> Result<Job, Error> {
    let name = cj.metadata.name.clone().unwrap_or_default();
    let template = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(
        "batch.kubernetes.io/cronjob-scheduled-timestamp".into(),
        decide_rfc3339(at),
    );
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": schedule::job_name(&name, at),
            "namespace": ns,
            "labels": meta.labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                "name": name, "uid": cj.metadata.uid,
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": template.spec,
    });
    serde_json::from_value(job).map_err(|e| {
        Error::terminal(
            "InvalidTemplate",
            format!("the job template does not make a Job: {e}"),
        )
    })
}

fn decide_rfc3339(t: Timestamp) -> String {
    t.round(jiff::Unit::Second).unwrap_or(t).to_string()
}

/// `status.active` (the unfinished Jobs), `lastScheduleTime` and
/// `lastSuccessfulTime`, written when they changed.
fn write_status(
    cj: &CronJob,
    ours: &[Job],
    last_schedule: Option<Timestamp>,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<(), Error> {
    let st = cj.status.clone().unwrap_or_default();
    let active: Vec<Value> = ours
        .iter()
        .filter(|j| !finished(j))
        .map(reference)
        .collect();
    let last_success = ours
        .iter()
        .filter(|j| has_condition(j, "Complete"))
        .filter_map(|j| j.status.as_ref()?.completion_time.as_ref().map(|t| t.0))
        .chain(st.last_successful_time.as_ref().map(|t| t.0))
        .max();
    let names = |refs: &[Value]| -> Vec<String> {
        refs.iter()
            .map(|r| r["uid"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let have_active: Vec<Value> = st
        .active
        .as_ref()
        .and_then(|a| serde_json::to_value(a).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let same = names(&have_active) == names(&active)
        && st.last_schedule_time.as_ref().map(|t| t.0) == last_schedule
        && st.last_successful_time.as_ref().map(|t| t.0) == last_success;
    if same {
        return Ok(());
    }
    // An empty list is written as null, as upstream's omitempty drops it.
    let active = if active.is_empty() {
        Value::Null
    } else {
        json!(active)
    };
    let mut status = json!({ "active": active });
    if let Some(t) = last_schedule {
        status["lastScheduleTime"] = json!(decide_rfc3339(t));
    }
    if let Some(t) = last_success {
        status["lastSuccessfulTime"] = json!(decide_rfc3339(t));
    }
    let patch = json!({"metadata": {"resourceVersion": cj.metadata.resource_version},
        "status": status});
    match ctx
        .client()
        .patch_status::<CronJob>(ns, name, &Patch::merge(patch))
    {
        Ok(_) | Err(ClientError::NotFound) => Ok(()),
        Err(e) => Err(Error::transient("StatusFailed", e.to_string())),
    }
}

wasmlet_sdk::reconciler!(CronJob, reconcile);
