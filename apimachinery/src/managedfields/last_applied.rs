//! The client-side apply annotation (`kubectl.kubernetes.io/last-applied-configuration`)
//! in server-side apply, as upstream's `lastAppliedManager` and
//! `lastAppliedUpdater` keep it for the manager `kubectl` only (another
//! manager opts out, upstream's words):
//!
//! * [`allowed_conflicts`]: the fields kubectl's client-side apply set and
//!   that still hold the value it set. A `kubectl apply --server-side` that
//!   conflicts only on those takes them (the upgrade from client-side apply:
//!   kubectl then moves the `kubectl-client-side-apply` entry into its own
//!   by a JSON patch of `managedFields`).
//! * [`refresh`]: after such an apply, the annotation holds the applied
//!   configuration, so a later client-side apply (a downgrade) computes its
//!   three-way patch from what was really applied last.

use serde_json::{Map, Value};

use super::fieldpath::Set;
use super::walk::Walker;

/// The annotation client-side apply keeps its last configuration in.
pub const ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The only manager whose applies read and write the annotation.
pub(super) const KUBECTL: &str = "kubectl";

fn annotation(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations")?
        .get(ANNOTATION)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Upstream `allowedConflictsFromLastApplied`: the fields of the annotation's
/// configuration whose value `live` (without managed fields) still has, or
/// `None` without a usable annotation (absent, not JSON, another apiVersion).
pub(super) fn allowed_conflicts(w: &Walker, live: &Value, api_version: &str) -> Option<Set> {
    let last: Value = serde_json::from_str(annotation(live)?).ok()?;
    if last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let cmp = w.compare(&last, live);
    Some(
        w.to_field_set(&last)
            .difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// Upstream `lastAppliedUpdater`: when `obj` carries the annotation, it is set
/// to `applied` without the annotation, encoded as Go encodes an unstructured
/// object (keys sorted, a trailing newline).
pub(super) fn refresh(obj: &mut Value, applied: &Value) {
    if annotation(obj).is_none() {
        return;
    }
    let mut last = sorted(applied);
    if let Some(Value::Object(a)) = last.pointer_mut("/metadata/annotations") {
        a.remove(ANNOTATION);
    }
    let text = format!("{}\n", last);
    if let Some(Value::Object(a)) = obj.pointer_mut("/metadata/annotations") {
        a.insert(ANNOTATION.into(), Value::String(text));
    }
}

/// `v` with every object's keys in sorted order (Go's map encoding).
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let out: Map<String, Value> = keys
                .into_iter()
                .map(|k| (k.clone(), sorted(&m[k])))
                .collect();
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}
