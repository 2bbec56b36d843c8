//! A set's pods: their identity (`SET-ORDINAL`, hostname, subdomain, labels),
//! how one is made from a revision's template, and upstream's predicates on
//! them (running and ready, available, terminating, finished).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::revision::owner;

/// The pod's revision: the name of the ControllerRevision it was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal in `pod`'s name if it is `SET-N` (upstream's `getParentNameAndOrdinal`).
pub fn ordinal(set_name: &str, pod_name: &str) -> Option<i32> {
    let (parent, n) = pod_name.rsplit_once('-')?;
    if parent != set_name || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

pub fn name_of(set_name: &str, ordinal: i32) -> String {
    format!("{set_name}-{ordinal}")
}

pub fn revision_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(REVISION_LABEL)
        .map(String::as_str)
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn is_failed(pod: &Pod) -> bool {
    phase(pod) == Some("Failed")
}

pub fn is_succeeded(pod: &Pod) -> bool {
    phase(pod) == Some("Succeeded")
}

/// The pod's Ready condition's transition time, when Ready is True.
fn ready_since(pod: &Pod) -> Option<Option<jiff::Timestamp>> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (c.status == "True").then(|| c.last_transition_time.as_ref().map(|t| t.0))
}

pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == Some("Running") && ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now` (upstream's `isRunningAndAvailable`).
pub fn is_running_and_available(pod: &Pod, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    if phase(pod) != Some("Running") {
        return false;
    }
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => {
            since + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds)) <= now
        }
    }
}

/// How long until a ready pod becomes available, if it is not yet.
pub fn until_available(
    pod: &Pod,
    min_ready_seconds: i32,
    now: jiff::Timestamp,
) -> Option<std::time::Duration> {
    if min_ready_seconds <= 0 || !is_running_and_ready(pod) {
        return None;
    }
    let since = ready_since(pod)??;
    let at = since + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds));
    let left = now.duration_until(at);
    (left.is_positive()).then(|| left.unsigned_abs())
}

/// Running and ready and not being deleted (upstream's `isHealthy`).
pub fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

/// Whether the pod carries its identity (upstream's `identityMatches`, the
/// labels part: hostname and subdomain are immutable once created).
pub fn identity_matches(set: &StatefulSet, pod: &Pod, ordinal: i32) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    name == name_of(set.metadata.name.as_deref().unwrap_or_default(), ordinal)
        && pod.metadata.namespace == set.metadata.namespace
        && label(POD_NAME_LABEL) == Some(name)
        && label(POD_INDEX_LABEL) == Some(ordinal.to_string().as_str())
}

/// Upstream's `newVersionedStatefulSetPod` for a chosen template: the pod
/// `SET-ORDINAL` from `template`, labelled with `revision` and its identity,
/// owned by the set, with hostname = its name and subdomain = `serviceName`.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: i32) -> Pod {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let name = name_of(&set_name, ordinal);
    let tmeta = template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tmeta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![owner(set)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    pub fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    /// A pod `NAME` at `revision` in `phase`, Ready when `ready`, Ready since `since`.
    pub fn pod_at(name: &str, revision: &str, phase: &str, ready: bool) -> Pod {
        pod(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "labels": {REVISION_LABEL: revision, POD_NAME_LABEL: name,
                    POD_INDEX_LABEL: name.rsplit_once('-').unwrap().1}},
            "status": {"phase": phase, "conditions": [{"type": "Ready",
                "status": if ready {"True"} else {"False"},
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
    }

    #[test]
    fn ordinals_come_from_names_of_this_set_only() {
        assert_eq!(ordinal("web", "web-0"), Some(0));
        assert_eq!(ordinal("web", "web-12"), Some(12));
        assert_eq!(ordinal("web-1", "web-1-3"), Some(3));
        assert_eq!(ordinal("web", "web-1-3"), None);
        assert_eq!(ordinal("web", "web-"), None);
        assert_eq!(ordinal("web", "web-x"), None);
        assert_eq!(ordinal("web", "db-0"), None);
    }

    #[test]
    fn availability_waits_min_ready_seconds_after_ready() {
        let p = pod_at("web-0", "r", "Running", true);
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later = t0 + jiff::SignedDuration::from_secs(10);
        assert!(is_running_and_ready(&p));
        assert!(is_running_and_available(&p, 0, t0));
        assert!(!is_running_and_available(&p, 10, t0));
        assert!(is_running_and_available(&p, 10, later));
        assert_eq!(
            until_available(&p, 10, t0),
            Some(std::time::Duration::from_secs(10))
        );
        assert_eq!(until_available(&p, 10, later), None);
        assert!(!is_running_and_ready(&pod_at(
            "web-0", "r", "Pending", true
        )));
        assert!(!is_running_and_ready(&pod_at(
            "web-0", "r", "Running", false
        )));
    }

    #[test]
    fn a_new_pod_has_the_identity_labels_owner_hostname_and_subdomain() {
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"selector": {}, "serviceName": "svc", "template": {}},
        }))
        .unwrap();
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        let p = new_pod(&set, &template, "web-abc", 2);
        assert_eq!(p.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        let l = p.metadata.labels.clone().unwrap();
        assert_eq!(l["app"], "web");
        assert_eq!(l[REVISION_LABEL], "web-abc");
        assert_eq!(l[POD_NAME_LABEL], "web-2");
        assert_eq!(l[POD_INDEX_LABEL], "2");
        let spec = p.spec.clone().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("svc"));
        let o = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("StatefulSet", "u1", Some(true))
        );
        assert!(identity_matches(&set, &p, 2));
        assert!(!identity_matches(&set, &p, 3));
    }
}
