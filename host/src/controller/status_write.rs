//! The host's status PATCH, reading back only what the host keeps of the
//! answer: the resourceVersion the write produced and the status the server
//! stored. The whole object (its `metadata.managedFields` above all, which
//! grow with every host-owned condition) is skipped, not built into a
//! `DynamicObject` that would be dropped at once: parsing it was about 6 % of
//! the controller's CPU at concurrency 16 in the versus bench (issue 16).
//!
//! Any Kubernetes API server answers a PATCH of `/status` with the object, so
//! nothing here depends on the embedded plane.

use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cluster::ClientError;

/// What the server answered to a status PATCH.
#[derive(Debug, Deserialize)]
pub(super) struct Stored {
    #[serde(default)]
    metadata: StoredMeta,
    /// `None`: the server kept no status (every field pruned).
    #[serde(default)]
    status: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct StoredMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl Stored {
    pub(super) fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    /// The resourceVersion the write produced and the stored status, `{}`
    /// when absent (as [`crate::cluster::CachedObject::status`]), both moved out.
    pub(super) fn into_parts(self) -> (Option<String>, Value) {
        let status = self.status.unwrap_or_else(|| Value::Object(Map::new()));
        (self.metadata.resource_version, status)
    }
}

/// PATCHes `name`'s status subresource in the collection at `url` (as
/// `Resource::url_path` gives it) through `client`.
pub(super) async fn patch_status(
    url: String,
    client: &kube::Client,
    name: &str,
    params: &PatchParams,
    patch: &Patch<Value>,
) -> Result<Stored, ClientError> {
    let mut req = kube::core::Request::new(url)
        .patch_subresource("status", name, params, patch)
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    // As `Api::patch_status` tags it (kube's tracing and metrics layers).
    req.extensions_mut().insert("patch_status");
    Ok(client.request::<Stored>(req).await?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Stored;

    #[test]
    fn the_answer_is_read_for_its_resource_version_and_status_only() {
        let answer = json!({
            "apiVersion": "bench.wasmlet.dev/v1", "kind": "Widget",
            "metadata": {
                "name": "w1", "resourceVersion": "42",
                "managedFields": [{"manager": "wasmlet", "fieldsV1": {"f:status": {}}}],
            },
            "spec": {"size": 3},
            "status": {"summary": "size=3", "observedGeneration": 1},
        });
        let s: Stored = serde_json::from_value(answer).unwrap();
        assert_eq!(s.resource_version(), Some("42"));
        let (rv, status) = s.into_parts();
        assert_eq!(rv.as_deref(), Some("42"));
        assert_eq!(
            status,
            json!({"summary": "size=3", "observedGeneration": 1})
        );
    }

    #[test]
    fn a_pruned_status_reads_as_empty() {
        let s: Stored =
            serde_json::from_value(json!({"metadata": {"resourceVersion": "7"}})).unwrap();
        assert_eq!(s.into_parts().1, json!({}));
    }
}
