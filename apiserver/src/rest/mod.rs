//! The REST surface: `/api/v1/...` and `/apis/{group}/{version}/...` parsed into
//! a [`Target`] and handed to the verb's handler.

mod approval;
mod eviction;
mod list_body;
mod read;
mod streams;
mod subresources;
mod watch;
mod write;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use crate::ApiState;
use crate::codec::{self, Output};
use crate::metrics::{DurationLabels, RequestLabels};
use crate::registry::{Extra, ResourceType};
use crate::status::{ApiError, ApiResult};

use crate::query::MAX_BODY;

/// What a request path names.
pub(crate) struct Target {
    pub(crate) rt: Arc<ResourceType>,
    pub(crate) version: String,
    /// The request's namespace; `None` for cluster-scoped kinds or all namespaces.
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
    /// The path began with `watch/` (the deprecated watch paths): a watch
    /// whatever the query says. Read from the parsed path, never by searching
    /// it for `/watch/`, which a namespace or name may hold.
    pub(crate) watch_path: bool,
}

impl Target {
    /// The namespace objects are stored under ("" for cluster-scoped kinds).
    pub(crate) fn ns(&self) -> &str {
        if self.rt.namespaced {
            self.namespace.as_deref().unwrap_or("")
        } else {
            ""
        }
    }
}

pub(crate) use crate::query::{Query, parse_query, query_bool};

/// Parses `/api/v1/...` or `/apis/g/v/...` after the group-version.
fn parse_target(state: &ApiState, path: &str) -> ApiResult<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => {
            return Err(ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        }
    };
    let mut rest: Vec<&str> = rest.to_vec();
    let watch_path = rest.first() == Some(&"watch");
    if watch_path {
        rest.remove(0);
    }
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let lookup = |resource: &str| {
        state
            .registry
            .lookup(group, version, resource)
            .ok_or_else(not_found)
    };
    let (namespace, resource, name, sub) = match rest.as_slice() {
        [r] => (None, *r, None, None),
        ["namespaces", ns, r] if !matches!(*r, "status" | "finalize") => {
            (Some(*ns), *r, None, None)
        }
        ["namespaces", ns, r, n] => (Some(*ns), *r, Some(*n), None),
        ["namespaces", ns, r, n, s] => (Some(*ns), *r, Some(*n), Some(*s)),
        [r, n] => (None, *r, Some(*n), None),
        [r, n, s] => (None, *r, Some(*n), Some(*s)),
        _ => return Err(not_found()),
    };
    let rt = lookup(resource)?;
    if !rt.namespaced && namespace.is_some() {
        return Err(not_found());
    }
    if let Some(s) = sub {
        let known = match s {
            "status" => rt.status,
            "scale" => rt.scale.is_some(),
            "binding" => rt.extras.contains(&Extra::Binding),
            "eviction" => rt.extras.contains(&Extra::Eviction),
            "log" => rt.extras.contains(&Extra::Log),
            "exec" => rt.extras.contains(&Extra::Exec),
            "attach" => rt.extras.contains(&Extra::Attach),
            "finalize" => rt.extras.contains(&Extra::Finalize),
            "token" => rt.extras.contains(&Extra::Token),
            "approval" => rt.extras.contains(&Extra::Approval),
            _ => false,
        };
        if !known {
            return Err(not_found());
        }
    }
    Ok(Target {
        rt,
        version: version.to_string(),
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        subresource: sub.map(str::to_string),
        watch_path,
    })
}

/// JSON response with the given status code.
pub(crate) fn json_response(code: u16, body: Bytes) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn value_response(code: u16, v: &Value) -> Response {
    json_response(code, Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
}

/// Reads the body, enforcing the size limit.
pub(crate) async fn read_body(body: Body) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::too_large())
}

/// Parses a JSON or YAML body into an object.
pub(crate) fn parse_object(bytes: &[u8], content_type: &str) -> ApiResult<Value> {
    if content_type.contains("protobuf") || content_type.contains("cbor") {
        return Err(ApiError::unsupported_media_type(
            content_type,
            &["application/json", "application/yaml"],
        ));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    let v: Value = if content_type.contains("yaml") {
        // Before libyaml sees it: deep flow nesting costs it quadratic time,
        // and aliases can multiply what the document builds.
        codec::yaml::check_depth(bytes, codec::yaml::MAX_DEPTH).map_err(ApiError::bad_request)?;
        codec::yaml::check_expansion(bytes, codec::yaml::expansion_budget(bytes.len()))
            .map_err(ApiError::bad_request)?;
        serde_yaml::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))?
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(v)
}

