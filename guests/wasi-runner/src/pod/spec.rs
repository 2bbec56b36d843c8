//! Reads of the Pod object itself: its spec, containers, identity and the policies
//! (restart, grace period) the states act on.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use wasmlet_sdk::provider::{Pod, StateError};

/// The pod's spec (every pod has one; a missing one is a handler error).
pub fn spec(pod: &Pod) -> Result<&PodSpec, StateError> {
    pod.spec
        .as_ref()
        .ok_or_else(|| StateError::new("the pod has no spec"))
}

/// A container or init container of the pod, by name.
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

pub fn pod_uid(pod: &Pod) -> String {
    pod.metadata
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}/{}", namespace(pod), name(pod)))
}

pub fn namespace(pod: &Pod) -> String {
    pod.metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned())
}

pub fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// `name_namespace(uid)`, as kubelet names a pod in messages.
pub fn pod_key(pod: &Pod) -> String {
    format!("{}_{}({})", name(pod), namespace(pod), pod_uid(pod))
}

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

pub fn restart_policy(pod: &Pod) -> RestartPolicy {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => RestartPolicy::Never,
        Some("OnFailure") => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    }
}

/// Whether a main container that exited with `code` is started again.
pub fn should_restart(policy: RestartPolicy, code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}

/// The grace period of a deleted pod: the delete's, else the spec's, else 30 s.
pub fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}
