//! Authentication and the request guard: who is calling (client
//! certificate, the admin token or a ServiceAccount token), who
//! they act as (`Impersonate-User` / `Impersonate-Group`, itself authorized
//! as upstream does with the `impersonate` verb), and whether that user may
//! make this request. The user is handed to handlers as a request extension.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use wasmlet_apimachinery::rbac::{
    Attributes, UserInfo, request_attributes, service_account_groups,
};

use crate::ApiState;
use crate::auth::authz;
use crate::auth::tls::PeerCert;
use crate::status::ApiError;

/// The identity of whoever holds the admin token.
pub(crate) fn admin() -> UserInfo {
    UserInfo::new(
        authz::ADMIN_USER,
        &["system:masters", "system:authenticated"],
    )
}

/// The user a bearer token authenticates as, with the audiences it was
/// accepted for (`audiences` empty: the plane's own), or why not.
pub(crate) fn user_of_token(
    state: &ApiState,
    token: &str,
    audiences: &[String],
) -> Result<(UserInfo, Vec<String>), String> {
    if crate::constant_time_eq(token.as_bytes(), state.token.as_bytes()) {
        return Ok((admin(), audiences.to_vec()));
    }
    state
        .tokens
        .verify(&state.resources, token, audiences)
        .map_err(|e| e.to_string())
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Applies `Impersonate-*` headers: the caller must be allowed to
/// `impersonate` the user (or service account) and each group.
fn impersonate(
    state: &ApiState,
    caller: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let Some(name) = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
    else {
        if headers.contains_key("impersonate-group") {
            return Err(ApiError::bad_request(
                "requested impersonation of groups without impersonating a user",
            ));
        }
        return Ok(caller);
    };
    let may = |resource: &str, namespace: &str, name: &str| {
        let attrs = Attributes::Resource {
            verb: "impersonate".into(),
            group: String::new(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: name.into(),
        };
        authz::authorize(state, &caller, &attrs)
    };
    let mut groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|g| g.to_str().ok().map(str::to_string))
        .collect();
    let sa = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match sa {
        Some((ns, sa_name)) => {
            may("serviceaccounts", ns, sa_name)?;
            if groups.is_empty() {
                groups = service_account_groups(ns);
            }
        }
        None => may("users", "", name)?,
    }
    for g in &groups {
        let attrs = Attributes::Resource {
            verb: "impersonate".into(),
            group: String::new(),
            resource: "groups".into(),
            subresource: String::new(),
            namespace: String::new(),
            name: g.clone(),
        };
        authz::authorize(state, &caller, &attrs)?;
    }
    if name != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(UserInfo {
        name: name.to_string(),
        groups,
    })
}

/// The request guard: authenticate, impersonate, authorize. Health probes stay
/// open as upstream's are.
pub(crate) async fn guard(
    State(state): State<Arc<ApiState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    if matches!(path.as_str(), "/healthz" | "/livez" | "/readyz") {
        return next.run(req).await;
    }
    let headers = req.headers();
    // A verified client certificate first, then a bearer token, as upstream.
    let cert = req.extensions().get::<PeerCert>().and_then(|p| p.0.clone());
    let caller = match (cert, bearer(headers)) {
        (Some(user), _) => user,
        (None, Some(t)) => match user_of_token(&state, t, &[]) {
            Ok((user, _)) => user,
            Err(why) => {
                tracing::debug!(%why, "bearer token refused");
                return ApiError::unauthorized().into_response();
            }
        },
        (None, None) => return ApiError::unauthorized().into_response(),
    };
    let user = match impersonate(&state, caller, headers) {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    // The same reading of `watch` as the handler's: authorizing `list` and
    // serving a watch would let a list-only user watch.
    let watch =
        crate::query::query_bool(&crate::query::parse_query(req.uri()), "watch") == Some(true);
    let attrs = request_attributes(req.method().as_str(), &path, watch);
    if let Err(e) = authz::authorize(&state, &user, &attrs) {
        return e.into_response();
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}
