//! Authorization answers of the embedded plane: SubjectAccessReview and
//! SelfSubjectAccessReview, so kubelets (the node agent) and
//! `kubectl auth can-i` ask it as they ask a real cluster.
//!
//! Until the plane has RBAC, its policy is fixed: `system:masters` (the admin
//! the kubeconfig's token authenticates) may do anything, and the plane's own
//! kubelet client certificate may use the kubelet API (`nodes/proxy`, `log`,
//! `stats`, `metrics`), as upstream binds it to `system:kubelet-api-admin`.
//! Everyone else is refused.

use serde_json::{Value, json};

/// The user the admin token authenticates as.
pub const ADMIN_USER: &str = "wasmlet-admin";
/// The common name of the client certificate the plane presents to kubelets.
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// The decision for `user` in `groups` on a SubjectAccessReview's
/// `resourceAttributes` / `nonResourceAttributes` (as JSON).
pub fn decide(user: &str, groups: &[String], spec: &Value) -> (bool, String) {
    if groups.iter().any(|g| g == "system:masters") {
        return (true, "system:masters may do anything".into());
    }
    let attrs = &spec["resourceAttributes"];
    let on_kubelet = attrs["group"].as_str().unwrap_or("").is_empty()
        && attrs["resource"] == "nodes"
        && matches!(
            attrs["subresource"].as_str(),
            Some("proxy" | "log" | "stats" | "metrics" | "spec")
        );
    if user == KUBELET_CLIENT_USER && on_kubelet {
        return (
            true,
            "the API server's kubelet client may use the kubelet API".into(),
        );
    }
    (
        false,
        format!(
            "the embedded API server has no RBAC yet: only system:masters and its own kubelet client are authorized, not user \"{user}\""
        ),
    )
}

/// Fills in the status of a SubjectAccessReview (`asker == None`: the spec
/// names the subject) or a SelfSubjectAccessReview asked by `asker`.
pub fn review(mut obj: Value, asker: Option<(String, Vec<String>)>) -> Value {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let (user, groups) = if let Some(asker) = asker {
        asker
    } else {
        (
            spec["user"].as_str().unwrap_or("").to_string(),
            spec["groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        )
    };
    let (allowed, reason) = decide(&user, &groups, &spec);
    obj["status"] = json!({"allowed": allowed, "reason": reason});
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(sub: &str) -> Value {
        json!({"resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": sub, "name": "n1"}})
    }

    #[test]
    fn only_masters_and_the_kubelet_client_are_allowed() {
        let masters = ["system:masters".to_string()];
        assert!(decide("anyone", &masters, &nodes("proxy")).0);
        assert!(decide(KUBELET_CLIENT_USER, &[], &nodes("proxy")).0);
        assert!(
            !decide(
                KUBELET_CLIENT_USER,
                &[],
                &json!({"resourceAttributes": {"verb": "delete", "resource": "pods"}})
            )
            .0
        );
        let (allowed, reason) = decide(
            "system:serviceaccount:default:default",
            &[],
            &nodes("proxy"),
        );
        assert!(!allowed);
        assert!(
            reason.contains("system:serviceaccount:default:default"),
            "{reason}"
        );
    }
}
