//! Test guest: every reconcile panics, which traps the instance (wasm panics abort).
//! The host must turn that into a failed reconcile for that one key, with back-off.

use std::sync::Arc;
use wasmlet_sdk::prelude::*;

/// The example's kind (guests/examples/configmap-summary), reduced to what this guest
/// needs; the manifest selects only objects labelled for this guest.
#[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
#[kube(
    group = "examples.wasmlet.dev",
    version = "v1",
    kind = "ConfigSummary",
    namespaced,
    schema = "disabled"
)]
pub struct ConfigSummarySpec {}

fn reconcile(obj: Arc<ConfigSummary>, _ctx: &Context) -> Result<Action, Error> {
    panic!(
        "wasmlet-test-trap: reconcile of {:?} panics by design",
        obj.metadata.name
    );
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
