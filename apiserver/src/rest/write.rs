//! POST, PUT, PATCH and DELETE: request options parsed here, semantics in
//! [`Resources`](crate::resources::Resources).

use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::{Query, Target, json_response, parse_object, value_response};
use crate::ApiState;
use crate::resources::{Address, DeleteOptions, PatchBody, Propagation, Sub, WriteOptions};
use crate::status::{ApiError, ApiResult, Cause};
use crate::validation::decode::duplicate_fields;
use crate::validation::warning_header;
use crate::validation::{FieldChecks, FieldValidation};

pub(crate) struct Req<'a> {
    pub(crate) query: &'a Query,
    pub(crate) content_type: &'a str,
    /// What the answer is asked in (`as=PartialObjectMetadata`: metadata only).
    pub(crate) accept: &'a str,
    pub(crate) user_agent: &'a str,
    /// Who makes the request (after impersonation).
    pub(crate) user: wasmlet_apimachinery::rbac::UserInfo,
    /// The RBAC objects the checks of writes by `user` read.
    pub(crate) policy: std::sync::Arc<crate::auth::rbac::PolicyCache>,
}

/// The request's write options; `kind` (`CreateOptions`, `UpdateOptions`,
/// `PatchOptions`) names them in a 422 as upstream does.
pub(crate) fn write_options(req: &Req<'_>, kind: &str) -> ApiResult<WriteOptions> {
    let q = req.query;
    let mut causes = Vec::new();
    let mut unsupported = |field: &str, got: &str, supported: &str| {
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: \"{got}\": supported values: {supported}"),
            field: field.into(),
        })
    };
    let field_validation = match q.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Ignore") => FieldValidation::Ignore,
        Some("Strict") => FieldValidation::Strict,
        Some(other) => {
            unsupported("fieldValidation", other, "\"Ignore\", \"Strict\", \"Warn\"");
            FieldValidation::Warn
        }
    };
    let dry_run = match q.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            unsupported("dryRun", other, "\"All\"");
            false
        }
    };
    if !causes.is_empty() {
        return Err(ApiError::invalid_options(kind, causes));
    }
    // Upstream's default manager is the user agent's program name.
    let field_manager = q
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .cloned()
        .unwrap_or_else(|| {
            req.user_agent
                .split('/')
                .next()
                .unwrap_or("unknown")
                .to_string()
        });
    Ok(WriteOptions {
        field_manager,
        dry_run,
        fields: FieldChecks {
            mode: field_validation,
            ..Default::default()
        },
        force: super::query_bool(q, "force") == Some(true),
        admission: Some(std::sync::Arc::new(crate::auth::requester::Requester {
            user: req.user.clone(),
            policy: req.policy.clone(),
        })),
        subresource: None,
    })
}

/// Adds one `Warning` header per warning the write collected (unknown or
/// duplicate fields under `fieldValidation=Warn`).
fn with_warnings(mut resp: Response, opts: &WriteOptions) -> Response {
    for w in opts.fields.warnings.take() {
        if let Ok(v) = axum::http::HeaderValue::from_str(&warning_header(&w)) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// A written object as the client asked for it: whole, or only its
/// metadata (`as=PartialObjectMetadata`), as kube-rs' `patch_metadata` and
/// controller-runtime's metadata client expect.
fn answer(
    state: &ApiState,
    t: &Target,
    accept: &str,
    code: u16,
    stored: &crate::store::Stored,
) -> ApiResult<Response> {
    if super::read::wants_metadata(accept) {
        let partial = super::read::partial_metadata(accept, &stored.value()?);
        return Ok(value_response(code, &partial));
    }
    Ok(json_response(
        code,
        state.resources.render(&t.rt, &t.version, stored)?,
    ))
}

/// The object a PUT or PATCH of `t` writes.
fn address<'a>(t: &'a Target, name: &'a str) -> Address<'a> {
    Address {
        rt: &t.rt,
        version: &t.version,
        ns: t.ns(),
        name,
        sub: if t.subresource.as_deref() == Some("status") {
            Sub::Status
        } else {
            Sub::Main
        },
    }
}

pub(crate) async fn create(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    if t.rt.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed());
    }
    let mut obj = parse_object(&body, req.content_type)?;
    if t.rt.create_only {
        return super::subresources::create_only(state, t, obj, req).await;
    }
    if t.rt.group == "certificates.k8s.io" && t.rt.resource == "certificatesigningrequests" {
        // Who asks is the server's to say (upstream's PrepareForCreate).
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("username".into(), req.user.name.clone().into());
            spec.insert("groups".into(), req.user.groups.clone().into());
            spec.remove("uid");
            spec.remove("extra");
        }
    }
    let mut opts = write_options(req, "CreateOptions")?;
    opts.fields.duplicates = duplicate_fields(&body, req.content_type);
    let stored = state
        .resources
        .create(&t.rt, &t.version, t.ns(), obj, &opts)
        .await?;
    Ok(with_warnings(
        answer(state, t, req.accept, 201, &stored)?,
        &opts,
    ))
}

pub(crate) async fn update(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let obj = parse_object(&body, req.content_type)?;
    let mut opts = write_options(req, "UpdateOptions")?;
    opts.fields.duplicates = duplicate_fields(&body, req.content_type);
    let name = t.name.as_deref().unwrap_or_default();
    if t.subresource.as_deref() == Some("finalize") {
        return super::subresources::finalize_namespace(state, t, obj, opts).await;
    }
    let w = state.resources.update(address(t, name), obj, &opts).await?;
    let code = if w.created { 201 } else { 200 };
    Ok(with_warnings(
        answer(state, t, req.accept, code, &w.object)?,
        &opts,
    ))
}

