//! The filters of kube-scheduler's default profile that apply here, in its
//! order: NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector and
//! required node affinity), NodeResourcesFit (pod count, cpu, memory). As
//! upstream, a node reports the reasons of its first failing filter only.
//!
//! Upstream's scheduler reads no node condition: a node that is not Ready
//! carries the `node.kubernetes.io/not-ready` (Ready False) or
//! `node.kubernetes.io/unreachable` (Ready Unknown) `NoSchedule` taint,
//! which the node lifecycle controller adds (and the `TaintNodesByCondition`
//! admission plugin on a new Node). The embedded plane has neither, so
//! TaintToleration here counts those taints on a node whose Ready condition
//! calls for them ([`condition_taint`]): a pod that tolerates them is placed
//! on a NotReady node as upstream places it, any other is not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

use crate::quantity::{parse_milli, parse_units};

/// Why a node does not fit a pod: upstream's reason strings.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Unschedulable,
    UntoleratedTaint { key: String, value: String },
    NodeAffinity,
    TooManyPods,
    InsufficientCpu,
    InsufficientMemory,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::UntoleratedTaint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Reason::NodeAffinity => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::TooManyPods => f.write_str("Too many pods"),
            Reason::InsufficientCpu => f.write_str("Insufficient cpu"),
            Reason::InsufficientMemory => f.write_str("Insufficient memory"),
        }
    }
}

/// Requested cpu (millicores) and memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_milli: i128,
    pub memory: i128,
}

impl Resources {
    fn add(&mut self, o: Resources) {
        self.cpu_milli += o.cpu_milli;
        self.memory += o.memory;
    }
    fn max(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.max(o.cpu_milli),
            memory: self.memory.max(o.memory),
        }
    }
}

fn requests_of(r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) -> Resources {
    let req = r.and_then(|r| r.requests.as_ref());
    let get = |k: &str| req.and_then(|m| m.get(k)).map(|q| q.0.as_str());
    Resources {
        cpu_milli: get("cpu").and_then(parse_milli).unwrap_or(0),
        memory: get("memory").and_then(parse_units).unwrap_or(0),
    }
}

/// What a pod requests as upstream computes it: the sum of its containers,
/// at least its largest init container, plus its overhead.
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = &pod.spec else {
        return Resources::default();
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(requests_of(c.resources.as_ref()));
    }
    for c in spec.init_containers.iter().flatten() {
        sum = sum.max(requests_of(c.resources.as_ref()));
    }
    if let Some(o) = &spec.overhead {
        let get = |k: &str| o.get(k).map(|q| q.0.as_str());
        sum.add(Resources {
            cpu_milli: get("cpu").and_then(parse_milli).unwrap_or(0),
            memory: get("memory").and_then(parse_units).unwrap_or(0),
        });
    }
    sum
}

/// Upstream's `GetNonzeroRequests`: what scoring assumes a pod that requests
/// nothing uses.
pub fn nonzero(r: Resources) -> Resources {
    Resources {
        cpu_milli: if r.cpu_milli == 0 { 100 } else { r.cpu_milli },
        memory: if r.memory == 0 { 200 << 20 } else { r.memory },
    }
}

/// What the pods bound to a node request, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub requested: Resources,
    /// As `requested`, with upstream's defaults for pods that request nothing
    /// (100m cpu, 200Mi memory): what scoring counts.
    pub nonzero_requested: Resources,
    pub pods: i128,
}

impl Usage {
    /// The node `pod` counts against and what it adds there: a bound pod
    /// that has not terminated.
    pub fn of(pod: &Pod) -> Option<(String, Usage)> {
        let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if on.is_empty() || matches!(phase, Some("Succeeded" | "Failed")) {
            return None;
        }
        Some((on.to_string(), Usage::requested_by(pod)))
    }

    /// What `pod` adds to the node it is (or is about to be) bound to.
    pub fn requested_by(pod: &Pod) -> Usage {
        let r = pod_requests(pod);
        Usage {
            requested: r,
            nonzero_requested: nonzero(r),
            pods: 1,
        }
    }

