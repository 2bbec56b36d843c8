//! What a Job should do next, from its spec, its status and what its pods
//! show (`Observed`): upstream's `syncJob` decisions as a pure function, so
//! they are tested without a host. Conditions as upstream 1.33 sets them:
//! `FailureTarget` (BackoffLimitExceeded, DeadlineExceeded) then `Failed`
//! once no pod runs, `SuccessCriteriaMet` (CompletionsReached) then
//! `Complete` with `completionTime`; `Suspended` while `spec.suspend`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp, Unit};
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

/// Upstream's `DefaultJobPodFailureBackOff` and its cap.
const BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(360);

/// What the pods show, with the finished ones counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observed {
    pub succeeded: i32,
    pub failed: i32,
    /// Running or pending, not being deleted.
    pub active: i32,
    pub ready: i32,
    /// Being deleted, not finished.
    pub terminating: i32,
    /// When the latest failed pod finished (for the back-off).
    pub last_failure: Option<Timestamp>,
}

/// One event to record: (warning, reason, note).
pub type Note = (bool, &'static str, String);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Pods to create.
    pub create: usize,
    /// Delete every active pod (the Job is finishing or suspended).
    pub delete_active: bool,
    /// Active pods beyond what is wanted (parallelism lowered).
    pub delete_extra: usize,
    pub conditions: Vec<Value>,
    pub start_time: Option<String>,
    pub completion_time: Option<String>,
    pub requeue: Option<Duration>,
    pub events: Vec<Note>,
    /// An Indexed Job's `completedIndexes` (set by the caller, which counts
    /// the pods).
    pub completed_indexes: Option<String>,
}

pub fn rfc3339(t: Timestamp) -> String {
    t.round(Unit::Second).unwrap_or(t).to_string()
}

fn has(conds: &[Value], type_: &str) -> bool {
    conds
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

fn find<'a>(conds: &'a [Value], type_: &str) -> Option<&'a Value> {
    conds
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
}

