//! Upstream's Node authorizer, kept simple: a node (user `system:node:NAME`
//! in group `system:nodes`) may read nodes and pods, write its own Node and
//! its own Lease, delete and update the status of pods bound to it, read the
//! secrets, configmaps and claims those pods reference (and request tokens for
//! their ServiceAccounts), create events, and ask TokenReviews and
//! SubjectAccessReviews. Everything else is left to RBAC, which binds nothing
//! to `system:nodes` by default, as upstream.
//!
//! As upstream, what the URL does not show (the name of a created Node or
//! Lease, labels, taints, which pod a status write is for) is checked by the
//! NodeRestriction admission ([`crate::auth::noderestriction`]) on the object
//! written.

use serde_json::Value;
use wasmlet_apimachinery::rbac::{Attributes, UserInfo};

use crate::resources::Resources;

/// The node name of a node identity, if `user` is one.
pub(crate) fn node_of(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    (user.in_group("system:nodes") && !name.is_empty()).then_some(name)
}

/// Why the request is allowed, or `None` (no opinion: RBAC decides).
pub(crate) fn allows(resources: &Resources, user: &UserInfo, attrs: &Attributes) -> Option<String> {
    let node = node_of(user)?;
    let Attributes::Resource {
        verb,
        group,
        resource,
        subresource,
        namespace,
        name,
    } = attrs
    else {
        return None;
    };
    let v = verb.as_str();
    let read = matches!(v, "get" | "list" | "watch");
    let own = name == node;
    let ok = match (group.as_str(), resource.as_str(), subresource.as_str()) {
        // A create names its object in the body only: NodeRestriction
        // admission checks that name.
        ("", "nodes", "") => {
            read || v == "create" || (matches!(v, "update" | "patch" | "delete") && own)
        }
        ("", "nodes", "status") => matches!(v, "get" | "update" | "patch") && own,
        ("coordination.k8s.io", "leases", "") => {
            namespace == "kube-node-lease"
                && (v == "create" || (own && matches!(v, "get" | "update" | "patch" | "delete")))
        }
        ("", "pods", "") if read => true,
        ("", "pods", "") | ("", "pods", "status") => {
            matches!(v, "get" | "update" | "patch" | "delete")
                && pod_on_node(resources, namespace, name, node)
        }
        ("", "events", "") | ("events.k8s.io", "events", "") => {
            matches!(v, "create" | "update" | "patch")
        }
        ("authentication.k8s.io", "tokenreviews", "")
        | ("authorization.k8s.io", "subjectaccessreviews", "") => v == "create",
        ("", "secrets" | "configmaps" | "persistentvolumeclaims", "") => {
            v == "get" && referenced(resources, node, namespace, resource, name)
        }
        ("", "serviceaccounts", "token") => {
            v == "create" && referenced(resources, node, namespace, "serviceaccounts", name)
        }
        _ => false,
    };
    ok.then(|| format!("Node: {node} may {v} {resource} it needs"))
}

fn pods_of_node<'a>(
    snap: &'a crate::store::Snapshot,
    resources: &Resources,
    namespace: &str,
    node: &'a str,
) -> Vec<Value> {
    let Some(rt) = resources.registry.get("", "pods") else {
        return vec![];
    };
    let prefix = rt.prefix(Some(namespace));
    snap.range(&prefix, None)
        .filter(|s| s.node_name.as_deref() == Some(node))
        .filter_map(|s| s.value().ok())
        .collect()
}

fn pod_on_node(resources: &Resources, namespace: &str, name: &str, node: &str) -> bool {
    let Some(rt) = resources.registry.get("", "pods") else {
        return false;
    };
    resources
        .store
        .get(&rt.key(namespace, name))
        .is_some_and(|s| s.node_name.as_deref() == Some(node))
}

/// Whether a pod bound to `node` in `namespace` references the object.
fn referenced(
    resources: &Resources,
    node: &str,
    namespace: &str,
    resource: &str,
    name: &str,
) -> bool {
    if name.is_empty() || namespace.is_empty() {
        return false;
    }
    let snap = resources.store.snapshot();
    pods_of_node(&snap, resources, namespace, node)
        .iter()
        .any(|pod| references(pod, resource).iter().any(|r| r == name))
}

/// The names of `resource` objects a pod spec references.
pub(crate) fn references(pod: &Value, resource: &str) -> Vec<String> {
    let spec = &pod["spec"];
    let mut out = vec![];
    let mut push = |v: &Value| {
        if let Some(s) = v.as_str().filter(|s| !s.is_empty()) {
            out.push(s.to_string());
        }
    };
    let each = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let containers = [
        each(&spec["containers"]),
        each(&spec["initContainers"]),
        each(&spec["ephemeralContainers"]),
    ]
    .concat();
    match resource {
        "serviceaccounts" => {
            let sa = spec["serviceAccountName"].as_str().unwrap_or("default");
            push(&Value::from(if sa.is_empty() { "default" } else { sa }));
        }
        "persistentvolumeclaims" => {
            for vol in each(&spec["volumes"]) {
                push(&vol["persistentVolumeClaim"]["claimName"]);
            }
        }
        "secrets" | "configmaps" => {
            let secret = resource == "secrets";
            let (vol_key, vol_name, env_ref, from_ref, proj) = if secret {
                (
                    "secret",
                    "secretName",
                    "secretKeyRef",
                    "secretRef",
                    "secret",
                )
            } else {
                (
                    "configMap",
                    "name",
                    "configMapKeyRef",
                    "configMapRef",
                    "configMap",
                )
            };
            if secret {
                for s in each(&spec["imagePullSecrets"]) {
                    push(&s["name"]);
                }
            }
            for vol in each(&spec["volumes"]) {
                push(&vol[vol_key][vol_name]);
                for src in each(&vol["projected"]["sources"]) {
                    push(&src[proj]["name"]);
                }
            }
            for c in &containers {
                for e in each(&c["env"]) {
                    push(&e["valueFrom"][env_ref]["name"]);
                }
                for e in each(&c["envFrom"]) {
                    push(&e[from_ref]["name"]);
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_references_what_its_spec_names() {
        let pod = json!({"spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol"}},
                {"name": "b", "configMap": {"name": "cm"}},
                {"name": "c", "projected": {"sources": [{"secret": {"name": "proj"}}]}},
            ],
            "containers": [{"name": "m", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "cm2"}}]}],
        }});
        let mut s = references(&pod, "secrets");
        s.sort();
        assert_eq!(s, ["env", "proj", "pull", "vol"]);
        let mut c = references(&pod, "configmaps");
        c.sort();
        assert_eq!(c, ["cm", "cm2"]);
        assert_eq!(references(&pod, "serviceaccounts"), ["default"]);
    }

    #[test]
    fn only_node_identities_are_nodes() {
        let n = UserInfo::new("system:node:n1", &["system:nodes"]);
        assert_eq!(node_of(&n), Some("n1"));
        assert_eq!(node_of(&UserInfo::new("system:node:n1", &[])), None);
        assert_eq!(node_of(&UserInfo::new("alice", &["system:nodes"])), None);
    }
}
