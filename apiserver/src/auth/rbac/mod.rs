//! The RBAC authorizer: evaluates the stored Roles, ClusterRoles, RoleBindings
//! and ClusterRoleBindings (`rbac.authorization.k8s.io/v1`) as upstream's RBAC
//! authorizer does, with the rule matching of
//! [`wasmlet_apimachinery::rbac`]. Upstream's default roles (`cluster-admin`,
//! `admin`, `edit`, `view`, discovery and basic-user with their bindings) are
//! created by [`bootstrap`] when missing.
//!
//! Writing roles and bindings is checked for escalation ([`escalation`]);
//! aggregated ClusterRoles get their rules from [`aggregate`].

pub(crate) mod aggregate;
pub(crate) mod escalation;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;
use wasmlet_apimachinery::rbac::{Attributes, PolicyRule, RoleRef, Subject, UserInfo};

use crate::resources::{Resources, WriteOptions};
use crate::store::Snapshot;

pub(crate) use crate::validation::rbac::GROUP;

const BOOTSTRAP: &str = include_str!("bootstrap.yaml");

#[derive(Deserialize, Default)]
pub(crate) struct Role {
    #[serde(default)]
    pub(crate) rules: Vec<PolicyRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Binding {
    #[serde(default)]
    subjects: Vec<Subject>,
    role_ref: RoleRef,
}

/// The storage key prefix of one RBAC resource, as the registry lays it out.
fn prefix(resources: &Resources, resource: &str, namespace: Option<&str>) -> Option<String> {
    let rt = resources.registry.get(GROUP, resource)?;
    Some(rt.prefix(namespace))
}

/// Roles and bindings parsed once per stored revision: every request that
/// RBAC decides reads them, and they change rarely.
#[derive(Default)]
pub(crate) struct PolicyCache {
    roles: Parsed<Role>,
    bindings: Parsed<Binding>,
}

type Parsed<T> = Mutex<HashMap<Arc<str>, (u64, Option<Arc<T>>)>>;

/// `stored` parsed, from `cache` when that revision was parsed before.
fn parse<T: for<'de> Deserialize<'de>>(
    cache: &Parsed<T>,
    stored: &crate::store::Stored,
) -> Option<Arc<T>> {
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((rv, parsed)) = cache.get(&stored.key)
        && *rv == stored.rv
    {
        return parsed.clone();
    }
    // Deleted objects' entries are dropped now and then; the cache holds at
    // most about twice the RBAC objects that exist.
    if cache.len() > 1024 {
        cache.clear();
    }
    let parsed = serde_json::from_slice(&stored.json).ok().map(Arc::new);
    cache.insert(stored.key.clone(), (stored.rv, parsed.clone()));
    parsed
}

/// The stored role a `roleRef` of a binding in `ns` ("" for a
/// ClusterRoleBinding) names, parsed.
fn referenced_role(
    resources: &Resources,
    cache: &PolicyCache,
    snap: &Snapshot,
    kind: &str,
    name: &str,
    ns: &str,
) -> Option<Arc<Role>> {
    let (resource, ns) = match kind {
        "ClusterRole" => ("clusterroles", ""),
        "Role" if !ns.is_empty() => ("roles", ns),
        _ => return None,
    };
    let rt = resources.registry.get(GROUP, resource)?;
    parse(&cache.roles, snap.get(&rt.key(ns, name))?)
}

/// The rules of the role a binding in `ns` refers to, or `None` when it
/// does not exist.
pub(crate) fn role_rules(
    resources: &Resources,
    cache: &PolicyCache,
    role_ref: &RoleRef,
    ns: &str,
) -> Option<Vec<PolicyRule>> {
    let snap = resources.store.snapshot();
    referenced_role(resources, cache, &snap, &role_ref.kind, &role_ref.name, ns)
        .map(|r| r.rules.clone())
}

/// Every rule `user` holds in `ns` ("": cluster-wide only) through RBAC, as
/// upstream's rule resolver `RulesFor`.
pub(crate) fn rules_for(
    resources: &Resources,
    cache: &PolicyCache,
    user: &UserInfo,
    ns: &str,
) -> Vec<PolicyRule> {
    let snap = resources.store.snapshot();
    let mut rules = vec![];
    let mut collect = |resource: &str, bns: Option<&str>| {
        let Some(p) = prefix(resources, resource, bns) else {
            return;
        };
        let bns = bns.unwrap_or("");
        for stored in snap.range(&p, None) {
            let Some(b) = parse(&cache.bindings, stored) else {
                continue;
            };
            if b.role_ref.api_group != GROUP
                || !b
                    .subjects
                    .iter()
                    .any(|s| wasmlet_apimachinery::rbac::subject_matches(s, user, bns))
            {
                continue;
            }
            if let Some(role) = referenced_role(
                resources,
                cache,
                &snap,
                &b.role_ref.kind,
                &b.role_ref.name,
                bns,
            ) {
                rules.extend(role.rules.iter().cloned());
            }
        }
    };
    collect("clusterrolebindings", None);
    if !ns.is_empty() {
        collect("rolebindings", Some(ns));
    }
    rules
}

/// Why the request is allowed (the binding and role that allow it), or `None`.
pub(crate) fn allows(
    resources: &Resources,
    cache: &PolicyCache,
    user: &UserInfo,
    attrs: &Attributes,
) -> Option<String> {
    let snap = resources.store.snapshot();
    let role =
        |kind: &str, name: &str, ns: &str| referenced_role(resources, cache, &snap, kind, name, ns);
    let check = |snap: &Snapshot, resource: &str, ns: Option<&str>| -> Option<String> {
        let p = prefix(resources, resource, ns)?;
        for stored in snap.range(&p, None) {
            let Some(b) = parse(&cache.bindings, stored) else {
                continue;
            };
            let bns = ns.unwrap_or("");
            if b.role_ref.api_group != GROUP
                || !b
                    .subjects
                    .iter()
                    .any(|s| wasmlet_apimachinery::rbac::subject_matches(s, user, bns))
            {
                continue;
            }
            let role = role(&b.role_ref.kind, &b.role_ref.name, bns);
            if role.is_some_and(|role| {
                role.rules
                    .iter()
                    .any(|r| wasmlet_apimachinery::rbac::rule_allows(r, attrs))
            }) {
                let (_, name) = stored.namespace_name();
                let what = if bns.is_empty() {
                    "ClusterRoleBinding"
                } else {
                    "RoleBinding"
                };
                return Some(format!(
                    "RBAC: allowed by {what} \"{name}\" of {} \"{}\" to {}",
                    b.role_ref.kind,
                    b.role_ref.name,
                    subject_desc(user)
                ));
            }
        }
        None
    };
    if let Some(why) = check(&snap, "clusterrolebindings", None) {
        return Some(why);
    }
    let ns = attrs.namespace();
    if ns.is_empty() {
        return None;
    }
    check(&snap, "rolebindings", Some(ns))
}

fn subject_desc(user: &UserInfo) -> String {
    format!("User \"{}\"", user.name)
}

/// Creates the default ClusterRoles and ClusterRoleBindings that are missing
/// (existing ones, perhaps edited by the operator, are left alone, except
/// that a default role stored before it was aggregated gets its aggregation
/// rule, unless annotated `rbac.authorization.kubernetes.io/autoupdate:
/// "false"`), then fills in the aggregated roles before anyone asks.
pub(crate) async fn bootstrap(resources: &Resources) -> anyhow::Result<()> {
    create_defaults(resources).await?;
    // Each pass sees the previous one's writes: admin gathers edit, which
    // gathers view.
    for _ in 0..8 {
        if aggregate::aggregate_all(resources).await == 0 {
            break;
        }
    }
    Ok(())
}

/// Gives a default ClusterRole stored by an older version its aggregation
/// rule and labels.
async fn upgrade_default(
    resources: &Resources,
    rt: &crate::registry::ResourceType,
    name: &str,
    default: &Value,
) -> anyhow::Result<()> {
    let Some(rule) = default.get("aggregationRule") else {
        return Ok(());
    };
    resources
        .modify(rt, "", name, &WriteOptions::by(crate::MANAGER), |current| {
            let autoupdate = current
                .pointer("/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate")
                .and_then(Value::as_str);
            if current.get("aggregationRule").is_some() || autoupdate == Some("false") {
                return None;
            }
            let mut v = current.clone();
            v["aggregationRule"] = rule.clone();
            let labels = crate::meta::meta_mut(&mut v)
                .entry("labels")
                .or_insert_with(|| serde_json::json!({}));
            if let (Some(l), Some(want)) = (
                labels.as_object_mut(),
                default
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object),
            ) {
                l.extend(want.clone());
            }
            Some(v)
        })
        .await
        .map_err(|e| anyhow::anyhow!("upgrading the default ClusterRole {name}: {e}"))?;
    Ok(())
}

