//! The ReplicaSet's status as upstream's `calculateStatus`, and the patch
//! that writes it only when it changed (`updateReplicaSetStatus`).

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{pod_condition, pod_ready};

/// `podutil.IsPodAvailable`: ready for at least `min_ready_seconds`.
pub fn pod_available(p: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !pod_ready(p) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    pod_condition(p, "Ready")
        .and_then(|c| c.last_transition_time.as_ref())
        .is_some_and(|t| t.0 + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds)) < now)
}

/// The counts of `calculateStatus` over the set's active, owned pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub replicas: i32,
    pub fully_labeled: i32,
    pub ready: i32,
    pub available: i32,
}

pub fn counts(rs: &ReplicaSet, pods: &[Pod], now: Timestamp) -> Counts {
    let spec = rs.spec.as_ref();
    let template_labels = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let mut c = Counts {
        replicas: i32::try_from(pods.len()).unwrap_or(i32::MAX),
        fully_labeled: 0,
        ready: 0,
        available: 0,
    };
    for p in pods {
        let labels = p.metadata.labels.as_ref();
        if template_labels
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            c.fully_labeled += 1;
        }
        if pod_ready(p) {
            c.ready += 1;
            if pod_available(p, min_ready, now) {
                c.available += 1;
            }
        }
    }
    c
}

/// The merge patch bringing the status to `c` (and the `ReplicaFailure`
/// condition to `failure`: `Some((reason, message))` sets it when absent,
/// `None` removes it), or `None` when nothing changes.
pub fn patch(
    rs: &ReplicaSet,
    c: Counts,
    failure: Option<(&str, &str)>,
    now: Timestamp,
) -> Option<Value> {
    let st = rs.status.clone().unwrap_or_default();
    let generation = rs.metadata.generation.unwrap_or(0);
    let mut conditions = st.conditions.clone().unwrap_or_default();
    let had_failure = conditions.iter().any(|c| c.type_ == "ReplicaFailure");
    let mut conditions_changed = false;
    match failure {
        Some((reason, message)) if !had_failure => {
            conditions.push(
                serde_json::from_value(json!({"type": "ReplicaFailure", "status": "True",
                    "reason": reason, "message": message,
                    "lastTransitionTime": now.round(jiff::Unit::Second).unwrap_or(now).to_string()}))
                .expect("a valid condition"),
            );
            conditions_changed = true;
        }
        None if had_failure => {
            conditions.retain(|c| c.type_ != "ReplicaFailure");
            conditions_changed = true;
        }
        _ => {}
    }
    let same = st.replicas == c.replicas
        && st.fully_labeled_replicas.unwrap_or(0) == c.fully_labeled
        && st.ready_replicas.unwrap_or(0) == c.ready
        && st.available_replicas.unwrap_or(0) == c.available
        && st.observed_generation == Some(generation)
        && !conditions_changed;
    if same {
        return None;
    }
    let mut status = json!({
        "replicas": c.replicas,
        "fullyLabeledReplicas": c.fully_labeled,
        "readyReplicas": c.ready,
        "availableReplicas": c.available,
        "observedGeneration": generation,
    });
    if conditions_changed {
        status["conditions"] = serde_json::to_value(&conditions).unwrap_or(Value::Null);
    }
    Some(json!({"status": status}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(status: Value) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": "r", "generation": 3},
            "spec": {"replicas": 2, "minReadySeconds": 10, "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b", "extra": "x"}}}},
            "status": status}))
        .unwrap()
    }

    fn pod(labels: Value, ready_since: Option<&str>) -> Pod {
        let conds = match ready_since {
            Some(t) => json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]),
            None => json!([]),
        };
        serde_json::from_value(
            json!({"metadata": {"labels": labels}, "status": {"conditions": conds}}),
        )
        .unwrap()
    }

    #[test]
    fn counts_follow_labels_readiness_and_min_ready_seconds() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let pods = [
            pod(
                json!({"a": "b", "extra": "x"}),
                Some("2026-01-01T00:00:00Z"),
            ),
            pod(json!({"a": "b"}), Some("2026-01-01T00:00:55Z")),
            pod(json!({"a": "b", "extra": "x"}), None),
        ];
        let c = counts(&rs(json!({})), &pods, now);
        assert_eq!(
            c,
            Counts {
                replicas: 3,
                fully_labeled: 2,
                ready: 2,
                available: 1
            }
        );
        let p = patch(&rs(json!({})), c, None, now).unwrap();
        assert_eq!(p["status"]["observedGeneration"], 3);
        assert_eq!(p["status"]["availableReplicas"], 1);
        let current = json!({"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 2,
            "availableReplicas": 1, "observedGeneration": 3});
        assert_eq!(patch(&rs(current.clone()), c, None, now), None);
        let failed = patch(&rs(current), c, Some(("FailedCreate", "quota")), now).unwrap();
        assert_eq!(failed["status"]["conditions"][0]["reason"], "FailedCreate");
    }
}
