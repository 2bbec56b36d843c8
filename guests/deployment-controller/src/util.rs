//! Upstream's `deploymentutil` pieces the controller needs: revisions and
//! the annotations carried between a Deployment and its ReplicaSets, the
//! pod-template hash, template equality, surge/unavailable fenceposts, and
//! conditions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use serde_json::Value;
use wasmlet_sdk::controllers::scaled_value;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Upstream's `maxRevHistoryLengthInChars`.
const MAX_HISTORY_CHARS: usize = 2000;

/// Annotations never copied from a Deployment to its ReplicaSets.
fn skip_copy(k: &str) -> bool {
    matches!(
        k,
        "kubectl.kubernetes.io/last-applied-configuration"
            | REVISION
            | REVISION_HISTORY
            | DESIRED_REPLICAS
            | MAX_REPLICAS
            | "deprecated.deployment.rollback.to"
    )
}

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_status(rs: &ReplicaSet) -> k8s_openapi::api::apps::v1::ReplicaSetStatus {
    rs.status.clone().unwrap_or_default()
}

pub fn revision(rs: &ReplicaSet) -> i64 {
    annotation(&rs.metadata.annotations, REVISION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn annotation<'a>(a: &'a Option<BTreeMap<String, String>>, k: &str) -> Option<&'a str> {
    a.as_ref().and_then(|a| a.get(k)).map(String::as_str)
}

pub fn max_revision(sets: &[ReplicaSet]) -> i64 {
    sets.iter().map(revision).max().unwrap_or(0)
}

pub fn is_rolling(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate")
}

/// `ResolveFenceposts`: (maxSurge, maxUnavailable) for `desired` replicas.
pub fn fenceposts(d: &Deployment) -> (i32, i32) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let desired = replicas(d);
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let zero = IntOrString::Int(0);
    let surge = ru.and_then(|r| r.max_surge.as_ref()).unwrap_or(&zero);
    let unavail = ru.and_then(|r| r.max_unavailable.as_ref()).unwrap_or(&zero);
    let surge = scaled_value(surge, desired, true).unwrap_or(0);
    let mut unavail = scaled_value(unavail, desired, false).unwrap_or(0);
    if surge == 0 && unavail == 0 {
        unavail = 1;
    }
    (surge, unavail)
}

pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d).0
}

pub fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling(d) || replicas(d) == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas(d))
}

/// A pod template as JSON with the hash label removed and empty values
/// dropped: upstream compares templates semantically (`EqualIgnoreHash`),
/// where a nil and an empty map are equal.
pub fn normalized_template(t: &k8s_openapi::api::core::v1::PodTemplateSpec) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    if let Some(labels) = v
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
    }
    prune(&mut v);
    v
}

fn prune(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                prune(x);
            }
            m.retain(|_, x| !is_empty(x));
        }
        Value::Array(a) => a.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `EqualIgnoreHash` of a Deployment's and a ReplicaSet's templates.
pub fn same_template(d: &Deployment, rs: &ReplicaSet) -> bool {
    let dt = d.spec.as_ref().map(|s| &s.template);
    let rt = rs.spec.as_ref().and_then(|s| s.template.as_ref());
    match (dt, rt) {
        (Some(a), Some(b)) => normalized_template(a) == normalized_template(b),
        _ => false,
    }
}

/// The pod-template hash: FNV-32a over the template and the collision
/// count, printed with upstream's `rand.SafeEncodeString` alphabet.
/// (Upstream hashes Go's printed struct, so the values differ from a real
/// cluster's; nothing relies on them being equal: sets are matched by
/// template.)
pub fn template_hash(d: &Deployment) -> String {
    let template = d.spec.as_ref().map(|s| &s.template);
    let bytes = serde_json::to_vec(&template).unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |b: u8| {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    };
    bytes.iter().for_each(|b| feed(*b));
    if let Some(c) = d.status.as_ref().and_then(|s| s.collision_count) {
        (c as u32).to_le_bytes().iter().for_each(|b| feed(*b));
    }
    safe_encode(&h.to_string())
}

/// `rand.SafeEncodeString`: no vowels, no look-alike characters.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// `SetNewReplicaSetAnnotations`: the annotations `rs` should carry as the
/// Deployment's new set at `new_revision`; `None` when they are already so.
pub fn new_rs_annotations(
    d: &Deployment,
    rs: &ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> Option<BTreeMap<String, String>> {
    let mut a = rs.metadata.annotations.clone().unwrap_or_default();
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy(k) || a.get(k) == Some(v) {
            continue;
        }
        a.insert(k.clone(), v.clone());
        changed = true;
    }
    let old = a.get(REVISION).cloned();
    let old_int: i64 = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse() {
            Ok(i) => i,
            Err(_) => return changed.then_some(a),
        },
    };
    if old_int < new_revision {
        a.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            // Rolling back to this set: keep its earlier revisions.
            let history = a.get(REVISION_HISTORY).cloned().unwrap_or_default();
            if history.is_empty() {
                a.insert(REVISION_HISTORY.into(), old);
            } else {
                let mut revs: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > MAX_HISTORY_CHARS && start < revs.len() {
                    total -= revs[start].len() + 1;
                    start += 1;
                }
                if total <= MAX_HISTORY_CHARS {
                    revs = revs.split_off(start);
                    revs.push(&old);
                    a.insert(REVISION_HISTORY.into(), revs.join(","));
                }
            }
        }
    }
    if !exists {
        set_replicas_annotations(&mut a, d);
        changed = true;
    }
    changed.then_some(a)
}