pub(crate) fn parse_patch(body: &[u8], content_type: &str) -> ApiResult<PatchBody> {
    let ct = content_type.split(';').next().unwrap_or("").trim();
    let json = |b: &[u8]| -> ApiResult<Value> {
        serde_json::from_slice(b)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))
    };
    match ct {
        "application/merge-patch+json" => Ok(PatchBody::Merge(json(body)?)),
        "application/json-patch+json" => Ok(PatchBody::Json(json(body)?)),
        "application/strategic-merge-patch+json" => Ok(PatchBody::Strategic(json(body)?)),
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            Ok(PatchBody::Apply(parse_object(body, "yaml")?))
        }
        other => Err(ApiError::unsupported_media_type(
            other,
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
                "application/strategic-merge-patch+json",
            ],
        )),
    }
}

pub(crate) async fn patch(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let patch = parse_patch(&body, req.content_type)?;
    let opts = write_options(req, "PatchOptions")?;
    let apply = matches!(patch, PatchBody::Apply(_));
    if apply && req.query.get("fieldManager").is_none_or(|m| m.is_empty()) {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    if !apply && req.query.contains_key("force") {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            vec![Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: may not be specified for non-apply patch".into(),
                field: "force".into(),
            }],
        ));
    }
    let name = t.name.as_deref().unwrap_or_default();
    let w = state
        .resources
        .patch(address(t, name), patch, &opts)
        .await?;
    let code = if w.created { 201 } else { 200 };
    Ok(with_warnings(
        answer(state, t, req.accept, code, &w.object)?,
        &opts,
    ))
}

pub(crate) fn delete_options(body: &[u8], q: &Query) -> ApiResult<DeleteOptions> {
    let mut opts = DeleteOptions::default();
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let grace = q
        .get("gracePeriodSeconds")
        .map(|g| {
            g.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds \"{g}\"")))
        })
        .transpose()?
        .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64));
    opts.grace_period_seconds = grace;
    let policy = q.get("propagationPolicy").cloned().or_else(|| {
        body.get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    opts.propagation = match policy.as_deref() {
        None | Some("") => None,
        Some("Orphan") => Some(Propagation::Orphan),
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    };
    let orphan = super::query_bool(q, "orphanDependents")
        .or_else(|| body.get("orphanDependents").and_then(Value::as_bool));
    if opts.propagation.is_none() {
        opts.propagation = orphan.map(|o| match o {
            true => Propagation::Orphan,
            false => Propagation::Background,
        });
    }
    opts.precondition_uid = body
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    opts.precondition_rv = body
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    opts.dry_run = q.get("dryRun").is_some_and(|d| d == "All")
        || body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
    Ok(opts)
}

pub(crate) async fn delete(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    q: &Query,
    accept: &str,
) -> ApiResult<Response> {
    let mut opts = delete_options(&body, q)?;
    let warning = default_propagation(&t.rt, &mut opts);
    let name = t.name.as_deref().unwrap_or_default();
    let d = state.resources.delete(&t.rt, t.ns(), name, &opts).await?;
    if d.gone && !crate::strategy::returns_deleted_object(&t.rt) {
        let uid = d.object.value()?.pointer("/metadata/uid").cloned();
        // Go's field order; an empty group is left out.
        let mut details = serde_json::json!({"name": name});
        if !t.rt.group.is_empty() {
            details["group"] = t.rt.group.clone().into();
        }
        details["kind"] = t.rt.resource.clone().into();
        details["uid"] = uid.unwrap_or_default();
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success", "details": details,
        });
        return Ok(value_response(200, &status));
    }
    let mut resp = answer(state, t, accept, 200, &d.object)?;
    if let Some(w) = warning
        && let Ok(v) = axum::http::HeaderValue::from_str(&warning_header(w))
    {
        resp.headers_mut().append("warning", v);
    }
    Ok(resp)
}

/// A batch/v1 Job deleted without a propagation policy orphans its pods,
/// as upstream keeps it for compatibility (the Job is answered, held by the
/// `orphan` finalizer until the collector has released its pods), with
/// upstream's warning.
fn default_propagation(
    rt: &crate::registry::ResourceType,
    opts: &mut DeleteOptions,
) -> Option<&'static str> {
    if opts.propagation.is_some() || !(rt.group == "batch" && rt.resource == "jobs") {
        return None;
    }
    opts.propagation = Some(Propagation::Orphan);
    Some(
        "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning",
    )
}

pub(crate) async fn delete_collection(
    state: &ApiState,
    t: &Target,
    body: Bytes,
    q: &Query,
) -> ApiResult<Response> {
    let mut opts = delete_options(&body, q)?;
    default_propagation(&t.rt, &mut opts);
    let filter = super::read::Filter::from_query(&t.rt, q)?;
    let snap = state.resources.store.snapshot();
    let prefix = t.rt.prefix(t.namespace.as_deref());
    let mut deleted = Vec::new();
    for s in snap.range(&prefix, None).filter(|s| filter.matches(s)) {
        let (ns, name) = s.namespace_name();
        // Upstream serves no collection delete of namespaces; here it
        // deletes all but what the cluster needs.
        if crate::resources::immortal(&t.rt, name).is_some() {
            continue;
        }
        match state.resources.delete(&t.rt, ns, name, &opts).await {
            // The last states are shared with the watch history: kept as
            // stored, not parsed (27,000 objects of 16 KiB parsed took GiBs).
            Ok(d) => deleted.push(d.object),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = state.resources.store.snapshot().rv.to_string();
    let items: Vec<&std::sync::Arc<_>> = deleted.iter().collect();
    super::read::list_response(state, t, serde_json::json!({"resourceVersion": rv}), &items)
}
