//! Test guest: every reconcile allocates (and touches) 1 MiB blocks until memory runs
//! out. The host's memory cap must stop it: a refused memory.grow makes the allocator
//! fail, which aborts (traps) the instance.

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
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        blocks.push(std::hint::black_box(vec![0xA5u8; 1 << 20]));
    }
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
