//! Subresources with behaviour of their own: scale, binding, eviction (with
//! PodDisruptionBudget checks), namespace finalize, pod logs, TokenReview.

use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use wasmlet_apimachinery::patch as patches;
use wasmlet_apimachinery::selector::LabelSelector;

use super::write::{Req, parse_patch};
use super::{Query, Target, parse_object, value_response};
use crate::ApiState;
use crate::meta;
use crate::resources::{PatchBody, WriteOptions};
use crate::status::{ApiError, ApiResult, success};

/// How `t`'s kind maps `scale` (routing sends only scalable kinds here).
fn scale_spec(t: &Target) -> ApiResult<&crate::registry::ScaleSpec> {
    t.rt.scale
        .as_ref()
        .ok_or_else(|| ApiError::internal(format!("{} has no scale subresource", t.rt.qualified())))
}

fn scale_of(state: &ApiState, t: &Target) -> ApiResult<(Value, Value)> {
    let name = t.name.as_deref().unwrap_or_default();
    let obj = state.resources.get(&t.rt, t.ns(), name)?.value()?;
    let spec = scale_spec(t)?;
    let replicas = meta::get_path(&obj, &spec.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status_replicas = meta::get_path(&obj, &spec.status_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = if t.rt.group.is_empty() && t.rt.resource == "replicationcontrollers" {
        // A ReplicationController's selector is a plain label map.
        obj.pointer("/spec/selector")
            .and_then(|s| LabelSelector::from_label_selector(&json!({"matchLabels": s})).ok())
            .map(|s| s.to_string())
            .unwrap_or_default()
    } else if t.rt.builtin {
        obj.pointer("/spec/selector")
            .and_then(|s| LabelSelector::from_label_selector(s).ok())
            .map(|s| s.to_string())
            .unwrap_or_default()
    } else {
        spec.label_selector
            .as_deref()
            .and_then(|p| meta::get_path(&obj, p))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let m = meta::meta(&obj).cloned().unwrap_or_default();
    let scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m.get("name"), "namespace": m.get("namespace"), "uid": m.get("uid"),
            "resourceVersion": m.get("resourceVersion"), "creationTimestamp": m.get("creationTimestamp"),
        },
        "spec": {"replicas": replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    });
    Ok((scale, obj))
}

pub(crate) fn get_scale(state: &ApiState, t: &Target) -> ApiResult<Response> {
    Ok(value_response(200, &scale_of(state, t)?.0))
}

async fn write_scale(
    state: &ApiState,
    t: &Target,
    new_scale: &Value,
    precondition: Option<&str>,
    opts: &WriteOptions,
) -> ApiResult<Response> {
    let replicas = new_scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            ApiError::invalid(
                &t.rt,
                t.name.as_deref().unwrap_or_default(),
                vec![crate::status::Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: "spec.replicas".into(),
                }],
            )
        })?;
    if replicas < 0 {
        return Err(ApiError::invalid(
            &t.rt,
            t.name.as_deref().unwrap_or_default(),
            vec![crate::status::Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                field: "spec.replicas".into(),
            }],
        ));
    }
    let name = t.name.as_deref().unwrap_or_default();
    if let Some(rv) = precondition
        && state.resources.get(&t.rt, t.ns(), name)?.rv.to_string() != rv
    {
        return Err(ApiError::conflict(&t.rt, name));
    }
    if opts.dry_run {
        // Everything checked, nothing stored: the answer is the scale as it
        // would be (`kubectl scale --dry-run=server`).
        let (mut scale, _) = scale_of(state, t)?;
        scale["spec"]["replicas"] = json!(replicas);
        return Ok(value_response(200, &scale));
    }
    let path = scale_spec(t)?.spec_replicas.clone();
    state
        .resources
        .modify(&t.rt, t.ns(), name, opts, |old| {
            if meta::get_path(old, &path) == Some(&json!(replicas)) {
                return None;
            }
            let mut new = old.clone();
            meta::set_path(&mut new, &path, json!(replicas));
            // A scale is a spec change: bump generation as a main-resource write does.
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta::meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
            Some(new)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(&t.rt, name))?;
    get_scale(state, t)
}

pub(crate) async fn put_scale(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let opts = scale_options(req, "UpdateOptions")?;
    let scale = parse_object(&body, req.content_type)?;
    let rv = meta::meta_str(&scale, "resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
        .map(str::to_string);
    write_scale(state, t, &scale, rv.as_deref(), &opts).await
}

pub(crate) async fn patch_scale(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let opts = scale_options(req, "PatchOptions")?;
    let (mut scale, _) = scale_of(state, t)?;
    match parse_patch(&body, req.content_type)? {
        PatchBody::Merge(p) | PatchBody::Strategic(p) | PatchBody::Apply(p) => {
            patches::merge(&mut scale, &p)
        }
        PatchBody::Json(p) => patches::json(&mut scale, &p)
            .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?,
    }
    write_scale(state, t, &scale, None, &opts).await
}

/// A write through `/scale`, recorded under the requester's field manager and
/// subresource `scale`, as upstream's managedFields show it.
fn scale_options(req: &Req<'_>, kind: &str) -> ApiResult<WriteOptions> {
    Ok(WriteOptions {
        subresource: Some("scale"),
        ..super::write::write_options(req, kind)?
    })
}

pub(crate) async fn bind(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let opts = WriteOptions {
        subresource: Some("binding"),
        ..super::write::write_options(req, "CreateOptions")?
    };
    let binding = parse_object(&body, "application/json")?;
    let name = t.name.as_deref().unwrap_or_default();
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            &t.rt,
            name,
            vec![crate::status::Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "target.name".into(),
            }],
        ));
    }
    let mut already = None;
    state
        .resources
        .modify(&t.rt, t.ns(), name, &opts, |old| {
            match old.pointer("/spec/nodeName").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => {
                    already = Some(n.to_string());
                    return None;
                }
                _ => {}
            }
            if meta::is_deleting(old) {
                already = Some(String::new());
                return None;
            }
            let mut new = old.clone();
            new["spec"]["nodeName"] = json!(node);
            let cond = json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": meta::now_rfc3339()});
            let conds = new["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
            conds.push(cond);
            new["status"]["conditions"] = Value::Array(conds);
            Some(new)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(&t.rt, name))?;
    match already {
        Some(n) if n.is_empty() => Err(ApiError::conflict_msg(
            &t.rt,
            name,
            "pod is being deleted, cannot be assigned to a host",
        )),
        Some(n) => Err(ApiError::conflict_msg(
            &t.rt,
            name,
            &format!("pod {name} is already assigned to node \"{n}\""),
        )),
        None => Ok(value_response(201, &success(201))),
    }
}

