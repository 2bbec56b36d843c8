//! Picking among the feasible nodes: kube-scheduler's NodeResourcesFit
//! `LeastAllocated` (cpu and memory, equal weights, weight 1) plus
//! TaintToleration (fewer untolerated `PreferNoSchedule` taints, weight 3).
//! Deviation: upstream picks randomly among equal scores; here the first node
//! by name wins, so placements are reproducible.

use k8s_openapi::api::core::v1::{Pod, Toleration};

use crate::fit::{NodeInfo, nonzero, pod_requests, tolerates};

const MAX_SCORE: i128 = 100;

/// 0..=100: how much of the node stays free with `pod` on it.
pub fn least_allocated(pod: &Pod, info: &NodeInfo) -> i128 {
    let (alloc, _) = info.allocatable();
    let want = nonzero(pod_requests(pod));
    let one = |capacity: i128, requested: i128| {
        if capacity <= 0 || requested > capacity {
            0
        } else {
            (capacity - requested) * MAX_SCORE / capacity
        }
    };
    let cpu = one(
        alloc.cpu_milli,
        info.nonzero_requested.cpu_milli + want.cpu_milli,
    );
    let mem = one(alloc.memory, info.nonzero_requested.memory + want.memory);
    (cpu + mem) / 2
}

/// `PreferNoSchedule` taints of the node that `pod` does not tolerate.
pub fn intolerable_prefer_no_schedule(pod: &Pod, info: &NodeInfo) -> usize {
    let tolerations: Vec<&Toleration> = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            t.effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
        })
        .collect();
    info.node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        .count()
}

/// The best of `feasible` for `pod` (`None` when empty).
pub fn best<'a>(pod: &Pod, feasible: &'a [NodeInfo<'a>]) -> Option<&'a NodeInfo<'a>> {
    let taints: Vec<usize> = feasible
        .iter()
        .map(|n| intolerable_prefer_no_schedule(pod, n))
        .collect();
    let worst = taints.iter().copied().max().unwrap_or(0) as i128;
    let score = |i: usize| {
        // Upstream's NormalizeScore, reversed: the fewest taints score 100.
        let taint = if worst == 0 {
            MAX_SCORE
        } else {
            MAX_SCORE * (worst - taints[i] as i128) / worst
        };
        least_allocated(pod, &feasible[i]) + 3 * taint
    };
    (0..feasible.len())
        .max_by(|&a, &b| {
            score(a)
                .cmp(&score(b))
                .then_with(|| feasible[b].name().cmp(feasible[a].name()))
        })
        .map(|i| &feasible[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::tests::{node, pod};
    use serde_json::json;

    #[test]
    fn the_least_allocated_node_wins_and_ties_go_by_name() {
        let small = node(
            json!({"metadata": {"name": "a-small"}, "status": {"allocatable": {"cpu": "1", "memory": "1Gi"}}}),
        );
        let big = node(
            json!({"metadata": {"name": "b-big"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}),
        );
        let twin = node(
            json!({"metadata": {"name": "c-big"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}),
        );
        let p = pod(json!({}));
        let infos = [
            NodeInfo::new(&twin, &[]),
            NodeInfo::new(&small, &[]),
            NodeInfo::new(&big, &[]),
        ];
        assert_eq!(best(&p, &infos).unwrap().name(), "b-big");
        // b-big gets busier: c-big now has more free.
        let mut busy = pod(
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}),
        );
        busy.spec.as_mut().unwrap().node_name = Some("b-big".into());
        let bound = [busy];
        let infos = [NodeInfo::new(&big, &bound), NodeInfo::new(&twin, &bound)];
        assert_eq!(best(&p, &infos).unwrap().name(), "c-big");
        assert!(best(&p, &[]).is_none());
    }

    #[test]
    fn prefer_no_schedule_only_scores() {
        let soft = node(
            json!({"metadata": {"name": "a"}, "spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}}),
        );
        let plain = node(json!({"metadata": {"name": "b"}}));
        let p = pod(json!({}));
        let infos = [NodeInfo::new(&soft, &[]), NodeInfo::new(&plain, &[])];
        assert_eq!(best(&p, &infos).unwrap().name(), "b");
        assert!(
            crate::fit::fits(&p, &infos[0]).is_ok(),
            "a PreferNoSchedule taint filters nothing"
        );
        let tolerant = pod(json!({"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}));
        assert_eq!(best(&tolerant, &infos).unwrap().name(), "a");
    }
}
