//! Test guest: every reconcile lists Secrets, which its manifest does not grant. The
//! host must refuse the call (`denied`, logged and counted); the SDK turns that into a
//! terminal error with reason `Forbidden`.

use k8s_openapi::api::core::v1::Secret;
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

fn reconcile(_obj: Arc<ConfigSummary>, ctx: &Context) -> Result<Action, Error> {
    let secrets: Vec<Secret> = ctx.client().list(&ListParams::all())?;
    // Reached only if the host wrongly allowed the call.
    Err(Error::terminal(
        "NotDenied",
        format!("listing Secrets was allowed ({} found)", secrets.len()),
    ))
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
