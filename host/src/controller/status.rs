//! Host-owned status (Knative's pattern, seed 003): the guest says what it
//! wants; the host merges it into the current status, keeps the declared
//! conditions, computes `Ready`, stamps `observedGeneration`, and moves
//! `lastTransitionTime` only when a condition's status moves.
//!
//! `status.observedGeneration` is the generation the controller acted on, as
//! upstream's API conventions have it: it moves only when a pass is done with
//! the generation, a success (to the generation the guest says it applied,
//! [`APPLIED_GENERATION`], else the one it was handed) or a terminal failure
//! (which `Ready`'s message says is terminal). A failure that will be retried
//! leaves it where it was, so a client tells "applied" from "seen" by
//! comparing it with `metadata.generation`; each condition's own
//! `observedGeneration` is the generation it was set on (the one seen).
//!
//! ```ignore
//! use serde_json::json;
//! use wasmlet::controller::status::{desired_status, GuestCondition, GuestResult};
//! let current = json!({});
//! let result = GuestResult {
//!     status: Some(json!({"keys": 3})),
//!     conditions: vec![GuestCondition::new("Summarised", "True", "Counted", "3 keys")],
//!     ..Default::default()
//! };
//! let s = desired_status(&current, &result, &["Summarised".into()], 4, "2026-01-01T00:00:00Z");
//! assert_eq!(s["keys"], 3);
//! assert_eq!(s["observedGeneration"], 4);
//! assert_eq!(s["conditions"][1]["type"], "Ready");
//! assert_eq!(s["conditions"][1]["status"], "True");
//! ```

use serde_json::{Value, json};

pub(crate) use crate::plugin::outcome::GuestCondition;

/// What one reconcile produced, guest error included.
#[derive(Debug, Clone, Default)]
pub struct GuestResult {
    pub status: Option<Value>,
    pub conditions: Vec<GuestCondition>,
    /// `(reason, message)` of a failed reconcile: `Ready` goes False with it.
    pub error: Option<(String, String)>,
    /// The error is terminal: retrying will not help until the object
    /// changes, so the host is done with this generation.
    pub terminal: bool,
}

const READY: &str = "Ready";

/// The key of the guest's status under which it may report the generation
/// it applied (`Action::applied_generation` in the SDK), when that is not
/// the one it was handed: the host takes it out of the status and writes it
/// as `observedGeneration`. A key no Kubernetes field can have, so no status
/// a guest writes today means it; a status field rather than a field of the
/// contract's `reconcile-outcome` record because a record that gains a field
/// is another type, and every component built against `0.1.0` would no
/// longer link.
pub(crate) const APPLIED_GENERATION: &str = "wasmlet.dev/appliedGeneration";

/// What `Ready`'s message says after a terminal error's own message.
const TERMINAL: &str = " (terminal: not retried until the object changes)";

/// The `observedGeneration` this pass writes, `None` to keep the stored one:
/// a success's (the guest's [`APPLIED_GENERATION`] when it is one of the
/// object's generations so far, else `generation`), a terminal failure's
/// (`generation`), none for a failure that is retried.
fn applied(result: &GuestResult, generation: i64) -> Option<i64> {
    match &result.error {
        None => Some(
            result
                .status
                .as_ref()
                .and_then(|s| s.get(APPLIED_GENERATION))
                .and_then(Value::as_i64)
                .filter(|g| (0..=generation).contains(g))
                .unwrap_or(generation),
        ),
        Some(_) if result.terminal => Some(generation),
        Some(_) => None,
    }
}

