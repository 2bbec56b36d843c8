//! The DaemonSet's ControllerRevisions (upstream's `constructHistory`): one
//! per distinct pod template, named `DS-HASH`, holding the patch
//! `{"spec":{"template":{...,"$patch":"replace"}}}` that `kubectl rollout
//! undo` applies; the current template's revision has the highest number.
//!
//! Deviation: the hash is the 32-bit FNV-1a of the template's JSON (with the
//! collision count), safe-encoded as upstream's; upstream hashes the Go
//! object, so the values differ from kube-controller-manager's.

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::json;

/// Upstream's `DefaultDaemonSetUniqueLabelKey`.
pub const HASH_LABEL: &str = "controller-revision-hash";
/// Upstream's `extensions.DaemonSetTemplateGenerationKey`.
pub const GENERATION_LABEL: &str = "pod-template-generation";

/// Upstream's `rand.SafeEncodeString` alphabet (no vowels, no 0/1/3).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv32a(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The hash of the DaemonSet's current template.
pub fn hash(ds: &DaemonSet) -> String {
    let template = ds.spec.as_ref().map(|s| &s.template);
    let raw = serde_json::to_string(&template).unwrap_or_default();
    let collisions = ds
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0)
        .to_string();
    fnv32a(&[raw.as_bytes(), collisions.as_bytes()])
        .to_string()
        .chars()
        .map(|c| ALPHANUMS[c as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// The revision of the current template, numbered `number`, carrying the
/// DaemonSet's annotations as upstream's `snapshot` does (where `kubectl
/// rollout history` reads a change's `kubernetes.io/change-cause`).
pub fn new_revision(ds: &DaemonSet, hash: &str, number: i64) -> ControllerRevision {
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.into());
    let mut t = serde_json::to_value(&template).unwrap_or_else(|_| json!({}));
    t["$patch"] = json!("replace");
    let name: String = ds
        .metadata
        .name
        .as_deref()
        .unwrap_or("")
        .chars()
        .take(223)
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {
            "name": format!("{name}-{hash}"),
            "namespace": ds.metadata.namespace,
            "labels": labels,
            "annotations": ds.metadata.annotations,
            "ownerReferences": [crate::owner(ds)],
        },
        "data": {"spec": {"template": t}},
        "revision": number,
    }))
    .unwrap_or_else(|_| ControllerRevision {
        data: Some(RawExtension(json!({}))),
        revision: number,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_carries_the_daemonsets_annotations() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "d", "uid": "u",
                "annotations": {"kubernetes.io/change-cause": "v2"}},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
        .unwrap();
        let rev = new_revision(&ds, "h", 1);
        assert_eq!(rev.metadata.annotations, ds.metadata.annotations);
    }

    #[test]
    fn the_hash_follows_the_template_and_the_collision_count() {
        let ds = |image: &str, collisions: i32| -> DaemonSet {
            serde_json::from_value(json!({"metadata": {"name": "d", "uid": "u"},
                "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
                "status": {"collisionCount": collisions, "currentNumberScheduled": 0,
                    "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}}))
            .unwrap()
        };
        let a = hash(&ds("x:1", 0));
        assert_eq!(a, hash(&ds("x:1", 0)));
        assert_ne!(a, hash(&ds("x:2", 0)));
        assert_ne!(a, hash(&ds("x:1", 1)));
        assert!(a.bytes().all(|b| ALPHANUMS.contains(&b)));
        let rev = new_revision(&ds("x:1", 0), &a, 3);
        assert_eq!(
            rev.metadata.name.as_deref(),
            Some(format!("d-{a}").as_str())
        );
        assert_eq!(rev.revision, 3);
        assert_eq!(rev.data.unwrap().0["spec"]["template"]["$patch"], "replace");
    }
}
