//! The `StatefulsetRollout` custom resource (rollouts.wasmlet.dev/v1, short name
//! `sroll`): its spec, and the status this reconciler owns. The CRD shipped with
//! the plugin (`statefulsetrollout.crd.yaml`) is generated from these types.

use std::collections::BTreeMap;

#[cfg(test)]
use k8s_openapi::api::apps::v1::StatefulSetSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A percent-based, pausable rollout of one `OnDelete` StatefulSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "rollouts.wasmlet.dev",
    version = "v1",
    kind = "StatefulsetRollout",
    namespaced,
    shortname = "sroll",
    status = "StatefulsetRolloutStatus"
)]
// `kubectl get sroll`: the target share beside the deployed one, the pod
// counts with their total (a printer column holds one field, so READY and
// REPLICAS are two), and whether the rollout is paused.
#[kube(printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(
    printcolumn = r#"{"name":"Target","type":"integer","description":"The percent of pods the rollout is to update (spec.percent)","jsonPath":".spec.percent"}"#
)]
#[kube(
    printcolumn = r#"{"name":"Deployed","type":"integer","description":"The percent of pods updated so far","jsonPath":".status.percentDeployed"}"#
)]
#[kube(printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas"}"#)]
#[kube(printcolumn = r#"{"name":"Updated","type":"integer","jsonPath":".status.updatedReplicas"}"#)]
#[kube(printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#)]
#[kube(printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".status.paused"}"#)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
#[serde(rename_all = "camelCase")]
pub struct StatefulsetRolloutSpec {
    /// The StatefulSet to manage (apps/v1: `metadata` and `spec`); its
    /// `updateStrategy.type` must be `OnDelete`. Its schema is apps/v1's, so
    /// the API server refuses (`kubectl`'s strict field validation) or prunes
    /// with a warning a misspelled field, as it does for a StatefulSet.
    #[cfg_attr(test, schemars(schema_with = "embedded_statefulset"))]
    #[cfg_attr(not(test), schemars(schema_with = "any_object"))]
    pub statefulset: serde_json::Value,
    /// How many of the set's pods (0-100 %) should run the new template.
    #[schemars(range(min = 0, max = 100))]
    pub percent: i32,
    /// `true` stops evictions until set back to `false`.
    #[serde(default)]
    pub pause_requested: bool,
    /// The least time between two batches of evictions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_pod_eviction_interval_seconds: Option<i64>,
    /// A new value retries a failed rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_identity: Option<String>,
    /// The chat channel notifications go to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<Notifications>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<Callback>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_discovery: Option<ServiceDiscovery>,
    /// For the PodDisruptionBudget created when none selects the pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_unavailable: Option<IntOrString>,
    /// A rollout that makes no progress for this long fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i64>,
}

/// The wasm build's stand-in for [`embedded_statefulset`]: the plugin never
/// generates its CRD (the host applies the shipped YAML), so it goes without
/// k8s-openapi's `schemars` feature and apps/v1's schema.
#[cfg(not(test))]
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// `spec.statefulset`: the metadata fields the operator uses and apps/v1's
/// StatefulSetSpec schema, so unknown fields are refused or pruned at
/// admission (on any API server) instead of being dropped unseen later. The
/// shipped CRD is generated from it by a unit test (`shipped_crd_matches_the_types`).
#[cfg(test)]
fn embedded_statefulset(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    // apps/v1's descriptions are left out: they would make the CRD several
    // times larger for nothing a rollout's author reads here.
    let mut spec = generator.subschema_for::<StatefulSetSpec>().to_value();
    strip_descriptions(&mut spec);
    let strings = schemars::json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
    });
    schemars::json_schema!({
        "type": "object",
        "properties": {
            "metadata": {
                "description": "The StatefulSet's name (default: the rollout's), labels and annotations.",
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "labels": strings,
                    "annotations": strings,
                },
            },
            "spec": spec,
        },
        "required": ["spec"],
    })
}

fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    })
}

