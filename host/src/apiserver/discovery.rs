//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`), the
//! legacy (non-aggregated) form every client falls back to.

use serde_json::{Value, json};

use super::registry::{Extra, Registry, ResourceType};

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": format!("v1.33.0+wasmlet-{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub fn api_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

pub fn api_groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    registry
        .groups()
        .into_iter()
        .find(|(g, _)| g == group)
        .map(|(g, vs)| group_doc(&g, &vs))
}

fn resource_entry(rt: &ResourceType) -> Value {
    let mut e = json!({
        "name": rt.resource,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        e["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        e["categories"] = json!(rt.categories);
    }
    e
}

fn sub_entry(
    rt: &ResourceType,
    sub: &str,
    kind: &str,
    group_version: Option<(&str, &str)>,
    verbs: &[&str],
) -> Value {
    let mut e = json!({
        "name": format!("{}/{sub}", rt.resource),
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if let Some((g, v)) = group_version {
        e["group"] = json!(g);
        e["version"] = json!(v);
    }
    e
}

pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for rt in registry.all() {
        if rt.group != group || !rt.versions.iter().any(|v| v == version) {
            continue;
        }
        resources.push(resource_entry(&rt));
        if rt.status {
            resources.push(sub_entry(
                &rt,
                "status",
                &rt.kind,
                None,
                &["get", "patch", "update"],
            ));
        }
        if rt.scale.is_some() {
            resources.push(sub_entry(
                &rt,
                "scale",
                "Scale",
                Some(("autoscaling", "v1")),
                &["get", "patch", "update"],
            ));
        }
        for extra in &rt.extras {
            resources.push(match extra {
                Extra::Binding => sub_entry(&rt, "binding", "Binding", None, &["create"]),
                Extra::Eviction => sub_entry(
                    &rt,
                    "eviction",
                    "Eviction",
                    Some(("policy", "v1")),
                    &["create"],
                ),
                Extra::Log => sub_entry(&rt, "log", &rt.kind, None, &["get"]),
                Extra::Finalize => sub_entry(&rt, "finalize", &rt.kind, None, &["update"]),
                Extra::Token => sub_entry(
                    &rt,
                    "token",
                    "TokenRequest",
                    Some(("authentication.k8s.io", "v1")),
                    &["create"],
                ),
            });
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
