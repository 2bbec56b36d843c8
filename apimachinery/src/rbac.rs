//! Kubernetes RBAC as plain functions: which request a request is (its
//! authorization attributes, as upstream's `RequestInfoFactory` derives them
//! from the method and path), whether a `PolicyRule` allows it, whether a
//! binding's subject is a given user, and the wording of the refusal.
//!
//! The semantics follow `k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go`:
//! `*` matches any verb, group, resource or non-resource URL; `*/sub` matches
//! subresource `sub` of any resource; a non-resource URL ending in `*` is a
//! prefix; an empty `resourceNames` matches every name.

use serde::{Deserialize, Serialize};

/// `rbac.authorization.k8s.io/v1` `PolicyRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs the rule grants (`get`, `list`, ...); `*` grants every verb.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups the rule covers (`""` is the core group); `*` covers every group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources the rule covers, as `resource` or `resource/subresource`; `*` and `*/sub` match any resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Object names the rule is limited to; empty means every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// Non-resource paths the rule covers (`/healthz`, `/apis/*`); a trailing `*` makes a prefix.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// A binding's `subjects[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// The user or group name, or the service account's name.
    #[serde(default)]
    pub name: String,
    /// The service account's namespace (empty for users and groups).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `rbac.authorization.k8s.io` for users and groups, empty for service accounts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
}

/// A binding's `roleRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    /// The referenced role's group, `rbac.authorization.k8s.io`.
    #[serde(default)]
    pub api_group: String,
    /// `Role` or `ClusterRole`.
    pub kind: String,
    /// The referenced role's name.
    pub name: String,
}

/// Who is asking: the authenticated (or impersonated) user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name, `system:serviceaccount:NS:NAME` for a service account.
    pub name: String,
    /// Groups the user is in, as the authenticator reported them; rules bound to a group apply to its members.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user with `groups` given as string slices (tests and built-in identities are written that way).
    pub fn new(name: impl Into<String>, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// Whether the user is a member of `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What a request does, in the terms rules are written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A request for an API object or collection (`/api/...`, `/apis/...`).
    Resource {
        /// The verb derived from the method and path (`list`, `watch`, `get`, `create`, ...).
        verb: String,
        /// The API group, empty for the core group.
        group: String,
        /// The resource's plural name.
        resource: String,
        /// The subresource (`status`, `log`), or empty.
        subresource: String,
        /// The namespace, empty for cluster-scoped requests.
        namespace: String,
        /// The object's name, empty for collection requests.
        name: String,
    },
    /// A request for any other path (`/healthz`, `/version`, `/metrics`).
    NonResource {
        /// The lowercase HTTP verb (`get`, `post`, ...).
        verb: String,
        /// The request path without its query.
        path: String,
    },
}

impl Attributes {
    /// The request's verb, whichever kind of request it is.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource { verb, .. } | Attributes::NonResource { verb, .. } => verb,
        }
    }

    /// The namespace the request is in; empty for cluster-scoped and non-resource requests.
    pub fn namespace(&self) -> &str {
        match self {
            Attributes::Resource { namespace, .. } => namespace,
            Attributes::NonResource { .. } => "",
        }
    }
}

fn has(list: &[String], item: &str) -> bool {
    list.iter().any(|x| x == item)
}

/// Whether `rule` allows the request.
pub fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    let verb_ok = |verb: &str| has(&rule.verbs, "*") || has(&rule.verbs, verb);
    match attrs {
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            verb_ok(verb)
                && (has(&rule.api_groups, "*") || has(&rule.api_groups, group))
                && resource_matches(rule, resource, subresource)
                && (rule.resource_names.is_empty() || has(&rule.resource_names, name))
        }
        Attributes::NonResource { verb, path } => {
            verb_ok(verb)
                && rule.non_resource_urls.iter().any(|u| {
                    u == "*"
                        || u == path
                        || u.strip_suffix('*')
                            .is_some_and(|prefix| path.starts_with(prefix))
                })
        }
    }
}

fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    let combined = if subresource.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{subresource}")
    };
    rule.resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

/// Whether `subject` of a binding in `binding_namespace` ("" for a
/// ClusterRoleBinding) names `user`. A ServiceAccount subject without a
/// namespace means the binding's own.
pub fn subject_matches(subject: &Subject, user: &UserInfo, binding_namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.in_group(&subject.name),
        "ServiceAccount" => {
            let ns = if subject.namespace.is_empty() {
                binding_namespace
            } else {
                &subject.namespace
            };
            !ns.is_empty() && user.name == service_account_user(ns, &subject.name)
        }
        _ => false,
    }
}

