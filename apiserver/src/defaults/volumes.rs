//! PersistentVolume and PersistentVolumeClaim defaults
//! (`SetDefaults_PersistentVolume`, `SetDefaults_PersistentVolumeClaim`): a
//! volume is `Retain`ed and both are `Filesystem` volumes unless stated. (The
//! `Pending` phase of a new one is set with the status, in `strategy`.)

use serde_json::{Value, json};

use super::default;

pub(crate) fn persistent_volume(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        default(spec, "volumeMode", json!("Filesystem"));
    }
}

pub(crate) fn persistent_volume_claim(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        default(spec, "volumeMode", json!("Filesystem"));
    }
}
