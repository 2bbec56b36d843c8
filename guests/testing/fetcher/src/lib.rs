//! Test guest: every reconcile GETs the URL in the annotation `wasmlet.dev/url`
//! (with the request timeout in `wasmlet.dev/timeout-ms`, when present) and returns
//! status `{"httpStatus": <code>, "body": <text, at most 200 chars>}`; any
//! `http-error` becomes a terminal error carrying its text. Its manifest allows HTTP
//! to 127.0.0.1 only.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use wasmlet_sdk::http::Request;
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

pub const URL_ANNOTATION: &str = "wasmlet.dev/url";
pub const TIMEOUT_ANNOTATION: &str = "wasmlet.dev/timeout-ms";

fn reconcile(obj: Arc<ConfigSummary>, ctx: &Context) -> Result<Action, Error> {
    let Some(url) = obj.annotations().get(URL_ANNOTATION) else {
        return Err(Error::terminal(
            "NoUrl",
            format!("annotation {URL_ANNOTATION} is missing"),
        ));
    };
    let mut req = Request::get(url);
    if let Some(ms) = obj.annotations().get(TIMEOUT_ANNOTATION) {
        let ms: u64 = ms
            .parse()
            .map_err(|e| Error::terminal("BadTimeout", format!("{TIMEOUT_ANNOTATION}: {e}")))?;
        req = req.timeout(Duration::from_millis(ms));
    }
    let resp = ctx
        .fetch(&req)
        .map_err(|e| Error::terminal("HttpError", e.to_string()))?;
    let body: String = resp.text().chars().take(200).collect();
    Ok(Action::await_change()
        .status(serde_json::json!({ "httpStatus": resp.status, "body": body })))
}

wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