/// The user name a ServiceAccount authenticates as.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The groups a ServiceAccount authenticates with.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".into(),
    ]
}

/// Upstream's message for a refused request, e.g. `pods "p" is forbidden:
/// User "u" cannot get resource "pods" in API group "" in the namespace "a"`.
pub fn forbidden_message(user: &str, attrs: &Attributes) -> String {
    match attrs {
        Attributes::NonResource { verb, path } => {
            format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\"")
        }
        Attributes::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let qualified = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let what = if name.is_empty() {
                format!("{qualified} is forbidden")
            } else {
                format!("{qualified} \"{name}\" is forbidden")
            };
            let full = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace \"{namespace}\"")
            };
            format!(
                "{what}: User \"{user}\" cannot {verb} resource \"{full}\" in API group \"{group}\" {scope}"
            )
        }
    }
}

/// The attributes of an HTTP request, as upstream derives them: `/api/v1/...`
/// and `/apis/G/V/...` below a group-version are resource requests (verb from
/// the method: get/list/watch/create/update/patch/delete/deletecollection);
/// everything else, discovery included, is a non-resource request whose verb
/// is the lower-cased method. `watch` is the value of the `watch` query
/// parameter.
pub fn request_attributes(method: &str, path: &str, watch: bool) -> Attributes {
    let non_resource = || Attributes::NonResource {
        verb: method.to_ascii_lowercase(),
        path: path.to_string(),
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, mut rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] if !rest.is_empty() => ("", rest.to_vec()),
        ["apis", g, _v, rest @ ..] if !rest.is_empty() => (*g, rest.to_vec()),
        _ => return non_resource(),
    };
    let watch_path = rest.first() == Some(&"watch");
    if watch_path {
        rest.remove(0);
    }
    let mut namespace = "";
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = rest[1];
        // `/namespaces/NS/status` and `/finalize` are the namespace's own subresources.
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest.drain(..2);
        }
    }
    let resource = rest.first().copied().unwrap_or("");
    let name = rest.get(1).copied().unwrap_or("");
    let subresource = rest.get(2).copied().unwrap_or("");
    let verb = match method {
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if name.is_empty() => "deletecollection",
        "DELETE" => "delete",
        "GET" | "HEAD" if watch_path || (watch && name.is_empty()) => "watch",
        "GET" | "HEAD" if name.is_empty() => "list",
        // A websocket's GET on a pod's exec, attach or portforward opens a
        // session as POST does: upstream authorizes it as `create` too
        // (AuthorizePodWebsocketUpgradeCreatePermission).
        "GET"
            if group.is_empty()
                && resource == "pods"
                && matches!(subresource, "exec" | "attach" | "portforward") =>
        {
            "create"
        }
        "GET" | "HEAD" => "get",
        other => {
            return Attributes::NonResource {
                verb: other.to_ascii_lowercase(),
                path: path.to_string(),
            };
        }
    };
    Attributes::Resource {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: vec![],
        }
    }

    fn res(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn rules_match_as_upstream() {
        let view = rule(&["get", "list"], &[""], &["pods", "pods/log"], &[]);
        assert!(rule_allows(&view, &res("get", "", "pods", "", "p")));
        assert!(rule_allows(&view, &res("get", "", "pods", "log", "p")));
        assert!(!rule_allows(&view, &res("get", "", "pods", "exec", "p")));
        assert!(!rule_allows(&view, &res("create", "", "pods", "", "")));
        assert!(!rule_allows(&view, &res("get", "apps", "pods", "", "p")));
        // `pods` does not grant its subresources.
        let pods = rule(&["*"], &[""], &["pods"], &[]);
        assert!(!rule_allows(&pods, &res("get", "", "pods", "status", "p")));
        let any_status = rule(&["get"], &["*"], &["*/status"], &[]);
        assert!(rule_allows(
            &any_status,
            &res("get", "apps", "x", "status", "n")
        ));
        assert!(!rule_allows(&any_status, &res("get", "apps", "x", "", "n")));
        let named = rule(&["get"], &[""], &["secrets"], &["s1"]);
        assert!(rule_allows(&named, &res("get", "", "secrets", "", "s1")));
        assert!(!rule_allows(&named, &res("get", "", "secrets", "", "s2")));
        // A list has no name, so resourceNames never allow it.
        assert!(!rule_allows(&named, &res("list", "", "secrets", "", "")));
        let all = rule(&["*"], &["*"], &["*"], &[]);
        assert!(rule_allows(&all, &res("delete", "x.io", "y", "z", "n")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let r = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/apis/*".into()],
            ..Default::default()
        };
        let get = |p: &str| Attributes::NonResource {
            verb: "get".into(),
            path: p.into(),
        };
        assert!(rule_allows(&r, &get("/healthz")));
        assert!(rule_allows(&r, &get("/apis/apps")));
        assert!(!rule_allows(&r, &get("/apis")));
        assert!(!rule_allows(&r, &get("/metrics")));
        // A resource rule never allows a non-resource request.
        assert!(!rule_allows(&rule(&["*"], &["*"], &["*"], &[]), &get("/x")));
    }

    #[test]
    fn subjects() {
        let alice = UserInfo::new("alice", &["devs", "system:authenticated"]);
        let s = |kind: &str, name: &str, ns: &str| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.into(),
            api_group: String::new(),
        };
        assert!(subject_matches(&s("User", "alice", ""), &alice, ""));
        assert!(!subject_matches(&s("User", "bob", ""), &alice, ""));
        assert!(subject_matches(&s("Group", "devs", ""), &alice, ""));
        let sa = UserInfo {
            name: service_account_user("a", "robot"),
            groups: service_account_groups("a"),
        };
        assert!(subject_matches(&s("ServiceAccount", "robot", ""), &sa, "a"));
        assert!(!subject_matches(
            &s("ServiceAccount", "robot", ""),
            &sa,
            "b"
        ));
        assert!(subject_matches(
            &s("ServiceAccount", "robot", "a"),
            &sa,
            "b"
        ));
        assert!(!subject_matches(&s("ServiceAccount", "robot", ""), &sa, ""));
    }

    #[test]
    fn attributes_of_requests() {
        let a = request_attributes("GET", "/api/v1/namespaces/a/pods", false);
        assert_eq!(a, res("list", "", "pods", "", ""));
        let a = request_attributes("GET", "/api/v1/namespaces/a/pods", true);
        assert_eq!(a.verb(), "watch");
        let a = request_attributes("GET", "/api/v1/watch/namespaces/a/pods/p", false);
        assert_eq!(a, res("watch", "", "pods", "", "p"));
        let a = request_attributes("GET", "/api/v1/namespaces/a/pods/p/log", false);
        assert_eq!(a, res("get", "", "pods", "log", "p"));
        // A websocket's GET opens an exec or attach session: `create`, as upstream.
        let a = request_attributes("GET", "/api/v1/namespaces/a/pods/p/exec", false);
        assert_eq!(a, res("create", "", "pods", "exec", "p"));
        let a = request_attributes("GET", "/api/v1/namespaces/a/pods/p/attach", false);
        assert_eq!(a, res("create", "", "pods", "attach", "p"));
        let a = request_attributes("DELETE", "/apis/apps/v1/namespaces/a/statefulsets", false);
        assert_eq!(a, res("deletecollection", "apps", "statefulsets", "", ""));
        // A namespace is its own namespace.
        let a = request_attributes("PUT", "/api/v1/namespaces/a/finalize", false);
        assert_eq!(
            a,
            Attributes::Resource {
                verb: "update".into(),
                group: "".into(),
                resource: "namespaces".into(),
                subresource: "finalize".into(),
                namespace: "a".into(),
                name: "a".into(),
            }
        );
        let a = request_attributes("GET", "/api/v1/nodes", false);
        assert_eq!(a.namespace(), "");
        for p in [
            "/api",
            "/api/v1",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3",
        ] {
            assert!(
                matches!(
                    request_attributes("GET", p, false),
                    Attributes::NonResource { .. }
                ),
                "{p}"
            );
        }
    }

    #[test]
    fn forbidden_messages_read_as_upstream() {
        assert_eq!(
            forbidden_message("alice", &res("create", "", "pods", "", "")),
            "pods is forbidden: User \"alice\" cannot create resource \"pods\" in API group \"\" in the namespace \"a\""
        );
        let mut a = res("get", "apps", "statefulsets", "scale", "s");
        if let Attributes::Resource { namespace, .. } = &mut a {
            namespace.clear();
        }
        assert_eq!(
            forbidden_message("bob", &a),
            "statefulsets.apps \"s\" is forbidden: User \"bob\" cannot get resource \"statefulsets/scale\" in API group \"apps\" at the cluster scope"
        );
        let n = Attributes::NonResource {
            verb: "get".into(),
            path: "/metrics".into(),
        };
        assert_eq!(
            forbidden_message("bob", &n),
            "forbidden: User \"bob\" cannot get path \"/metrics\""
        );
    }
}
