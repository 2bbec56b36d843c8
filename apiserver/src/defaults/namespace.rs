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

/// Labels namespaces stored before the label was defaulted (a data directory
/// from an older wasmlet), so every namespace has it.
pub(crate) async fn label_existing(resources: &crate::resources::Resources) {
    let Ok(nsrt) = resources.registry.builtin("", "v1", "namespaces") else {
        return;
    };
    let snap = resources.store.snapshot();
    for s in snap.range(&nsrt.prefix(None), None) {
        let (_, name) = s.namespace_name();
        let r = resources
            .modify(&nsrt, "", name, |old| {
                let mut new = old.clone();
                apply(&mut new);
                (new != *old).then_some(new)
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(namespace = %name, error = %e, "labelling namespace failed");
        }
    }
}
