//! `[clusters.NAME]`: what a plugin may do in the host's named clusters
//! (`--cluster NAME=KUBECONFIG`), one table per cluster, in the form of
//! `[permissions] rules`. `[clusters."*"]` grants its rules in every named
//! cluster the plugin's own table does not name, so a global reconciler
//! need not list each region; a cluster neither names is out of reach.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Rule;

/// The name that stands for any named cluster.
pub(crate) const ANY: &str = "*";

/// One `[clusters.NAME]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct ClusterPermissions {
    #[serde(default)]
    pub(crate) rules: Vec<Rule>,
    /// CRDs (files beside the manifest, as the top-level `crds`) the host
    /// server-side applies to each of these clusters when the plugin loads:
    /// the kinds the plugin writes there, so a new region needs no manual step.
    #[serde(default)]
    pub(crate) crds: Vec<std::path::PathBuf>,
}

/// The `[clusters]` tables by cluster name.
pub(crate) type Clusters = BTreeMap<String, ClusterPermissions>;

/// The table that applies in `cluster`: its own, else `*`'s; `None` when
/// the manifest names neither.
pub(crate) fn table_for<'a>(
    clusters: &'a Clusters,
    cluster: &str,
) -> Option<&'a ClusterPermissions> {
    clusters.get(cluster).or_else(|| clusters.get(ANY))
}

/// The rules that apply in `cluster`: its own table's, else `*`'s; `None`
/// when the manifest grants nothing there.
pub(crate) fn rules_for<'a>(clusters: &'a Clusters, cluster: &str) -> Option<&'a [Rule]> {
    table_for(clusters, cluster).map(|c| c.rules.as_slice())
}

/// The table's name in messages, quoted like a TOML key that is not bare
/// (`clusters."*"`).
pub(crate) fn table_name(name: &str) -> String {
    if name == ANY {
        "clusters.\"*\"".to_string()
    } else {
        format!("clusters.{name}")
    }
}

/// Whether a `cluster` that a watch names (a name, or `*`) covers `name`.
pub(crate) fn covers(watched: &str, name: &str) -> bool {
    watched == ANY || watched == name
}

/// A problem with one `[clusters]` key: `(field, message)`.
pub(crate) fn check_name(name: &str) -> Result<(), (String, String)> {
    if name == ANY || crate::cluster::named::valid_name(name) {
        return Ok(());
    }
    Err((
        format!("clusters.{name}"),
        format!(
            "\"{name}\" is not a cluster name (a DNS label as in --cluster NAME=KUBECONFIG, or \"*\" for any)"
        ),
    ))
}

/// The clusters the manifest names (`*` aside) that `configured` lacks: calls
/// there will fail, which an operator should hear about when the plugin loads.
pub(crate) fn unconfigured<'a>(
    clusters: &'a Clusters,
    configured: &crate::cluster::NamedClusters,
) -> Vec<&'a str> {
    clusters
        .keys()
        .map(String::as_str)
        .filter(|n| *n != ANY && configured.get(n).is_none())
        .collect()
}
