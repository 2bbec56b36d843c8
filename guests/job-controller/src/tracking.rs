//! Counting each finished pod exactly once, as upstream's job controller
//! does (`trackJobStatusAndRemoveFinalizers`): every pod is created with
//! the `batch.kubernetes.io/job-tracking` finalizer, so it cannot vanish
//! before it is counted. A finished pod's uid is first recorded in
//! `status.uncountedTerminatedPods` (a status write, guarded by the Job's
//! resourceVersion), then its finalizer is removed, then the uid moves into
//! `succeeded`/`failed` in the Job's next status write. A crash between any
//! two steps repeats the step, never the count: a uid already recorded is
//! not recorded again, a pod already released is not released again.
//!
//! The pod cache may lag our own finalizer removals: pods released by this
//! instance are remembered (upstream's finalizer expectations) until the
//! cache shows them released or gone, so a stale copy is never recounted.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

pub const FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Job uid → uids of the pods whose finalizer this instance removed.
static RELEASED: LazyLock<Mutex<HashMap<String, HashSet<String>>>> =
    LazyLock::new(Default::default);

/// How a pod counts for its Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Succeeded,
    Failed,
    /// Deleted by the Job's own winding down: released, not counted.
    Dropped,
}

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

pub fn tracked(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// A pod being deleted counts as failed unless it succeeded (upstream's
/// `TerminatingOrFailed` replacement policy; with `Failed`, only once its
/// phase says so). `winding_down`: the Job deletes its own pods.
pub fn outcome(p: &Pod, replace_failed_only: bool, winding_down: bool) -> Outcome {
    match phase(p) {
        "Succeeded" => Outcome::Succeeded,
        "Failed" if winding_down => Outcome::Dropped,
        "Failed" => Outcome::Failed,
        _ if p.metadata.deletion_timestamp.is_none() => Outcome::Running,
        _ if winding_down => Outcome::Dropped,
        _ if replace_failed_only => Outcome::Running,
        _ => Outcome::Failed,
    }
}

/// The recorded (not yet counted) uids of a Job: (succeeded, failed).
pub fn uncounted(job: &Job) -> (BTreeSet<String>, BTreeSet<String>) {
    let u = job
        .status
        .as_ref()
        .and_then(|s| s.uncounted_terminated_pods.as_ref());
    let set = |l: Option<&Vec<String>>| l.into_iter().flatten().cloned().collect();
    (
        set(u.and_then(|u| u.succeeded.as_ref())),
        set(u.and_then(|u| u.failed.as_ref())),
    )
}

/// Whether this instance released `pod` of `job` already.
pub fn released(job: &str, pod: &str) -> bool {
    RELEASED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(job)
        .is_some_and(|s| s.contains(pod))
}

pub fn remember_released(job: &str, pod: &str) {
    RELEASED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(job.to_string())
        .or_default()
        .insert(pod.to_string());
}

/// Forgets the releases the cache now shows: `still_tracked` are the uids
/// of the Job's pods that still carry the finalizer in the cache.
pub fn settle(job: &str, still_tracked: &HashSet<String>) {
    let mut map = RELEASED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = map.get_mut(job) {
        s.retain(|u| still_tracked.contains(u));
        if s.is_empty() {
            map.remove(job);
        }
    }
}

/// The JSON patch removing the finalizer at `index` of `pod`, guarded by
/// a test of both (a concurrent change makes it fail, not remove another).
pub fn release_patch(pod: &Pod) -> Option<serde_json::Value> {
    let index = pod
        .metadata
        .finalizers
        .as_ref()?
        .iter()
        .position(|f| f == FINALIZER)?;
    let path = format!("/metadata/finalizers/{index}");
    Some(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "test", "path": path, "value": FINALIZER},
        {"op": "remove", "path": path},
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str, deleting: bool) -> Pod {
        let mut p = json!({"metadata": {"uid": "p", "finalizers": ["x", FINALIZER]},
            "status": {"phase": phase}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(p).unwrap()
    }

    #[test]
    fn outcomes_follow_the_phase_and_the_replacement_policy() {
        assert_eq!(
            outcome(&pod("Running", false), false, false),
            Outcome::Running
        );
        assert_eq!(
            outcome(&pod("Succeeded", true), false, false),
            Outcome::Succeeded
        );
        assert_eq!(
            outcome(&pod("Failed", false), false, false),
            Outcome::Failed
        );
        assert_eq!(
            outcome(&pod("Running", true), false, false),
            Outcome::Failed
        );
        assert_eq!(
            outcome(&pod("Running", true), true, false),
            Outcome::Running
        );
        assert_eq!(
            outcome(&pod("Running", true), false, true),
            Outcome::Dropped
        );
    }

    #[test]
    fn the_release_patch_names_the_finalizer_by_index_and_tests_it() {
        let p = release_patch(&pod("Succeeded", false)).unwrap();
        assert_eq!(
            p[1],
            json!({"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER})
        );
        assert_eq!(p[2]["op"], "remove");
    }

    #[test]
    fn a_released_pod_is_remembered_until_the_cache_shows_it() {
        remember_released("job-a", "p1");
        assert!(released("job-a", "p1"));
        settle("job-a", &HashSet::from(["p1".to_string()]));
        assert!(
            released("job-a", "p1"),
            "the cache still shows the finalizer"
        );
        settle("job-a", &HashSet::new());
        assert!(!released("job-a", "p1"));
    }
}
