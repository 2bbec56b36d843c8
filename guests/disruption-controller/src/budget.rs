//! A budget's status from its pods, as upstream's `trySync`: expected and
//! desired counts (`getExpectedPodCount`), the disrupted-pod map the Eviction
//! API feeds (`buildDisruptedPodMap`), healthy pods (`countHealthyPods`) and
//! the `DisruptionAllowed` condition (`UpdateDisruptionAllowedCondition`).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use wasmlet_sdk::controllers::{controller_of, pod_ready, scaled_value};

/// How long a pod the Eviction API recorded in `disruptedPods` counts as
/// going away (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// The scale of the controller named by a pod's controller reference, with the
/// controller's uid (so two pods of one controller count it once); `Ok(None)`
/// when no supported controller by that reference exists.
pub trait Scales {
    fn scale_of(
        &mut self,
        namespace: &str,
        owner: &OwnerReference,
    ) -> Result<Option<(String, i32)>, String>;
}

/// What the controller computed, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computed {
    pub expected_pods: i32,
    pub desired_healthy: i32,
    pub current_healthy: i32,
    pub disruptions_allowed: i32,
    /// Pod name → the eviction time the Eviction API recorded.
    pub disrupted_pods: BTreeMap<String, Time>,
    /// Pods without a controller (an event says the percentage is unreliable).
    pub unmanaged: Vec<String>,
    /// Recorded pods whose 2 minutes passed without a deletion.
    pub expired: Vec<String>,
    /// When the earliest still-counted disruption expires: reconcile again then.
    pub recheck: Option<Timestamp>,
}

/// `getExpectedPodCount` + `getExpectedScale`: `(expected, desired, unmanaged)`.
pub fn expected_counts<P: Borrow<Pod>>(
    pdb: &PodDisruptionBudget,
    pods: &[P],
    scales: &mut dyn Scales,
) -> Result<(i32, i32, Vec<String>), String> {
    let spec = pdb.spec.as_ref();
    if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        let (expected, unmanaged) = expected_scale(pdb, pods, scales)?;
        let max = scaled_value(max, expected, true)?;
        Ok((expected, (expected - max).max(0), unmanaged))
    } else if let Some(min) = spec.and_then(|s| s.min_available.as_ref()) {
        match min {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => {
                Ok((len(pods), *i, vec![]))
            }
            pct => {
                let (expected, unmanaged) = expected_scale(pdb, pods, scales)?;
                Ok((expected, scaled_value(pct, expected, true)?, unmanaged))
            }
        }
    } else {
        // Validation requires one of the two; upstream leaves both counts at 0.
        Ok((0, 0, vec![]))
    }
}

fn len<P>(pods: &[P]) -> i32 {
    i32::try_from(pods.len()).unwrap_or(i32::MAX)
}

/// The sum of the scales of the pods' controllers, each counted once.
fn expected_scale<P: Borrow<Pod>>(
    pdb: &PodDisruptionBudget,
    pods: &[P],
    scales: &mut dyn Scales,
) -> Result<(i32, Vec<String>), String> {
    let ns = pdb.metadata.namespace.clone().unwrap_or_default();
    let mut seen_refs: BTreeSet<String> = BTreeSet::new();
    let mut by_controller: BTreeMap<String, i32> = BTreeMap::new();
    let mut unmanaged = vec![];
    for p in pods.iter().map(Borrow::borrow) {
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(owner) = controller_of(&p.metadata) else {
            unmanaged.push(name);
            continue;
        };
        if !seen_refs.insert(owner.uid.clone()) {
            continue;
        }
        match scales.scale_of(&ns, owner)? {
            Some((uid, scale)) => {
                by_controller.insert(uid, scale);
            }
            None => return Err(format!("found no controllers for pod {name:?}")),
        }
    }
    Ok((by_controller.values().sum(), unmanaged))
}