fn set_condition(conds: &mut Vec<Value>, c: &GuestCondition, generation: i64, now: &str) {
    let status = match c.status.as_str() {
        "True" | "False" => c.status.as_str(),
        _ => "Unknown",
    };
    let reason = if c.reason.is_empty() {
        status
    } else {
        c.reason.as_str()
    };
    match conds.iter_mut().find(|x| x["type"] == c.type_.as_str()) {
        Some(existing) => {
            if existing["status"] != status {
                existing["lastTransitionTime"] = json!(now);
            }
            existing["status"] = json!(status);
            existing["reason"] = json!(reason);
            existing["message"] = json!(c.message);
            existing["observedGeneration"] = json!(generation);
        }
        None => conds.push(json!({
            "type": c.type_, "status": status, "reason": reason, "message": c.message,
            "lastTransitionTime": now, "observedGeneration": generation,
        })),
    }
}

/// The time a condition's `lastTransitionTime` takes now (RFC 3339, seconds,
/// as the API server's timestamps).
pub(crate) fn now() -> String {
    // Not `format("%Y-...")`: parsing the format string on every reconcile
    // showed in profiles.
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The status the object should have after this reconcile of the object at
/// `generation` (a row's revision).
pub fn desired_status(
    current: &Value,
    result: &GuestResult,
    declared: &[String],
    generation: i64,
    now: &str,
) -> Value {
    let mut status = current.as_object().cloned().unwrap_or_default();
    if let Some(Value::Object(guest)) = &result.status {
        let mut patch = Value::Object(guest.clone());
        if let Some(p) = patch.as_object_mut() {
            // These are the host's.
            p.remove("conditions");
            p.remove("observedGeneration");
            p.remove(APPLIED_GENERATION);
        }
        let mut merged = Value::Object(status);
        json_patch::merge(&mut merged, &patch);
        status = merged.as_object().cloned().unwrap_or_default();
    }
    let mut conds: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for d in declared {
        if !conds.iter().any(|c| c["type"] == d.as_str()) {
            set_condition(
                &mut conds,
                &GuestCondition::new(d, "Unknown", "Reconciling", ""),
                generation,
                now,
            );
        }
    }
    for c in &result.conditions {
        set_condition(&mut conds, c, generation, now);
    }
    // Every condition the host keeps is current as of this generation.
    for c in conds.iter_mut() {
        c["observedGeneration"] = json!(generation);
    }
    let ready = match &result.error {
        Some((reason, message)) if result.terminal => {
            GuestCondition::new(READY, "False", reason, &format!("{message}{TERMINAL}"))
        }
        Some((reason, message)) => GuestCondition::new(READY, "False", reason, message),
        None => {
            let deps: Vec<&Value> = conds
                .iter()
                .filter(|c| c["type"] != READY && declared.iter().any(|d| c["type"] == d.as_str()))
                .collect();
            let (status, reason, message) = if deps.iter().any(|c| c["status"] == "False") {
                let bad = deps
                    .iter()
                    .find(|c| c["status"] == "False")
                    .expect("checked above");
                (
                    "False",
                    bad["reason"].as_str().unwrap_or("NotReady").to_string(),
                    bad["message"].as_str().unwrap_or("").to_string(),
                )
            } else if deps.iter().all(|c| c["status"] == "True") {
                ("True", "Ready".to_string(), String::new())
            } else {
                ("Unknown", "Reconciling".to_string(), String::new())
            };
            GuestCondition::new(READY, status, &reason, &message)
        }
    };
    set_condition(&mut conds, &ready, generation, now);
    // Ready last, the rest in the order they were first set.
    conds.sort_by_key(|c| c["type"] == READY);
    status.insert("conditions".into(), Value::Array(conds));
    if let Some(g) = applied(result, generation) {
        status.insert("observedGeneration".into(), json!(g));
    }
    Value::Object(status)
}

/// `status` of an object, `{}` when absent.
/// The host-owned status fields a CRD's `version` schema would prune (none
/// when the schema declares them or preserves unknown fields).
pub(crate) fn pruned_host_fields(crd: &Value, version: &str) -> Vec<&'static str> {
    let Some(v) = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["name"] == version))
    else {
        return Vec::new();
    };
    let root = &v["schema"]["openAPIV3Schema"];
    let status = &root["properties"]["status"];
    let preserves = |s: &Value| s["x-kubernetes-preserve-unknown-fields"] == true;
    if preserves(root) || preserves(status) {
        return Vec::new();
    }
    ["conditions", "observedGeneration"]
        .into_iter()
        .filter(|f| status["properties"].get(*f).is_none())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_schema_without_the_host_fields_is_reported() {
        let crd = |status: Value| {
            json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"status": status}}}}]}})
        };
        let bare = crd(json!({"type": "object", "properties": {"keys": {"type": "integer"}}}));
        assert_eq!(
            pruned_host_fields(&bare, "v1"),
            ["conditions", "observedGeneration"]
        );
        let full = crd(json!({"type": "object", "properties": {
            "conditions": {"type": "array"}, "observedGeneration": {"type": "integer"}}}));
        assert!(pruned_host_fields(&full, "v1").is_empty());
        let open = crd(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        assert!(pruned_host_fields(&open, "v1").is_empty());
    }

    #[test]
    fn now_is_rfc3339_in_whole_seconds_utc() {
        let t = now();
        assert_eq!(t.len(), "2026-01-01T00:00:00Z".len(), "{t}");
        assert!(t.ends_with('Z'), "{t}");
        assert!(chrono::DateTime::parse_from_rfc3339(&t).is_ok(), "{t}");
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:05:00Z";

    fn result(conds: Vec<GuestCondition>) -> GuestResult {
        GuestResult {
            status: Some(json!({"keys": 1})),
            conditions: conds,
            ..Default::default()
        }
    }

    #[test]
    fn declared_conditions_start_unknown_and_ready_follows() {
        let s = desired_status(
            &json!({}),
            &GuestResult::default(),
            &["A".into(), "B".into()],
            1,
            T0,
        );
        let types: Vec<&str> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["A", "B", "Ready"]);
        assert_eq!(s["conditions"][2]["status"], "Unknown");

        let s = desired_status(
            &s,
            &result(vec![GuestCondition::new("A", "True", "Ok", "")]),
            &["A".into(), "B".into()],
            1,
            T1,
        );
        assert_eq!(
            s["conditions"][2]["status"], "Unknown",
            "B is still unknown"
        );
        let s = desired_status(
            &s,
            &result(vec![GuestCondition::new("B", "True", "Ok", "")]),
            &["A".into(), "B".into()],
            1,
            T1,
        );
        assert_eq!(s["conditions"][2]["status"], "True");
        let s = desired_status(
            &s,
            &result(vec![GuestCondition::new("A", "False", "Broken", "disk")]),
            &["A".into(), "B".into()],
            1,
            T1,
        );
        assert_eq!(s["conditions"][2]["status"], "False");
        assert_eq!(s["conditions"][2]["reason"], "Broken");
    }

    #[test]
    fn transition_time_moves_only_when_status_moves() {
        let declared = ["A".to_string()];
        let s0 = desired_status(
            &json!({}),
            &result(vec![GuestCondition::new("A", "True", "Ok", "one")]),
            &declared,
            1,
            T0,
        );
        let s1 = desired_status(
            &s0,
            &result(vec![GuestCondition::new("A", "True", "Ok", "two")]),
            &declared,
            2,
            T1,
        );
        assert_eq!(s1["conditions"][0]["lastTransitionTime"], T0);
        assert_eq!(s1["conditions"][0]["message"], "two");
        assert_eq!(s1["conditions"][0]["observedGeneration"], 2);
        assert_eq!(s1["observedGeneration"], 2);
        let s2 = desired_status(
            &s1,
            &result(vec![GuestCondition::new("A", "False", "Bad", "")]),
            &declared,
            2,
            T1,
        );
        assert_eq!(s2["conditions"][0]["lastTransitionTime"], T1);
    }

    #[test]
    fn same_input_twice_is_no_change() {
        let declared = ["A".to_string()];
        let r = result(vec![GuestCondition::new("A", "True", "Ok", "")]);
        let s0 = desired_status(&json!({}), &r, &declared, 3, T0);
        let s1 = desired_status(&s0, &r, &declared, 3, T1);
        assert_eq!(s0, s1, "timestamps carried over, nothing else moved");
    }

    #[test]
    fn guest_cannot_write_host_fields_and_errors_set_ready_false() {
        let r = GuestResult {
            status: Some(json!({"observedGeneration": 99, "conditions": [], "x": 1})),
            conditions: vec![],
            error: Some(("Boom".into(), "it broke".into())),
            terminal: false,
        };
        let s = desired_status(&json!({"y": 2, "observedGeneration": 4}), &r, &[], 5, T0);
        // Retried: generation 5 is seen, not applied.
        assert_eq!(s["observedGeneration"], 4);
        assert_eq!(s["x"], 1);
        assert_eq!(s["y"], 2);
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "Boom");
        assert_eq!(s["conditions"][0]["message"], "it broke");
        assert_eq!(s["conditions"][0]["observedGeneration"], 5);
        // Never applied: nothing to say.
        let s = desired_status(&json!({}), &r, &[], 1, T0);
        assert!(s.get("observedGeneration").is_none(), "{s}");
    }

    #[test]
    fn observed_generation_moves_on_success_and_terminal_failure_only() {
        let ok = GuestResult::default();
        let s1 = desired_status(&json!({}), &ok, &[], 1, T0);
        assert_eq!(s1["observedGeneration"], 1);
        let terminal = GuestResult {
            error: Some(("Invalid".into(), "spec.size is negative".into())),
            terminal: true,
            ..Default::default()
        };
        let s2 = desired_status(&s1, &terminal, &[], 2, T1);
        assert_eq!(s2["observedGeneration"], 2, "done with generation 2");
        assert_eq!(
            s2["conditions"][0]["message"],
            "spec.size is negative (terminal: not retried until the object changes)"
        );
        let s3 = desired_status(&s2, &ok, &[], 3, T1);
        assert_eq!(s3["observedGeneration"], 3);
        assert_eq!(s3["conditions"][0]["status"], "True");
    }

    #[test]
    fn a_guest_may_say_which_generation_it_applied() {
        let applied = |v: Value| GuestResult {
            status: Some(json!({"x": 1, APPLIED_GENERATION: v})),
            ..Default::default()
        };
        let s = desired_status(&json!({}), &applied(json!(3)), &[], 5, T0);
        assert_eq!(s["observedGeneration"], 3);
        assert!(s.get(APPLIED_GENERATION).is_none(), "{s}");
        assert_eq!(s["x"], 1);
        // Not one of the object's generations: the one handed over.
        for bad in [json!(6), json!(-1), json!("3")] {
            let s = desired_status(&json!({}), &applied(bad.clone()), &[], 5, T0);
            assert_eq!(s["observedGeneration"], 5, "{bad}");
        }
    }
}

/// The module documentation's example (its modules are private to the
/// crate, so rustdoc cannot compile it from outside).
#[cfg(test)]
mod doc_example {
    #[test]
    fn the_module_example_merges_status_and_ready() {
        use crate::controller::status::{GuestCondition, GuestResult, desired_status};
        use serde_json::json;
        let current = json!({});
        let result = GuestResult {
            status: Some(json!({"keys": 3})),
            conditions: vec![GuestCondition::new(
                "Summarised",
                "True",
                "Counted",
                "3 keys",
            )],
            ..Default::default()
        };
        let s = desired_status(
            &current,
            &result,
            &["Summarised".into()],
            4,
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(s["keys"], 3);
        assert_eq!(s["observedGeneration"], 4);
        assert_eq!(s["conditions"][1]["type"], "Ready");
        assert_eq!(s["conditions"][1]["status"], "True");
    }
}