#[cfg(test)]
fn strip_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("description")
                .is_some_and(serde_json::Value::is_string)
            {
                m.remove("description");
            }
            m.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// A Slack-compatible Web API (`chat.postMessage`, `chat.update`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Notifications {
    /// The API's base URL, e.g. `https://slack.com/api`.
    pub url: String,
    /// The Secret (in the rollout's namespace) holding the Bearer token.
    pub token_secret: SecretKey,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    pub name: String,
    /// The data key (default `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Where the end of the rollout is reported, once per stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Callback {
    pub url: String,
    pub stage_id: String,
}

/// Consul services whose health gates each step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDiscovery {
    /// Consul's HTTP API (default `http://127.0.0.1:8500`, the local agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub dc: String,
    pub service_names: Vec<String>,
}

/// Observed state. Every field is serialised (absent ones as `null`) so the
/// host's merge of this status clears what no longer holds; `conditions` and
/// `observedGeneration` are the host's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulsetRolloutStatus {
    #[serde(default)]
    pub phase: String,
    #[serde(default)]
    pub percent_deployed: i32,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub updated_replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub ready_replicas_service_discovery: Option<i32>,
    #[serde(default)]
    pub paused: bool,
    /// The StatefulSet was deleted from outside (and recreated).
    #[serde(default)]
    pub deleted: bool,
    #[serde(default)]
    pub pods: Vec<PodInfo>,
    /// Seconds until the next reconcile, when one is due.
    #[serde(default)]
    pub reconcile_after: Option<i64>,
    #[serde(default)]
    pub last_updated: Option<String>,
    /// The stage id of the last callback delivered (kept for rollouts whose
    /// callback predates `lastCallback`).
    #[serde(default)]
    pub last_callback_stage_id: Option<String>,
    /// The last callback delivered: one per (stage id, rolloutIdentity,
    /// generation) and outcome.
    #[serde(default)]
    pub last_callback: Option<CallbackKey>,
    #[serde(default)]
    pub build_metadata: Option<BuildMetadata>,
    #[serde(default)]
    pub notification_message: Option<NotificationMessage>,
    #[serde(default)]
    pub consul_services: Vec<String>,
    #[serde(default)]
    pub statefulset_name: Option<String>,
    /// The StatefulSet carries the spec of this generation.
    #[serde(default)]
    pub statefulset_spec_current: bool,
    #[serde(default)]
    pub rollout_identity: Option<String>,
    /// RFC 3339 time of the last batch of evictions.
    #[serde(default)]
    pub last_eviction_time: Option<String>,
    /// The pods of the last batch.
    #[serde(default)]
    pub last_evicted: Vec<String>,
    /// RFC 3339 time the rollout last made progress (for the deadline).
    #[serde(default)]
    pub last_progress_time: Option<String>,
    /// The generation a final phase (RolloutDone / RolloutFailed) is for.
    #[serde(default)]
    pub final_generation: Option<i64>,
    #[serde(default)]
    pub callback_attempts: i32,
    #[serde(default)]
    pub next_callback_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<StatusCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodInfo {
    pub name: String,
    pub revision: String,
    pub ready: bool,
    #[serde(default)]
    pub in_service_discovery: Option<bool>,
}

/// What one callback reports: a retry through a new `rolloutIdentity`, or
/// any new generation, is a new report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackKey {
    pub stage_id: String,
    #[serde(default)]
    pub rollout_identity: Option<String>,
    pub generation: i64,
    /// `success` or `failure`.
    pub outcome: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildMetadata {
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub commit: Option<String>,
}

/// The chat message this rollout keeps updating.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationMessage {
    pub channel: String,
    pub ts: String,
    /// Thread replies holding pod pages beyond the first (50 pods each).
    #[serde(default)]
    pub pages: Vec<String>,
    /// The generation the message is about (a new one opens a new message).
    #[serde(default)]
    pub generation: i64,
    /// A digest of what was last sent per message (skips unchanged updates).
    #[serde(default)]
    pub sent: BTreeMap<String, String>,
}

/// A condition as the host writes it (declared so the CRD schema keeps it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCondition {
    #[serde(rename = "type")]
    pub type_: String,
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
