//! LimitRange defaults (`SetDefaults_LimitRangeItem`): for a `Container`
//! item, `default` (the limit) falls back to `max`, and `defaultRequest` to
//! `default`, then to `min`. So a LimitRange with only `max` gives every
//! container without limits that limit, and the same request.

use serde_json::{Map, Value};

pub(crate) fn apply(obj: &mut Value) {
    let Some(items) = obj
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for item in items.iter_mut().filter_map(Value::as_object_mut) {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            continue;
        }
        let list = |item: &Map<String, Value>, k: &str| {
            item.get(k)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let mut default = list(item, "default");
        for (k, v) in list(item, "max") {
            default.entry(k).or_insert(v);
        }
        let mut request = list(item, "defaultRequest");
        for (k, v) in default.iter().chain(list(item, "min").iter()) {
            request.entry(k.clone()).or_insert_with(|| v.clone());
        }
        // Go leaves an empty map out (omitempty).
        for (k, m) in [("default", default), ("defaultRequest", request)] {
            if !m.is_empty() {
                item.insert(k.into(), Value::Object(m));
            }
        }
    }
}
