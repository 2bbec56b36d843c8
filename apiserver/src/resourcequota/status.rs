//! A ResourceQuota's `status` measured from the store: `hard` mirrored from
//! `spec.hard`, `used` counted over the namespace's objects. Called with the
//! namespace's gate held exclusively (by admission for a quota not yet
//! measured, by `controllers::resourcequota` after deletes and pods that
//! ended), so no create lands between the count and the write.

use serde_json::{Map, Value, json};

use super::quantity::Quantity;
use super::usage::{self, Usage};
use crate::registry::{Registry, ResourceType};
use crate::store::{Expect, Snapshot, Store, StoreError, Stored};

/// Writes that lose a race with a client's write of the same quota
/// (`kubectl edit`) are tried again this many times.
const RETRIES: usize = 16;

/// Whether the quota's status covers its spec: `status.hard` equals
/// `spec.hard` and `status.used` has every name (upstream's admission
/// refuses with "status unknown" until the controller has done this).
pub(crate) fn in_sync(q: &Value) -> bool {
    let hard = q.pointer("/spec/hard").cloned().unwrap_or(json!({}));
    let status_hard = q.pointer("/status/hard").cloned().unwrap_or(json!({}));
    let used = q.pointer("/status/used").and_then(Value::as_object);
    hard == status_hard
        && hard
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, _)| used.is_some_and(|u| u.contains_key(k)))
}

/// A quota list (`spec.hard`, `status.used`) parsed; unparsable entries left out.
pub(crate) fn parsed(q: &Value, path: &str) -> Usage {
    q.pointer(path)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v.as_str()?)?)))
        .collect()
}

/// The types whose objects a quota's `hard` names measure.
fn measured_types(registry: &Registry, quota: &Value) -> Vec<std::sync::Arc<ResourceType>> {
    let mut out: Vec<std::sync::Arc<ResourceType>> = Vec::new();
    let names: Vec<String> = quota
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for name in names {
        let rt = match name.strip_prefix("count/") {
            Some(q) => {
                let (resource, group) = q.split_once('.').unwrap_or((q, ""));
                registry.get(group, resource)
            }
            None if name.contains("cpu")
                || name.contains("memory")
                || name.contains("ephemeral-storage")
                || name == "pods" =>
            {
                registry.get("", "pods")
            }
            None => registry.get("", &name),
        };
        if let Some(rt) = rt.filter(|rt| rt.namespaced && usage::tracks(rt, &name))
            && !out.iter().any(|o| o.key("", "") == rt.key("", ""))
        {
            out.push(rt);
        }
    }
    out
}

/// What the namespace's objects use of each of the quota's `hard` names.
pub(crate) fn measure(snap: &Snapshot, registry: &Registry, ns: &str, quota: &Value) -> Usage {
    let hard = parsed(quota, "/spec/hard");
    let mut used: Usage = hard.keys().map(|k| (k.clone(), Quantity::ZERO)).collect();
    for rt in measured_types(registry, quota) {
        for s in snap.range(&rt.prefix(Some(ns)), None) {
            let Ok(obj) = s.value() else { continue };
            if !usage::in_scope(&rt, quota, &obj) {
                continue;
            }
            for (k, q) in usage::usage(&rt, &obj) {
                if let Some(u) = used.get_mut(&k) {
                    *u = u.add(q);
                }
            }
        }
    }
    used
}

/// The quota with `status` set to `hard` from its spec and `used`.
pub(crate) fn with_status(quota: &Value, used: &Usage) -> Value {
    let mut q = quota.clone();
    let used: Map<String, Value> = used
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.to_string())))
        .collect();
    q["status"] = json!({
        "hard": quota.pointer("/spec/hard").cloned().unwrap_or(json!({})),
        "used": used,
    });
    q
}

/// Measures the quota at `key` again and stores its status when it
/// changed; answers the quota as stored after (`None` if it is gone).
pub(crate) async fn sync(
    store: &Store,
    registry: &Registry,
    key: &str,
) -> Result<Option<Value>, StoreError> {
    for _ in 0..RETRIES {
        let Some(stored) = store.get(key) else {
            return Ok(None);
        };
        let quota = stored.value()?;
        let (ns, _) = stored.namespace_name();
        let used = measure(&store.snapshot(), registry, ns, &quota);
        match write(store, &stored, &quota, &used).await {
            Err(StoreError::Conflict { .. }) => continue,
            other => return other.map(Some),
        }
    }
    Err(StoreError::Internal(format!(
        "{key}: status lost {RETRIES} write races in a row"
    )))
}

/// Stores `used` as the quota's status unless it is so already.
pub(crate) async fn write(
    store: &Store,
    stored: &Stored,
    quota: &Value,
    used: &Usage,
) -> Result<Value, StoreError> {
    let next = with_status(quota, used);
    if next.get("status") == quota.get("status") {
        return Ok(next);
    }
    store
        .put(&stored.key, Expect::Rv(stored.rv), next.clone())
        .await?;
    Ok(next)
}
