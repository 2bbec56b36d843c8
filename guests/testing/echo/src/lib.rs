//! Test guest: every reconcile returns the status `{"echo": <the object's spec>}` and
//! makes no calls, so a benchmark sees only the host's per-call cost plus the guest's
//! JSON work (an object of N bytes in gives about N bytes of status out).

use std::sync::Arc;
use wasmlet_sdk::prelude::*;

/// The example's kind (guests/examples/configmap-summary) with its spec kept as
/// arbitrary JSON; the manifest selects only objects labelled for this guest.
#[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
#[kube(
    group = "examples.wasmlet.dev",
    version = "v1",
    kind = "ConfigSummary",
    namespaced,
    schema = "disabled"
)]
pub struct ConfigSummarySpec {
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

fn reconcile(obj: Arc<ConfigSummary>, _ctx: &Context) -> Result<Action, Error> {
    Ok(Action::await_change().status(serde_json::json!({ "echo": obj.spec })))
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
