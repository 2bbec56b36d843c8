//! API errors as upstream `Status` objects: the same code, reason and message
//! wording kube-apiserver uses, so clients' error handling (kube's
//! `ErrorResponse`, client-go's `IsConflict`, kubectl's messages) works unchanged.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use crate::cause::Cause;
use crate::registry::{NotRegistered, ResourceType};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) details: Option<Value>,
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    pub(crate) fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified()),
        )
        .with_details(json!({"name": name, "group": rt.group, "kind": rt.resource}))
    }

    pub(crate) fn namespace_not_found(ns: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub(crate) fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified()),
        )
        .with_details(json!({"name": name, "group": rt.group, "kind": rt.resource}))
    }

    pub(crate) fn conflict(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::conflict_msg(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub(crate) fn conflict_msg(rt: &ResourceType, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                rt.qualified()
            ),
        )
        .with_details(json!({"name": name, "group": rt.group, "kind": rt.resource}))
    }

    pub(crate) fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
        let kind = if rt.group.is_empty() {
            rt.kind.clone()
        } else {
            format!("{}.{}", rt.kind, rt.group)
        };
        ApiError::unprocessable(
            &kind,
            name,
            json!({"name": name, "group": rt.group, "kind": rt.kind}),
            &causes,
        )
    }

    /// 422 for bad request options (`fieldValidation`, `dryRun`,
    /// `fieldManager`, `force`): upstream validates them as an object of kind
    /// `CreateOptions`/`UpdateOptions`/`PatchOptions` in `meta.k8s.io`.
    pub(crate) fn invalid_options(kind: &str, causes: Vec<Cause>) -> ApiError {
        ApiError::unprocessable(
            &format!("{kind}.meta.k8s.io"),
            "",
            json!({"group": "meta.k8s.io", "kind": kind}),
            &causes,
        )
    }

    /// `KIND "NAME" is invalid: field: message` (a list when there are
    /// several), with each cause in the details as upstream's `Invalid`.
    fn unprocessable(kind: &str, name: &str, mut details: Value, causes: &[Cause]) -> ApiError {
        let list: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        details["causes"] = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        ApiError::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {summary}"),
        )
        .with_details(details)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub(crate) fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    pub(crate) fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub(crate) fn unsupported_media_type(got: &str, accepted: &[&str]) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({got}) - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    pub(crate) fn too_many_requests(message: impl Into<String>, causes: Vec<Value>) -> ApiError {
        ApiError::new(429, "TooManyRequests", message).with_details(json!({"causes": causes}))
    }

    pub(crate) fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    pub(crate) fn too_large() -> ApiError {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(504, "Timeout", message)
    }

    /// Asks the client to retry after `seconds` (`details.retryAfterSeconds`
    /// and the `Retry-After` header, as upstream's 429s carry).
    pub(crate) fn retry_after(mut self, seconds: u64) -> ApiError {
        let details = self.details.get_or_insert_with(|| json!({}));
        details["retryAfterSeconds"] = json!(seconds);
        self
    }

    /// The `Status` body, its fields in the order Go's encoder writes
    /// `metav1.Status` (`details` before `code`) and an empty `group` left
    /// out (`omitempty`): clients and tests compare error bodies byte for byte.
    pub(crate) fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        });
        if let Some(d) = &self.details {
            let mut d = d.clone();
            if let Some(o) = d.as_object_mut()
                && o.get("group").and_then(Value::as_str) == Some("")
            {
                o.shift_remove("group");
            }
            s["details"] = d;
        }
        s["code"] = json!(self.code);
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut response = (code, [("content-type", "application/json")], body).into_response();
        let retry = self
            .details
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64);
        if let Some(seconds) = retry {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// A success `Status`, as returned by binding and eviction.
pub(crate) fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

impl From<NotRegistered> for ApiError {
    fn from(e: NotRegistered) -> ApiError {
        ApiError::internal(e.to_string())
    }
}
