//! core/v1 `SetDefaults_ReplicationController`: the selector and the
//! object's labels come from the template's labels when unset, one replica,
//! and the template's pod spec defaulted as the apps kinds' templates are.

use serde_json::{Value, json};

use super::{default, object, pod};

pub(crate) fn apply(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let labels = o
        .get("spec")
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
        .cloned();
    if let Some(labels) = &labels
        && let Some(m) = object(o, "metadata")
        && m.get("labels")
            .and_then(Value::as_object)
            .is_none_or(|l| l.is_empty())
    {
        m.insert("labels".into(), labels.clone());
    }
    let Some(spec) = object(o, "spec") else {
        return;
    };
    if let Some(labels) = labels
        && spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(|s| s.is_empty())
    {
        spec.insert("selector".into(), labels);
    }
    default(spec, "replicas", json!(1));
    if let Some(p) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod::spec(p);
    }
}
