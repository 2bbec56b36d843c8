//! Defaulting: upstream's structural `Default` pass, which fills `default`
//! values into absent (or non-nullable `null`) fields, items and map values.

use serde_json::Value;

use super::structural::Node;

fn is_non_nullable_null(v: &Value, s: Option<&Node>) -> bool {
    v.is_null() && s.is_some_and(|s| !s.nullable)
}

pub(super) fn apply_default(x: &mut Value, s: Option<&Node>) {
    let Some(s) = s else { return };
    match x {
        Value::Object(obj) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                match obj.get_mut(k) {
                    None => {
                        obj.insert(k.clone(), d.clone());
                    }
                    Some(v) if is_non_nullable_null(v, Some(prop)) => *v = d.clone(),
                    Some(_) => {}
                }
            }
            let additional = s.additional.as_ref().and_then(|a| a.as_deref());
            for (k, v) in obj.iter_mut() {
                if let Some(prop) = s.property(k) {
                    apply_default(v, Some(prop));
                } else if s.additional.is_some() {
                    if let Some(a) = additional
                        && is_non_nullable_null(v, Some(a))
                        && let Some(d) = &a.default
                    {
                        *v = d.clone();
                    }
                    apply_default(v, additional);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.items.as_deref();
            for v in items.iter_mut() {
                if is_non_nullable_null(v, item_schema)
                    && let Some(d) = item_schema.and_then(|i| i.default.as_ref())
                {
                    *v = d.clone();
                }
                apply_default(v, item_schema);
            }
        }
        _ => {}
    }
}