/// Everything but the expected counts: which recorded disruptions still
/// count, how many pods are healthy, and how many may go.
pub fn compute<P: Borrow<Pod>>(
    pdb: &PodDisruptionBudget,
    pods: &[P],
    (expected_pods, desired_healthy, unmanaged): (i32, i32, Vec<String>),
    now: Timestamp,
) -> Computed {
    let recorded = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    let mut disrupted_pods = BTreeMap::new();
    let mut expired = vec![];
    let mut recheck: Option<Timestamp> = None;
    let mut current_healthy = 0;
    for p in pods.iter().map(Borrow::borrow) {
        // Being deleted: neither healthy nor a pending disruption.
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(at) = recorded.and_then(|r| r.get(&name)) {
            let until = at.0 + DELETION_TIMEOUT;
            if until < now {
                expired.push(name);
            } else {
                recheck = Some(recheck.map_or(until, |r| r.min(until)));
                disrupted_pods.insert(name, at.clone());
                continue;
            }
        }
        if pod_ready(p) {
            current_healthy += 1;
        }
    }
    // A budget that matches no pods yet stays safe when its first pods appear.
    let allowed = current_healthy - desired_healthy;
    let disruptions_allowed = if expected_pods <= 0 || allowed <= 0 {
        0
    } else {
        allowed
    };
    Computed {
        expected_pods,
        desired_healthy,
        current_healthy,
        disruptions_allowed,
        disrupted_pods,
        unmanaged,
        expired,
        recheck,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    struct Fixed(Vec<(String, i32)>);

    impl Scales for Fixed {
        fn scale_of(
            &mut self,
            _ns: &str,
            owner: &OwnerReference,
        ) -> Result<Option<(String, i32)>, String> {
            Ok(self
                .0
                .iter()
                .find(|(uid, _)| *uid == owner.uid)
                .map(|(u, s)| (u.clone(), *s)))
        }
    }

    fn pdb(spec: Value, status: Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "ns", "generation": 1},
            "spec": spec, "status": status}),
        )
        .unwrap()
    }

    fn pod(name: &str, ready: bool, owner: Option<&str>) -> Pod {
        let mut p = json!({"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
        if let Some(uid) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "rs", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(p).unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    #[test]
    fn integer_min_available_counts_the_pods_themselves() {
        let b = pdb(json!({"minAvailable": 2}), json!({}));
        let pods = [
            pod("a", true, None),
            pod("b", true, None),
            pod("c", false, None),
        ];
        let counts = expected_counts(&b, &pods, &mut Fixed(vec![])).unwrap();
        assert_eq!(counts, (3, 2, vec![]));
        let c = compute(&b, &pods, counts, now());
        assert_eq!((c.current_healthy, c.disruptions_allowed), (2, 0));
    }

    #[test]
    fn max_unavailable_and_percentages_count_the_controllers_scale() {
        let pods = [pod("a", true, Some("u1")), pod("b", true, Some("u1"))];
        let mut scales = Fixed(vec![("u1".into(), 4)]);
        let b = pdb(json!({"maxUnavailable": 1}), json!({}));
        assert_eq!(
            expected_counts(&b, &pods, &mut scales).unwrap(),
            (4, 3, vec![])
        );
        let b = pdb(json!({"maxUnavailable": "30%"}), json!({}));
        // 30% of 4 rounds up to 2 unavailable.
        assert_eq!(
            expected_counts(&b, &pods, &mut scales).unwrap(),
            (4, 2, vec![])
        );
        let b = pdb(json!({"minAvailable": "50%"}), json!({}));
        let counts = expected_counts(&b, &pods, &mut scales).unwrap();
        assert_eq!(counts, (4, 2, vec![]));
        assert_eq!(compute(&b, &pods, counts, now()).disruptions_allowed, 0);
        let orphan = [pod("a", true, Some("gone"))];
        assert_eq!(
            expected_counts(&b, &orphan, &mut scales).unwrap_err(),
            "found no controllers for pod \"a\""
        );
        let bare = [pod("x", true, None), pod("a", true, Some("u1"))];
        assert_eq!(
            expected_counts(&b, &bare, &mut scales).unwrap(),
            (4, 2, vec!["x".to_string()])
        );
    }

    #[test]
    fn disrupted_pods_stop_counting_for_two_minutes() {
        let b = pdb(
            json!({"minAvailable": 1}),
            json!({"disruptedPods": {"a": "2026-01-01T00:09:00Z", "b": "2026-01-01T00:07:00Z",
                "gone": "2026-01-01T00:09:30Z"}}),
        );
        let pods = [
            pod("a", true, None),
            pod("b", true, None),
            pod("c", true, None),
        ];
        let counts = expected_counts(&b, &pods, &mut Fixed(vec![])).unwrap();
        let c = compute(&b, &pods, counts, now());
        // a still counts as going away; b's 2 minutes are over; gone is gone.
        assert_eq!(c.disrupted_pods.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(c.expired, ["b"]);
        assert_eq!((c.current_healthy, c.disruptions_allowed), (2, 1));
        assert_eq!(c.recheck, Some("2026-01-01T00:11:00Z".parse().unwrap()));
    }

    #[test]
    fn no_expected_pods_allows_nothing() {
        let b = pdb(json!({"maxUnavailable": 1}), json!({}));
        let counts = expected_counts::<Pod>(&b, &[], &mut Fixed(vec![])).unwrap();
        let c = compute::<Pod>(&b, &[], counts, now());
        assert_eq!(
            (c.expected_pods, c.desired_healthy, c.disruptions_allowed),
            (0, 0, 0)
        );
    }
}
