//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`): the
//! legacy form every client falls back to, and the aggregated form
//! (`apidiscovery.k8s.io/v2`, one document for `/api` and one for `/apis`)
//! that kubectl and kube-rs ask for first.

use serde_json::{Value, json};

use crate::registry::{Extra, Registry, ResourceType};

pub(crate) fn version() -> Value {
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

pub(crate) fn api_versions(addr: &str) -> Value {
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

pub(crate) fn api_groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(registry: &Registry, group: &str) -> Option<Value> {
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
    with_aliases(rt, &mut e);
    if !rt.create_only {
        e["storageVersionHash"] = json!(storage_version_hash(rt));
    }
    e
}

/// Upstream's `StorageVersionHash`: the first 8 bytes of the SHA-256 of
/// `group/version/kind` at the storage version, in base64. Clients compare
/// it to notice that a resource's storage version moved (the storage
/// version migrator does).
fn storage_version_hash(rt: &ResourceType) -> String {
    use base64::Engine;
    use sha2::Digest;
    let gvk = format!("{}/{}/{}", rt.group, rt.storage_version(), rt.kind);
    let digest = sha2::Sha256::digest(gvk.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// A resource entry's `shortNames` and `categories` (both forms of discovery
/// leave them out when empty).
fn with_aliases(rt: &ResourceType, e: &mut Value) {
    if !rt.short_names.is_empty() {
        e["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        e["categories"] = json!(rt.categories);
    }
}

/// A subresource as discovery names it: its name, the kind it answers with
/// (and that kind's group/version when not the parent's) and its verbs.
struct Sub<'a> {
    name: &'static str,
    kind: &'a str,
    group_version: Option<(&'static str, &'static str)>,
    verbs: &'static [&'static str],
}

/// The subresources `rt` serves.
fn subresources(rt: &ResourceType) -> Vec<Sub<'_>> {
    let sub = |name, kind, group_version, verbs| Sub {
        name,
        kind,
        group_version,
        verbs,
    };
    let mut subs = Vec::new();
    if rt.status {
        subs.push(sub("status", &rt.kind, None, &["get", "patch", "update"]));
    }
    if rt.scale.is_some() {
        subs.push(sub(
            "scale",
            "Scale",
            Some(("autoscaling", "v1")),
            &["get", "patch", "update"],
        ));
    }
    for extra in &rt.extras {
        subs.push(match extra {
            Extra::Binding => sub("binding", "Binding", None, &["create"]),
            Extra::Eviction => sub("eviction", "Eviction", Some(("policy", "v1")), &["create"]),
            Extra::Log => sub("log", &rt.kind, None, &["get"]),
            Extra::Exec => sub("exec", "PodExecOptions", None, &["create", "get"]),
            Extra::Attach => sub("attach", "PodAttachOptions", None, &["create", "get"]),
            Extra::Finalize => sub("finalize", &rt.kind, None, &["update"]),
            Extra::Approval => sub("approval", &rt.kind, None, &["get", "update"]),
            Extra::Token => sub(
                "token",
                "TokenRequest",
                Some(("authentication.k8s.io", "v1")),
                &["create"],
            ),
        });
    }
    subs
}

fn sub_entry(rt: &ResourceType, sub: &Sub) -> Value {
    let mut e = json!({
        "name": format!("{}/{}", rt.resource, sub.name),
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": sub.kind,
        "verbs": sub.verbs,
    });
    if let Some((g, v)) = sub.group_version {
        e["group"] = json!(g);
        e["version"] = json!(v);
    }
    e
}

/// The types of `group` served at `version`.
fn served<'a>(
    all: &'a [std::sync::Arc<ResourceType>],
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'a std::sync::Arc<ResourceType>> {
    all.iter()
        .filter(move |rt| rt.group == group && rt.versions.iter().any(|v| v == version))
}

pub(crate) fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    let all = registry.all();
    for rt in served(&all, group, version) {
        resources.push(resource_entry(rt));
        for sub in subresources(rt) {
            resources.push(sub_entry(rt, &sub));
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

/// The media type of an aggregated discovery answer.
pub(crate) const AGGREGATED: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether `Accept` asks for aggregated discovery v2 (kubectl, client-go and
/// kube-rs list it first, then plain JSON).
pub(crate) fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut params = range.split(';').map(str::trim);
        let media = params.next().unwrap_or("");
        let params: Vec<&str> = params.collect();
        media == "application/json"
            && params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
    })
}

/// One version of a group as `APIVersionDiscovery`.
fn version_discovery(all: &[std::sync::Arc<ResourceType>], group: &str, version: &str) -> Value {
    let resources: Vec<Value> = served(all, group, version)
        .map(|rt| {
            let kind = |kind: &str, gv: Option<(&str, &str)>| {
                let (g, v) = gv.unwrap_or((group, version));
                json!({"group": g, "version": v, "kind": kind})
            };
            let mut r = json!({
                "resource": rt.resource,
                "responseKind": kind(&rt.kind, None),
                "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                "singularResource": rt.singular,
                "verbs": rt.verbs(),
            });
            with_aliases(rt, &mut r);
            let subs: Vec<Value> = subresources(rt)
                .iter()
                .map(|s| {
                    json!({"subresource": s.name, "responseKind": kind(s.kind, s.group_version),
                        "verbs": s.verbs})
                })
                .collect();
            if !subs.is_empty() {
                r["subresources"] = json!(subs);
            }
            r
        })
        .collect();
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

/// The aggregated discovery document of `/api` (`core`: the legacy group
/// alone) or of `/apis` (every named group, preferred version first).
pub(crate) fn aggregated(registry: &Registry, core: bool) -> Value {
    let all = registry.all();
    let groups = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        registry.groups()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| version_discovery(&all, g, v))
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !g.is_empty() {
                metadata["name"] = json!(g);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {}, "items": items})
}