/// `SetReplicasAnnotations`: desired and max (desired + surge) replicas.
pub fn set_replicas_annotations(a: &mut BTreeMap<String, String>, d: &Deployment) -> bool {
    let desired = replicas(d).to_string();
    let max = (replicas(d) + max_surge(d)).to_string();
    let changed = a.get(DESIRED_REPLICAS) != Some(&desired) || a.get(MAX_REPLICAS) != Some(&max);
    a.insert(DESIRED_REPLICAS.into(), desired);
    a.insert(MAX_REPLICAS.into(), max);
    changed
}

pub fn desired_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata.annotations, DESIRED_REPLICAS).and_then(|v| v.parse().ok())
}

pub fn max_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata.annotations, MAX_REPLICAS).and_then(|v| v.parse().ok())
}

pub fn created(rs: &ReplicaSet) -> (Option<Timestamp>, String) {
    (
        rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        rs.metadata.name.clone().unwrap_or_default(),
    )
}

pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dep(v: Value) -> Deployment {
        serde_json::from_value(v).unwrap()
    }

    fn rs(v: Value) -> ReplicaSet {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn fenceposts_round_as_upstream() {
        let d = |surge: Value, unavail: Value, n: i32| {
            dep(
                json!({"spec": {"replicas": n, "selector": {}, "template": {},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavail}}}}),
            )
        };
        assert_eq!(fenceposts(&d(json!("25%"), json!("25%"), 10)), (3, 2));
        assert_eq!(fenceposts(&d(json!(1), json!(0), 4)), (1, 0));
        // Both resolving to zero: one may be unavailable.
        assert_eq!(fenceposts(&d(json!(0), json!("10%"), 4)), (0, 1));
        assert_eq!(max_unavailable(&d(json!(0), json!(9), 4)), 4);
        let recreate = dep(
            json!({"spec": {"replicas": 3, "selector": {}, "template": {}, "strategy": {"type": "Recreate"}}}),
        );
        assert_eq!((max_surge(&recreate), max_unavailable(&recreate)), (0, 0));
    }

    #[test]
    fn templates_compare_without_the_hash_and_hash_with_collisions() {
        let d = dep(
            json!({"spec": {"selector": {}, "template": {"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        );
        let r = rs(
            json!({"spec": {"selector": {}, "template": {"metadata": {"labels": {"app": "a", HASH_LABEL: "x"},
            "annotations": {}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        );
        assert!(same_template(&d, &r));
        let other = rs(
            json!({"spec": {"selector": {}, "template": {"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "j"}]}}}}),
        );
        assert!(!same_template(&d, &other));
        let h = template_hash(&d);
        assert!(
            h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{h}"
        );
        let mut collided = d.clone();
        collided.status = Some(serde_json::from_value(json!({"collisionCount": 1})).unwrap());
        assert_ne!(template_hash(&collided), h);
        assert_eq!(safe_encode("0123"), "4567");
    }

    #[test]
    fn a_rolled_back_set_keeps_its_revision_history() {
        let d = dep(
            json!({"metadata": {"annotations": {"team": "x", REVISION: "9"}},
            "spec": {"replicas": 2, "selector": {}, "template": {}}}),
        );
        let r = rs(json!({"metadata": {"annotations": {REVISION: "1", REVISION_HISTORY: "0"}}}));
        let a = new_rs_annotations(&d, &r, 3, true).unwrap();
        assert_eq!(a[REVISION], "3");
        assert_eq!(a[REVISION_HISTORY], "0,1");
        assert_eq!(a["team"], "x");
        assert!(!a.contains_key(DESIRED_REPLICAS));
        // No rollingUpdate given (the API server would default 25%): no surge.
        let fresh = new_rs_annotations(&d, &rs(json!({})), 1, false).unwrap();
        assert_eq!(
            (
                fresh[REVISION].as_str(),
                fresh[DESIRED_REPLICAS].as_str(),
                fresh[MAX_REPLICAS].as_str()
            ),
            ("1", "2", "2")
        );
        assert_eq!(
            new_rs_annotations(
                &d,
                &rs(json!({"metadata": {"annotations": {REVISION: "3", "team": "x"}}})),
                3,
                true
            ),
            None
        );
    }
}
