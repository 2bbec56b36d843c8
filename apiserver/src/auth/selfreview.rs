//! The answers of SelfSubjectReview (`kubectl auth whoami`) and
//! SelfSubjectRulesReview (`kubectl auth can-i --list`): who the caller is,
//! and every rule the plane's authorizers would enumerate for it, as
//! upstream's `selfsubjectreview` and `selfsubjectrulesreview` registries.
//!
//! Deviations: the user carries no `uid` or `extra` (the plane's identities
//! have neither, as its TokenReview answers); rules come from RBAC only, with
//! `incomplete` set for nodes, whose Node authorizer cannot enumerate rules
//! (upstream says the same). `system:masters` gets `cluster-admin`'s rules
//! through its bootstrap binding, as upstream.

use serde_json::{Value, json};
use wasmlet_apimachinery::rbac::{PolicyRule, UserInfo};

use crate::ApiState;
use crate::status::ApiError;

/// A SelfSubjectReview's status: the caller's user info.
pub(crate) fn subject_review(mut obj: Value, user: &UserInfo) -> Value {
    obj["status"] = json!({"userInfo": {"username": user.name, "groups": user.groups}});
    obj["apiVersion"] = json!("authentication.k8s.io/v1");
    obj["kind"] = json!("SelfSubjectReview");
    obj
}

/// A SelfSubjectRulesReview answered for `user` in `spec.namespace`, which
/// upstream requires (`kubectl` sends its current namespace).
pub(crate) fn rules_review(
    state: &ApiState,
    mut obj: Value,
    user: &UserInfo,
) -> Result<Value, ApiError> {
    let ns = obj
        .pointer("/spec/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if ns.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let rules = crate::auth::rbac::rules_for(&state.resources, &state.rbac, user, &ns);
    let mut status = rules_status(&rules);
    if crate::auth::nodeauthz::node_of(user).is_some() {
        status["incomplete"] = json!(true);
        status["evaluationError"] = json!("node authorizer does not support user rule resolution");
    }
    obj["status"] = status;
    obj["apiVersion"] = json!("authorization.k8s.io/v1");
    obj["kind"] = json!("SelfSubjectRulesReview");
    Ok(obj)
}

/// Upstream's `getResourceRules` / `getNonResourceRules`: a rule with
/// resources is a resource rule, one with URLs a non-resource rule (a rule
/// with both, which validation refuses, would count as each).
fn rules_status(rules: &[PolicyRule]) -> Value {
    let resource: Vec<Value> = rules
        .iter()
        .filter(|r| !r.resources.is_empty())
        .map(|r| {
            // Go's `omitempty`: empty lists are left out.
            let mut rule = json!({"verbs": r.verbs});
            for (key, list) in [
                ("apiGroups", &r.api_groups),
                ("resources", &r.resources),
                ("resourceNames", &r.resource_names),
            ] {
                if !list.is_empty() {
                    rule[key] = json!(list);
                }
            }
            rule
        })
        .collect();
    let non_resource: Vec<Value> = rules
        .iter()
        .filter(|r| !r.non_resource_urls.is_empty())
        .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
        .collect();
    json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_split_into_resource_and_non_resource_rules() {
        let rules: Vec<PolicyRule> = serde_json::from_value(json!([
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]},
            {"verbs": ["get"], "resources": ["nodes"]},
        ]))
        .unwrap();
        let status = rules_status(&rules);
        assert_eq!(
            status["resourceRules"],
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
                {"verbs": ["get"], "resources": ["nodes"]}])
        );
        assert_eq!(
            status["nonResourceRules"],
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}])
        );
        assert_eq!(status["incomplete"], false);
    }

    #[test]
    fn whoami_names_the_caller_and_its_groups() {
        let user = UserInfo::new(
            "system:serviceaccount:ns:sa",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let got = subject_review(json!({"metadata": {}}), &user);
        assert_eq!(
            got["status"]["userInfo"],
            json!({"username": "system:serviceaccount:ns:sa",
                "groups": ["system:serviceaccounts", "system:authenticated"]})
        );
        assert_eq!(got["kind"], "SelfSubjectReview");
    }
}
