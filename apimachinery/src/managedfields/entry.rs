//! `metadata.managedFields` entries: their identity (upstream's manager
//! identifier), decoding, encoding and order.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::fieldpath::Set;

/// Upstream `BuildManagerIdentifier`: the entry without time and fields (and
/// without `apiVersion` for appliers), JSON-encoded in Go field order.
pub(super) fn identifier(
    manager: &str,
    operation: &str,
    api_version: &str,
    subresource: &str,
) -> String {
    let mut m = Map::new();
    if !manager.is_empty() {
        m.insert("manager".into(), manager.into());
    }
    m.insert("operation".into(), operation.into());
    if operation == "Update" && !api_version.is_empty() {
        m.insert("apiVersion".into(), api_version.into());
    }
    if !subresource.is_empty() {
        m.insert("subresource".into(), subresource.into());
    }
    Value::Object(m).to_string()
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) manager: String,
    pub(super) operation: String,
    pub(super) api_version: String,
    pub(super) subresource: String,
    pub(super) time: Option<String>,
    pub(super) set: Set,
}

impl Entry {
    pub(super) fn id(&self) -> String {
        identifier(
            &self.manager,
            &self.operation,
            &self.api_version,
            &self.subresource,
        )
    }

    pub(super) fn decode(v: &Value) -> Option<Entry> {
        let operation = v.get("operation")?.as_str()?;
        if operation != "Apply" && operation != "Update" {
            return None;
        }
        let api_version = v.get("apiVersion")?.as_str().filter(|s| !s.is_empty())?;
        if v.get("fieldsType")?.as_str()? != "FieldsV1" {
            return None;
        }
        let set = match v.get("fieldsV1") {
            None | Some(Value::Null) => Set::new(),
            Some(f) => Set::from_fields_v1(f).ok()?,
        };
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation: operation.to_string(),
            api_version: api_version.to_string(),
            subresource: text("subresource").unwrap_or_default(),
            time: text("time"),
            set,
        })
    }

    pub(super) fn encode(&self) -> Value {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), self.manager.clone().into());
        }
        m.insert("operation".into(), self.operation.clone().into());
        m.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(t) = &self.time {
            m.insert("time".into(), t.clone().into());
        }
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), self.subresource.clone().into());
        }
        Value::Object(m)
    }

    /// Upstream `sortEncodedManagedFields`: operation, time (seconds), manager,
    /// apiVersion, subresource.
    pub(super) fn sort_key(&self) -> (String, i64, String, String, String) {
        let secs = self
            .time
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or(0, |t| t.timestamp());
        (
            self.operation.clone(),
            secs,
            self.manager.clone(),
            self.api_version.clone(),
            self.subresource.clone(),
        )
    }
}

/// The entries of `obj`'s `metadata.managedFields`; for a repeated identity
/// the last wins, as upstream's map does.
pub(super) fn decode(obj: &Value) -> Vec<Entry> {
    match obj.pointer("/metadata/managedFields") {
        Some(Value::Array(list)) => last_of_each(list.iter().filter_map(Entry::decode)),
        _ => Vec::new(),
    }
}

/// The last entry of each identity, in the order of those last ones; linear
/// (a client may send any number of entries).
fn last_of_each(entries: impl Iterator<Item = Entry>) -> Vec<Entry> {
    let mut slots: Vec<Option<Entry>> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for e in entries {
        if let Some(i) = at.insert(e.id(), slots.len()) {
            slots[i] = None;
        }
        slots.push(Some(e));
    }
    slots.into_iter().flatten().collect()
}

/// The entries a client sent, or `None` when any of them does not decode
/// (upstream then keeps the live object's, as for an empty list).
pub(super) fn decode_sent(obj: &Value) -> Option<Vec<Entry>> {
    let Some(Value::Array(list)) = obj.pointer("/metadata/managedFields") else {
        return None;
    };
    let entries: Option<Vec<Entry>> = list.iter().map(Entry::decode).collect();
    Some(last_of_each(entries?.into_iter())).filter(|d| !d.is_empty())
}

pub(super) fn without_managed_fields(mut v: Value) -> Value {
    if let Some(Value::Object(meta)) = v.get_mut("metadata") {
        meta.remove("managedFields");
    }
    v
}

pub(super) fn set_managed_fields(obj: &mut Value, mut entries: Vec<Entry>) {
    let Value::Object(root) = obj else { return };
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by_key(Entry::sort_key);
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = root.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::encode).collect()),
        );
    }
}
