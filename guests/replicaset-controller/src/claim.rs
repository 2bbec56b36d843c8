//! Which pods a ReplicaSet owns, as upstream's `ControllerRefManager.ClaimPods`:
//! its own pods whose labels still match, orphans its selector picks
//! (adopted), never another controller's; owned pods that stop matching are
//! released. The patches carry the pod's uid, as upstream's, so a pod
//! replaced under the same name is never adopted by mistake.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{controller_of, selector_matches};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Ours and matching.
    Owned,
    /// An orphan to adopt.
    Adopt,
    /// Ours but no longer matching: release.
    Release,
    /// Not ours, or nothing to do with it.
    Ignore,
}

/// `FilterActivePods`: not finished, not being deleted.
pub fn active(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

pub fn claim(rs: &ReplicaSet, pod: &Pod) -> Claim {
    let selector = rs.spec.as_ref().map(|s| &s.selector);
    let matches = selector_matches(selector, pod.metadata.labels.as_ref());
    let deleting = rs.metadata.deletion_timestamp.is_some();
    match controller_of(&pod.metadata) {
        Some(r) if Some(&r.uid) == rs.metadata.uid.as_ref() => {
            if matches {
                Claim::Owned
            } else if deleting || pod.metadata.deletion_timestamp.is_some() {
                Claim::Ignore
            } else {
                Claim::Release
            }
        }
        Some(_) => Claim::Ignore,
        None if matches && !deleting && pod.metadata.deletion_timestamp.is_none() => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// The controller reference a ReplicaSet (or ReplicationController) puts on its pods.
pub fn controller_ref(rs: &ReplicaSet) -> Value {
    let (api_version, kind) = super::kind::OWNER;
    json!({"apiVersion": api_version, "kind": kind,
        "name": rs.metadata.name, "uid": rs.metadata.uid,
        "controller": true, "blockOwnerDeletion": true})
}

/// Strategic merge patch adopting `pod`.
pub fn adopt_patch(rs: &ReplicaSet, pod: &Pod) -> Value {
    json!({"metadata": {"ownerReferences": [controller_ref(rs)], "uid": pod.metadata.uid}})
}

/// Strategic merge patch releasing `pod`.
pub fn release_patch(rs: &ReplicaSet, pod: &Pod) -> Value {
    json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": rs.metadata.uid}],
        "uid": pod.metadata.uid}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs() -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": "r", "uid": "rs-uid"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {}}}))
        .unwrap()
    }

    fn pod(labels: Value, owner: Option<&str>) -> Pod {
        let mut p = json!({"metadata": {"name": "p", "uid": "p-uid", "labels": labels}});
        if let Some(uid) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "x", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(p).unwrap()
    }

    #[test]
    fn owned_adopted_released_or_ignored_as_upstream() {
        let r = rs();
        assert_eq!(
            claim(&r, &pod(json!({"app": "a"}), Some("rs-uid"))),
            Claim::Owned
        );
        assert_eq!(claim(&r, &pod(json!({"app": "a"}), None)), Claim::Adopt);
        assert_eq!(
            claim(&r, &pod(json!({"app": "b"}), Some("rs-uid"))),
            Claim::Release
        );
        assert_eq!(
            claim(&r, &pod(json!({"app": "a"}), Some("other"))),
            Claim::Ignore
        );
        assert_eq!(claim(&r, &pod(json!({"app": "b"}), None)), Claim::Ignore);
        let p = release_patch(&r, &pod(json!({}), None));
        assert_eq!(p["metadata"]["ownerReferences"][0]["$patch"], "delete");
        assert_eq!(p["metadata"]["uid"], "p-uid");
    }
}
