//! Which nodes a DaemonSet's pod belongs on, as upstream's
//! `NodeShouldRunDaemonPod`: the pod (with the daemon tolerations added)
//! must match the node's labels (`nodeSelector`, required node affinity,
//! including `matchFields` on `metadata.name`) and tolerate its `NoSchedule`
//! and `NoExecute` taints to be placed there; a pod already there stays while
//! it tolerates the `NoExecute` ones.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

/// Upstream's `AddOrUpdateDaemonPodTolerations`: a daemon pod rides out the
/// node conditions that evict or keep out other pods.
pub fn daemon_tolerations(spec: &mut PodSpec) {
    let mut add = |key: &str, effect: &str| {
        let list = spec.tolerations.get_or_insert_with(Vec::new);
        if !list.iter().any(|t| {
            t.key.as_deref() == Some(key)
                && t.operator.as_deref() == Some("Exists")
                && t.effect.as_deref() == Some(effect)
        }) {
            list.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Default::default()
            });
        }
    };
    add("node.kubernetes.io/not-ready", "NoExecute");
    add("node.kubernetes.io/unreachable", "NoExecute");
    add("node.kubernetes.io/disk-pressure", "NoSchedule");
    add("node.kubernetes.io/memory-pressure", "NoSchedule");
    add("node.kubernetes.io/pid-pressure", "NoSchedule");
    add("node.kubernetes.io/unschedulable", "NoSchedule");
    if spec.host_network == Some(true) {
        add("node.kubernetes.io/network-unavailable", "NoSchedule");
    }
}

/// `v1helper.TolerationsTolerateTaint` for one toleration.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    match t.operator.as_deref() {
        Some("Exists") => t
            .key
            .as_deref()
            .is_none_or(|k| k.is_empty() || k == taint.key),
        _ => {
            t.key.as_deref() == Some(taint.key.as_str())
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// Whether `spec` tolerates every taint of `node` with one of `effects`.
fn tolerates_taints(spec: &PodSpec, node: &Node, effects: &[&str]) -> bool {
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(number),
                values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// A `NodeSelectorTerm`: its label expressions and field expressions all
/// hold; an empty term matches nothing (upstream's).
fn term(t: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let v = (r.key == "metadata.name").then_some(name);
            requirement(r, v)
        })
}

/// `nodeSelector` and required node affinity (any term) against `node`.
fn matches_node(spec: &PodSpec, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or("");
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let affinity_ok = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_none_or(|r| r.node_selector_terms.iter().any(|t| term(t, labels, name)));
    selector_ok && affinity_ok
}

/// (should run, should continue running) for a daemon pod with `spec` (the
/// daemon tolerations added) on `node`.
pub fn should_run(spec: &PodSpec, node: &Node) -> (bool, bool) {
    if node.metadata.deletion_timestamp.is_some() || !matches_node(spec, node) {
        return (false, false);
    }
    (
        tolerates_taints(spec, node, &["NoSchedule", "NoExecute"]),
        tolerates_taints(spec, node, &["NoExecute"]),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn node(v: Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn spec(v: Value) -> PodSpec {
        let mut s: PodSpec = serde_json::from_value(v).unwrap();
        daemon_tolerations(&mut s);
        s
    }

    #[test]
    fn node_selector_affinity_and_taints_decide() {
        let wasm = node(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/os": "wasi"}},
            "spec": {"taints": [{"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoSchedule"}]}}),
        );
        let plain = json!({"containers": []});
        // The wasm taint is not tolerated: not placed, but not evicted either.
        assert_eq!(should_run(&spec(plain), &wasm), (false, true));
        let tolerant = json!({"containers": [],
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}]});
        assert_eq!(should_run(&spec(tolerant.clone()), &wasm), (true, true));
        let mut other_os = tolerant.clone();
        other_os["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        assert_eq!(should_run(&spec(other_os), &wasm), (false, false));
        let mut by_name = tolerant.clone();
        by_name["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["wasi"]}]}]}}});
        assert_eq!(should_run(&spec(by_name.clone()), &wasm), (true, true));
        by_name["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array_mut()
            .unwrap()
            .pop();
        assert_eq!(should_run(&spec(by_name), &wasm), (false, false));
        // An unschedulable node (cordoned) still runs daemon pods; a NoExecute
        // taint nobody tolerates evicts them.
        let cordoned = node(
            json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true,
            "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(
            should_run(&spec(json!({"containers": []})), &cordoned),
            (true, true)
        );
        let evicting = node(json!({"metadata": {"name": "n1"}, "spec": {
            "taints": [{"key": "drain", "value": "now", "effect": "NoExecute"}]}}));
        assert_eq!(
            should_run(&spec(json!({"containers": []})), &evicting),
            (false, false)
        );
    }
}
