//! The CRDs a plugin ships, server-side applied when a version loads: the
//! manifest's `crds` to the host's cluster, each `[clusters.NAME] crds` to
//! the named clusters that table covers (`*`: every one). Also read from
//! their YAML files.

use std::path::Path;

use super::PluginSet;
use crate::plugin::loaded::LoadError;
use crate::plugin::manifest::{Manifest, clusters};

impl PluginSet {
    /// Server-side applies the CRDs a plugin ships; a cluster that does not
    /// allow it gets a warning, not a failed plugin. A CRD that another field
    /// manager wrote is never taken over: that fails the load, naming the owner.
    pub(super) async fn apply_crds(
        &self,
        name: &str,
        manifest: &Manifest,
    ) -> Result<(), LoadError> {
        if let Some(cluster) = &self.cluster {
            apply_files(cluster.client(), name, &manifest.crds, None).await?;
        }
        let named = self.clusters();
        for cluster in named.names() {
            let cluster = cluster.as_str();
            let Some(table) =
                clusters::table_for(&manifest.clusters, cluster).filter(|t| !t.crds.is_empty())
            else {
                continue;
            };
            let Some(caches) = named.caches(cluster) else {
                continue;
            };
            // A region that does not answer must not hold the load (nor
            // the other regions) for the client's own timeouts.
            let apply = apply_files(caches.client(), name, &table.crds, Some(cluster));
            if tokio::time::timeout(NAMED_CLUSTER_WAIT, apply)
                .await
                .is_err()
            {
                tracing::warn!(plugin = %name, cluster, wait = ?NAMED_CLUSTER_WAIT, "CRDs not applied: the cluster did not answer in time");
            }
        }
        Ok(())
    }
}

/// How long a plugin's load waits for one named cluster's CRD applies.
const NAMED_CLUSTER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Applies the CRDs in `paths` with `client` (cluster `named`, or the host's).
pub(super) async fn apply_files(
    client: &kube::Client,
    name: &str,
    paths: &[std::path::PathBuf],
    named: Option<&str>,
) -> Result<(), LoadError> {
    let cluster = named.unwrap_or("(the host's)");
    let manager = format!("wasmlet-plugin-{name}");
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client.clone());
    for path in paths {
        let docs = match read_yaml_documents(path) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(plugin = %name, file = %path.display(), error = %e, "cannot read CRD file");
                continue;
            }
        };
        for doc in docs {
            let crd_name = doc
                .pointer("/metadata/name")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            match crds.get_opt(&crd_name).await {
                Ok(Some(existing)) => {
                    if let Some(owner) = foreign_owner(&existing.metadata, &manager) {
                        let in_cluster = named
                            .map(|n| format!(" in cluster \"{n}\""))
                            .unwrap_or_default();
                        return Err(LoadError::Crd {
                            path: path.display().to_string(),
                            message: format!(
                                "CustomResourceDefinition {crd_name}{in_cluster} is managed by field manager \"{owner}\", not by this plugin ({manager}); refusing to take it over"
                            ),
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(plugin = %name, crd = %crd_name, cluster, error = %e, "CRD not applied (cannot read the existing one)");
                    continue;
                }
            }
            // `force` only takes fields from earlier writes under our own
            // manager name (checked above).
            let params = kube::api::PatchParams::apply(&manager).force();
            match crds
                .patch(&crd_name, &params, &kube::api::Patch::Apply(doc))
                .await
            {
                Ok(_) => tracing::info!(plugin = %name, crd = %crd_name, cluster, "CRD applied"),
                Err(e) => {
                    tracing::warn!(plugin = %name, crd = %crd_name, cluster, error = %e, "CRD not applied")
                }
            }
        }
    }
    Ok(())
}

/// The API servers' own controllers (the CRD finalizer and conditions): their
/// fields on a CRD are not an owner's.
const SERVER_MANAGERS: &[&str] = &["kube-apiserver", "wasmlet-apiserver"];

/// A field manager other than `ours` that owns fields outside `status`
/// (status writers, such as the API server's own CRD controller, do not count).
fn foreign_owner(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ours: &str,
) -> Option<String> {
    let beyond_status =
        |m: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
            m.subresource.as_deref().unwrap_or("").is_empty()
                && m.fields_v1
                    .as_ref()
                    .and_then(|f| f.0.as_object())
                    .is_none_or(|o| o.keys().any(|k| k != "f:status"))
        };
    meta.managed_fields
        .iter()
        .flatten()
        .filter(beyond_status)
        .filter_map(|m| m.manager.clone())
        .filter(|m| !SERVER_MANAGERS.contains(&m.as_str()))
        .find(|m| m != ours)
}

/// Every YAML document in a file, as JSON values (empty documents skipped).
pub fn read_yaml_documents(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = serde_json::Value::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}
