//! Checking a rollout's spec and turning it into the StatefulSet and
//! PodDisruptionBudget it manages. Every refusal names the field.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{controller_of, scaled_value, selector_is_empty, selector_matches};

use crate::api::StatefulsetRollout;

/// The annotation on the StatefulSet holding the digest of the spec it was given.
pub const SPEC_HASH: &str = "rollouts.wasmlet.dev/spec-hash";
/// The pod template label naming the rollout.
pub const ROLLOUT_LABEL: &str = "rollouts.wasmlet.dev/rollout";

/// A spec this operator refuses: the field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSpec {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for BadSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn bad(field: &str, message: impl Into<String>) -> BadSpec {
    BadSpec {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// What a valid spec asks for.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The StatefulSet as it should be (name, namespace, owner, spec, hash).
    pub set: StatefulSet,
    pub replicas: i32,
    pub percent: i32,
    pub hash: String,
    /// Pods on the new template wanted: ceil(replicas × percent / 100).
    pub target: i32,
    pub max_unavailable: IntOrString,
}

/// Validates `sroll`'s spec and builds the desired StatefulSet.
pub fn desired(sroll: &StatefulsetRollout) -> Result<Desired, BadSpec> {
    let spec = &sroll.spec;
    if !(0..=100).contains(&spec.percent) {
        return Err(bad(
            "spec.percent",
            format!("must be between 0 and 100, got {}", spec.percent),
        ));
    }
    if spec
        .min_pod_eviction_interval_seconds
        .is_some_and(|s| s < 0)
    {
        return Err(bad(
            "spec.minPodEvictionIntervalSeconds",
            "must not be negative",
        ));
    }
    if spec.progress_deadline_seconds.is_some_and(|s| s <= 0) {
        return Err(bad("spec.progressDeadlineSeconds", "must be positive"));
    }
    let mut raw = spec.statefulset.clone();
    if !raw.is_object() {
        return Err(bad("spec.statefulset", "must be an object"));
    }
    raw["apiVersion"] = json!("apps/v1");
    raw["kind"] = json!("StatefulSet");
    let mut set: StatefulSet =
        serde_json::from_value(raw).map_err(|e| bad("spec.statefulset", e.to_string()))?;
    let Some(set_spec) = set.spec.as_ref() else {
        return Err(bad("spec.statefulset.spec", "required"));
    };
    let Some(replicas) = set_spec.replicas else {
        return Err(bad("spec.statefulset.spec.replicas", "required"));
    };
    if replicas < 0 {
        return Err(bad(
            "spec.statefulset.spec.replicas",
            "must not be negative",
        ));
    }
    let strategy = set_spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "RollingUpdate".into());
    if strategy != "OnDelete" {
        return Err(bad(
            "spec.statefulset.spec.updateStrategy.type",
            format!("must be OnDelete (the operator replaces pods itself), got {strategy}"),
        ));
    }
    if set_spec.selector.match_labels.is_none() && set_spec.selector.match_expressions.is_none()
        || selector_is_empty(Some(&set_spec.selector))
    {
        return Err(bad(
            "spec.statefulset.spec.selector",
            "must select some labels",
        ));
    }
    if !selector_matches(
        Some(&set_spec.selector),
        set_spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref()),
    ) {
        return Err(bad(
            "spec.statefulset.spec.selector",
            "does not match spec.statefulset.spec.template.metadata.labels",
        ));
    }
    let max_unavailable = spec.max_unavailable.clone().unwrap_or(IntOrString::Int(1));
    match scaled_value(&max_unavailable, replicas, true) {
        Ok(n) if n >= 1 || replicas == 0 => {}
        Ok(n) => {
            return Err(bad(
                "spec.maxUnavailable",
                format!("must allow at least one pod, got {n}"),
            ));
        }
        Err(e) => return Err(bad("spec.maxUnavailable", e)),
    }
    // Pods carry the StatefulSet's ownerReference, not ours: this label makes a
    // pod's change requeue its rollout (the manifest's `label:` watch).
    if let Some(spec) = set.spec.as_mut() {
        spec.template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(
                ROLLOUT_LABEL.into(),
                sroll.metadata.name.clone().unwrap_or_default(),
            );
    }
    let set_spec = set.spec.as_ref().expect("checked above");
    let hash = digest(&serde_json::to_value(set_spec).unwrap_or(Value::Null));
    let target = (i64::from(replicas) * i64::from(spec.percent) + 99) / 100;
    let meta = &mut set.metadata;
    if meta.name.as_deref().unwrap_or_default().is_empty() {
        meta.name = sroll.metadata.name.clone();
    }
    meta.namespace = sroll.metadata.namespace.clone();
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(SPEC_HASH.into(), hash.clone());
    meta.owner_references = Some(vec![owner(sroll)]);
    meta.resource_version = None;
    meta.uid = None;
    set.status = None;
    Ok(Desired {
        set,
        replicas,
        percent: spec.percent,
        hash,
        target: i32::try_from(target).unwrap_or(i32::MAX),
        max_unavailable,
    })
}

/// The controller owner reference naming `sroll`.
pub fn owner(sroll: &StatefulsetRollout) -> OwnerReference {
    OwnerReference {
        api_version: StatefulsetRollout::api_version(&()).into_owned(),
        kind: StatefulsetRollout::kind(&()).into_owned(),
        name: sroll.metadata.name.clone().unwrap_or_default(),
        uid: sroll.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The budget created when none selects the set's pods.
pub fn budget(sroll: &StatefulsetRollout, want: &Desired) -> PodDisruptionBudget {
    let name = want.set.metadata.name.clone().unwrap_or_default();
    let selector = want.set.spec.as_ref().map(|s| s.selector.clone());
    serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {
            "name": format!("{name}-sroll"),
            "namespace": sroll.metadata.namespace,
            "ownerReferences": [owner(sroll)],
        },
        "spec": {"maxUnavailable": want.max_unavailable, "selector": selector},
    }))
    .expect("a PodDisruptionBudget from its own fields")
}

/// Our budget (the rollout is its controller) brought to the spec's
/// `maxUnavailable`, when it differs; `None` when it already follows it, or
/// when the budget is someone else's (a user's own budget is used as it is).
pub fn budget_update(
    sroll: &StatefulsetRollout,
    want: &Desired,
    pdb: &PodDisruptionBudget,
) -> Option<PodDisruptionBudget> {
    let uid = sroll.metadata.uid.as_deref().unwrap_or_default();
    controller_of(&pdb.metadata).filter(|c| c.uid == uid)?;
    let spec = pdb.spec.as_ref();
    let current = spec.and_then(|s| s.max_unavailable.as_ref());
    let min_available = spec.and_then(|s| s.min_available.as_ref());
    if current == Some(&want.max_unavailable) && min_available.is_none() {
        return None;
    }
    let mut updated = pdb.clone();
    let spec = updated.spec.get_or_insert_with(Default::default);
    spec.max_unavailable = Some(want.max_unavailable.clone());
    spec.min_available = None;
    updated.status = None;
    Some(updated)
}

/// A stable digest of `v` (keys sorted at every level; FNV-1a 64, hex): the
/// same spec gives the same digest whatever order the API server kept.
pub fn digest(v: &Value) -> String {
    let mut text = String::new();
    canonical(v, &mut text);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for x in a {
                canonical(x, out);
                out.push(',');
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
