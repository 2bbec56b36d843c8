//! Test guest for host/benches/versus.rs: status `{summary: "size=N"}` from the
//! Widget's `spec.size`, no calls; the benchmark runs the same logic as a native
//! kube-runtime `Controller` to compare the two side by side.

use std::sync::Arc;
use wasmlet_sdk::prelude::*;

#[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
#[kube(
    group = "bench.wasmlet.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    schema = "disabled"
)]
pub struct WidgetSpec {
    pub size: i64,
}

fn reconcile(obj: Arc<Widget>, _ctx: &Context) -> Result<Action, Error> {
    let summary = format!("size={}", obj.spec.size);
    Ok(Action::await_change().status(serde_json::json!({ "summary": summary })))
}

wasmlet_sdk::reconciler!(Widget, reconcile);
