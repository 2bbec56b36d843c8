//! The Deployment's status: upstream's `calculateStatus` (counts from the
//! ReplicaSets, the `Available` condition) and `syncRolloutStatus` (the
//! `Progressing` condition and the progress deadline).

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::util::{max_unavailable, progress_deadline, replicas, rs_replicas, rs_status};

pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";

pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn get<'a>(st: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    st.conditions.iter().flatten().find(|c| c.type_ == type_)
}

/// `SetDeploymentCondition`: nothing when status and reason are the same;
/// the transition time stays when only the reason changes.
pub fn set(st: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = get(st, &c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove(st, &c.type_);
    st.conditions.get_or_insert_with(Vec::new).push(c);
}

pub fn remove(st: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = st.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
    }
}

fn sum(sets: &[&ReplicaSet], f: impl Fn(&ReplicaSet) -> i32) -> i32 {
    sets.iter().map(|rs| f(rs)).sum()
}

/// `calculateStatus`; `conditions` are the ones to start from.
pub fn calculate(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    base: &DeploymentStatus,
    now: Timestamp,
) -> DeploymentStatus {
    let available = sum(all, |rs| rs_status(rs).available_replicas.unwrap_or(0));
    let total = sum(all, rs_replicas);
    let mut st = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(sum(all, |rs| rs_status(rs).replicas)),
        updated_replicas: Some(new_rs.map_or(0, |rs| rs_status(rs).replicas)),
        ready_replicas: Some(sum(all, |rs| rs_status(rs).ready_replicas.unwrap_or(0))),
        available_replicas: Some(available),
        unavailable_replicas: Some((total - available).max(0)),
        collision_count: base.collision_count,
        conditions: base.conditions.clone(),
        ..Default::default()
    };
    if available >= replicas(d) - max_unavailable(d) {
        set(
            &mut st,
            condition(
                AVAILABLE,
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                now,
            ),
        );
    } else {
        set(
            &mut st,
            condition(
                AVAILABLE,
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                now,
            ),
        );
    }
    st
}

/// `DeploymentComplete`.
pub fn complete(d: &Deployment, st: &DeploymentStatus) -> bool {
    let n = replicas(d);
    st.updated_replicas.unwrap_or(0) == n
        && st.replicas.unwrap_or(0) == n
        && st.available_replicas.unwrap_or(0) == n
        && st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: any sign of progress since `old`.
fn progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let g = |v: Option<i32>| v.unwrap_or(0);
    let old_old = g(old.replicas) - g(old.updated_replicas);
    let new_old = g(new.replicas) - g(new.updated_replicas);
    g(new.updated_replicas) > g(old.updated_replicas)
        || new_old < old_old
        || g(new.ready_replicas) > g(old.ready_replicas)
        || g(new.available_replicas) > g(old.available_replicas)
}

/// `DeploymentTimedOut`.
fn timed_out(d: &Deployment, st: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = progress_deadline(d) else {
        return false;
    };
    let Some(c) = get(st, PROGRESSING) else {
        return false;
    };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => c
            .last_update_time
            .as_ref()
            .is_some_and(|t| t.0 + SignedDuration::from_secs(i64::from(deadline)) < now),
    }
}

