//! The pods the controller keeps between calls, cut to what it reads.
//!
//! A warm instance keeps a namespace's pods and reads only what changed
//! (`Client::list_kept_as`). Kept whole, a decoded pod is kilobytes, so a
//! set of `replicas: 1000000` ran its controller out of its 128 MiB once a
//! few tens of thousands of pods existed (as the job controller at 28,010).
//! Each pod is kept as a [`slim`] copy of the fields claiming, counting
//! and ranking read.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasmlet_sdk::client::{Client, ClientError, ListParams};

use crate::rank::DELETION_COST;

/// The pods of `ns` now, as [`slim`] copies.
pub fn pods(client: &Client, ns: &str) -> Result<Vec<Arc<Pod>>, ClientError> {
    client.list_kept_as(&ListParams::namespaced(ns), slim)
}

/// `pod` with only what the controller reads: name, uid, labels (the
/// selector), owner references (claims), the deletion-cost annotation,
/// creation and deletion times, the node, and the status' phase, Ready
/// condition and restart counts.
pub fn slim(pod: Pod) -> Pod {
    let m = pod.metadata;
    let metadata = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        labels: m.labels,
        owner_references: m.owner_references,
        annotations: m
            .annotations
            .and_then(|mut a| a.remove_entry(DELETION_COST))
            .map(|e| [e].into()),
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    };
    let spec = pod.spec.map(|s| PodSpec {
        node_name: s.node_name,
        ..PodSpec::default()
    });
    let status = pod.status.map(|s| PodStatus {
        phase: s.phase,
        conditions: s.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| PodCondition {
                    type_: c.type_,
                    status: c.status,
                    last_transition_time: c.last_transition_time,
                    ..PodCondition::default()
                })
                .collect()
        }),
        container_statuses: s.container_statuses.map(|cs| {
            cs.into_iter()
                .map(|c| ContainerStatus {
                    restart_count: c.restart_count,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
    Pod {
        metadata,
        spec,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slim_pod_keeps_what_claiming_counting_and_ranking_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "labels": {"app": "web"},
                "annotations": {DELETION_COST: "-5", "big": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "ru", "controller": true}],
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
                {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "i", "imageID": "",
                    "ready": true, "restartCount": 3}]}
        }))
        .unwrap();
        let s = slim(pod);
        assert_eq!(s.metadata.annotations.as_ref().unwrap().len(), 1);
        assert_eq!(s.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].uid, "ru");
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers.is_empty());
        let st = s.status.as_ref().unwrap();
        assert_eq!(st.conditions.as_ref().unwrap().len(), 1);
        assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 3);
        assert!(wasmlet_sdk::controllers::pod_ready(&s));
    }
}
