//! `pods/log`: forwarded to the kubelet endpoint of the node that runs the pod
//! (`status.addresses` InternalIP + `status.daemonEndpoints.kubeletEndpoint`),
//! authenticated with a client certificate from this server's CA, as
//! kube-apiserver does with `--kubelet-client-certificate`.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::ApiState;
use crate::query::Query;
use crate::status::{ApiError, ApiResult};
use wasmlet_apimachinery::log_options::LogOptions;

/// One client per kubelet address.
#[derive(Default)]
pub(crate) struct KubeletClients {
    clients: Mutex<HashMap<String, kube::Client>>,
}

pub(crate) fn client_for(state: &ApiState, url: &str) -> ApiResult<kube::Client> {
    let mut clients = state
        .kubelets
        .clients
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(c) = clients.get(url) {
        return Ok(c.clone());
    }
    let (cert, key) = state
        .pki
        .client_cert(crate::auth::authz::KUBELET_CLIENT_USER)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut config = kube::Config::new(
        url.parse()
            .map_err(|e| ApiError::internal(format!("{url}: {e}")))?,
    );
    let ca = rustls_pemfile::certs(&mut state.pki.ca_pem.as_bytes())
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect();
    config.root_cert = Some(ca);
    // As kube-apiserver without --kubelet-certificate-authority: a kubelet's
    // serving certificate is often self-signed (a node agent started with
    // `wasmlet run` makes its own), so it is not verified; the kubelet still
    // authenticates *us* by our client certificate.
    config.accept_invalid_certs = true;
    config.auth_info.client_certificate_data = Some(b64.encode(cert));
    config.auth_info.client_key_data = Some(b64.encode(key).into());
    // Following logs may be quiet for long stretches.
    config.read_timeout = None;
    let client = kube::Client::try_from(config).map_err(|e| ApiError::internal(e.to_string()))?;
    clients.insert(url.to_string(), client.clone());
    Ok(client)
}

/// The numeric options, checked before the kubelet is asked: not a number is
/// 400; what upstream's `ValidatePodLogOptions` refuses is its 422
/// `PodLogOptions "POD" is invalid: ...`. Huge values are valid (everything).
fn log_options(pod: &str, query: &Query) -> ApiResult<LogOptions> {
    let opts = LogOptions::parse(query).map_err(ApiError::bad_request)?;
    let invalid = opts.validate();
    if invalid.is_empty() {
        return Ok(opts);
    }
    let causes: Vec<Value> = invalid
        .iter()
        .map(|i| {
            let message = i.text();
            let reason = if i.field.is_empty() {
                "FieldValueForbidden"
            } else {
                "FieldValueInvalid"
            };
            json!({"reason": reason, "message": message, "field": i.field})
        })
        .collect();
    let texts: Vec<String> = invalid.iter().map(|i| i.text()).collect();
    let summary = if texts.len() == 1 {
        texts[0].clone()
    } else {
        format!("[{}]", texts.join(", "))
    };
    let mut err = ApiError::new(
        422,
        "Invalid",
        format!("PodLogOptions \"{pod}\" is invalid: {summary}"),
    );
    err.details = Some(json!({"name": pod, "kind": "PodLogOptions", "causes": causes}));
    Err(err)
}

/// The container a `pods/log`, `exec` or `attach` request names (`container`),
/// or the pod's only one: upstream's messages when it names none or another.
pub(crate) fn container_of(pod: &Value, query: &Query) -> ApiResult<String> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let containers: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let inits: Vec<&str> = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    match query.get("container").filter(|c| !c.is_empty()) {
        Some(c) if containers.contains(&c.as_str()) || inits.contains(&c.as_str()) => Ok(c.clone()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].to_string()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            containers.join(" ")
        ))),
    }
}

/// `https://IP:PORT` of the node's kubelet, from its Node's status.
pub(crate) fn kubelet_base(state: &ApiState, node: &str) -> ApiResult<String> {
    let nodes = state.registry.builtin("", "v1", "nodes")?;
    let node_obj = state.resources.get(&nodes, "", node)?.value()?;
    let port = node_obj
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64);
    let ip = node_obj
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
        .and_then(|x| x["address"].as_str())
        .map(str::to_string);
    let (Some(port), Some(ip)) = (port, ip) else {
        return Err(ApiError::new(
            503,
            "ServiceUnavailable",
            format!("node {node} publishes no kubelet endpoint"),
        ));
    };
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip
    };
    Ok(format!("https://{host}:{port}"))
}

pub(crate) async fn proxy(
    state: &ApiState,
    pod: &Value,
    node: &str,
    query: &Query,
) -> ApiResult<Response> {
    let ns = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let container = container_of(pod, query)?;
    let opts = log_options(name, query)?;
    let base = kubelet_base(state, node)?;
    // The serializer is not Send: finish it before any await.
    let q = {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for k in ["follow", "timestamps", "previous"] {
            if let Some(v) = query.get(k) {
                q.append_pair(k, v);
            }
        }
        for (k, v) in opts.to_pairs() {
            q.append_pair(k, &v);
        }
        q.finish()
    };
    let path = format!("/containerLogs/{ns}/{name}/{container}?{q}");
    let client = client_for(state, &base)?;
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let res = client.send(req).await.map_err(|e| {
        ApiError::new(
            503,
            "ServiceUnavailable",
            format!("node {node}'s kubelet at {base}: {e}"),
        )
    })?;
    let status = res.status();
    if !status.is_success() {
        let body = res
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let msg = String::from_utf8_lossy(&body).trim().to_string();
        return Err(ApiError::new(
            status.as_u16(),
            if status.as_u16() == 404 {
                "NotFound"
            } else {
                "BadRequest"
            },
            msg,
        ));
    }
    let stream = res.into_body().into_data_stream();
    Ok(([("content-type", "text/plain")], Body::from_stream(stream)).into_response())
}
