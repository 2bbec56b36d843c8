//! Built-in kinds checked as upstream checks them: decoded against their
//! published schema ([`schemas`], from k8s-openapi) so wrong JSON types are
//! refused with Go's decoding message and unknown or duplicate fields follow
//! `fieldValidation`; then the kind-specific rules ([`data`] for ConfigMaps
//! and Secrets, [`pods`] for pod updates).
//!
//! Upstream's statuses: a body that does not decode (a wrong type, bad
//! base64) is a 400 `BadRequest` "`Kind` in version "v1" cannot be handled
//! as a `Kind`: json: cannot unmarshal ..."; `fieldValidation=Strict` with
//! unknown or duplicate fields is a 400 "strict decoding error: unknown field
//! "spec.foo", duplicate field "x""; `Warn` (the default) drops them and
//! answers with one `Warning` header each; rule violations are 422 `Invalid`.
//!
//! Deviations: the first type error found in schema order is reported
//! (Go reports the first in document order); unknown fields are listed
//! sorted by path (upstream: in document order); a Quantity accepts any
//! value and Time fields any string here (upstream parses them); integral
//! floats (`1.0`) decode into integer fields; duplicate fields are found in
//! create and update bodies, not in patches; a refused pod update lists the
//! changed paths where upstream prints a `cmp.Diff` of the spec.
//!
//! Cost (`cargo bench --bench validation`, dev profile): building a kind's
//! schema once, 5 ms (ConfigMap) to 50 ms (Pod); per write, ~50 µs for a
//! 1 KiB ConfigMap and ~220 µs for a typical Pod.

mod autoscaling;
pub(crate) mod batch;
mod bounds;
pub(crate) mod certificates;
pub(crate) mod data;
pub(crate) mod decode;
mod networking;
pub(crate) mod pods;
pub(crate) mod rbac;
mod scheduling;
pub(crate) mod schemas;
mod service;
mod volumes;
pub(crate) mod workloads;

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

/// `fieldValidation`: what a write does with unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// A write's field checks (part of `resources::WriteOptions`, defined here so
/// that validation does not import `resources`): the `fieldValidation` mode,
/// the fields the body names twice, and the warnings collected.
#[derive(Debug, Clone, Default)]
pub struct FieldChecks {
    pub(crate) mode: FieldValidation,
    /// Fields the request body names twice (reported per `mode`).
    pub(crate) duplicates: Vec<String>,
    /// What the response's `Warning` headers will say.
    pub(crate) warnings: Warnings,
}

/// Warnings a write collects for the response's `Warning` headers. Shared
/// by the clones of one request's options; a retried write adds the same
/// text again, so [`Warnings::take`] removes repeats.
#[derive(Debug, Clone, Default)]
pub(crate) struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    pub(crate) fn push(&self, text: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(text);
    }

    /// Every warning once, in the order first seen.
    pub(crate) fn take(&self) -> Vec<String> {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        let mut out: Vec<String> = Vec::new();
        for w in all {
            if !out.contains(&w) {
                out.push(w);
            }
        }
        out
    }
}

/// The `Warning` header value upstream sends: `299 - "text"` (Go-quoted).
pub(crate) fn warning_header(text: &str) -> String {
    format!("299 - {}", wasmlet_apimachinery::goquote::go_quote(text))
}

pub(crate) fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.into(),
        message,
        field: field.into(),
    }
}

pub(crate) fn required(field: &str) -> Cause {
    cause("FieldValueRequired", field, "Required value".into())
}

pub(crate) fn invalid(field: &str, bad: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {bad}: {detail}"),
    )
}

pub(crate) fn forbidden(field: &str, detail: &str) -> Cause {
    cause("FieldValueForbidden", field, format!("Forbidden: {detail}"))
}

