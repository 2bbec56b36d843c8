//! Pod spec immutability, as upstream's `ValidatePodUpdate`: after creation
//! only container and init container images, `activeDeadlineSeconds` (set,
//! or lowered), tolerations (additions only), `terminationGracePeriodSeconds`
//! (to 1 from a negative value) and `schedulingGates` (removals) change.

use serde_json::{Map, Value};

use super::{forbidden, invalid};
use crate::status::Cause;

const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Drops what upstream's semantic equality does not tell apart: `null`s and
/// empty lists and maps (Go's nil and empty slices and maps compare equal).
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Copies the images of `from`'s containers into `into`'s, by position.
fn take_images(into: &mut Value, from: &Value, list: &str) {
    let (Some(dst), Some(src)) = (
        into.get_mut(list).and_then(Value::as_array_mut),
        from.get(list).and_then(Value::as_array),
    ) else {
        return;
    };
    if dst.len() != src.len() {
        return;
    }
    for (d, s) in dst.iter_mut().zip(src) {
        if let (Some(d), Some(image)) = (d.as_object_mut(), s.get("image")) {
            d.insert("image".into(), image.clone());
        }
    }
}

pub(crate) fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let empty = Value::Object(Map::new());
    let old_spec = normalized(old.get("spec").unwrap_or(&empty));
    let new_spec = normalized(new.get("spec").unwrap_or(&empty));
    let old_ads = old_spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_i64);
    match (
        old_ads,
        new_spec
            .get("activeDeadlineSeconds")
            .and_then(Value::as_i64),
    ) {
        (_, Some(n)) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            causes.push(invalid(
                "spec.activeDeadlineSeconds",
                &n.to_string(),
                &format!("must be between 0 and {}, inclusive", i32::MAX),
            ));
            return causes;
        }
        (Some(o), Some(n)) if n > o => {
            causes.push(invalid(
                "spec.activeDeadlineSeconds",
                &n.to_string(),
                "must be less than or equal to previous value",
            ));
            return causes;
        }
        (Some(_), None) => causes.push(invalid(
            "spec.activeDeadlineSeconds",
            "\"null\"",
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    // The old spec with every allowed change of the new one applied must
    // equal the new spec.
    let mut munged = new_spec.clone();
    take_images(&mut munged, &old_spec, "containers");
    take_images(&mut munged, &old_spec, "initContainers");
    let Some(m) = munged.as_object_mut() else {
        return causes;
    };
    for field in ["activeDeadlineSeconds", "schedulingGates"] {
        match old_spec.get(field) {
            Some(v) => m.insert(field.into(), v.clone()),
            None => m.remove(field),
        };
    }
    if new_spec["schedulingGates"].as_array().map_or(0, Vec::len)
        > old_spec["schedulingGates"].as_array().map_or(0, Vec::len)
    {
        causes.push(forbidden(
            "spec.schedulingGates",
            "only deletion is allowed, but found new scheduling gate",
        ));
    }
    // Tolerations: the old ones must all remain; new ones may be added.
    let old_tol = old_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let new_tol = new_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if old_tol.iter().all(|t| new_tol.contains(t)) {
        match old_spec.get("tolerations") {
            Some(v) => m.insert("tolerations".into(), v.clone()),
            None => m.remove("tolerations"),
        };
    }
    let old_grace = old_spec["terminationGracePeriodSeconds"].as_i64();
    if old_grace.is_some_and(|g| g < 0) && new_spec["terminationGracePeriodSeconds"] == 1 {
        m.insert(
            "terminationGracePeriodSeconds".into(),
            old_spec["terminationGracePeriodSeconds"].clone(),
        );
    }
    if munged != old_spec {
        let changed = changed_fields(&old_spec, &munged, "spec");
        causes.push(forbidden(
            "spec",
            &format!(
                "pod updates may not change fields other than {UPDATABLE}\n  changed: {}",
                changed.join(", ")
            ),
        ));
    }
    causes
}

/// The top-most paths where two specs differ (upstream prints a `cmp.Diff`).
fn changed_fields(old: &Value, new: &Value, path: &str) -> Vec<String> {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .flat_map(|k| {
                    let p = format!("{path}.{k}");
                    match (a.get(k), b.get(k)) {
                        (Some(x), Some(y)) => changed_fields(x, y, &p),
                        _ => vec![p],
                    }
                })
                .collect()
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .filter(|(_, (x, y))| x != y)
            .flat_map(|(i, (x, y))| changed_fields(x, y, &format!("{path}[{i}]")))
            .collect(),
        _ => vec![path.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"spec": spec})
    }

    #[test]
    fn images_and_added_tolerations_may_change() {
        let old = pod(
            json!({"containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "k"}]}),
        );
        let new = pod(json!({"containers": [{"name": "c", "image": "b"}],
            "tolerations": [{"key": "k"}, {"key": "j"}], "activeDeadlineSeconds": 5}));
        assert!(
            validate_update(&old, &new).is_empty(),
            "{:?}",
            validate_update(&old, &new)
        );
    }

    #[test]
    fn other_spec_changes_are_forbidden() {
        let old = pod(
            json!({"containers": [{"name": "c", "image": "a", "ports": [{"containerPort": 80}]}]}),
        );
        let new = pod(
            json!({"containers": [{"name": "c", "image": "a", "ports": [{"containerPort": 81}]}]}),
        );
        let c = validate_update(&old, &new);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "spec");
        assert!(
            c[0].message.starts_with(
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
            ),
            "{}",
            c[0].message
        );
        assert!(
            c[0].message
                .contains("spec.containers[0].ports[0].containerPort")
        );
        let removed = pod(
            json!({"containers": [{"name": "c", "image": "a", "ports": [{"containerPort": 80}]}], "tolerations": []}),
        );
        let with_tol = pod(
            json!({"containers": [{"name": "c", "image": "a", "ports": [{"containerPort": 80}]}], "tolerations": [{"key": "k"}]}),
        );
        assert_eq!(validate_update(&with_tol, &removed).len(), 1);
    }

    #[test]
    fn nulls_and_empty_lists_are_no_change() {
        let old = pod(json!({"containers": [{"name": "c", "image": "a"}]}));
        let new =
            pod(json!({"containers": [{"name": "c", "image": "a", "env": []}], "volumes": null}));
        assert!(validate_update(&old, &new).is_empty());
    }
}
