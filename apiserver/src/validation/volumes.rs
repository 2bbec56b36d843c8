//! PersistentVolume and PersistentVolumeClaim rules, as upstream's
//! `ValidatePersistentVolumeSpec` and `ValidatePersistentVolumeClaimSpec`:
//! access modes from the known set, a storage capacity or request, exactly
//! one volume source on a volume, and a claim's spec fixed after creation
//! except the storage it requests.

use serde_json::Value;

use super::{cause, forbidden, required};
use crate::status::Cause;

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// The volume sources a PersistentVolume may name (one of them).
const SOURCES: [&str; 22] = [
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

fn unsupported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    cause(
        "FieldValueNotSupported",
        field,
        format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    )
}

fn access_modes(spec: &Value, causes: &mut Vec<Cause>, missing: &str) {
    let modes = spec.get("accessModes").and_then(Value::as_array);
    if modes.is_none_or(Vec::is_empty) {
        causes.push(cause(
            "FieldValueRequired",
            "spec.accessModes",
            format!("Required value{missing}"),
        ));
    }
    for m in modes.into_iter().flatten() {
        let m = m.as_str().unwrap_or("");
        if !ACCESS_MODES.contains(&m) {
            causes.push(unsupported("spec.accessModes", m, &ACCESS_MODES));
        }
    }
}

pub(crate) fn validate_persistent_volume(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or_default();
    access_modes(&spec, &mut causes, "");
    match spec.get("capacity").and_then(Value::as_object) {
        None => causes.push(required("spec.capacity")),
        Some(c) if c.is_empty() => causes.push(required("spec.capacity")),
        Some(c) => {
            if !c.contains_key("storage") || c.len() > 1 {
                let keys: Vec<&str> = c.keys().map(String::as_str).collect();
                causes.push(unsupported("spec.capacity", &keys.join(","), &["storage"]));
            }
        }
    }
    let named: Vec<&str> = SOURCES
        .iter()
        .copied()
        .filter(|s| spec.get(*s).is_some_and(|v| !v.is_null()))
        .collect();
    match named.as_slice() {
        [] => causes.push(cause(
            "FieldValueRequired",
            "spec",
            "Required value: must specify a volume type".into(),
        )),
        [_] => {}
        [_, rest @ ..] => {
            for s in rest {
                causes.push(forbidden(
                    &format!("spec.{s}"),
                    "may not specify more than 1 volume type",
                ));
            }
        }
    }
    if let Some(p) = spec
        .get("persistentVolumeReclaimPolicy")
        .and_then(Value::as_str)
    {
        let known = ["Delete", "Recycle", "Retain"];
        if !known.contains(&p) {
            causes.push(unsupported("spec.persistentVolumeReclaimPolicy", p, &known));
        }
    }
    causes
}

pub(crate) fn validate_persistent_volume_claim(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or_default();
    access_modes(&spec, &mut causes, ": at least 1 access mode is required");
    if spec.pointer("/resources/requests/storage").is_none() {
        causes.push(required("spec.resources[storage]"));
    }
    causes
}

/// A claim's spec is fixed once created, except the storage it requests
/// (expansion) and the volume it names once bound.
pub(crate) fn validate_claim_update(old: &Value, new: &Value) -> Vec<Cause> {
    let strip = |v: &Value| {
        let mut spec = v.get("spec").cloned().unwrap_or_default();
        if let Some(o) = spec.as_object_mut() {
            o.remove("volumeAttributesClassName");
            if let Some(r) = o.get_mut("resources").and_then(Value::as_object_mut) {
                r.remove("requests");
            }
        }
        spec
    };
    if strip(old) == strip(new) {
        return Vec::new();
    }
    vec![forbidden(
        "spec",
        "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
    )]
}
