//! Upstream's NodeRestriction admission for node identities
//! (`system:node:NAME`): checks of the object written that the authorizer
//! ([`super::nodeauthz`]) cannot make from the URL alone. A node may create
//! and change only its own Node and its own Lease; it may not set or change
//! labels under `node-restriction.kubernetes.io/`, nor `kubernetes.io` /
//! `k8s.io` labels outside the kubelet's own set (so no
//! `node-role.kubernetes.io/*`), nor change its taints; it may update the
//! status of pods bound to it only, and not their labels.

use std::collections::BTreeSet;

use serde_json::Value;
use wasmlet_apimachinery::rbac::UserInfo;

use super::meta;
use super::nodeauthz::node_of;
use super::registry::ResourceType;
use super::resources::Sub;
use super::status::{ApiError, ApiResult};

/// The namespace of node heartbeats.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Labels the kubelet sets on its own Node (upstream's `kubeletapis`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// Label namespaces (and their subdomains) the kubelet may use freely.
const KUBELET_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn in_domain(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.ends_with(&format!(".{domain}"))
}

/// Whether a node may set the label `key` on itself.
pub fn label_allowed_for_node(key: &str) -> bool {
    let Some((namespace, _)) = key.split_once('/') else {
        return true;
    };
    if in_domain(namespace, "node-restriction.kubernetes.io") {
        return false;
    }
    let kubernetes = in_domain(namespace, "kubernetes.io") || in_domain(namespace, "k8s.io");
    !kubernetes
        || KUBELET_LABELS.contains(&key)
        || KUBELET_NAMESPACES.iter().any(|d| in_domain(namespace, d))
}

fn labels(v: Option<&Value>) -> serde_json::Map<String, Value> {
    v.and_then(|v| v.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Keys added, removed or changed between `old` and `new`.
fn modified_labels(old: Option<&Value>, new: &Value) -> BTreeSet<String> {
    let (old, new) = (labels(old), labels(Some(new)));
    old.keys()
        .chain(new.keys())
        .filter(|k| old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

/// Refuses what a node identity may not write; other users pass.
pub fn check(
    user: &UserInfo,
    rt: &ResourceType,
    ns: &str,
    sub: Sub,
    old: Option<&Value>,
    new: &Value,
) -> ApiResult<()> {
    let Some(node) = node_of(user) else {
        return Ok(());
    };
    let name = meta::name(new);
    let refuse = |why: String| {
        ApiError::forbidden(format!("{} \"{name}\" is forbidden: {why}", rt.qualified()))
    };
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "nodes") => {
            if name != node {
                return Err(refuse(format!(
                    "node \"{node}\" is not allowed to modify node \"{name}\""
                )));
            }
            if let Some(old) = old
                && sub == Sub::Main
                && old.pointer("/spec/taints") != new.pointer("/spec/taints")
            {
                return Err(refuse(format!(
                    "node \"{node}\" is not allowed to modify taints"
                )));
            }
            let forbidden: Vec<String> = modified_labels(old, new)
                .into_iter()
                .filter(|k| !label_allowed_for_node(k))
                .collect();
            if !forbidden.is_empty() {
                return Err(refuse(format!(
                    "node \"{node}\" is not allowed to modify labels: {}",
                    forbidden.join(", ")
                )));
            }
            Ok(())
        }
        ("coordination.k8s.io", "leases") if ns == NODE_LEASE_NAMESPACE && name != node => Err(
            refuse("can only access node lease with the same name as the requesting node".into()),
        ),
        ("", "pods") => {
            let bound = |v: Option<&Value>| {
                v.and_then(|v| v.pointer("/spec/nodeName"))
                    .and_then(Value::as_str)
                    == Some(node)
            };
            match (old, sub) {
                (None, _) if !bound(Some(new)) => Err(refuse(format!(
                    "node \"{node}\" can only create pods with spec.nodeName set to itself"
                ))),
                (None, _) => Ok(()),
                (Some(_), Sub::Main) => Err(refuse(format!(
                    "node \"{node}\" can only update the status of pods, not the pods themselves"
                ))),
                (Some(_), Sub::Status) if !bound(old) => Err(refuse(format!(
                    "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                ))),
                (Some(o), Sub::Status) if labels(Some(o)) != labels(Some(new)) => Err(refuse(
                    format!("node \"{node}\" cannot update labels through pod status"),
                )),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_may_set_only_kubelet_labels() {
        for ok in [
            "kubernetes.io/hostname",
            "kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "x.kubelet.kubernetes.io/y",
            "type",
            "example.com/role",
        ] {
            assert!(label_allowed_for_node(ok), "{ok}");
        }
        for refused in [
            "node-role.kubernetes.io/control-plane",
            "node-restriction.kubernetes.io/dedicated",
            "a.node-restriction.kubernetes.io/x",
            "kubernetes.io/role",
            "k8s.io/x",
            "sub.k8s.io/x",
        ] {
            assert!(!label_allowed_for_node(refused), "{refused}");
        }
    }
}
