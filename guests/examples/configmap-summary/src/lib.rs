//! `configmap-summary`: for each `ConfigSummary` (examples.wasmlet.dev/v1), counts the
//! data keys of the ConfigMaps in its namespace labelled
//! `wasmlet.dev/summary=<its name>` and reports them in its status with the condition
//! `Summarised`. The manifest (`configmap-summary.toml`) makes a change to such a
//! ConfigMap requeue its ConfigSummary (`map = "label:wasmlet.dev/summary"`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wasmlet_sdk::prelude::*;

/// The label that ties a ConfigMap to the ConfigSummary named by its value.
pub const SUMMARY_LABEL: &str = "wasmlet.dev/summary";

/// Desired state: which keys to count.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "examples.wasmlet.dev",
    version = "v1",
    kind = "ConfigSummary",
    namespaced
)]
#[kube(status = "ConfigSummaryStatus", shortname = "csum")]
#[kube(printcolumn = r#"{"name":"Keys","type":"integer","jsonPath":".status.keys"}"#)]
#[kube(
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSummarySpec {
    /// Count only keys starting with this prefix (all keys when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
}

/// Observed state. `keys` and `configMaps` are this reconciler's; `conditions` and
/// `observedGeneration` are written by the wasmlet host (never serialised when empty,
/// so the status this reconciler returns cannot clobber them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSummaryStatus {
    /// Data keys counted across the labelled ConfigMaps.
    #[serde(default)]
    pub keys: u32,
    /// How many ConfigMaps carry the label.
    #[serde(default)]
    pub config_maps: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<StatusCondition>,
}

/// A condition as the host writes it (metav1.Condition's shape; declared here so the
/// CRD schema covers it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Counts the keys of `maps` that start with `prefix`.
pub fn count_keys(maps: &[ConfigMap], prefix: Option<&str>) -> u32 {
    let keys = maps
        .iter()
        .flat_map(|cm| {
            cm.data
                .iter()
                .flat_map(|d| d.keys())
                .chain(cm.binary_data.iter().flat_map(|d| d.keys()))
        })
        .filter(|k| prefix.is_none_or(|p| k.starts_with(p)))
        .count();
    u32::try_from(keys).unwrap_or(u32::MAX)
}

fn reconcile(obj: Arc<ConfigSummary>, ctx: &Context) -> Result<Action, Error> {
    let Some(ns) = obj.namespace() else {
        return Err(Error::terminal(
            "NotNamespaced",
            "a ConfigSummary must live in a namespace",
        ));
    };
    let selector = format!("{SUMMARY_LABEL}={}", obj.name_any());
    let maps: Vec<ConfigMap> = ctx
        .client()
        .list(&ListParams::namespaced(&ns).labels(&selector))?;
    let keys = count_keys(&maps, obj.spec.key_prefix.as_deref());
    let config_maps = u32::try_from(maps.len()).unwrap_or(u32::MAX);
    ctx.log(
        Level::Debug,
        "summarised",
        &[
            ("configMaps", &config_maps.to_string()),
            ("keys", &keys.to_string()),
        ],
    );
    Ok(Action::await_change()
        .status(ConfigSummaryStatus {
            keys,
            config_maps,
            ..Default::default()
        })
        .condition(
            Condition::is_true("Summarised")
                .reason("Counted")
                .message(format!(
                    "{keys} keys in {config_maps} ConfigMaps labelled {selector}"
                )),
        ))
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile, conditions = ["Summarised"]);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::json;
    use wasmlet_sdk::testing::FakeHost;

    fn summary(name: &str, prefix: Option<&str>) -> ConfigSummary {
        let mut s = ConfigSummary::new(
            name,
            ConfigSummarySpec {
                key_prefix: prefix.map(str::to_owned),
            },
        );
        s.metadata.namespace = Some("ns".into());
        s
    }

    fn config_map(name: &str, summary: &str, keys: &[&str]) -> serde_json::Value {
        let data: serde_json::Map<String, serde_json::Value> =
            keys.iter().map(|k| ((*k).to_owned(), json!("v"))).collect();
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "ns", "labels": { SUMMARY_LABEL: summary } },
            "data": data,
        })
    }

    #[test]
    fn counts_labelled_keys_and_sets_the_condition() {
        let host = FakeHost::new();
        host.insert(config_map("a", "s1", &["x", "y"]));
        host.insert(config_map("b", "s1", &["app.z"]));
        host.insert(config_map("c", "s2", &["w"]));
        let _guard = host.install();

        let obj = Arc::new(summary("s1", None));
        let action = reconcile(obj.clone(), &Context::for_object(&*obj)).unwrap();
        assert_eq!(
            action.status_json(),
            Some(&json!({ "keys": 3, "configMaps": 2 }))
        );
        assert_eq!(action.conditions()[0].type_, "Summarised");
        assert_eq!(action.requeue_after(), None);

        let obj = Arc::new(summary("s1", Some("app.")));
        let action = reconcile(obj.clone(), &Context::for_object(&*obj)).unwrap();
        assert_eq!(
            action.status_json(),
            Some(&json!({ "keys": 1, "configMaps": 2 }))
        );
    }

    /// The shipped CRD is generated from the Rust types; regenerate it with
    /// `UPDATE_CRDS=1 cargo test -p configmap-summary`.
    #[test]
    fn shipped_crd_matches_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configsummary.crd.yaml");
        let generated = serde_yaml::to_string(&ConfigSummary::crd()).unwrap();
        if std::env::var_os("UPDATE_CRDS").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let shipped = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            shipped, generated,
            "{path} is stale: rerun with UPDATE_CRDS=1"
        );
    }
}
