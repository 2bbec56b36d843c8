//! `pods/log`: forwarded to the kubelet endpoint of the node that runs the pod.
//!
//! The node agent (and its kubelet API) is not built yet, so for now this
//! answers with a clear error naming the node and what it lacks.

use axum::response::Response;
use serde_json::Value;

use super::ApiState;
use super::rest::Query;
use super::status::{ApiError, ApiResult};

pub async fn proxy(state: &ApiState, _pod: &Value, node: &str, _query: &Query) -> ApiResult<Response> {
    let nodes = state.registry.lookup("", "v1", "nodes").expect("nodes are built in");
    let node_obj = state.resources.get(&nodes, "", node)?.value();
    let port = node_obj.pointer("/status/daemonEndpoints/kubeletEndpoint/Port").and_then(Value::as_i64);
    Err(ApiError::new(
        503,
        "ServiceUnavailable",
        match port {
            None => format!("node {node} publishes no kubelet endpoint; its agent cannot serve logs"),
            Some(p) => format!("logs from node {node} (kubelet port {p}) are not proxied yet by this server"),
        },
    ))
}
