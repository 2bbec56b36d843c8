//! LimitRange admission, as kube-apiserver's `LimitRanger` plugin: a new
//! pod's containers get the namespace's LimitRange `default` limits and
//! `defaultRequest` requests where they state none (recorded in the
//! `kubernetes.io/limit-ranger` annotation), then `min`, `max` and
//! `maxLimitRequestRatio` of `Container` and `Pod` items are enforced with
//! upstream's messages (403 `maximum memory usage per Container is 1Gi, but
//! limit is 2Gi.`). A pod without limits in such a namespace so takes a
//! known share of a node, and a quota on compute can be met by defaults.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::meta;
use crate::registry::{Registry, ResourceType};
use crate::resourcequota::quantity::Quantity;
use crate::status::ApiError;
use crate::store::Store;

const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Defaults and checks a pod being created in `ns` against its LimitRanges.
pub(crate) fn admit_pod(
    store: &Store,
    registry: &Registry,
    rt: &ResourceType,
    ns: &str,
    pod: &mut Value,
) -> Result<(), ApiError> {
    if !(rt.group.is_empty() && rt.resource == "pods") {
        return Ok(());
    }
    let Ok(lrt) = registry.builtin("", "v1", "limitranges") else {
        return Ok(());
    };
    let ranges: Vec<Value> = store
        .snapshot()
        .range(&lrt.prefix(Some(ns)), None)
        .filter_map(|s| s.value().ok())
        .collect();
    if ranges.is_empty() {
        return Ok(());
    }
    let mut errors = Vec::new();
    for range in &ranges {
        let items: Vec<&Value> = range
            .pointer("/spec/limits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .collect();
        set_defaults(pod, &items);
        for item in &items {
            check(pod, item, &mut errors);
        }
    }
    if let Some(spec) = pod.get("spec").cloned() {
        // The QoS class follows the defaulted resources (upstream computes
        // it after admission, in the strategy's PrepareForCreate).
        pod["status"]["qosClass"] = Value::String(crate::defaults::qos_class(&spec).into());
    }
    if errors.is_empty() {
        return Ok(());
    }
    // utilerrors.NewAggregate: duplicates once, brackets around two or more.
    let mut seen = BTreeSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    let message = match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    Err(ApiError::forbidden(format!(
        "pods \"{}\" is forbidden: {message}",
        meta::name(pod)
    )))
}

/// Upstream's `mergePodResourceRequirements`.
fn set_defaults(pod: &mut Value, items: &[&Value]) {
    let (mut limits, mut requests) = (Map::new(), Map::new());
    for item in items.iter().filter(|i| i["type"] == "Container") {
        for (field, into) in [("default", &mut limits), ("defaultRequest", &mut requests)] {
            if let Some(m) = item.get(field).and_then(Value::as_object) {
                into.extend(m.clone());
            }
        }
    }
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (field, what) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(cs) = pod
            .pointer_mut(&format!("/spec/{field}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in cs.iter_mut() {
            let name = c["name"].as_str().unwrap_or("").to_string();
            let set_requests = fill(c, "requests", &requests);
            let set_limits = fill(c, "limits", &limits);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {what} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if !notes.is_empty() {
        let m = meta::meta_mut(pod);
        let annotations = m
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        annotations[ANNOTATION] =
            Value::String(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

/// Sets what `defaults` has and the container's `resources.<kind>` lacks;
/// answers the names set, sorted.
fn fill(c: &mut Value, kind: &str, defaults: &Map<String, Value>) -> Vec<String> {
    if defaults.is_empty() {
        return vec![];
    }
    if !c["resources"].is_object() {
        c["resources"] = Value::Object(Map::new());
    }
    if !c["resources"][kind].is_object() {
        c["resources"][kind] = Value::Object(Map::new());
    }
    let list = c["resources"][kind]
        .as_object_mut()
        .expect("an object, set above");
    let mut set = Vec::new();
    for (k, v) in defaults {
        if !list.contains_key(k) {
            list.insert(k.clone(), v.clone());
            set.push(k.clone());
        }
    }
    set.sort();
    set
}

type List = Vec<(String, Quantity, String)>;

/// A `resources.requests`/`limits` map as (name, value, text as written).
fn list_of(v: Option<&Value>) -> List {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| {
            let s = q.as_str()?;
            Some((k.clone(), Quantity::parse(s)?, s.to_string()))
        })
        .collect()
}

fn find<'a>(l: &'a List, k: &str) -> Option<&'a (String, Quantity, String)> {
    l.iter().find(|(n, ..)| n == k)
}

/// One LimitRange item's bounds over the pod's containers (`Container`) or
/// their sum (`Pod`), with upstream's messages.
fn check(pod: &Value, item: &Value, errors: &mut Vec<String>) {
    let ty = item["type"].as_str().unwrap_or("");
    let spec = pod.get("spec").cloned().unwrap_or_default();
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|f| spec.get(*f).and_then(Value::as_array).into_iter().flatten())
        .collect();
    let targets: Vec<(List, List)> = match ty {
        "Container" => containers
            .iter()
            .map(|c| {
                (
                    list_of(c.pointer("/resources/requests")),
                    list_of(c.pointer("/resources/limits")),
                )
            })
            .collect(),
        "Pod" => vec![(pod_sum(&spec, "requests"), pod_sum(&spec, "limits"))],
        _ => return,
    };
    for (requests, limits) in &targets {
        for (k, enforced, text) in list_of(item.get("min")) {
            match (find(requests, &k), find(limits, &k)) {
                (None, _) => errors.push(format!(
                    "minimum {k} usage per {ty} is {text}.  No request is specified."
                )),
                (Some((_, r, rs)), _) if *r < enforced => errors.push(format!(
                    "minimum {k} usage per {ty} is {text}, but request is {rs}."
                )),
                (_, Some((_, l, ls))) if *l < enforced => errors.push(format!(
                    "minimum {k} usage per {ty} is {text}, but limit is {ls}."
                )),
                _ => {}
            }
        }
        for (k, enforced, text) in list_of(item.get("max")) {
            match (find(requests, &k), find(limits, &k)) {
                (_, None) => errors.push(format!(
                    "maximum {k} usage per {ty} is {text}.  No limit is specified."
                )),
                (_, Some((_, l, ls))) if *l > enforced => errors.push(format!(
                    "maximum {k} usage per {ty} is {text}, but limit is {ls}."
                )),
                (Some((_, r, rs)), _) if *r > enforced => errors.push(format!(
                    "maximum {k} usage per {ty} is {text}, but request is {rs}."
                )),
                _ => {}
            }
        }
        for (k, enforced, text) in list_of(item.get("maxLimitRequestRatio")) {
            let r = find(requests, &k).map(|r| r.1.milli).filter(|r| *r != 0);
            let l = find(limits, &k).map(|l| l.1.milli).filter(|l| *l != 0);
            match (r, l) {
                (None, _) => errors.push(format!(
                    "{k} max limit to request ratio per {ty} is {text}, but no request is specified or request is 0."
                )),
                (_, None) => errors.push(format!(
                    "{k} max limit to request ratio per {ty} is {text}, but no limit is specified or limit is 0."
                )),
                (Some(r), Some(l)) => {
                    let ratio = l as f64 / r as f64;
                    if ratio * 1000.0 > enforced.milli as f64 {
                        errors.push(format!(
                            "{k} max limit to request ratio per {ty} is {text}, but provided ratio is {ratio:.6}."
                        ));
                    }
                }
            }
        }
    }
}

/// The pod's containers' sum (a name only when every container states it),
/// or its largest init container's where that is more, as upstream's `sum`.
fn pod_sum(spec: &Value, kind: &str) -> List {
    let lists: Vec<List> = spec
        .get("containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| list_of(c.pointer(&format!("/resources/{kind}"))))
        .collect();
    let mut names: Vec<String> = lists.iter().flatten().map(|(k, ..)| k.clone()).collect();
    names.sort();
    names.dedup();
    let mut out: List = names
        .into_iter()
        .filter(|k| lists.iter().all(|l| find(l, k).is_some()))
        .map(|k| {
            let total = lists
                .iter()
                .filter_map(|l| find(l, &k))
                .fold(Quantity::ZERO, |t, (_, q, _)| t.add(*q));
            let text = total.to_string();
            (k, total, text)
        })
        .collect();
    for c in spec
        .get("initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (k, q, s) in list_of(c.pointer(&format!("/resources/{kind}"))) {
            match out.iter_mut().find(|(n, ..)| *n == k) {
                Some(e) if q > e.1 => *e = (k, q, s),
                Some(_) => {}
                None => out.push((k, q, s)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_what_a_container_lacks_and_bounds_refuse_the_rest() {
        let item = json!({"type": "Container", "max": {"memory": "1Gi"},
            "default": {"memory": "512Mi"}, "defaultRequest": {"memory": "256Mi", "cpu": "100m"}});
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a"}, {"name": "b", "resources": {"limits": {"memory": "2Gi"}}}]}});
        set_defaults(&mut pod, &[&item]);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "512Mi"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "100m"
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; memory limit for container a; cpu, memory request for container b"
        );
        let mut errors = vec![];
        check(&pod, &item, &mut errors);
        assert_eq!(
            errors,
            ["maximum memory usage per Container is 1Gi, but limit is 2Gi."]
        );
    }
}
