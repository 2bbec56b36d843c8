//! apps/v1: `SetDefaults_StatefulSet`, `_Deployment`, `_ReplicaSet` and
//! `_DaemonSet`, with their pod templates defaulted as pod specs are.

use serde_json::{Map, Value, json};

use super::{default, each, object, pod};

fn spec(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = obj.as_object_mut()?;
    object(o, "spec")
}

/// The template's pod spec gets `SetDefaults_PodSpec` (not the pod-only or
/// admission defaults: those come when the controller creates the pods).
fn template(spec: &mut Map<String, Value>) {
    if let Some(p) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod::spec(p);
    }
}

pub(crate) fn statefulset(obj: &mut Value) {
    let Some(spec) = spec(obj) else { return };
    default(spec, "replicas", json!(1));
    default(spec, "podManagementPolicy", json!("OrderedReady"));
    default(spec, "revisionHistoryLimit", json!(10));
    if let Some(u) = object(spec, "updateStrategy") {
        if u.get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            u.insert("type".into(), json!("RollingUpdate"));
            default(u, "rollingUpdate", json!({}));
        }
        // Only a rollingUpdate that exists gets its partition.
        if u["type"] == "RollingUpdate"
            && let Some(r) = u.get_mut("rollingUpdate").and_then(Value::as_object_mut)
        {
            default(r, "partition", json!(0));
        }
    }
    // StatefulSetAutoDeletePVC (on by default since 1.27).
    if let Some(p) = object(spec, "persistentVolumeClaimRetentionPolicy") {
        default(p, "whenDeleted", json!("Retain"));
        default(p, "whenScaled", json!("Retain"));
    }
    for claim in each(spec, "volumeClaimTemplates") {
        // SetDefaults_PersistentVolumeClaim(Spec).
        if let Some(s) = object(claim, "spec") {
            default(s, "volumeMode", json!("Filesystem"));
        }
        if let Some(s) = object(claim, "status") {
            default(s, "phase", json!("Pending"));
        }
    }
    template(spec);
}

pub(crate) fn deployment(obj: &mut Value) {
    let Some(spec) = spec(obj) else { return };
    default(spec, "replicas", json!(1));
    if let Some(s) = object(spec, "strategy") {
        default(s, "type", json!("RollingUpdate"));
        if s["type"] == "RollingUpdate"
            && let Some(r) = object(s, "rollingUpdate")
        {
            default(r, "maxUnavailable", json!("25%"));
            default(r, "maxSurge", json!("25%"));
        }
    }
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

pub(crate) fn replicaset(obj: &mut Value) {
    let Some(spec) = spec(obj) else { return };
    default(spec, "replicas", json!(1));
    template(spec);
}

pub(crate) fn daemonset(obj: &mut Value) {
    let Some(spec) = spec(obj) else { return };
    if let Some(u) = object(spec, "updateStrategy") {
        default(u, "type", json!("RollingUpdate"));
        if u["type"] == "RollingUpdate"
            && let Some(r) = object(u, "rollingUpdate")
        {
            default(r, "maxUnavailable", json!(1));
            default(r, "maxSurge", json!(0));
        }
    }
    default(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}
