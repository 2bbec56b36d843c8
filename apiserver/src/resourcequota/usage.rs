//! What one object charges a quota, as upstream's evaluators measure it
//! (k8s.io/kubernetes `pkg/quota/v1/evaluator/core`, apiserver's generic
//! object-count evaluator): `count/<resource>[.<group>]` for every object,
//! the legacy names (`pods`, `services`, `configmaps`, ...) and, for pods
//! not yet Succeeded or Failed, their compute requests and limits.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::quantity::Quantity;
use crate::registry::ResourceType;

/// Resource name → what an object (or a namespace) uses of it.
pub(crate) type Usage = BTreeMap<String, Quantity>;

/// Core kinds counted under their bare resource name too (upstream's
/// `services`, `configmaps`, ... quota names).
const LEGACY_COUNTS: &[&str] = &[
    "services",
    "configmaps",
    "secrets",
    "replicationcontrollers",
    "resourcequotas",
    "persistentvolumeclaims",
];

/// The compute resources a pod is charged (`cpu` and `memory` are
/// `requests.*` under their old names).
const COMPUTE: &[&str] = &["cpu", "memory", "ephemeral-storage"];

/// Quota names upstream requires every container to set when a quota
/// tracks them ("it was a mistake", says upstream, kept for compatibility).
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// `count/pods`, `count/jobs.batch`: the object-count name of a resource.
pub(crate) fn count_name(rt: &ResourceType) -> String {
    format!("count/{}", rt.qualified())
}

/// Whether a quota's `hard` name `name` measures objects of `rt`.
pub(crate) fn tracks(rt: &ResourceType, name: &str) -> bool {
    if name == count_name(rt) {
        return true;
    }
    if !rt.group.is_empty() {
        return false;
    }
    if rt.resource == "pods" {
        return name == "pods"
            || COMPUTE.iter().any(|c| {
                name == *c || name == format!("requests.{c}") || name == format!("limits.{c}")
            });
    }
    LEGACY_COUNTS.contains(&name) && name == rt.resource
}

/// A pod that has ended no longer holds compute or a `pods` slot (its
/// `count/pods` stays until it is deleted), as upstream's `QuotaV1Pod`.
pub(crate) fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// Everything `obj` (of type `rt`) charges.
pub(crate) fn usage(rt: &ResourceType, obj: &Value) -> Usage {
    let mut u = Usage::new();
    u.insert(count_name(rt), Quantity::count(1));
    if !rt.group.is_empty() {
        return u;
    }
    if LEGACY_COUNTS.contains(&rt.resource.as_str()) {
        u.insert(rt.resource.clone(), Quantity::count(1));
    }
    if rt.resource == "pods" && !is_terminal(obj) {
        u.insert("pods".into(), Quantity::count(1));
        let spec = obj.get("spec").cloned().unwrap_or_default();
        for (kind, prefix) in [("requests", "requests."), ("limits", "limits.")] {
            for (r, q) in pod_total(&spec, kind) {
                if !COMPUTE.contains(&r.as_str()) {
                    continue;
                }
                if kind == "requests" {
                    u.insert(r.clone(), q);
                }
                u.insert(format!("{prefix}{r}"), q);
            }
        }
    }
    u
}

/// A pod's requests or limits: its containers' sum, or its largest init
/// container's where that is more (init containers run one at a time).
fn pod_total(spec: &Value, kind: &str) -> BTreeMap<String, Quantity> {
    let mut total: BTreeMap<String, Quantity> = BTreeMap::new();
    for c in containers(spec, "containers") {
        for (r, q) in resources(c, kind) {
            let sum = total.get(&r).copied().unwrap_or_default().add(q);
            total.insert(r, sum);
        }
    }
    for c in containers(spec, "initContainers") {
        for (r, q) in resources(c, kind) {
            let max = total.get(&r).copied().map_or(q, |t| t.max(q));
            total.insert(r, max);
        }
    }
    total
}

fn containers<'a>(spec: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> + 'a {
    spec.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A container's `resources.requests` or `resources.limits`, parsed.
pub(crate) fn resources<'a>(
    c: &'a Value,
    kind: &str,
) -> impl Iterator<Item = (String, Quantity)> + 'a {
    c.pointer(&format!("/resources/{kind}"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(r, q)| Some((r.clone(), Quantity::parse(q.as_str()?)?)))
}

