//! Test guest: every reconcile loops forever. The host's per-call deadline (epoch
//! interruption) must stop it.

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

fn reconcile(_obj: Arc<ConfigSummary>, _ctx: &Context) -> Result<Action, Error> {
    let mut n: u64 = 0;
    loop {
        // black_box keeps the loop a real loop (with back edges the epoch check sees).
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
