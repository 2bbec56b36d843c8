//! `certificatesigningrequests/NAME/approval`: the Approved or Denied
//! condition, as `kubectl certificate approve|deny` writes it (a PUT of the
//! whole request). Upstream's CertificateApproval admission applies: the
//! writer needs `approve` on `signers` for the request's signer (the exact
//! name or its `domain/*`), as well as `update` on the subresource, which
//! the request's authorization already checked. Only the conditions change.

use axum::response::Response;
use serde_json::{Value, json};
use wasmlet_apimachinery::rbac::Attributes;

use super::write::Req;
use super::{Target, json_response};
use crate::ApiState;
use crate::meta;
use crate::resources::WriteOptions;
use crate::status::{ApiError, ApiResult};
use crate::validation::certificates::validate_conditions;

const GROUP: &str = "certificates.k8s.io";

/// Whether `req`'s user may approve or deny requests for `signer`.
fn may_approve(state: &ApiState, req: &Req<'_>, signer: &str) -> bool {
    let domain = signer.split_once('/').map(|(d, _)| format!("{d}/*"));
    std::iter::once(signer.to_string())
        .chain(domain)
        .any(|name| {
            let attrs = Attributes::Resource {
                verb: "approve".into(),
                group: GROUP.into(),
                resource: "signers".into(),
                subresource: String::new(),
                namespace: String::new(),
                name,
            };
            crate::auth::authz::decide(state, &req.user, &attrs).0
        })
}

pub(crate) async fn approve(
    state: &ApiState,
    t: &Target,
    body: Value,
    req: &Req<'_>,
) -> ApiResult<Response> {
    let opts = WriteOptions {
        subresource: Some("approval"),
        ..super::write::write_options(req, "UpdateOptions")?
    };
    let name = t.name.as_deref().unwrap_or_default();
    let current = state.resources.get(&t.rt, "", name)?.value()?;
    let signer = current
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !may_approve(state, req, &signer) {
        return Err(ApiError::forbidden(format!(
            "{} \"{name}\" is forbidden: user not permitted to approve requests with signerName \"{signer}\"",
            t.rt.qualified()
        )));
    }
    let now = meta::now_rfc3339();
    let conditions: Vec<Value> = body
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut c| {
            for stamp in ["lastUpdateTime", "lastTransitionTime"] {
                if c.get(stamp).is_none_or(Value::is_null) {
                    c[stamp] = json!(now);
                }
            }
            c
        })
        .collect();
    let causes = validate_conditions(&current, &conditions);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&t.rt, name, causes));
    }
    let stored = state
        .resources
        .modify(&t.rt, "", name, &opts, |old| {
            let mut new = old.clone();
            new["status"]["conditions"] = json!(conditions);
            Some(new)
        })
        .await?
        .ok_or_else(|| ApiError::not_found(&t.rt, name))?;
    Ok(json_response(
        200,
        state.resources.render(&t.rt, &t.version, &stored)?,
    ))
}