    pub fn add(&mut self, o: &Usage) {
        self.requested.add(o.requested);
        self.nonzero_requested.add(o.nonzero_requested);
        self.pods += o.pods;
    }

    pub fn sub(&mut self, o: &Usage) {
        self.requested.cpu_milli -= o.requested.cpu_milli;
        self.requested.memory -= o.requested.memory;
        self.nonzero_requested.cpu_milli -= o.nonzero_requested.cpu_milli;
        self.nonzero_requested.memory -= o.nonzero_requested.memory;
        self.pods -= o.pods;
    }
}

/// A node with what its bound pods already request.
#[derive(Debug, Clone)]
pub struct NodeInfo<'a> {
    pub node: &'a Node,
    pub requested: Resources,
    /// As `requested`, with upstream's defaults for pods that request nothing
    /// (100m cpu, 200Mi memory): what scoring counts.
    pub nonzero_requested: Resources,
    pub pods: i128,
}

impl<'a> NodeInfo<'a> {
    /// `node` with every pod of `pods` bound to it that has not terminated.
    pub fn new(node: &'a Node, pods: &[Pod]) -> NodeInfo<'a> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let mut usage = Usage::default();
        for (_, u) in pods
            .iter()
            .filter_map(Usage::of)
            .filter(|(on, _)| on == name)
        {
            usage.add(&u);
        }
        NodeInfo::with_usage(node, usage)
    }

    /// `node` with what is already bound to it.
    pub fn with_usage(node: &'a Node, usage: Usage) -> NodeInfo<'a> {
        NodeInfo {
            node,
            requested: usage.requested,
            nonzero_requested: usage.nonzero_requested,
            pods: usage.pods,
        }
    }

    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or_default()
    }

    /// Allocatable cpu (millicores), memory (bytes) and pods.
    pub fn allocatable(&self) -> (Resources, i128) {
        let a = self
            .node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref());
        let get = |k: &str| a.and_then(|m| m.get(k)).map(|q| q.0.as_str());
        (
            Resources {
                cpu_milli: get("cpu").and_then(parse_milli).unwrap_or(0),
                memory: get("memory").and_then(parse_units).unwrap_or(0),
            },
            get("pods").and_then(parse_units).unwrap_or(0),
        )
    }
}

/// `Ok` when `pod` fits `info`, else the reasons of the first failing filter.
pub fn fits(pod: &Pod, info: &NodeInfo) -> Result<(), Vec<Reason>> {
    let node = info.node;
    let tolerations: &[Toleration] = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    let unschedulable_taint = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    if unschedulable
        && !tolerations
            .iter()
            .any(|t| tolerates(t, &unschedulable_taint))
    {
        return Err(vec![Reason::Unschedulable]);
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let by_condition = condition_taint(node).filter(|c| !taints.iter().any(|t| same_taint(t, c)));
    if let Some(t) = taints
        .iter()
        .chain(by_condition.as_ref())
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
    {
        return Err(vec![Reason::UntoleratedTaint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
        }]);
    }
    if !matches_affinity(pod, node) {
        return Err(vec![Reason::NodeAffinity]);
    }
    let (alloc, max_pods) = info.allocatable();
    let want = pod_requests(pod);
    let mut reasons = vec![];
    if info.pods + 1 > max_pods {
        reasons.push(Reason::TooManyPods);
    }
    if want.cpu_milli > 0 && want.cpu_milli > alloc.cpu_milli - info.requested.cpu_milli {
        reasons.push(Reason::InsufficientCpu);
    }
    if want.memory > 0 && want.memory > alloc.memory - info.requested.memory {
        reasons.push(Reason::InsufficientMemory);
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

/// The taint the node lifecycle controller keeps on a node that is not
/// Ready (`TaintNodesByCondition`): `not-ready` when Ready is False or
/// missing (a new Node, as the admission plugin taints it), `unreachable`
/// when Unknown; none when Ready is True.
pub fn condition_taint(node: &Node) -> Option<Taint> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    let key = match ready {
        Some("True") => return None,
        Some("Unknown") => "node.kubernetes.io/unreachable",
        _ => "node.kubernetes.io/not-ready",
    };
    Some(Taint {
        key: key.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    })
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// Upstream's `Toleration.ToleratesTaint`.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    let exists = t.operator.as_deref() == Some("Exists");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    if key.is_empty() && !exists {
        return false;
    }
    exists || t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
}

