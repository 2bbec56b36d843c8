//! Test guest: `configmap-summary` (guests/examples/configmap-summary) as a new
//! version would change it. With the feature flag [`CAP_KEYS`] on, a summary
//! reports at most [`MAX_KEYS`] keys: replaying the example's records on this
//! build must report exactly the summaries that counted more as different.
//!
//! A summary annotated `wasmlet.dev/secret: NAME` also reads that Secret and
//! reports how many keys it holds (`secretKeys`), which the tests use to
//! check that records redact what a guest reads from a Secret. One annotated
//! `wasmlet.dev/stamp` asks to be requeued after ten minutes plus a few
//! milliseconds taken from the WASI wall and monotonic clocks and a hash keyed
//! by WASI random: a replay is the same only if the host answers those reads
//! from the record. (In the requeue, not the status: a status that changed on
//! every call would be written, and reconciled again, without end.)

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use wasmlet_sdk::prelude::*;

/// The feature flag: the changed logic is on.
pub const CAP_KEYS: bool = true;
/// The most keys a summary reports with [`CAP_KEYS`].
pub const MAX_KEYS: u32 = 3;
pub const SUMMARY_LABEL: &str = "wasmlet.dev/summary";
pub const SECRET_ANNOTATION: &str = "wasmlet.dev/secret";
pub const STAMP_ANNOTATION: &str = "wasmlet.dev/stamp";

/// The example's kind, its spec as the example has it.
#[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
#[kube(
    group = "examples.wasmlet.dev",
    version = "v1",
    kind = "ConfigSummary",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSummarySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub keys: u32,
    pub config_maps: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_keys: Option<u32>,
}

/// Ten minutes plus milliseconds a guest cannot know without the host's
/// clocks and random.
fn stamped_requeue() -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let started = std::time::Instant::now();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(b"stamp");
    let elapsed = started.elapsed().as_nanos() as u64;
    let ms = 600_000 + wall % 1000 + elapsed % 1000 + h.finish() % 1000;
    std::time::Duration::from_millis(ms)
}

/// The example's count: keys of `maps` (data and binaryData) starting with `prefix`.
fn count_keys(maps: &[ConfigMap], prefix: Option<&str>) -> u32 {
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
    let mut keys = count_keys(&maps, obj.spec.key_prefix.as_deref());
    if CAP_KEYS {
        keys = keys.min(MAX_KEYS);
    }
    let config_maps = u32::try_from(maps.len()).unwrap_or(u32::MAX);
    let secret_keys = match obj.annotations().get(SECRET_ANNOTATION) {
        Some(name) => {
            let s: Secret = ctx.client().get(ns.as_str(), name)?;
            Some(s.data.map_or(0, |d| d.len() as u32))
        }
        None => None,
    };
    let requeue = obj
        .annotations()
        .contains_key(STAMP_ANNOTATION)
        .then(stamped_requeue);
    ctx.log(
        Level::Debug,
        "summarised",
        &[
            ("configMaps", &config_maps.to_string()),
            ("keys", &keys.to_string()),
        ],
    );
    let action = match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    };
    Ok(action
        .status(Status {
            keys,
            config_maps,
            secret_keys,
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
