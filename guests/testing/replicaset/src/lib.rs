//! Test guest: a ReplicaSet-like reconciler (seed 003's expectations examples).
//! For a `ConfigSet` it keeps exactly `spec.replicas` ConfigMaps labelled
//! `testing.wasmlet.dev/set=<name>`, owned by the ConfigSet: it counts them with
//! `ctx.client().list` (the host's cache), creates the missing ones with `generateName`, and
//! deletes the newest surplus ones. It trusts the cache completely, exactly like a
//! naive controller: without the host's expectations a lagging cache makes it create
//! 7 ConfigMaps for 5, or scale 5 → 1 when asked for 3.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use wasmlet_sdk::prelude::*;

/// The label tying a ConfigMap to its ConfigSet.
pub const SET_LABEL: &str = "testing.wasmlet.dev/set";

#[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
#[kube(
    group = "testing.wasmlet.dev",
    version = "v1",
    kind = "ConfigSet",
    namespaced,
    schema = "disabled"
)]
pub struct ConfigSetSpec {
    pub replicas: i64,
}

fn reconcile(obj: Arc<ConfigSet>, ctx: &Context) -> Result<Action, Error> {
    let Some(ns) = obj.namespace() else {
        return Err(Error::terminal(
            "NotNamespaced",
            "a ConfigSet must live in a namespace",
        ));
    };
    let name = obj.name_any();
    let selector = format!("{SET_LABEL}={name}");
    let mut maps: Vec<ConfigMap> = ctx
        .client()
        .list(&ListParams::namespaced(&ns).labels(&selector))?;
    maps.retain(|m| m.metadata.deletion_timestamp.is_none());
    let want = usize::try_from(obj.spec.replicas.max(0)).unwrap_or(0);
    let have = maps.len();
    if have < want {
        let owner = OwnerReference {
            api_version: "testing.wasmlet.dev/v1".into(),
            kind: "ConfigSet".into(),
            name: name.clone(),
            uid: obj.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        for _ in have..want {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{name}-")),
                    namespace: Some(ns.clone()),
                    labels: Some(BTreeMap::from([(SET_LABEL.to_string(), name.clone())])),
                    owner_references: Some(vec![owner.clone()]),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([("set".to_string(), name.clone())])),
                ..Default::default()
            };
            ctx.client()
                .create(&cm)
                .map_err(|e| Error::transient("CreateFailed", e.to_string()))?;
        }
    } else if have > want {
        // Newest first: creation time, then resourceVersion (this server's are numbers).
        maps.sort_by_key(|m| {
            let created = m.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let rv: u64 = m
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            std::cmp::Reverse((created, rv))
        });
        for m in &maps[..have - want] {
            ctx.client()
                .delete::<ConfigMap>(ns.as_str(), &m.name_any(), &DeleteParams::default())
                .map_err(|e| Error::transient("DeleteFailed", e.to_string()))?;
        }
    }
    ctx.log(
        Level::Debug,
        "scaled",
        &[("had", &have.to_string()), ("want", &want.to_string())],
    );
    Ok(Action::await_change().status(serde_json::json!({ "replicas": want, "seen": have })))
}

wasmlet_sdk::reconciler!(ConfigSet, reconcile);