/// The fallback handler for every resource path.
pub async fn dispatch(State(state): State<Arc<ApiState>>, req: Request) -> Response {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let query = parse_query(&uri);
    let target = parse_target(&state, uri.path()).ok();
    let watching =
        target.as_ref().is_some_and(|t| t.watch_path) || query_bool(&query, "watch") == Some(true);
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Custom resources have no protobuf form, as upstream's.
    let protobuf_ok = target.as_ref().is_some_and(|t| t.rt.builtin);
    let output = codec::negotiate(accept, protobuf_ok);
    let response = match output {
        None => ApiError::new(
            406,
            "NotAcceptable",
            if protobuf_ok {
                "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
            } else {
                "only the following media types are accepted: application/json, application/yaml"
            },
        )
        .into_response(),
        Some(output) => {
            // Long-running requests (watches, logs) have bounds of their own;
            // the rest take a place in flight (crate::inflight).
            let long_running = watching
                || target
                    .as_ref()
                    .is_some_and(|t| matches!(t.subresource.as_deref(), Some("log" | "exec" | "attach")));
            let result = if long_running {
                handle(state.clone(), req).await
            } else {
                let user = req
                    .extensions()
                    .get::<wasmlet_apimachinery::rbac::UserInfo>()
                    .cloned()
                    .unwrap_or_default();
                let user = (!crate::auth::exempt_from_inflight_bounds(&user)).then_some(user.name);
                state
                    .inflight
                    .run(user.as_deref(), handle(state.clone(), req))
                    .await
                    .and_then(|r| r)
            };
            let response = match result {
                Ok(r) => r,
                Err(e) => e.into_response(),
            };
            match output {
                Output::Protobuf => protobuf_response(response, watching).await,
                Output::Json => response,
            }
        }
    };
    if let Some(t) = target {
        let verb = match (&method, t.name.is_some()) {
            (&Method::GET, _) if watching => "WATCH",
            (&Method::GET, true) => "GET",
            (&Method::GET, false) => "LIST",
            (&Method::DELETE, false) => "DELETECOLLECTION",
            (m, _) => m.as_str(),
        };
        state.metrics.request(RequestLabels {
            verb: verb.to_string(),
            group: t.rt.group.clone(),
            version: t.version.clone(),
            resource: t.rt.resource.clone(),
            subresource: t.subresource.clone().unwrap_or_default(),
            code: response.status().as_u16().to_string(),
        });
        if verb != "WATCH" {
            let scope = match (&t.name, &t.namespace) {
                (Some(_), _) => "resource",
                (None, Some(_)) => "namespace",
                (None, None) => "cluster",
            };
            let dry_run = query.get("dryRun").filter(|v| !v.is_empty());
            state.metrics.duration(
                DurationLabels {
                    verb: verb.to_string(),
                    dry_run: dry_run.map_or("", |_| "All"),
                    group: t.rt.group.clone(),
                    version: t.version.clone(),
                    resource: t.rt.resource.clone(),
                    subresource: t.subresource.unwrap_or_default(),
                    scope,
                    component: "apiserver",
                },
                started.elapsed(),
            );
        }
    }
    response
}

/// A JSON response rewritten in protobuf for a client that prefers it;
/// bodies with no protobuf form (tables, logs, kinds k8s-pb lacks) stay as
/// they are.
async fn protobuf_response(response: Response, watching: bool) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    if watching && parts.status == StatusCode::OK {
        parts.headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(codec::PROTOBUF_WATCH),
        );
        return Response::from_parts(parts, protobuf_watch(body));
    }
    let Ok(json) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    match codec::response_to_protobuf(&json) {
        Ok(pb) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(codec::PROTOBUF),
            );
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(pb))
        }
        Err(e) => {
            tracing::debug!(error = %e, "response served as JSON");
            Response::from_parts(parts, Body::from(json))
        }
    }
}

/// A JSON watch stream (one event per line) as length-prefixed protobuf
/// `WatchEvent` frames.
fn protobuf_watch(body: Body) -> Body {
    use futures::StreamExt;
    let mut pending: Vec<u8> = Vec::new();
    let frames = body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match codec::watch_frame(&line) {
                Ok(frame) => out.extend_from_slice(&frame),
                Err(e) => tracing::warn!(error = %e, "watch event not encodable in protobuf"),
            }
        }
        Ok::<Bytes, std::io::Error>(Bytes::from(out))
    });
    Body::from_stream(frames)
}

