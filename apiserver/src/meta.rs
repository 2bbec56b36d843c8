//! Small accessors for `metadata` on JSON objects, and the server-set values
//! (uid, timestamps, generated names).

use rand::Rng;
use serde_json::{Map, Value};

pub(crate) use wasmlet_apimachinery::time::now_rfc3339;

pub(crate) fn rfc3339_in(seconds: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(seconds))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(crate) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` + five characters from upstream's alphabet (no vowels, no
/// look-alikes, so no words and no ambiguity).
pub(crate) fn generate_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    let base = if base.len() > 58 { &base[..58] } else { base };
    format!("{base}{suffix}")
}

pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

pub(crate) fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub(crate) fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn set_finalizers(obj: &mut Value, list: Vec<String>) {
    let m = meta_mut(obj);
    if list.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), Value::from(list));
    }
}

pub(crate) fn is_deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|v| !v.is_null()))
}

pub(crate) fn owner_uids(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything but `metadata` (and `status`, when the kind has a status
/// subresource): what a change to must bump `metadata.generation`.
pub(crate) fn spec_part(obj: &Value, has_status: bool) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("apiVersion");
        o.remove("kind");
        if has_status {
            o.remove("status");
        }
    }
    v
}

/// Dotted path (`.spec.replicas`) lookup, as scale subresource paths are written.
pub(crate) fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        cur = cur.get(part)?;
    }
    Some(cur)
}

pub(crate) fn set_path(obj: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let o = cur.as_object_mut().expect("made an object above");
        if i == parts.len() - 1 {
            o.insert(part.to_string(), value);
            return;
        }
        cur = o
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Copies `fields` of `old`'s spec into `new`'s where `new` leaves them out
/// (absent, null, `""` or `[]`): what the server set (allocated, admitted)
/// and an update from the client's manifest does not name.
pub(crate) fn keep_unset_spec_fields(old: &Value, new: &mut Value, fields: &[&str]) {
    let (Some(o), Some(n)) = (
        old.get("spec").and_then(Value::as_object),
        new.get_mut("spec").and_then(Value::as_object_mut),
    ) else {
        return;
    };
    for f in fields {
        let unset = n
            .get(*f)
            .is_none_or(|v| v.is_null() || v == "" || v.as_array().is_some_and(Vec::is_empty));
        if unset && let Some(v) = o.get(*f) {
            n.insert((*f).into(), v.clone());
        }
    }
}
