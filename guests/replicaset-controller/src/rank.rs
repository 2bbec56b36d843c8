//! Which pods go first when a ReplicaSet scales down: upstream's
//! `ActivePodsWithRanks` order (`getPodsToDelete`), least valuable first.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use wasmlet_sdk::controllers::{pod_condition, pod_ready};

/// The annotation that lets users say which pods to delete first.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn node(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn phase_rank(p: &Pod) -> u8 {
    match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn cost(p: &Pod) -> i32 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ready_since(p: &Pod) -> Option<Timestamp> {
    pod_condition(p, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| {
            cs.iter().map(|c| c.restart_count).max().unwrap_or(0)
        })
}

fn created(p: &Pod) -> Option<Timestamp> {
    p.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// `afterOrZero` with `LogarithmicScaleDown` (on by default upstream): a
/// missing time first, then the more recent one by powers of two of its age.
fn later_first(a: Option<Timestamp>, b: Option<Timestamp>, now: Timestamp) -> Ordering {
    let bucket = |t: Timestamp| {
        let ns = now.duration_since(t).as_nanos().max(1);
        // floor(log2(age in ns))
        127 - ns.leading_zeros()
    };
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) if x == y => Ordering::Equal,
        (Some(x), Some(y)) => bucket(x).cmp(&bucket(y)),
    }
}

/// Upstream's `ActivePodsWithRanks.Less`: whether `a` should be deleted before `b`.
fn before(a: &Pod, b: &Pod, rank_a: usize, rank_b: usize, now: Timestamp) -> Ordering {
    // 1. Unassigned before assigned.
    let by_node = (!node(a).is_empty()).cmp(&!node(b).is_empty());
    // 2. Pending < Unknown < Running.
    let by_phase = phase_rank(a).cmp(&phase_rank(b));
    // 3. Not ready before ready.
    let by_ready = pod_ready(a).cmp(&pod_ready(b));
    // 4. Lower deletion cost first.
    let by_cost = cost(a).cmp(&cost(b));
    // 5. More doubled-up pods (on the same node) first.
    let by_rank = rank_b.cmp(&rank_a);
    // 6. Ready for less time first (both ready).
    let by_since = if pod_ready(a) && pod_ready(b) {
        later_first(ready_since(a), ready_since(b), now)
    } else {
        Ordering::Equal
    };
    // 7. More restarts first.
    let by_restarts = restarts(b).cmp(&restarts(a));
    // 8. Newer first (a missing creation time first of all).
    let by_age = later_first(created(a), created(b), now);
    by_node
        .then(by_phase)
        .then(by_ready)
        .then(by_cost)
        .then(by_rank)
        .then(by_since)
        .then(by_restarts)
        .then(by_age)
}

/// The `diff` pods of `pods` to delete. `related` are the active pods of
/// every set with the same owner (a Deployment's ReplicaSets, this one's
/// included; just `pods` for a set without owner): a pod whose node holds
/// more of them goes first, spreading what is left.
pub fn pods_to_delete<'a>(
    pods: &'a [Pod],
    related: &[Pod],
    diff: usize,
    now: Timestamp,
) -> Vec<&'a Pod> {
    if diff >= pods.len() {
        return pods.iter().collect();
    }
    let mut on_node: BTreeMap<&str, usize> = BTreeMap::new();
    for p in related {
        if !node(p).is_empty() {
            *on_node.entry(node(p)).or_default() += 1;
        }
    }
    let rank = |p: &Pod| {
        if node(p).is_empty() {
            0
        } else {
            on_node.get(node(p)).copied().unwrap_or(0)
        }
    };
    let mut ranked: Vec<(&Pod, usize)> = pods.iter().map(|p| (p, rank(p))).collect();
    ranked.sort_by(|(a, ra), (b, rb)| before(a, b, *ra, *rb, now));
    ranked.into_iter().take(diff).map(|(p, _)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, ready: bool, created: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": [{"type": "Ready",
                "status": if ready {"True"} else {"False"}, "lastTransitionTime": created}]},
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T02:00:00Z".parse().unwrap()
    }

    fn names(ps: Vec<&Pod>) -> Vec<&str> {
        ps.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn unscheduled_pending_unready_and_newer_pods_go_first() {
        let old = "2026-01-01T00:00:00Z";
        // Two hours vs 50 minutes old: different powers of two.
        let new = "2026-01-01T01:10:00Z";
        let pods = [
            pod("running-old", "n1", "Running", true, old),
            pod("running-new", "n1", "Running", true, new),
            pod("unready", "n1", "Running", false, old),
            pod("pending", "n1", "Pending", false, old),
            pod("unscheduled", "", "Pending", false, old),
        ];
        assert_eq!(
            names(pods_to_delete(&pods, &pods, 4, now())),
            ["unscheduled", "pending", "unready", "running-new"]
        );
    }

    #[test]
    fn deletion_cost_and_doubled_up_nodes_decide_among_equals() {
        let t = "2026-01-01T00:00:00Z";
        let mut cheap = pod("cheap", "n1", "Running", true, t);
        cheap.metadata.annotations = Some([(DELETION_COST.to_string(), "-5".to_string())].into());
        let pods = [
            pod("alone", "n1", "Running", true, t),
            pod("crowded", "n2", "Running", true, t),
            cheap,
        ];
        let related = [
            pod("x", "n2", "Running", true, t),
            pod("y", "n2", "Running", true, t),
        ];
        assert_eq!(
            names(pods_to_delete(&pods, &related, 2, now())),
            ["cheap", "crowded"]
        );
    }
}
