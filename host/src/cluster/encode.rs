//! Objects as guests read them: JSON text with `apiVersion` and `kind`
//! (which list items and cached objects may lack), written straight from the
//! cached object. Every guest call and every cached read a guest makes goes
//! through here, so no intermediate `Value` tree is built.

use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

/// The object as the guest reads it, apiVersion and kind included, written
/// straight to text (no intermediate `Value` tree: this runs for every call).
pub fn object_json(obj: &DynamicObject, resource: &ApiResource) -> String {
    use std::fmt::Write;
    let text = |v: &str| Value::String(v.to_string()).to_string();
    let mut out = String::with_capacity(1024);
    let _ = write!(
        out,
        "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{}",
        text(&resource.api_version),
        text(&resource.kind),
        serde_json::to_string(&obj.metadata).unwrap_or_else(|_| "{}".into())
    );
    if let Some(fields) = obj.data.as_object() {
        for (k, v) in fields {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            let _ = write!(out, ",{}:{}", text(k), v);
        }
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use serde_json::{Value, json};

    #[test]
    fn the_guest_reads_the_object_with_its_api_version_and_kind() {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.dev", "v1", "Widget"));
        let obj: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "w\"1", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"size": 3, "tags": ["a", "é"]},
            "status": {"summary": "size=3"},
        }))
        .unwrap();
        let text = super::object_json(&obj, &ar);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "example.dev/v1", "kind": "Widget",
                "metadata": {"name": "w\"1", "namespace": "ns", "resourceVersion": "7"},
                "spec": {"size": 3, "tags": ["a", "é"]},
                "status": {"summary": "size=3"},
            })
        );
    }
}