async fn create_defaults(resources: &Resources) -> anyhow::Result<()> {
    for doc in serde_yaml::Deserializer::from_str(BOOTSTRAP) {
        let mut obj = Value::deserialize(doc)?;
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let rt = resources
            .registry
            .by_kind(GROUP, &kind)
            .ok_or_else(|| anyhow::anyhow!("{kind} is not served"))?;
        if let Some(l) = crate::meta::meta_mut(&mut obj)
            .entry("labels")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
        {
            l.insert("kubernetes.io/bootstrapping".into(), "rbac-defaults".into());
        }
        if resources.store.get(&rt.key("", &name)).is_some() {
            upgrade_default(resources, &rt, &name, &obj).await?;
            continue;
        }
        match resources
            .create(&rt, "v1", "", obj, &WriteOptions::by(crate::MANAGER))
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => anyhow::bail!("creating the default {kind} {name}: {e}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_parses() {
        let mut names = vec![];
        for doc in serde_yaml::Deserializer::from_str(BOOTSTRAP) {
            let obj = Value::deserialize(doc).unwrap();
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            if obj["kind"] == "ClusterRole" {
                let aggregated = obj.get("aggregationRule").is_some();
                let role: Role = serde_json::from_value(obj).unwrap();
                assert!(aggregated || !role.rules.is_empty(), "{name}");
            } else {
                let b: Binding = serde_json::from_value(obj).unwrap();
                assert_eq!(b.role_ref.api_group, GROUP, "{name}");
            }
            names.push(name);
        }
        for n in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:basic-user",
        ] {
            assert!(names.iter().any(|x| x == n), "{n}");
        }
    }
}