/// Unknown fields (dropped already) and the body's duplicate fields, as
/// `fieldValidation` says: an error under Strict, warnings under Warn.
pub(crate) fn field_problems(unknown: &[String], opts: &FieldChecks) -> ApiResult<()> {
    let problems: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .chain(
            opts.duplicates
                .iter()
                .map(|f| format!("duplicate field \"{f}\"")),
        )
        .collect();
    match opts.mode {
        _ if problems.is_empty() => Ok(()),
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            problems.join(", ")
        ))),
        FieldValidation::Warn => {
            for p in problems {
                opts.warnings.push(p);
            }
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

fn decode_error(rt: &ResourceType, version: &str, err: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {err}",
        kind = rt.kind
    ))
}

/// Decodes a built-in object as upstream's typed decoding would: unknown
/// fields pruned (and reported per `fieldValidation`), wrong types refused,
/// Secret conversion applied. Kinds without a schema here pass unchanged.
pub fn decode(
    rt: &ResourceType,
    version: &str,
    obj: &mut Value,
    opts: &FieldChecks,
) -> ApiResult<()> {
    let Some(schema) = schemas::for_kind(&rt.group, &rt.kind) else {
        return field_problems(&[], opts);
    };
    let unknown = schema.structural.prune_typed(obj);
    if let Some(c) = schema
        .structural
        .validate(obj)
        .into_iter()
        .find(|c| c.reason == "FieldValueTypeInvalid")
    {
        let msg = decode::go_type_error(&schema.annotated, obj, &c.field);
        return Err(decode_error(rt, version, &msg));
    }
    let converted = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Secret") => data::decode_secret(obj),
        ("", "ConfigMap") => data::decode_configmap(obj),
        _ => Ok(()),
    };
    converted.map_err(|e| decode_error(rt, version, &e))?;
    field_problems(&unknown, opts)
}

/// The kind-specific rules of a new or updated object.
pub fn validate(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "ConfigMap") => data::validate_configmap(obj),
        ("", "Secret") => data::validate_secret(obj),
        ("batch", "Job") => batch::validate_job(obj),
        ("batch", "CronJob") => batch::validate_cronjob(obj),
        ("apps", "DaemonSet") => workloads::validate_daemonset(obj),
        ("apps", kind @ ("Deployment" | "ReplicaSet" | "StatefulSet")) => {
            workloads::validate_replicated(kind, obj)
        }
        ("", "ReplicationController") => workloads::validate_replicationcontroller(obj),
        ("", "ResourceQuota") => bounds::validate_resourcequota(obj),
        ("", "LimitRange") => bounds::validate_limitrange(obj),
        ("", "PersistentVolume") => volumes::validate_persistent_volume(obj),
        ("", "PersistentVolumeClaim") => volumes::validate_persistent_volume_claim(obj),
        ("networking.k8s.io", "Ingress") => networking::validate_ingress(obj),
        ("networking.k8s.io", "IngressClass") => networking::validate_ingress_class(obj),
        ("scheduling.k8s.io", "PriorityClass") => scheduling::validate_priority_class(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            autoscaling::validate_horizontal_pod_autoscaler(obj)
        }
        ("certificates.k8s.io", "CertificateSigningRequest") => certificates::validate_csr(obj),
        _ => Vec::new(),
    }
}

/// The rules of an update that compare it with the stored object.
pub(crate) fn validate_update(rt: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "ConfigMap") => data::validate_update(false, old, new),
        ("", "Secret") => data::validate_update(true, old, new),
        ("", "Pod") => pods::validate_update(old, new),
        ("batch", "Job") => batch::validate_job_update(old, new),
        ("apps", "DaemonSet" | "Deployment" | "ReplicaSet" | "StatefulSet") => {
            workloads::selector_unchanged(old, new)
        }
        ("", "Service") => service::validate_update(old, new),
        ("", "PersistentVolumeClaim") => volumes::validate_claim_update(old, new),
        ("networking.k8s.io", "IngressClass") => {
            networking::validate_ingress_class_update(old, new)
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            scheduling::validate_priority_class_update(old, new)
        }
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            certificates::validate_csr_update(old, new)
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
trait Full {
    fn full(&self) -> String;
}

#[cfg(test)]
impl Full for Cause {
    fn full(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}
