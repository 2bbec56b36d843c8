//! Namespaces: the `kubernetes.io/metadata.name` label, always equal to the
//! name and put back if a write drops or changes it (upstream's
//! `SetDefaults_Namespace`), so selectors can pick namespaces by name.

use serde_json::{Value, json};

use crate::meta;

pub(crate) const NAME_LABEL: &str = "kubernetes.io/metadata.name";

pub(crate) fn apply(obj: &mut Value) {
    let name = meta::name(obj).to_string();
    if name.is_empty() {
        return;
    }
    let m = meta::meta_mut(obj);
    if !m.get("labels").is_some_and(Value::is_object) {
        m.insert("labels".into(), json!({}));
    }
    if let Some(labels) = m.get_mut("labels").and_then(Value::as_object_mut) {
        labels.insert(NAME_LABEL.into(), json!(name));
    }
}