/// `syncRolloutStatus` minus the write: the status to write, and when to
/// look again for a deadline (`requeueStuckDeployment`).
pub fn rollout(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    current: &DeploymentStatus,
    failure: Option<DeploymentCondition>,
    now: Timestamp,
) -> (DeploymentStatus, Option<std::time::Duration>) {
    let mut st = calculate(d, all, new_rs, current, now);
    let deadline = progress_deadline(d);
    if deadline.is_none() {
        remove(&mut st, PROGRESSING);
    }
    let cur = get(current, PROGRESSING).cloned();
    let is_complete = st.replicas == st.updated_replicas
        && cur
            .as_ref()
            .is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
    let what = |verb: &str| match new_rs.and_then(|rs| rs.metadata.name.as_deref()) {
        Some(n) => format!("ReplicaSet \"{n}\" {verb}."),
        None => format!(
            "Deployment \"{}\" {verb}.",
            d.metadata.name.as_deref().unwrap_or_default()
        ),
    };
    if deadline.is_some() && !is_complete {
        if complete(d, &st) {
            set(
                &mut st,
                condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_AVAILABLE,
                    &what("has successfully progressed"),
                    now,
                ),
            );
        } else if progressing(current, &st) {
            let mut c = condition(
                PROGRESSING,
                "True",
                "ReplicaSetUpdated",
                &what("is progressing"),
                now,
            );
            if let Some(cur) = &cur
                && cur.status == "True"
            {
                c.last_transition_time = cur.last_transition_time.clone();
            }
            remove(&mut st, PROGRESSING);
            st.conditions.get_or_insert_with(Vec::new).push(c);
        } else if timed_out(d, &st, now) {
            set(
                &mut st,
                condition(
                    PROGRESSING,
                    "False",
                    TIMED_OUT,
                    &what("has timed out progressing"),
                    now,
                ),
            );
        }
    }
    match failure {
        Some(f) => set(&mut st, f),
        None => remove(&mut st, REPLICA_FAILURE),
    }
    // requeueStuckDeployment, against the status as it was.
    let recheck = match (deadline, &cur) {
        (Some(secs), Some(c)) if !complete(d, &st) && c.reason.as_deref() != Some(TIMED_OUT) => {
            let from = c.last_update_time.as_ref().map_or(now, |t| t.0);
            let after = (from + SignedDuration::from_secs(i64::from(secs))).duration_since(now);
            Some(if after < SignedDuration::from_secs(1) {
                std::time::Duration::from_secs(1)
            } else {
                after.unsigned_abs() + std::time::Duration::from_secs(1)
            })
        }
        _ => None,
    };
    (st, recheck)
}

/// `getReplicaFailures`: the first ReplicaFailure condition of the new set,
/// else of any set.
pub fn replica_failure(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
) -> Option<DeploymentCondition> {
    let of = |rs: &ReplicaSet| {
        rs_status(rs)
            .conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == REPLICA_FAILURE)
            .map(|c| DeploymentCondition {
                type_: REPLICA_FAILURE.into(),
                status: c.status,
                reason: c.reason,
                message: c.message,
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time,
            })
    };
    new_rs
        .and_then(of)
        .or_else(|| all.iter().find_map(|rs| of(rs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn dep(status: Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "d", "generation": 2},
            "spec": {"replicas": 3, "progressDeadlineSeconds": 60, "selector": {}, "template": {},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
            "status": status}))
        .unwrap()
    }

    fn rs(name: &str, spec: i32, replicas: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"replicas": spec, "selector": {}},
            "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available}}))
        .unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn counts_and_availability_follow_the_sets() {
        let d = dep(json!({}));
        let (old, new) = (rs("old", 3, 3, 3), rs("new", 1, 1, 0));
        let st = calculate(
            &d,
            &[&old, &new],
            Some(&new),
            &DeploymentStatus::default(),
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(
            (
                st.replicas,
                st.updated_replicas,
                st.available_replicas,
                st.unavailable_replicas
            ),
            (Some(4), Some(1), Some(3), Some(1))
        );
        assert_eq!(get(&st, AVAILABLE).unwrap().status, "True");
    }

    #[test]
    fn progressing_completes_or_times_out_as_upstream() {
        let t0 = at("2026-01-01T00:00:00Z");
        let d = dep(
            json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let cur = d.status.clone().unwrap();
        let (old, new) = (rs("old", 3, 3, 3), rs("new", 1, 1, 0));
        // No progress yet, deadline not reached: look again when it would be.
        let (st, recheck) = rollout(
            &d,
            &[&old, &new],
            Some(&new),
            &cur,
            None,
            at("2026-01-01T00:00:30Z"),
        );
        assert_eq!(
            get(&st, PROGRESSING).unwrap().reason.as_deref(),
            Some("ReplicaSetUpdated")
        );
        assert_eq!(recheck, Some(std::time::Duration::from_secs(31)));
        // Past the deadline without progress.
        let (st, _) = rollout(
            &d,
            &[&old, &new],
            Some(&new),
            &cur,
            None,
            at("2026-01-01T00:01:01Z"),
        );
        let c = get(&st, PROGRESSING).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some(TIMED_OUT))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"new\" has timed out progressing.")
        );
        // All new pods available: complete.
        let done = rs("new", 3, 3, 3);
        let (st, recheck) = rollout(
            &d,
            &[&rs("old", 0, 0, 0), &done],
            Some(&done),
            &cur,
            None,
            t0,
        );
        assert_eq!(
            get(&st, PROGRESSING).unwrap().reason.as_deref(),
            Some(NEW_RS_AVAILABLE)
        );
        assert_eq!(recheck, None);
    }
}
