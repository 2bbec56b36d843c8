//! CertificateSigningRequest rules, as upstream's
//! `ValidateCertificateSigningRequestCreate`: a PEM certificate request that
//! parses, a signer, usages from the known set, at least ten minutes asked
//! for; and the approval rules (`validate_conditions`): Approved and Denied
//! exclude each other and, once set, stay.

use base64::Engine;
use serde_json::Value;

use super::{cause, forbidden, invalid, required};
use crate::status::Cause;

/// The key usages a request may ask for (`certificates.KeyUsage`).
const USAGES: [&str; 20] = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
];

/// The PEM text of `spec.request` (base64 in JSON, as Go's `[]byte`).
pub(crate) fn request_pem(obj: &Value) -> Option<String> {
    let b64 = obj.pointer("/spec/request")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}

pub(crate) fn validate_csr(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match request_pem(obj) {
        None => causes.push(required("spec.request")),
        Some(pem) => {
            let parsed = rcgen::CertificateSigningRequestParams::from_pem(&pem);
            if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
                causes.push(invalid(
                    "spec.request",
                    "[]byte{...}",
                    "PEM block type must be CERTIFICATE REQUEST",
                ));
            } else if let Err(e) = parsed {
                causes.push(invalid("spec.request", "[]byte{...}", &e.to_string()));
            }
        }
    }
    if obj
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(required("spec.signerName"));
    }
    match obj.pointer("/spec/usages").and_then(Value::as_array) {
        None => causes.push(required("spec.usages")),
        Some(u) if u.is_empty() => causes.push(required("spec.usages")),
        Some(u) => {
            for (i, usage) in u.iter().enumerate() {
                let usage = usage.as_str().unwrap_or("");
                if !USAGES.contains(&usage) {
                    causes.push(cause(
                        "FieldValueNotSupported",
                        &format!("spec.usages[{i}]"),
                        format!("Unsupported value: {usage:?}"),
                    ));
                }
            }
        }
    }
    if let Some(s) = obj
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        && s < 600
    {
        causes.push(invalid(
            "spec.expirationSeconds",
            &s.to_string(),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    causes
}

/// The spec of a request is fixed once created.
pub(crate) fn validate_csr_update(old: &Value, new: &Value) -> Vec<Cause> {
    if old.get("spec") == new.get("spec") {
        return Vec::new();
    }
    vec![forbidden("spec", "field is immutable")]
}

/// The conditions an approval writes over `old`'s.
pub(crate) fn validate_conditions(old: &Value, new: &[Value]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let has = |list: &[Value], t: &str| list.iter().any(|c| c["type"] == t);
    for (i, c) in new.iter().enumerate() {
        let t = c["type"].as_str().unwrap_or("");
        if !["Approved", "Denied", "Failed"].contains(&t) {
            causes.push(cause(
                "FieldValueNotSupported",
                &format!("status.conditions[{i}].type"),
                format!("Unsupported value: {t:?}: supported values: \"Approved\", \"Denied\", \"Failed\""),
            ));
        }
        if c["status"] != "True" && ["Approved", "Denied"].contains(&t) {
            causes.push(invalid(
                &format!("status.conditions[{i}].status"),
                &format!("{:?}", c["status"].as_str().unwrap_or("")),
                "Approved and Denied conditions must have status \"True\"",
            ));
        }
    }
    if has(new, "Approved") && has(new, "Denied") {
        causes.push(invalid(
            "status.conditions",
            "Denied",
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    let before: Vec<Value> = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for t in ["Approved", "Denied"] {
        if has(&before, t) && !has(new, t) {
            causes.push(forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type {t:?}"),
            ));
        }
    }
    causes
}