/// Sets condition `type_` (a new transition time only when its status changes).
fn set(conds: &mut Vec<Value>, type_: &str, status: bool, reason: &str, message: &str, now: &str) {
    let status = if status { "True" } else { "False" };
    if let Some(c) = conds.iter_mut().find(|c| c["type"] == type_) {
        if c["status"] != status {
            *c = json!({"type": type_, "status": status, "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now});
        }
        return;
    }
    conds.push(
        json!({"type": type_, "status": status, "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now}),
    );
}

fn min_requeue(plan: &mut Plan, d: Duration) {
    plan.requeue = Some(plan.requeue.map_or(d, |r| r.min(d)));
}

/// Upstream's pod failure back-off: 10 s doubling per failure, at most 6 min.
pub fn backoff(failed: i32) -> Duration {
    let shift = u32::try_from(failed.saturating_sub(1).clamp(0, 16)).unwrap_or(16);
    BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

/// Whether the Job has a terminal condition (`Complete` or `Failed`).
pub fn finished(job: &Job) -> bool {
    let conds = conditions(job);
    has(&conds, "Complete") || has(&conds, "Failed")
}

/// Whether the Job is on its way out: suspended or with a terminal target,
/// so that pods deleted now are not failures of its own.
pub fn winding_down(job: &Job) -> bool {
    let conds = conditions(job);
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
        || ["FailureTarget", "SuccessCriteriaMet", "Complete", "Failed"]
            .iter()
            .any(|t| has(&conds, t))
}

pub fn conditions(job: &Job) -> Vec<Value> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| serde_json::to_value(c).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// When a finished Job finished: its completion time, or when it failed.
pub fn finish_time(job: &Job) -> Option<Timestamp> {
    if let Some(t) = job.status.as_ref().and_then(|s| s.completion_time.as_ref()) {
        return Some(t.0);
    }
    find(&conditions(job), "Failed")?["lastTransitionTime"]
        .as_str()?
        .parse()
        .ok()
}

pub fn plan(job: &Job, obs: &Observed, now: Timestamp) -> Plan {
    let spec = job.spec.clone().unwrap_or_default();
    let st = job.status.clone().unwrap_or_default();
    let stamp = rfc3339(now);
    let mut conds = conditions(job);
    let mut plan = Plan {
        start_time: st.start_time.as_ref().map(|t| rfc3339(t.0)),
        completion_time: st.completion_time.as_ref().map(|t| rfc3339(t.0)),
        ..Plan::default()
    };
    if has(&conds, "Complete") || has(&conds, "Failed") {
        plan.conditions = conds;
        return plan;
    }
    let suspended = spec.suspend == Some(true);
    let start: Option<Timestamp> = st.start_time.as_ref().map(|t| t.0);
    if !has(&conds, "FailureTarget") && !has(&conds, "SuccessCriteriaMet") {
        let deadline = spec
            .active_deadline_seconds
            .zip(start)
            .map(|(s, t)| t + SignedDuration::from_secs(s));
        let done = match spec.completions {
            Some(c) => obs.succeeded >= c,
            None => obs.succeeded > 0 && obs.active == 0,
        };
        if obs.failed > spec.backoff_limit.unwrap_or(6) {
            let m = "Job has reached the specified backoff limit";
            set(
                &mut conds,
                "FailureTarget",
                true,
                "BackoffLimitExceeded",
                m,
                &stamp,
            );
            plan.events.push((true, "BackoffLimitExceeded", m.into()));
        } else if !suspended && deadline.is_some_and(|d| d <= now) {
            let m = "Job was active longer than specified deadline";
            set(
                &mut conds,
                "FailureTarget",
                true,
                "DeadlineExceeded",
                m,
                &stamp,
            );
            plan.events.push((true, "DeadlineExceeded", m.into()));
        } else if done {
            let m = "Reached expected number of succeeded pods";
            set(
                &mut conds,
                "SuccessCriteriaMet",
                true,
                "CompletionsReached",
                m,
                &stamp,
            );
        }
    }
    if let Some(target) = find(&conds, "FailureTarget").cloned() {
        plan.delete_active = true;
        if obs.active == 0 && obs.terminating == 0 {
            let (r, m) = (
                target["reason"].as_str().unwrap_or(""),
                target["message"].as_str().unwrap_or(""),
            );
            set(&mut conds, "Failed", true, r, m, &stamp);
        }
        plan.conditions = conds;
        return plan;
    }
    if has(&conds, "SuccessCriteriaMet") {
        plan.delete_active = true;
        if obs.active == 0 && obs.terminating == 0 {
            let m = "Reached expected number of succeeded pods";
            set(
                &mut conds,
                "Complete",
                true,
                "CompletionsReached",
                m,
                &stamp,
            );
            plan.completion_time = Some(stamp.clone());
            plan.events
                .push((false, "Completed", "Job completed".into()));
        }
        plan.conditions = conds;
        return plan;
    }
    if suspended {
        plan.delete_active = true;
        if !has(&conds, "Suspended") {
            set(
                &mut conds,
                "Suspended",
                true,
                "JobSuspended",
                "Job suspended",
                &stamp,
            );
            plan.events
                .push((false, "Suspended", "Job suspended".into()));
        }
        plan.conditions = conds;
        return plan;
    }
    let mut start = start;
    if has(&conds, "Suspended") {
        // Resumed: the deadline counts from now.
        set(
            &mut conds,
            "Suspended",
            false,
            "JobResumed",
            "Job resumed",
            &stamp,
        );
        plan.events.push((false, "Resumed", "Job resumed".into()));
        start = None;
    }
    let start = start.unwrap_or(now);
    plan.start_time = Some(rfc3339(start));
    if let Some(s) = spec.active_deadline_seconds {
        let left = (start + SignedDuration::from_secs(s)).duration_since(now);
        min_requeue(&mut plan, left.unsigned_abs() + Duration::from_millis(500));
    }
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let want = match spec.completions {
        Some(c) => parallelism.min((c - obs.succeeded).max(0)),
        // A work queue: once one pod succeeded, no new ones.
        None if obs.succeeded > 0 => obs.active.min(parallelism),
        None => parallelism,
    };
    if obs.active < want {
        if obs.failed > 0
            && let Some(last) = obs.last_failure
        {
            let ready_at = last + backoff(obs.failed);
            if ready_at > now {
                min_requeue(&mut plan, ready_at.duration_since(now).unsigned_abs());
                plan.conditions = conds;
                return plan;
            }
        }
        plan.create = usize::try_from(want - obs.active).unwrap_or(0);
    } else if obs.active > want {
        plan.delete_extra = usize::try_from(obs.active - want).unwrap_or(0);
    }
    plan.conditions = conds;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value, status: Value) -> Job {
        serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": spec, "status": status}))
            .unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn types(p: &Plan) -> Vec<(String, String)> {
        p.conditions
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().into(),
                    c["status"].as_str().unwrap().into(),
                )
            })
            .collect()
    }

    #[test]
    fn pods_are_made_up_to_parallelism_and_the_completions_left() {
        let j = job(json!({"completions": 5, "parallelism": 3}), json!({}));
        let p = plan(&j, &Observed::default(), now());
        assert_eq!(p.create, 3);
        assert_eq!(p.start_time.as_deref(), Some("2026-01-01T00:10:00Z"));
        let obs = Observed {
            succeeded: 4,
            active: 0,
            ..Observed::default()
        };
        assert_eq!(plan(&j, &obs, now()).create, 1);
        let obs = Observed {
            active: 3,
            ..Observed::default()
        };
        let p = plan(
            &job(json!({"completions": 5, "parallelism": 1}), json!({})),
            &obs,
            now(),
        );
        assert_eq!((p.create, p.delete_extra), (0, 2));
    }

    #[test]
    fn success_is_met_then_complete_once_no_pod_runs() {
        let j = job(json!({"completions": 2, "parallelism": 2}), json!({}));
        let obs = Observed {
            succeeded: 2,
            active: 0,
            ..Observed::default()
        };
        let p = plan(&j, &obs, now());
        assert_eq!(
            types(&p),
            [
                ("SuccessCriteriaMet".into(), "True".into()),
                ("Complete".into(), "True".into())
            ]
        );
        assert_eq!(p.completion_time.as_deref(), Some("2026-01-01T00:10:00Z"));
        assert_eq!(p.create, 0);
        // A work queue (no completions) completes when a pod succeeded and none runs.
        let q = job(json!({"parallelism": 2}), json!({}));
        let running = Observed {
            succeeded: 1,
            active: 1,
            ..Observed::default()
        };
        let p = plan(&q, &running, now());
        assert!(p.conditions.is_empty() && p.create == 0 && p.delete_extra == 0);
    }

    #[test]
    fn the_backoff_limit_fails_the_job_after_its_pods_stop() {
        let j = job(json!({"completions": 1, "backoffLimit": 1}), json!({}));
        let obs = Observed {
            failed: 2,
            active: 0,
            terminating: 1,
            ..Observed::default()
        };
        let p = plan(&j, &obs, now());
        assert_eq!(types(&p), [("FailureTarget".into(), "True".into())]);
        assert!(p.delete_active);
        assert_eq!(p.events[0].1, "BackoffLimitExceeded");
        let j = job(
            json!({"completions": 1, "backoffLimit": 1}),
            json!({"conditions": p.conditions}),
        );
        let p = plan(
            &j,
            &Observed {
                failed: 2,
                ..Observed::default()
            },
            now(),
        );
        assert_eq!(p.conditions[1]["type"], "Failed");
        assert_eq!(p.conditions[1]["reason"], "BackoffLimitExceeded");
        assert_eq!(p.completion_time, None);
    }

    #[test]
    fn a_failed_pod_is_replaced_after_the_backoff() {
        let j = job(json!({"completions": 1, "backoffLimit": 6}), json!({}));
        let obs = Observed {
            failed: 2,
            last_failure: Some("2026-01-01T00:09:50Z".parse().unwrap()),
            ..Observed::default()
        };
        let p = plan(&j, &obs, now());
        assert_eq!(p.create, 0);
        assert_eq!(p.requeue, Some(Duration::from_secs(10)));
        let later = "2026-01-01T00:10:10Z".parse().unwrap();
        assert_eq!(plan(&j, &obs, later).create, 1);
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }

    #[test]
    fn the_active_deadline_fails_the_job() {
        let j = job(
            json!({"completions": 1, "activeDeadlineSeconds": 60}),
            json!({"startTime": "2026-01-01T00:09:30Z"}),
        );
        let obs = Observed {
            active: 1,
            ..Observed::default()
        };
        let p = plan(&j, &obs, now());
        assert_eq!(p.requeue, Some(Duration::from_millis(30_500)));
        let p = plan(&j, &obs, "2026-01-01T00:10:30Z".parse().unwrap());
        assert_eq!(p.conditions[0]["reason"], "DeadlineExceeded");
        assert!(p.delete_active);
    }

    #[test]
    fn suspend_deletes_the_pods_and_resume_restarts_the_clock() {
        let j = job(
            json!({"completions": 1, "suspend": true}),
            json!({"startTime": "2026-01-01T00:00:00Z"}),
        );
        let p = plan(
            &j,
            &Observed {
                active: 1,
                ..Observed::default()
            },
            now(),
        );
        assert!(p.delete_active && p.create == 0);
        assert_eq!(types(&p), [("Suspended".into(), "True".into())]);
        let j = job(
            json!({"completions": 1, "suspend": false}),
            json!({"startTime": "2026-01-01T00:00:00Z", "conditions": p.conditions}),
        );
        let p = plan(&j, &Observed::default(), now());
        assert_eq!(types(&p), [("Suspended".into(), "False".into())]);
        assert_eq!(p.start_time.as_deref(), Some("2026-01-01T00:10:00Z"));
        assert_eq!(p.create, 1);
    }
}