pub(crate) async fn finalize_namespace(
    state: &ApiState,
    t: &Target,
    obj: Value,
    opts: WriteOptions,
) -> ApiResult<Response> {
    let opts = WriteOptions {
        subresource: Some("finalize"),
        ..opts
    };
    let name = t.name.as_deref().unwrap_or_default();
    let finalizers = obj
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or(json!([]));
    let stored = state
        .resources
        .modify(&t.rt, "", name, &opts, |old| {
            let mut new = old.clone();
            new["spec"]["finalizers"] = finalizers.clone();
            Some(new)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(&t.rt, name))?;
    Ok(super::json_response(
        200,
        state.resources.render(&t.rt, &t.version, &stored)?,
    ))
}

/// `serviceaccounts/NAME/token`: a TokenRequest for a bound token.
pub(crate) async fn token(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let request = parse_object(&body, "application/json")?;
    let name = t.name.as_deref().unwrap_or_default();
    let sa = state.resources.get(&t.rt, t.ns(), name)?.value()?;
    let answer = crate::auth::satoken::token_request(
        &state.tokens,
        &state.resources,
        &sa,
        request,
        &req.user,
    )?;
    Ok(value_response(201, &answer))
}

/// `pods/log` goes to the node agent that runs the pod.
pub(crate) async fn log(state: &ApiState, t: &Target, query: &Query) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let pod = state.resources.get(&t.rt, t.ns(), name)?.value()?;
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} is not scheduled to a node yet; it has no logs"
        )));
    }
    crate::logs::proxy(state, &pod, node, query).await
}

/// Create-only kinds: TokenReview answers whether a bearer token is this
/// server's; the access reviews answer with [`authz`](crate::auth::authz).
pub(crate) async fn create_only(
    state: &ApiState,
    t: &Target,
    mut obj: Value,
    req: &Req<'_>,
) -> ApiResult<Response> {
    match (t.rt.group.as_str(), t.rt.resource.as_str()) {
        ("authentication.k8s.io", "selfsubjectreviews") => {
            let obj = crate::auth::selfreview::subject_review(obj, &req.user);
            return Ok(value_response(201, &obj));
        }
        ("authorization.k8s.io", "selfsubjectrulesreviews") => {
            let obj = crate::auth::selfreview::rules_review(state, obj, &req.user)?;
            return Ok(value_response(201, &obj));
        }
        _ => {}
    }
    if t.rt.group == "authorization.k8s.io" {
        let kind = t.rt.kind.clone();
        let asker = (t.rt.resource == "selfsubjectaccessreviews").then(|| req.user.clone());
        let mut obj = crate::auth::authz::review(state, obj, asker);
        obj["apiVersion"] = json!("authorization.k8s.io/v1");
        obj["kind"] = json!(kind);
        return Ok(value_response(201, &obj));
    }
    if t.rt.resource != "tokenreviews" {
        return Err(ApiError::method_not_allowed());
    }
    let token = obj
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or("");
    let audiences: Vec<String> = obj
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let user = if token.is_empty() {
        Err("the token is empty".to_string())
    } else {
        crate::auth::authn::user_of_token(state, token, &audiences)
    };
    obj["status"] = match user {
        Ok((u, auds)) => json!({"authenticated": true,
            "user": {"username": u.name, "groups": u.groups}, "audiences": auds}),
        Err(why) => json!({"authenticated": false, "error": why}),
    };
    obj["apiVersion"] = json!("authentication.k8s.io/v1");
    obj["kind"] = json!("TokenReview");
    Ok(value_response(201, &obj))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    /// TokenReview accepts exactly this server's token: not a near miss of the
    /// same length, not a prefix, not empty.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_review_accepts_only_the_exact_token() {
        let (_data, server, client) = crate::test_server().await;
        let token = server.state.token.clone();
        let mut near = token.clone().into_bytes();
        let last = near.len() - 1;
        near[last] = if near[last] == b'a' { b'b' } else { b'a' };
        let near = String::from_utf8(near).unwrap();
        let review = |t: &str| {
            let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": t}});
            let req = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            let client = client.clone();
            async move {
                let v: Value = client.request(req).await.unwrap();
                v["status"]["authenticated"] == json!(true)
            }
        };
        assert!(review(&token).await);
        assert!(!review(&near).await);
        assert!(!review(&token[..token.len() - 1]).await);
        assert!(!review("").await);
    }
}
