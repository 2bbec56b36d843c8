//! Authorization of every request and the answers of SubjectAccessReview and
//! SelfSubjectAccessReview (so kubelets and `kubectl auth can-i` ask the plane
//! as they ask a real cluster).
//!
//! The chain is upstream's `--authorization-mode=Node,RBAC` behind its
//! privileged-group short cut: `system:masters` may do anything, then the
//! Node authorizer ([`crate::auth::nodeauthz`]) for `system:node:*` users, then
//! RBAC ([`crate::auth::rbac`]). Refusals carry upstream's Status message.

use serde_json::{Value, json};
use wasmlet_apimachinery::rbac::{Attributes, UserInfo, forbidden_message};

use crate::ApiState;
use crate::auth::rbac::PolicyCache;
use crate::resources::Resources;
use crate::status::ApiError;

/// Upstream's privileged group: its members pass every check.
pub(crate) const MASTERS: &str = "system:masters";
/// The user the admin token authenticates as.
pub(crate) const ADMIN_USER: &str = "wasmlet-admin";
/// The identity `wasmlet up` gives its controller host (bound to
/// `cluster-admin`: it serves whatever plugins are installed, each confined
/// by its manifest).
pub const CONTROLLER_USER: &str = "system:wasmlet-controller";
/// The common name of the client certificate the plane presents to kubelets.
pub(crate) const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// The decision and its reason.
pub(crate) fn decide(state: &ApiState, user: &UserInfo, attrs: &Attributes) -> (bool, String) {
    decide_in(&state.resources, &state.rbac, user, attrs)
}

/// [`decide`] from the parts of the state it reads (the write path has no
/// `ApiState`).
pub(crate) fn decide_in(
    resources: &Resources,
    cache: &PolicyCache,
    user: &UserInfo,
    attrs: &Attributes,
) -> (bool, String) {
    if user.in_group(MASTERS) {
        return (true, "system:masters may do anything".into());
    }
    if let Some(why) = crate::auth::nodeauthz::allows(resources, user, attrs) {
        return (true, why);
    }
    match crate::auth::rbac::allows(resources, cache, user, attrs) {
        Some(why) => (true, why),
        None => (false, String::new()),
    }
}

/// `Ok` when `user` may do `attrs`, else upstream's 403.
pub(crate) fn authorize(
    state: &ApiState,
    user: &UserInfo,
    attrs: &Attributes,
) -> Result<(), ApiError> {
    if decide(state, user, attrs).0 {
        Ok(())
    } else {
        Err(forbidden(user, attrs))
    }
}

/// Upstream's Forbidden Status for a refused request.
pub(crate) fn forbidden(user: &UserInfo, attrs: &Attributes) -> ApiError {
    let mut err = ApiError::new(403, "Forbidden", forbidden_message(&user.name, attrs));
    if let Attributes::Resource {
        group,
        resource,
        name,
        ..
    } = attrs
    {
        err.details = Some(json!({"name": name, "group": group, "kind": resource}));
    }
    err
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|g| {
            g.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The attributes a SubjectAccessReview spec asks about.
pub(crate) fn review_attributes(spec: &Value) -> Attributes {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let r = &spec["resourceAttributes"];
    if r.is_object() {
        return Attributes::Resource {
            verb: s(&r["verb"]),
            group: s(&r["group"]),
            resource: s(&r["resource"]),
            subresource: s(&r["subresource"]),
            namespace: s(&r["namespace"]),
            name: s(&r["name"]),
        };
    }
    let n = &spec["nonResourceAttributes"];
    Attributes::NonResource {
        verb: s(&n["verb"]),
        path: s(&n["path"]),
    }
}

/// Fills in the status of a SubjectAccessReview (`asker == None`: the spec
/// names the subject) or a SelfSubjectAccessReview asked by `asker`.
pub(crate) fn review(state: &ApiState, mut obj: Value, asker: Option<UserInfo>) -> Value {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let user = asker.unwrap_or_else(|| UserInfo {
        name: spec["user"].as_str().unwrap_or("").to_string(),
        groups: strings(&spec["groups"]),
    });
    let attrs = review_attributes(&spec);
    let (allowed, reason) = decide(state, &user, &attrs);
    obj["status"] = if allowed {
        json!({"allowed": true, "reason": reason})
    } else {
        json!({"allowed": false})
    };
    obj
}
