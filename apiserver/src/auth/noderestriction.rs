//! Upstream's NodeRestriction admission for node identities
//! (`system:node:NAME`): checks of the object written that the authorizer
//! ([`crate::auth::nodeauthz`]) cannot make from the URL alone. A node may create
//! and change only its own Node and its own Lease; it may not set or change
//! labels under `node-restriction.kubernetes.io/`, nor `kubernetes.io` /
//! `k8s.io` labels outside the kubelet's own set (so no
//! `node-role.kubernetes.io/*`), nor change its taints; it may update the
//! status of pods bound to it only, and not their labels.

use std::collections::BTreeSet;

use serde_json::Value;
use wasmlet_apimachinery::rbac::UserInfo;

use crate::auth::nodeauthz::node_of;
use crate::meta;
use crate::registry::ResourceType;
use crate::resources::Sub;
use crate::status::{ApiError, ApiResult};

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
pub(crate) fn label_allowed_for_node(key: &str) -> bool {
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
pub(crate) fn check(
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

/// Upstream's NodeRestriction for a TokenRequest (`serviceaccounts/token`)
/// by a node identity: the token must be bound, by uid, to a pod scheduled on
/// that node. Without it a node could mint an unbound token of any
/// ServiceAccount its pods use, valid long after the pod is gone.
/// `pod` is the bound pod as stored, when the request names one.
pub(crate) fn check_token_request(
    user: &UserInfo,
    sa: &str,
    request: &Value,
    pod: Option<&Value>,
) -> ApiResult<()> {
    let Some(node) = node_of(user) else {
        return Ok(());
    };
    let refuse =
        |why: &str| ApiError::forbidden(format!("serviceaccounts \"{sa}\" is forbidden: {why}"));
    let bound = request.pointer("/spec/boundObjectRef");
    let field = |f: &str| {
        bound
            .and_then(|b| b.get(f))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if field("apiVersion") != "v1" || field("kind") != "Pod" || field("name").is_empty() {
        return Err(refuse("node requested token not bound to a pod"));
    }
    if field("uid").is_empty() {
        return Err(refuse(
            "node requested token with a pod binding without a uid",
        ));
    }
    // The pod exists (the caller answers 404 before this otherwise) and its
    // uid was compared with the reference's.
    let on_node = pod
        .and_then(|p| p.pointer("/spec/nodeName"))
        .and_then(Value::as_str)
        == Some(node);
    if !on_node {
        return Err(refuse(
            "node requested token bound to a pod scheduled on a different node",
        ));
    }
    Ok(())
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

    #[test]
    fn a_node_requests_only_tokens_bound_to_its_own_pods() {
        use serde_json::json;
        let node = UserInfo::new("system:node:n1", &["system:nodes"]);
        let admin = UserInfo::new("admin", &["system:masters"]);
        let pod = |on: &str| json!({"spec": {"nodeName": on}});
        let bound = |uid: &str| json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid}}});
        let unbound = json!({"spec": {}});
        let check = |user: &UserInfo, req: &Value, on: Option<&str>| {
            let p = on.map(pod);
            check_token_request(user, "sa", req, p.as_ref()).map_err(|e| e.message)
        };
        assert!(check(&admin, &unbound, None).is_ok());
        assert!(check(&node, &bound("u"), Some("n1")).is_ok());
        for (req, on, why) in [
            (&unbound, None, "not bound to a pod"),
            (&bound(""), Some("n1"), "without a uid"),
            (&bound("u"), Some("n2"), "scheduled on a different node"),
        ] {
            let e = check(&node, req, on).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
