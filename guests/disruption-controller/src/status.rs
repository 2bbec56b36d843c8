//! The status write: upstream's `updatePdbStatus` (skip when nothing changed)
//! and `failSafe` (no disruptions, `DisruptionAllowed=False` `SyncFailed`),
//! as a merge patch carrying the resourceVersion the status was computed
//! from, so it never overwrites an eviction that spent the budget meanwhile
//! (upstream's `UpdateStatus` conflict).

use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Value, json};

use crate::budget::Computed;

pub const CONDITION: &str = "DisruptionAllowed";

/// `apimeta.SetStatusCondition`: the transition time moves only with the status.
fn set_condition(
    conditions: &[Condition],
    status: &str,
    reason: &str,
    message: &str,
    generation: i64,
    now: Timestamp,
) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut found = false;
    for c in conditions {
        if c.type_ == CONDITION {
            found = true;
            let since = if c.status == status {
                c.last_transition_time.0
            } else {
                now
            };
            out.push(condition(status, reason, message, generation, since));
        } else {
            out.push(serde_json::to_value(c).unwrap_or(Value::Null));
        }
    }
    if !found {
        out.push(condition(status, reason, message, generation, now));
    }
    out
}

fn condition(
    status: &str,
    reason: &str,
    message: &str,
    generation: i64,
    since: Timestamp,
) -> Value {
    json!({"type": CONDITION, "status": status, "reason": reason, "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since.round(jiff::Unit::Second).unwrap_or(since).to_string()})
}

/// `ConditionsAreUpToDate`.
fn conditions_up_to_date(pdb: &PodDisruptionBudget, allowed: i32) -> bool {
    let generation = pdb.metadata.generation.unwrap_or(0);
    let Some(st) = pdb.status.as_ref() else {
        return false;
    };
    let Some(c) = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION)
    else {
        return false;
    };
    if st.observed_generation != Some(generation) || c.observed_generation != Some(generation) {
        return false;
    }
    if allowed > 0 {
        c.status == "True" && c.reason == "SufficientPods"
    } else {
        c.status == "False" && c.reason == "InsufficientPods"
    }
}

/// The merge patch that brings `pdb`'s status to `c`, or `None` when it is
/// already there.
pub fn patch(pdb: &PodDisruptionBudget, c: &Computed, now: Timestamp) -> Option<Value> {
    let generation = pdb.metadata.generation.unwrap_or(0);
    let st = pdb.status.clone().unwrap_or_default();
    let recorded = st.disrupted_pods.clone().unwrap_or_default();
    if st.current_healthy == c.current_healthy
        && st.desired_healthy == c.desired_healthy
        && st.expected_pods == c.expected_pods
        && st.disruptions_allowed == c.disruptions_allowed
        && recorded == c.disrupted_pods
        && st.observed_generation == Some(generation)
        && conditions_up_to_date(pdb, c.disruptions_allowed)
    {
        return None;
    }
    let (status, reason) = if c.disruptions_allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let conditions = set_condition(
        st.conditions.as_deref().unwrap_or_default(),
        status,
        reason,
        "",
        generation,
        now,
    );
    // A merge patch merges maps: entries that no longer count are nulled.
    let mut disrupted = serde_json::Map::new();
    for name in recorded.keys() {
        if !c.disrupted_pods.contains_key(name) {
            disrupted.insert(name.clone(), Value::Null);
        }
    }
    for (name, at) in &c.disrupted_pods {
        disrupted.insert(
            name.clone(),
            serde_json::to_value(at).unwrap_or(Value::Null),
        );
    }
    let mut patch = json!({
        "metadata": {"resourceVersion": pdb.metadata.resource_version},
        "status": {
            "currentHealthy": c.current_healthy,
            "desiredHealthy": c.desired_healthy,
            "expectedPods": c.expected_pods,
            "disruptionsAllowed": c.disruptions_allowed,
            "observedGeneration": generation,
            "conditions": conditions,
        }
    });
    if !disrupted.is_empty() {
        patch["status"]["disruptedPods"] = Value::Object(disrupted);
    }
    Some(patch)
}

/// `failSafe`: the budget allows nothing while its status cannot be computed.
pub fn fail_safe(pdb: &PodDisruptionBudget, why: &str, now: Timestamp) -> Value {
    let st = pdb.status.clone().unwrap_or_default();
    let conditions = set_condition(
        st.conditions.as_deref().unwrap_or_default(),
        "False",
        "SyncFailed",
        why,
        st.observed_generation.unwrap_or(0),
        now,
    );
    json!({
        "metadata": {"resourceVersion": pdb.metadata.resource_version},
        "status": {"disruptionsAllowed": 0, "conditions": conditions},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Computed, compute};

    fn pdb(status: Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "ns", "generation": 2,
            "resourceVersion": "7"}, "spec": {"minAvailable": 1}, "status": status}),
        )
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn computed(allowed: i32) -> Computed {
        let mut c =
            compute::<k8s_openapi::api::core::v1::Pod>(&pdb(json!({})), &[], (1, 1, vec![]), now());
        c.current_healthy = 1 + allowed;
        c.disruptions_allowed = allowed;
        c
    }

    #[test]
    fn writes_status_and_condition_with_the_resource_version() {
        let p = patch(&pdb(json!({})), &computed(1), now()).unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["status"]["disruptionsAllowed"], 1);
        assert_eq!(p["status"]["observedGeneration"], 2);
        let c = &p["status"]["conditions"][0];
        assert_eq!(
            (&c["type"], &c["status"], &c["reason"]),
            (
                &json!("DisruptionAllowed"),
                &json!("True"),
                &json!("SufficientPods")
            )
        );
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:10:00Z");
    }

    #[test]
    fn an_up_to_date_status_is_not_written_and_expired_entries_are_nulled() {
        let current = json!({"currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 1,
            "disruptionsAllowed": 1, "observedGeneration": 2, "conditions": [{"type": "DisruptionAllowed",
            "status": "True", "reason": "SufficientPods", "message": "", "observedGeneration": 2,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert_eq!(patch(&pdb(current.clone()), &computed(1), now()), None);
        let mut with_entry = current;
        with_entry["disruptedPods"] = json!({"old": "2026-01-01T00:00:00Z"});
        let p = patch(&pdb(with_entry), &computed(1), now()).unwrap();
        assert_eq!(p["status"]["disruptedPods"], json!({"old": null}));
        // Same status: the transition time stays.
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn fail_safe_allows_nothing() {
        let p = fail_safe(&pdb(json!({"disruptionsAllowed": 3})), "boom", now());
        assert_eq!(p["status"]["disruptionsAllowed"], 0);
        assert_eq!(p["status"]["conditions"][0]["reason"], "SyncFailed");
        assert_eq!(p["status"]["conditions"][0]["message"], "boom");
    }
}
