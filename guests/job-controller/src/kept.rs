//! The pods the controller keeps between calls, cut to what it reads.
//!
//! A warm instance keeps a namespace's pods and reads only what changed
//! (`Client::list_kept_as`). Kept whole, a decoded pod is kilobytes: a Job with
//! `parallelism: 1000000` made 28,000 pods in 80 s and its controller ran
//! out of its 128 MiB on every pass from then on. Each pod is kept as a
//! [`slim`] copy holding only the fields the controller reads (about a
//! fifth of the memory), and a fresh instance's first read decodes one pod
//! at a time into it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasmlet_sdk::client::{Client, ClientError, ListParams};

use crate::indexed::INDEX_KEY;

/// The pods of `ns` now, as [`slim`] copies.
pub fn pods(client: &Client, ns: &str) -> Result<Vec<Arc<Pod>>, ClientError> {
    client.list_kept_as(&ListParams::namespaced(ns), slim)
}

/// `pod` with only what the controller reads: name, uid, creation and
/// deletion times, finalizers, controller reference, the completion index
/// (annotation and label), and the status' phase, Ready condition and
/// container end times.
pub fn slim(pod: Pod) -> Pod {
    let m = pod.metadata;
    let index = |map: Option<BTreeMap<String, String>>| {
        map.and_then(|mut a| a.remove(INDEX_KEY))
            .map(|v| BTreeMap::from([(INDEX_KEY.to_string(), v)]))
    };
    let metadata = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        owner_references: m.owner_references.map(|refs| {
            refs.into_iter()
                .filter(|r| r.controller == Some(true))
                .collect()
        }),
        annotations: index(m.annotations),
        labels: index(m.labels),
        ..ObjectMeta::default()
    };
    let status = pod.status.map(|s| PodStatus {
        phase: s.phase,
        conditions: s.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(ready)
                .collect()
        }),
        container_statuses: s
            .container_statuses
            .map(|cs| cs.into_iter().map(ended).collect()),
        ..PodStatus::default()
    });
    Pod {
        metadata,
        spec: None,
        status,
    }
}

fn ready(c: PodCondition) -> PodCondition {
    PodCondition {
        type_: c.type_,
        status: c.status,
        ..PodCondition::default()
    }
}

/// A container status with its end time only (`failed_at` reads it).
fn ended(c: ContainerStatus) -> ContainerStatus {
    let terminated = c.state.and_then(|s| s.terminated).map(|t| {
        k8s_openapi::api::core::v1::ContainerStateTerminated {
            finished_at: t.finished_at,
            ..Default::default()
        }
    });
    ContainerStatus {
        state: terminated.map(|t| k8s_openapi::api::core::v1::ContainerState {
            terminated: Some(t),
            ..Default::default()
        }),
        ..ContainerStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasmlet_sdk::controllers::{controller_of, pod_ready};

    #[test]
    fn a_slim_pod_keeps_what_the_controller_reads() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "labels": {"a": "b", INDEX_KEY: "3"}, "annotations": {INDEX_KEY: "3", "big": "x"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                    "uid": "ju", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Failed", "conditions": [
                {"type": "Ready", "status": "True", "message": "long"},
                {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 1,
                        "finishedAt": "2026-01-01T00:01:00Z"}}}]}
        }))
        .unwrap();
        let s = slim(pod);
        assert!(s.spec.is_none());
        assert_eq!(controller_of(&s.metadata).unwrap().uid, "ju");
        assert!(pod_ready(&s));
        assert_eq!(crate::indexed::index_of(&s), Some(3));
        assert_eq!(s.metadata.annotations.as_ref().unwrap().len(), 1);
        let st = s.status.unwrap();
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        let cs = &st.container_statuses.unwrap()[0];
        let at = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert!(at.finished_at.is_some());
    }
}
