//! Priority admission, as kube-apiserver's `Priority` plugin: a new pod's
//! `priorityClassName` is resolved to its class's `priority` and
//! `preemptionPolicy` (a pod without one takes the global default class, or
//! priority 0), a name that names no class is refused, and only one class
//! may be the global default. The two system classes exist from the start
//! (`controllers::bootstrap`) and cannot be deleted (`resources::immortal`).

use serde_json::{Value, json};

use crate::meta;
use crate::registry::{Registry, ResourceType};
use crate::status::ApiError;
use crate::store::Store;

/// The classes every cluster has, with their values (created at start by
/// `controllers::bootstrap`).
pub(crate) const SYSTEM_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// What a pod's class resolves to.
struct Class {
    name: String,
    value: i64,
    preemption: String,
}

impl Class {
    fn of(pc: &Value) -> Class {
        Class {
            name: meta::name(pc).to_string(),
            value: pc.get("value").and_then(Value::as_i64).unwrap_or(0),
            preemption: pc
                .get("preemptionPolicy")
                .and_then(Value::as_str)
                .unwrap_or("PreemptLowerPriority")
                .to_string(),
        }
    }
}

fn classes(store: &Store, registry: &Registry) -> Vec<Value> {
    let Ok(rt) = registry.builtin("scheduling.k8s.io", "v1", "priorityclasses") else {
        return Vec::new();
    };
    store
        .snapshot()
        .range(&rt.prefix(None), None)
        .filter_map(|s| s.value().ok())
        .collect()
}

/// The class named `name`, if stored.
fn class(store: &Store, registry: &Registry, name: &str) -> Option<Value> {
    let rt = registry
        .builtin("scheduling.k8s.io", "v1", "priorityclasses")
        .ok()?;
    store.get(&rt.key("", name))?.value().ok()
}

/// The global default class: of several (written concurrently), the highest.
fn global_default(all: &[Value]) -> Option<&Value> {
    all.iter()
        .filter(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .max_by_key(|pc| pc.get("value").and_then(Value::as_i64).unwrap_or(0))
}

/// Resolves a pod being created in `ns`; a PriorityClass being written may
/// not become a second global default.
pub(crate) fn admit(
    store: &Store,
    registry: &Registry,
    rt: &ResourceType,
    obj: &mut Value,
) -> Result<(), ApiError> {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => admit_pod(store, registry, obj),
        ("scheduling.k8s.io", "priorityclasses") => one_default(store, registry, rt, obj),
        _ => Ok(()),
    }
}

/// An update of a PriorityClass may not make it a second global default
/// either (a pod's priority is fixed once created).
pub(crate) fn admit_update(
    store: &Store,
    registry: &Registry,
    rt: &ResourceType,
    obj: &Value,
) -> Result<(), ApiError> {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("scheduling.k8s.io", "priorityclasses") => one_default(store, registry, rt, obj),
        _ => Ok(()),
    }
}

fn admit_pod(store: &Store, registry: &Registry, pod: &mut Value) -> Result<(), ApiError> {
    let pod_name = meta::name(pod).to_string();
    let forbidden =
        |why: String| ApiError::forbidden(format!("pods \"{pod_name}\" is forbidden: {why}"));
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let named = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    // A named class is one read; only a pod without one looks at them all.
    let class = match &named {
        Some(n) => match class(store, registry, n) {
            Some(pc) => Class::of(&pc),
            None => {
                return Err(forbidden(format!(
                    "no PriorityClass with name {n} was found"
                )));
            }
        },
        None => match global_default(&classes(store, registry)) {
            Some(pc) => Class::of(pc),
            None => Class {
                name: String::new(),
                value: 0,
                preemption: "PreemptLowerPriority".into(),
            },
        },
    };
    if let Some(p) = spec.get("priority").and_then(Value::as_i64)
        && p != class.value
    {
        return Err(forbidden(format!(
            "the integer value of priority ({p}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            class.value
        )));
    }
    if let Some(p) = spec.get("preemptionPolicy").and_then(Value::as_str)
        && p != class.preemption
    {
        return Err(forbidden(format!(
            "the string value of PreemptionPolicy ({p}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            class.preemption
        )));
    }
    if !class.name.is_empty() {
        spec.insert("priorityClassName".into(), json!(class.name));
    }
    spec.insert("priority".into(), json!(class.value));
    spec.insert("preemptionPolicy".into(), json!(class.preemption));
    Ok(())
}

fn one_default(
    store: &Store,
    registry: &Registry,
    rt: &ResourceType,
    pc: &Value,
) -> Result<(), ApiError> {
    if pc.get("globalDefault").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let name = meta::name(pc);
    let all = classes(store, registry);
    match global_default(&all) {
        Some(other) if meta::name(other) != name => Err(ApiError::forbidden(format!(
            "{} \"{name}\" is forbidden: PriorityClass {} is already marked as default. Only one default can exist",
            rt.qualified(),
            meta::name(other)
        ))),
        _ => Ok(()),
    }
}
