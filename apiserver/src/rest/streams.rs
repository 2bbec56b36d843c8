//! `pods/exec` and `pods/attach`: forwarded to the kubelet of the node that
//! runs the pod as an upgraded connection (a websocket speaking
//! `v5.channel.k8s.io`, what `kubectl` 1.30+ asks for), authenticated with
//! this server's kubelet client certificate as `pods/log` is. Once the
//! kubelet answers 101, the two connections are spliced byte for byte: the
//! kubelet does the channel protocol. As kube-apiserver, the upgrade needs
//! `create` on the subresource (RBAC), also for the websocket's GET.

use axum::body::Body;
use axum::response::Response;
use http::header;
use http_body_util::BodyExt;
use serde_json::Value;

use super::Target;
use crate::ApiState;
use crate::logs::{client_for, container_of, kubelet_base};
use crate::query::parse_query;
use crate::status::{ApiError, ApiResult};

/// Headers of the upgrade handshake, passed through both ways.
const HANDSHAKE: [header::HeaderName; 5] = [
    header::CONNECTION,
    header::UPGRADE,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
];

pub(crate) async fn forward(
    state: &ApiState,
    t: &Target,
    parts: &mut http::request::Parts,
) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let pod = state.resources.get(&t.rt, t.ns(), name)?.value()?;
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if let Some(phase @ ("Succeeded" | "Failed")) = phase {
        return Err(ApiError::bad_request(format!(
            "cannot exec into or attach to a container in a completed pod; current phase is {phase}"
        )));
    }
    let query = parse_query(&parts.uri);
    let container = container_of(&pod, &query)?;
    let websocket = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !websocket {
        return Err(ApiError::bad_request(format!(
            "{} is served over websockets only (v5.channel.k8s.io); SPDY is not served",
            t.subresource.as_deref().unwrap_or("exec")
        )));
    }
    let Some(upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
        return Err(ApiError::bad_request(
            "exec and attach need an upgraded connection (a websocket)",
        ));
    };
    let sub = t.subresource.as_deref().unwrap_or("exec");
    let ns = t.ns();
    let raw = parts.uri.query().unwrap_or("");
    let base = kubelet_base(state, node)?;
    let mut req = http::Request::builder()
        .method(parts.method.clone())
        .uri(format!("/{sub}/{ns}/{name}/{container}?{raw}"));
    for h in &HANDSHAKE {
        for v in parts.headers.get_all(h) {
            req = req.header(h, v);
        }
    }
    let req = req
        .body(kube::client::Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let client = client_for(state, &base)?;
    let mut res = client.send(req).await.map_err(|e| {
        ApiError::new(
            503,
            "ServiceUnavailable",
            format!("node {node}'s kubelet at {base}: {e}"),
        )
    })?;
    let status = res.status();
    if status != http::StatusCode::SWITCHING_PROTOCOLS {
        let body = res
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let msg = String::from_utf8_lossy(&body).trim().to_string();
        let reason = match status.as_u16() {
            404 => "NotFound",
            429 => "TooManyRequests",
            _ => "BadRequest",
        };
        return Err(ApiError::new(status.as_u16(), reason, msg));
    }
    let kubelet = hyper::upgrade::on(&mut res);
    let mut answer = Response::builder().status(http::StatusCode::SWITCHING_PROTOCOLS);
    for h in &HANDSHAKE {
        for v in res.headers().get_all(h) {
            answer = answer.header(h, v);
        }
    }
    if let Some(accept) = res.headers().get(header::SEC_WEBSOCKET_ACCEPT) {
        answer = answer.header(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    tokio::spawn(async move {
        let (client, kubelet) = tokio::join!(upgrade, kubelet);
        let (Ok(client), Ok(kubelet)) = (client, kubelet) else {
            tracing::debug!("an exec or attach upgrade did not complete");
            return;
        };
        let mut a = hyper_util::rt::TokioIo::new(client);
        let mut b = hyper_util::rt::TokioIo::new(kubelet);
        let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
    });
    answer
        .body(Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))
}
