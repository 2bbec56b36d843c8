//! One scheduling decision: which pods are this scheduler's, and where one goes
//! (or upstream's FitError message when it goes nowhere).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::fit::{NodeInfo, Reason, Usage, fits};
use crate::score::best;

/// The scheduler name this plugin serves (and the one a pod gets by default).
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Whether `pod` waits for this scheduler: not bound, not being deleted, not
/// finished, and meant for the default scheduler.
pub fn wants_scheduling(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    spec.node_name.as_deref().unwrap_or_default().is_empty()
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
        && spec
            .scheduler_name
            .as_deref()
            .is_none_or(|s| s.is_empty() || s == SCHEDULER_NAME)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Bind(String),
    /// Upstream's message, e.g. `0/2 nodes are available: 1 Insufficient memory,
    /// 1 node(s) had untolerated taint {k: v}.`
    Unschedulable(String),
}

/// Where `pod` goes among `nodes`, given what is already bound to each
/// (`usage`, by node name; a node missing there has nothing bound).
pub fn decide<'a>(
    pod: &Pod,
    nodes: impl IntoIterator<Item = &'a Node>,
    usage: &HashMap<String, Usage>,
) -> Decision {
    let mut feasible = vec![];
    let mut reasons: BTreeMap<Reason, usize> = BTreeMap::new();
    let mut all = 0;
    for n in nodes {
        all += 1;
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let info = NodeInfo::with_usage(n, usage.get(name).copied().unwrap_or_default());
        match fits(pod, &info) {
            Ok(()) => feasible.push(info),
            Err(rs) => {
                for r in rs {
                    *reasons.entry(r).or_default() += 1;
                }
            }
        }
    }
    match best(pod, &feasible) {
        Some(n) => Decision::Bind(n.name().to_string()),
        None => Decision::Unschedulable(fit_error(all, &reasons)),
    }
}

/// Upstream's `FitError.Error()` without the preemption part (this scheduler
/// does not preempt): reasons with their node counts, sorted as strings.
pub fn fit_error(all: usize, reasons: &BTreeMap<Reason, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    if parts.is_empty() {
        format!("0/{all} nodes are available.")
    } else {
        format!("0/{all} nodes are available: {}.", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::tests::{node, pod};
    use serde_json::json;

    #[test]
    fn the_message_counts_reasons_per_node_as_upstream() {
        let tainted = node(json!({"metadata": {"name": "wasm"}, "spec": {"taints": [
            {"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoSchedule"}]}}));
        let small = node(
            json!({"metadata": {"name": "small"}, "status": {"allocatable": {"memory": "1Mi"}}}),
        );
        let p = pod(
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]}}),
        );
        assert_eq!(
            decide(&p, &[tainted, small], &HashMap::new()),
            Decision::Unschedulable(
                "0/2 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint {kubernetes.io/arch: wasm32-wasi}.".into()
            )
        );
        assert_eq!(
            decide(&p, &[], &HashMap::new()),
            Decision::Unschedulable("0/0 nodes are available.".into())
        );
    }

    #[test]
    fn a_fitting_node_is_chosen() {
        let n = node(json!({"metadata": {"name": "ok"}}));
        assert_eq!(
            decide(&pod(json!({})), &[n], &HashMap::new()),
            Decision::Bind("ok".into())
        );
    }

    #[test]
    fn only_unbound_live_default_scheduler_pods_are_ours() {
        assert!(wants_scheduling(&pod(json!({}))));
        assert!(wants_scheduling(&pod(
            json!({"spec": {"schedulerName": "default-scheduler"}})
        )));
        assert!(!wants_scheduling(&pod(
            json!({"spec": {"schedulerName": "other"}})
        )));
        assert!(!wants_scheduling(&pod(json!({"spec": {"nodeName": "n"}}))));
        assert!(!wants_scheduling(&pod(
            json!({"status": {"phase": "Failed"}})
        )));
        assert!(!wants_scheduling(&pod(
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
        )));
    }
}
