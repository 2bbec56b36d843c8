//! The example `ConfigSummary` kind and its ConfigMaps, as the controller
//! tests write and read them.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

/// ConfigSummaries in `default`.
pub fn summaries(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.wasmlet.dev", "v1", "ConfigSummary"),
        "configsummaries",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

pub async fn create_summary(
    api: &Api<DynamicObject>,
    name: &str,
    labels: Value,
) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
        "metadata": {"name": name, "labels": labels}, "spec": {}
    }))?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

/// A ConfigMap with `keys` data keys, labelled for ConfigSummary `summary`.
pub async fn create_configmap(
    client: &kube::Client,
    name: &str,
    summary: &str,
    keys: usize,
) -> anyhow::Result<()> {
    let data: serde_json::Map<String, Value> =
        (0..keys).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"wasmlet.dev/summary": summary}}, "data": data
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

pub fn status_keys(o: &DynamicObject) -> Option<i64> {
    o.data.pointer("/status/keys").and_then(Value::as_i64)
}

/// The `Ready` condition's status.
pub fn ready(o: &DynamicObject) -> Option<String> {
    o.data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str().map(str::to_string))
}
