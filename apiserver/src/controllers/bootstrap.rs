//! The plane's writes at start, through `resources` as any client's: the
//! `kubernetes` Service, Endpoints and EndpointSlice naming the API server's
//! address (as kube-apiserver's bootstrap controller), the two system
//! PriorityClasses (as its post-start hook), and the name label on
//! namespaces an older wasmlet stored without it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde_json::{Value, json};

use crate::defaults::namespace;
use crate::meta;
use crate::registry::ResourceType;
use crate::resources::{Resources, WriteOptions};
use crate::services::kubernetes_ip;

/// The address clients reach the API server at, as the Endpoints name it.
fn endpoint_ip(addr: SocketAddr) -> IpAddr {
    if addr.ip().is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        addr.ip()
    }
}

/// Creates (or points at the current address) the `kubernetes` Service, its
/// Endpoints and its EndpointSlice in `default`.
pub(crate) async fn services(resources: &Resources, addr: SocketAddr) -> anyhow::Result<()> {
    let ip = endpoint_ip(addr).to_string();
    let family = if endpoint_ip(addr).is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    };
    let port = addr.port();
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": kubernetes_ip().to_string(),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
            "sessionAffinity": "None",
        },
    });
    let ep = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    });
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": family,
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    for (group, resource, obj) in [
        ("", "services", svc),
        ("", "endpoints", ep),
        ("discovery.k8s.io", "endpointslices", slice),
    ] {
        let rt = resources.registry.builtin(group, "v1", resource)?;
        upsert(resources, &rt, obj).await?;
    }
    Ok(())
}

/// Creates `obj`, or brings the stored one's address fields up to date.
async fn upsert(resources: &Resources, rt: &ResourceType, obj: Value) -> anyhow::Result<()> {
    let name = meta::name(&obj).to_string();
    if resources.store.get(&rt.key("default", &name)).is_none() {
        match resources
            .create(
                rt,
                "v1",
                "default",
                obj.clone(),
                &WriteOptions::by(crate::MANAGER),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => anyhow::bail!("creating {} default/{name}: {e}", rt.kind),
        }
    }
    resources
        .modify(
            rt,
            "default",
            &name,
            &WriteOptions::by(crate::MANAGER),
            |old| {
                let mut new = old.clone();
                for f in ["subsets", "endpoints", "ports", "addressType"] {
                    if let Some(v) = obj.get(f) {
                        new[f] = v.clone();
                    }
                }
                if rt.resource == "services" {
                    new["spec"]["ports"] = obj["spec"]["ports"].clone();
                }
                (new != *old).then_some(new)
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("updating {} default/{name}: {e}", rt.kind))?;
    Ok(())
}

/// Labels namespaces stored before the label was defaulted (a data directory
/// from an older wasmlet), so every namespace has it.
pub(crate) async fn label_existing(resources: &Resources) {
    let Ok(nsrt) = resources.registry.builtin("", "v1", "namespaces") else {
        return;
    };
    let snap = resources.store.snapshot();
    for s in snap.range(&nsrt.prefix(None), None) {
        let (_, name) = s.namespace_name();
        let r = resources
            .modify(&nsrt, "", name, &WriteOptions::by(crate::MANAGER), |old| {
                let mut new = old.clone();
                namespace::apply(&mut new);
                (new != *old).then_some(new)
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(namespace = %name, error = %e, "labelling namespace failed");
        }
    }
}

/// Creates the system classes that are missing, as upstream's post-start hook.
pub(crate) async fn priority_classes(resources: &Resources) -> anyhow::Result<()> {
    let rt = resources
        .registry
        .builtin("scheduling.k8s.io", "v1", "priorityclasses")?;
    for (name, value) in crate::priority::SYSTEM_CLASSES {
        if resources.store.get(&rt.key("", name)).is_some() {
            continue;
        }
        let description = match name {
            "system-node-critical" => {
                "Used for system critical pods that must not be moved from their current node."
            }
            _ => {
                "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."
            }
        };
        let obj = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description});
        match resources
            .create(&rt, "v1", "", obj, &WriteOptions::default())
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => anyhow::bail!("creating the PriorityClass {name}: {e}"),
        }
    }
    Ok(())
}