async fn handle(state: Arc<ApiState>, req: Request) -> ApiResult<Response> {
    let (mut parts, mut body) = req.into_parts();
    let target = parse_target(&state, parts.uri.path())?;
    let query = parse_query(&parts.uri);
    let mut content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    // Protobuf bodies of built-in kinds are read as the JSON they encode;
    // custom resources' fall through to the handlers' 415. Patch bodies
    // have their own media types, as upstream's.
    if codec::is_protobuf(&content_type)
        && target.rt.builtin
        && matches!(parts.method, Method::POST | Method::PUT | Method::DELETE)
    {
        let raw = read_body(body).await?;
        let json = codec::request_to_json(&raw).map_err(|e| {
            ApiError::bad_request(format!("the protobuf body could not be decoded: {e}"))
        })?;
        body = Body::from(json);
        content_type = "application/json".into();
    }
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown")
        .to_string();
    if target.rt.create_only && parts.method != Method::POST {
        return Err(ApiError::method_not_allowed());
    }
    // The guard (crate::auth::authn) put the authenticated user here.
    let user = parts
        .extensions
        .get::<wasmlet_apimachinery::rbac::UserInfo>()
        .cloned()
        .unwrap_or_default();
    let req = write::Req {
        query: &query,
        content_type: &content_type,
        accept: &accept,
        user_agent: &user_agent,
        user,
        policy: state.rbac.clone(),
    };
    match (
        &parts.method,
        target.name.is_some(),
        target.subresource.as_deref(),
    ) {
        (&Method::GET, false, _) => {
            let watching = target.watch_path || query_bool(&query, "watch") == Some(true);
            if watching {
                watch::watch(&state, &target, &query, &accept, &req.user.name).await
            } else {
                read::list(&state, &target, &query, &accept)
            }
        }
        (&Method::GET, true, Some("scale")) => subresources::get_scale(&state, &target),
        (&Method::GET, true, Some("log")) => subresources::log(&state, &target, &query).await,
        (&Method::GET | &Method::POST, true, Some("exec" | "attach")) => {
            streams::forward(&state, &target, &mut parts).await
        }
        (&Method::GET, true, _) => read::get(&state, &target, &accept),
        (&Method::POST, false, _) => {
            write::create(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::POST, true, Some("binding")) => {
            subresources::bind(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::POST, true, Some("token")) => {
            subresources::token(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::POST, true, Some("eviction")) => {
            eviction::evict(&state, &target, read_body(body).await?).await
        }
        (&Method::PUT, true, Some("scale")) => {
            subresources::put_scale(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::PUT, true, Some("approval")) => {
            let obj = parse_object(&read_body(body).await?, &content_type)?;
            approval::approve(&state, &target, obj, &req).await
        }
        // Served by PUT only (`kubectl certificate approve`).
        (&Method::PATCH, true, Some("approval")) => Err(ApiError::method_not_allowed()),
        (&Method::PUT, true, _) => {
            write::update(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::PATCH, true, Some("scale")) => {
            subresources::patch_scale(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::PATCH, true, _) => {
            write::patch(&state, &target, read_body(body).await?, &req).await
        }
        (&Method::DELETE, true, None) => {
            write::delete(&state, &target, read_body(body).await?, &query, &accept).await
        }
        (&Method::DELETE, false, None) => {
            write::delete_collection(&state, &target, read_body(body).await?, &query).await
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

#[cfg(test)]
mod tests {
    /// A YAML body nested past the limit, here 117 KiB of `[` that libyaml
    /// took 12.8 s of CPU over, is refused with 400 before it is parsed; and
    /// so is a self review written in YAML (any token may send one).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deeply_nested_yaml_is_refused_before_it_is_parsed() {
        let (_data, _server, client) = crate::test_server().await;
        let deep = "[".repeat(117 << 10);
        for (path, body) in [
            (
                "/api/v1/namespaces/default/configmaps",
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {deep}\n"),
            ),
            (
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                format!(
                    "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec: {deep}\n"
                ),
            ),
        ] {
            let req = http::Request::post(path)
                .header("content-type", "application/yaml")
                .body(body.into_bytes())
                .unwrap();
            let started = std::time::Instant::now();
            let resp = client.send(req.map(Into::into)).await.expect("a response");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(2),
                "{path}: {:?}",
                started.elapsed()
            );
            assert_eq!(resp.status(), 400, "{path}");
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                status["message"], "the YAML body nests deeper than 100 levels",
                "{path}"
            );
        }
        // A YAML manifest still goes through.
        let req = http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/yaml")
            .body(
                b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\ndata:\n  a: |\n    [[[\n"
                    .to_vec(),
            )
            .unwrap();
        let resp = client.send(req.map(Into::into)).await.expect("a response");
        assert_eq!(resp.status(), 201);
    }
}