/// `nodeSelector` and `requiredDuringSchedulingIgnoredDuringExecution`.
pub fn matches_affinity(pod: &Pod, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let Some(spec) = &pod.spec else {
        return true;
    };
    if let Some(sel) = &spec.node_selector
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        // Terms are ORed; an empty list matches nothing.
        Some(r) => r
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, labels, node.metadata.name.as_deref().unwrap_or_default())),
    }
}

fn term_matches(t: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    // A term with no requirements matches nothing (upstream's nodeaffinity).
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(name)))
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value.and_then(number), values) else {
                return false;
            };
            let Some(bound) = number(bound) else {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub fn node(v: serde_json::Value) -> Node {
        let mut base = json!({
            "metadata": {"name": "n1", "labels": {"zone": "a", "gen": "5"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "2", "memory": "1Gi", "pods": "3"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        });
        merge(&mut base, v);
        serde_json::from_value(base).unwrap()
    }

    pub fn pod(v: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}]},
        });
        merge(&mut base, v);
        serde_json::from_value(base).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn check(p: &Pod, n: &Node, bound: &[Pod]) -> Result<(), Vec<Reason>> {
        fits(p, &NodeInfo::new(n, bound))
    }

    #[test]
    fn not_ready_and_unschedulable_nodes_are_filtered() {
        let p = pod(json!({}));
        let down = node(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
        let err = check(&p, &down, &[]).unwrap_err();
        assert_eq!(
            err[0].to_string(),
            "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        );
        let gone =
            node(json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}));
        assert_eq!(
            check(&p, &gone, &[]).unwrap_err()[0].to_string(),
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
        );
        // As upstream: a pod that tolerates the condition's taint is placed.
        let tolerates_not_ready = pod(json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]}}));
        assert_eq!(check(&tolerates_not_ready, &down, &[]), Ok(()));
        assert!(check(&tolerates_not_ready, &gone, &[]).is_err());
        let cordoned = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(check(&p, &cordoned, &[]), Err(vec![Reason::Unschedulable]));
        let tolerant = pod(json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}));
        assert_eq!(check(&tolerant, &cordoned, &[]), Ok(()));
    }

    #[test]
    fn taints_need_tolerations_except_prefer_no_schedule() {
        let n = node(json!({"spec": {"taints": [
            {"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoSchedule"},
            {"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoExecute"},
            {"key": "soft", "effect": "PreferNoSchedule"}]}}));
        let err = check(&pod(json!({})), &n, &[]).unwrap_err();
        assert_eq!(
            err[0].to_string(),
            "node(s) had untolerated taint {kubernetes.io/arch: wasm32-wasi}"
        );
        let only_no_schedule = pod(json!({"spec": {"tolerations": [
            {"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoSchedule"}]}}));
        assert!(
            check(&only_no_schedule, &n, &[]).is_err(),
            "NoExecute is not tolerated"
        );
        let both = pod(json!({"spec": {"tolerations": [
            {"key": "kubernetes.io/arch", "operator": "Equal", "value": "wasm32-wasi"}]}}));
        assert_eq!(check(&both, &n, &[]), Ok(()));
        let wrong_value = pod(json!({"spec": {"tolerations": [
            {"key": "kubernetes.io/arch", "value": "amd64"}]}}));
        assert!(check(&wrong_value, &n, &[]).is_err());
        let everything = pod(json!({"spec": {"tolerations": [{"operator": "Exists"}]}}));
        assert_eq!(check(&everything, &n, &[]), Ok(()));
    }

    #[test]
    fn node_selector_and_required_affinity() {
        let n = node(json!({}));
        let sel = |s| pod(json!({"spec": {"nodeSelector": s}}));
        assert_eq!(check(&sel(json!({"zone": "a"})), &n, &[]), Ok(()));
        assert_eq!(
            check(&sel(json!({"zone": "b"})), &n, &[]),
            Err(vec![Reason::NodeAffinity])
        );
        let aff = |exprs: serde_json::Value| {
            pod(
                json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}}}}),
            )
        };
        let ok = |e| check(&aff(e), &n, &[]).is_ok();
        assert!(ok(
            json!([{"key": "zone", "operator": "In", "values": ["a", "b"]}])
        ));
        assert!(!ok(
            json!([{"key": "zone", "operator": "In", "values": ["b"]}])
        ));
        assert!(ok(
            json!([{"key": "zone", "operator": "NotIn", "values": ["b"]}])
        ));
        assert!(ok(
            json!([{"key": "nope", "operator": "NotIn", "values": ["b"]}])
        ));
        assert!(!ok(
            json!([{"key": "zone", "operator": "NotIn", "values": ["a"]}])
        ));
        assert!(ok(json!([{"key": "zone", "operator": "Exists"}])));
        assert!(!ok(json!([{"key": "nope", "operator": "Exists"}])));
        assert!(ok(json!([{"key": "nope", "operator": "DoesNotExist"}])));
        assert!(!ok(json!([{"key": "zone", "operator": "DoesNotExist"}])));
        assert!(ok(
            json!([{"key": "gen", "operator": "Gt", "values": ["4"]}])
        ));
        assert!(!ok(
            json!([{"key": "gen", "operator": "Gt", "values": ["5"]}])
        ));
        assert!(ok(
            json!([{"key": "gen", "operator": "Lt", "values": ["6"]}])
        ));
        assert!(
            !ok(json!([{"key": "zone", "operator": "Lt", "values": ["6"]}])),
            "not a number"
        );
        assert!(
            !ok(
                json!([{"key": "zone", "operator": "Exists"}, {"key": "gen", "operator": "Lt", "values": ["1"]}])
            ),
            "ANDed"
        );
        assert!(!ok(json!([])), "an empty term matches nothing");
        // Terms are ORed.
        let or = pod(
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}}),
        );
        assert_eq!(check(&or, &n, &[]), Ok(()));
    }

    #[test]
    fn resources_count_bound_pods_and_skip_terminated_ones() {
        let n = node(json!({}));
        let req = |cpu: &str, mem: &str| {
            pod(
                json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}}),
            )
        };
        let bound = |p: Pod, phase: &str| {
            let mut p = p;
            p.spec.as_mut().unwrap().node_name = Some("n1".into());
            p.status = Some(serde_json::from_value(json!({"phase": phase})).unwrap());
            p
        };
        let on = [bound(req("1500m", "512Mi"), "Running")];
        assert_eq!(check(&req("500m", "512Mi"), &n, &on), Ok(()));
        assert_eq!(
            check(&req("501m", "1Mi"), &n, &on),
            Err(vec![Reason::InsufficientCpu])
        );
        assert_eq!(
            check(&req("1", "513Mi"), &n, &on),
            Err(vec![Reason::InsufficientCpu, Reason::InsufficientMemory])
        );
        assert_eq!(
            check(&req("0", "2Gi"), &n, &[]),
            Err(vec![Reason::InsufficientMemory])
        );
        let done = [
            bound(req("2", "1Gi"), "Succeeded"),
            bound(req("2", "1Gi"), "Failed"),
        ];
        assert_eq!(check(&req("2", "1Gi"), &n, &done), Ok(()));
        let full = [
            bound(pod(json!({})), "Running"),
            bound(pod(json!({})), "Pending"),
            bound(pod(json!({})), "Running"),
        ];
        assert_eq!(
            check(&pod(json!({})), &n, &full),
            Err(vec![Reason::TooManyPods])
        );
    }

    #[test]
    fn init_containers_and_overhead_count_as_upstream() {
        let p = pod(json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "10Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "500m", "memory": "1Mi"}}}],
            "overhead": {"cpu": "10m"}}}));
        assert_eq!(
            pod_requests(&p),
            Resources {
                cpu_milli: 510,
                memory: 10 << 20
            }
        );
    }
}