/// Upstream's pod `Constraints`: when a quota tracks cpu or memory, every
/// container must state it. `None` when they all do; else the message
/// after `failed quota: NAME: `.
pub(crate) fn missing_compute(pod: &Value, tracked: &BTreeSet<&str>) -> Option<String> {
    let required: Vec<&str> = MUST_SPECIFY
        .iter()
        .copied()
        .filter(|r| tracked.contains(r))
        .collect();
    if required.is_empty() {
        return None;
    }
    let spec = pod.get("spec").cloned().unwrap_or_default();
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for c in containers(&spec, "containers").chain(containers(&spec, "initContainers")) {
        let has = |kind: &str, r: &str| c.pointer(&format!("/resources/{kind}/{r}")).is_some();
        for r in &required {
            let set = match r.split_once('.') {
                Some((kind, res)) => has(kind, res),
                None => has("requests", r),
            };
            if !set {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                missing.entry(r).or_default().insert(name.to_string());
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// Whether a quota's scopes (`spec.scopes`, `spec.scopeSelector`) select
/// `obj`. A scoped quota measures pods only, as upstream's (an object-count
/// evaluator matches no scope).
pub(crate) fn in_scope(rt: &ResourceType, quota: &Value, obj: &Value) -> bool {
    let mut scopes: Vec<(String, String, Vec<String>)> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| (s.to_string(), "Exists".to_string(), vec![]))
        .collect();
    for e in quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let values = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        scopes.push((
            e["scopeName"].as_str().unwrap_or("").to_string(),
            e["operator"].as_str().unwrap_or("").to_string(),
            values,
        ));
    }
    if scopes.is_empty() {
        return true;
    }
    if !(rt.group.is_empty() && rt.resource == "pods") {
        return false;
    }
    scopes
        .iter()
        .all(|(scope, op, values)| pod_in_scope(obj, scope, op, values))
}

fn pod_in_scope(pod: &Value, scope: &str, op: &str, values: &[String]) -> bool {
    let spec = pod.get("spec").cloned().unwrap_or_default();
    let terminating = spec
        .get("activeDeadlineSeconds")
        .is_some_and(|v| v.as_i64().is_some_and(|s| s >= 0));
    let best_effort = containers(&spec, "containers")
        .chain(containers(&spec, "initContainers"))
        .all(|c| {
            resources(c, "requests")
                .chain(resources(c, "limits"))
                .next()
                .is_none()
        });
    match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        "PriorityClass" => {
            let class = spec.get("priorityClassName").and_then(Value::as_str);
            let class = class.filter(|c| !c.is_empty());
            match op {
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !values.iter().any(|v| v == c)),
                _ => false,
            }
        }
        // CrossNamespacePodAffinity, VolumeAttributesClass: not evaluated.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> ResourceType {
        crate::registry::Registry::with_builtins()
            .get("", "pods")
            .unwrap()
            .as_ref()
            .clone()
    }

    #[test]
    fn a_pod_charges_its_count_and_compute_until_it_ends() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]}});
        let u = usage(&pods(), &pod);
        let s = |k: &str| u.get(k).map(|q| q.to_string());
        assert_eq!(s("pods").as_deref(), Some("1"));
        assert_eq!(s("count/pods").as_deref(), Some("1"));
        assert_eq!(
            s("requests.cpu").as_deref(),
            Some("2"),
            "the init container's is more"
        );
        assert_eq!(s("cpu").as_deref(), Some("2"));
        assert_eq!(s("requests.memory").as_deref(), Some("128Mi"));
        assert_eq!(s("limits.memory").as_deref(), Some("128Mi"));
        pod["status"] = json!({"phase": "Succeeded"});
        let u = usage(&pods(), &pod);
        assert_eq!(u.keys().collect::<Vec<_>>(), ["count/pods"]);
    }

    #[test]
    fn containers_without_tracked_compute_are_named() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"memory": "64Mi"}}},
            {"name": "b"}]}});
        let tracked = BTreeSet::from(["limits.memory", "requests.memory", "pods"]);
        assert_eq!(
            missing_compute(&pod, &tracked).unwrap(),
            "must specify limits.memory for: a,b; requests.memory for: b"
        );
    }
}
