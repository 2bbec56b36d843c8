//! Privilege-escalation prevention on writing RBAC objects, as upstream's
//! RBAC registry does: a Role or ClusterRole may only be written by someone
//! who holds every permission in it (in its scope) or may `escalate` it; a
//! RoleBinding or ClusterRoleBinding only by someone who holds every
//! permission of the role it refers to (in the binding's scope) or may
//! `bind` that role. Members of `system:masters` pass, as upstream.

use serde_json::Value;
use wasmlet_apimachinery::rbac::{Attributes, PolicyRule, RoleRef, UserInfo};
use wasmlet_apimachinery::rbac_covers::{Missing, compact, compact_string, missing, quote_list};

use super::{GROUP, PolicyCache};
use crate::auth::authz::{self, MASTERS};
use crate::meta;
use crate::registry::ResourceType;
use crate::resources::Resources;
use crate::status::{ApiError, ApiResult};

/// Refuses the write of `new` (over `old` for an update) by `user` when it
/// would grant `user` more than it holds.
pub(crate) fn check(
    resources: &Resources,
    cache: &PolicyCache,
    user: &UserInfo,
    rt: &ResourceType,
    ns: &str,
    old: Option<&Value>,
    new: &Value,
) -> ApiResult<()> {
    if rt.group != GROUP || user.in_group(MASTERS) {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_change(old, new)) {
        return Ok(());
    }
    let name = meta::name(new);
    let refuse = |why: String| {
        ApiError::forbidden(format!(
            "{}.{GROUP} \"{name}\" is forbidden: {why}",
            rt.resource
        ))
    };
    let may = |verb: &str, resource: &str, name: &str| {
        let attrs = Attributes::Resource {
            verb: verb.into(),
            group: GROUP.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: ns.into(),
            name: name.into(),
        };
        authz::decide_in(resources, cache, user, &attrs).0
    };
    let held = || super::rules_for(resources, cache, user, ns);
    match rt.resource.as_str() {
        "roles" | "clusterroles" => {
            if may("escalate", &rt.resource, name) {
                return Ok(());
            }
            let rules = rules_of(new);
            let absent = missing(&held(), &rules).map_err(|e| refuse(e.to_string()))?;
            if absent.total > 0 {
                return Err(refuse(not_held(user, &absent)));
            }
            // An aggregation rule can gather any rule, now or later.
            let aggregation_changed =
                aggregation(new).is_some() && old.map(aggregation) != Some(aggregation(new));
            if aggregation_changed
                && missing(&held(), &full_authority()).map_or(true, |m| m.total > 0)
            {
                return Err(refuse(
                    "must have cluster-admin privileges to use the aggregationRule".into(),
                ));
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let Ok(role_ref) = serde_json::from_value::<RoleRef>(new["roleRef"].clone()) else {
                // Validation reports the malformed roleRef.
                return Ok(());
            };
            let role_resource = if role_ref.kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if may("bind", role_resource, &role_ref.name) {
                return Ok(());
            }
            let Some(rules) = super::role_rules(resources, cache, &role_ref, ns) else {
                return Err(refuse(format!(
                    "{}.{GROUP} \"{}\" not found",
                    role_ref.kind.to_lowercase(),
                    role_ref.name
                )));
            };
            let absent = missing(&held(), &rules).map_err(|e| {
                refuse(format!(
                    "{} {}: {e}",
                    role_ref.kind.to_lowercase(),
                    role_ref.name
                ))
            })?;
            if absent.total > 0 {
                return Err(refuse(not_held(user, &absent)));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn aggregation(v: &Value) -> Option<&Value> {
    v.get("aggregationRule").filter(|a| !a.is_null())
}

fn rules_of(v: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(v["rules"].clone()).unwrap_or_default()
}

/// `*` on everything, resources and non-resource URLs.
fn full_authority() -> Vec<PolicyRule> {
    let all = || vec!["*".to_string()];
    vec![
        PolicyRule {
            verbs: all(),
            api_groups: all(),
            resources: all(),
            ..Default::default()
        },
        PolicyRule {
            verbs: all(),
            non_resource_urls: all(),
            ..Default::default()
        },
    ]
}

/// Upstream's refusal: who, and each missing permission on a line. Upstream
/// lists them all; past the first [`MAX_LISTED`] this says how many more, so
/// the answer stays small whatever the rules hold.
///
/// [`MAX_LISTED`]: wasmlet_apimachinery::rbac_covers::MAX_LISTED
fn not_held(user: &UserInfo, missing: &Missing) -> String {
    let mut lines: Vec<String> = compact(&missing.listed)
        .iter()
        .map(compact_string)
        .collect();
    lines.sort();
    lines.dedup();
    let more = missing.total.saturating_sub(missing.listed.len() as u128);
    if more > 0 {
        lines.push(format!("... and {more} more permissions not held"));
    }
    format!(
        "user \"{}\" (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        quote_list(&user.groups),
        lines.join("\n")
    )
}

/// Whether the update only touches what the garbage collector needs to
/// delete the object eventually (owner references, finalizers), which
/// upstream lets through unchecked.
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(old) == strip(new)
}
