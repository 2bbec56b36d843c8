//! Defaulting of built-in kinds as upstream's `SetDefaults_*` functions
//! (k8s.io/kubernetes `pkg/apis/*/v1/defaults.go`) and the defaulting
//! admission plugins (ServiceAccount, DefaultTolerationSeconds, Priority):
//! every write of a built-in kind is defaulted before it is validated and
//! stored, so clients read back what an upstream server would store.
//!
//! One module per API group; each works on the JSON form and only fills what
//! is missing (a client's explicit value always wins).

mod apps;
mod autoscaling;
pub(crate) mod batch;
mod limitrange;
pub(crate) mod namespace;
mod pod;
mod replicationcontroller;
mod service;
mod volumes;

use serde_json::{Map, Value};

pub(crate) use pod::qos_class;

use crate::registry::ResourceType;

/// Fills upstream's defaults into `obj`. `create` adds what upstream's
/// admission plugins add on create only (a pod's ServiceAccount and
/// priority); a pod's default tolerations are added on every write.
pub(crate) fn apply(rt: &ResourceType, obj: &mut Value, create: bool) {
    if !rt.builtin {
        return;
    }
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                pod::spec(spec);
                pod::pod(spec);
                if create {
                    pod::admission(spec);
                } else {
                    pod::default_tolerations(spec);
                }
            }
        }
        ("", "namespaces") => namespace::apply(obj),
        ("", "services") => service::apply(obj),
        ("apps", "statefulsets") => apps::statefulset(obj),
        ("apps", "deployments") => apps::deployment(obj),
        ("apps", "replicasets") => apps::replicaset(obj),
        ("apps", "daemonsets") => apps::daemonset(obj),
        ("batch", "jobs") => batch::job(obj, create),
        ("batch", "cronjobs") => batch::cronjob(obj),
        ("", "replicationcontrollers") => replicationcontroller::apply(obj),
        ("", "limitranges") => limitrange::apply(obj),
        ("", "persistentvolumes") => volumes::persistent_volume(obj),
        ("", "persistentvolumeclaims") => volumes::persistent_volume_claim(obj),
        ("scheduling.k8s.io", "priorityclasses") => {
            if let Some(o) = obj.as_object_mut() {
                default(
                    o,
                    "preemptionPolicy",
                    serde_json::json!("PreemptLowerPriority"),
                );
            }
        }
        ("autoscaling", "horizontalpodautoscalers") => autoscaling::horizontal_pod_autoscaler(obj),
        _ => {}
    }
}

/// What an update keeps of what admission set at creation: upstream's
/// Priority plugin gives a pod whose update omits `priority` or
/// `preemptionPolicy` the values it set (a replace from the manifest the pod
/// was created from would otherwise change them, which pod validation
/// refuses).
pub(crate) fn keep_admitted(rt: &ResourceType, old: &Value, new: &mut Value) {
    if !(rt.builtin && rt.group.is_empty() && rt.resource == "pods") {
        return;
    }
    crate::meta::keep_unset_spec_fields(old, new, &["priority", "preemptionPolicy"]);
}

/// Whether objects of this kind carry `metadata.generation`: upstream's
/// strategies set it for kinds with a spec a controller acts on, and custom
/// resources always have it. Pods have it since 1.33 (set on create whatever
/// the PodObservedGenerationTracking gate); ConfigMaps, Secrets, Nodes,
/// Events, Namespaces, Services and ServiceAccounts never.
pub(crate) fn has_generation(rt: &ResourceType) -> bool {
    if !rt.builtin {
        return true;
    }
    matches!(
        (rt.group.as_str(), rt.resource.as_str()),
        ("", "pods")
            | (
                "apps",
                "statefulsets" | "deployments" | "replicasets" | "daemonsets"
            )
            | ("policy", "poddisruptionbudgets")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
            | ("batch", "jobs" | "cronjobs")
            | ("", "replicationcontrollers")
    )
}

/// Sets `key` to `value` where the client left it out (absent or null; an
/// empty string counts as unset for string fields, as Go's zero value does).
fn default(o: &mut Map<String, Value>, key: &str, value: Value) {
    let unset = match o.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty() && value.is_string(),
        Some(_) => false,
    };
    if unset {
        o.insert(key.to_string(), value);
    }
}

/// The object at `key`, created empty where missing; `None` if the client
/// sent something other than an object there (validation reports that).
fn object<'a>(o: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    if o.get(key).is_none_or(Value::is_null) {
        o.insert(key.to_string(), Value::Object(Map::new()));
    }
    o.get_mut(key).and_then(Value::as_object_mut)
}

/// Each object in the array at `key` (nothing if it is absent).
fn each<'a>(
    o: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    o.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

#[cfg(test)]
mod tests;
