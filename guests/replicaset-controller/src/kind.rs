//! Which kind this build reconciles. Upstream runs its ReplicaSet controller
//! for ReplicationControllers too, converting each RC to a ReplicaSet (the
//! map selector as `matchLabels`) and back (`pkg/controller/replication`):
//! this source does the same. Built as `replicaset-controller` it reconciles
//! `apps/v1` ReplicaSets; built with the `replication-controller` feature (by
//! guests/replicationcontroller-controller) it reconciles `v1`
//! ReplicationControllers, whose pods' controller references, status writes
//! and events name the RC.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
#[cfg(feature = "replication-controller")]
use k8s_openapi::api::core::v1::ReplicationController;

/// The reconciled type.
#[cfg(not(feature = "replication-controller"))]
pub type Set = ReplicaSet;
#[cfg(feature = "replication-controller")]
pub type Set = ReplicationController;

/// `apiVersion` and `kind` of the controller references put on pods.
#[cfg(not(feature = "replication-controller"))]
pub const OWNER: (&str, &str) = ("apps/v1", "ReplicaSet");
#[cfg(feature = "replication-controller")]
pub const OWNER: (&str, &str) = ("v1", "ReplicationController");

/// The reconciled object as the ReplicaSet the controller works on.
#[cfg(not(feature = "replication-controller"))]
pub fn as_replicaset(set: Arc<Set>) -> Arc<ReplicaSet> {
    set
}

/// `conversion.go`'s `convertRCtoRS`: the same metadata, the selector as
/// `matchLabels`, the template, replicas and minReadySeconds; the status
/// with its conditions (RC and RS conditions have the same fields).
#[cfg(feature = "replication-controller")]
pub fn as_replicaset(rc: Arc<Set>) -> Arc<ReplicaSet> {
    Arc::new(convert(&rc))
}

#[cfg(any(test, feature = "replication-controller"))]
pub fn convert(rc: &k8s_openapi::api::core::v1::ReplicationController) -> ReplicaSet {
    use serde_json::json;
    let spec = rc.spec.clone().unwrap_or_default();
    let status = serde_json::to_value(&rc.status).unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": rc.metadata,
        "spec": {
            "replicas": spec.replicas,
            "minReadySeconds": spec.min_ready_seconds,
            "selector": {"matchLabels": spec.selector.unwrap_or_default()},
            "template": spec.template,
        },
        "status": status,
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_replication_controller_reads_as_a_replicaset_with_match_labels() {
        let rc: k8s_openapi::api::core::v1::ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u", "generation": 2},
            "spec": {"replicas": 3, "selector": {"app": "web"},
                "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"replicas": 1, "readyReplicas": 1, "conditions": [
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]}}))
        .unwrap();
        let rs = super::convert(&rc);
        assert_eq!(rs.metadata.uid.as_deref(), Some("u"));
        let spec = rs.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(
            spec.selector.match_labels,
            Some([("app".to_string(), "web".to_string())].into())
        );
        let status = rs.status.unwrap();
        assert_eq!(status.ready_replicas, Some(1));
        assert_eq!(
            status.conditions.unwrap()[0].reason.as_deref(),
            Some("FailedCreate")
        );
    }
}
