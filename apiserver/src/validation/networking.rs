//! Ingress and IngressClass rules, as upstream's `ValidateIngressSpec` and
//! `ValidateIngressClass` in the parts a manifest most often gets wrong:
//! every path has a known `pathType` and one backend, a rule-less Ingress
//! has a default backend, and a class names its controller once and for all.

use serde_json::Value;

use super::{cause, invalid, required};
use crate::status::Cause;

const PATH_TYPES: [&str; 3] = ["Exact", "ImplementationSpecific", "Prefix"];

fn backend(at: &str, b: Option<&Value>, causes: &mut Vec<Cause>) {
    let b = b.cloned().unwrap_or_default();
    let service = b.get("service").is_some_and(|v| !v.is_null());
    let resource = b.get("resource").is_some_and(|v| !v.is_null());
    if service == resource {
        let detail = if service {
            "cannot set both resource and service backends"
        } else {
            "resource or service backend is required"
        };
        causes.push(cause(
            "FieldValueInvalid",
            at,
            format!("Invalid value: \"\": {detail}"),
        ));
    }
    if service {
        if b.pointer("/service/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(required(&format!("{at}.service.name")));
        }
        let port = b.pointer("/service/port").cloned().unwrap_or_default();
        let named = port
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        let numbered = port
            .get("number")
            .and_then(Value::as_i64)
            .is_some_and(|n| n != 0);
        if named == numbered {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("{at}.service.port"),
                "Invalid value: \"\": port name or number is required".into(),
            ));
        }
    }
}

pub(crate) fn validate_ingress(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or_default();
    let rules = spec.get("rules").and_then(Value::as_array);
    if spec.get("defaultBackend").is_some_and(|v| !v.is_null()) {
        backend(
            "spec.defaultBackend",
            spec.get("defaultBackend"),
            &mut causes,
        );
    } else if rules.is_none_or(Vec::is_empty) {
        causes.push(invalid(
            "spec.rules",
            "[]",
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let paths = rule.pointer("/http/paths").and_then(Value::as_array);
        for (j, path) in paths.into_iter().flatten().enumerate() {
            let at = format!("spec.rules[{i}].http.paths[{j}]");
            match path.get("pathType").and_then(Value::as_str) {
                None => causes.push(cause(
                    "FieldValueRequired",
                    &format!("{at}.pathType"),
                    "Required value: pathType must be specified".into(),
                )),
                Some(t) if !PATH_TYPES.contains(&t) => causes.push(cause(
                    "FieldValueNotSupported",
                    &format!("{at}.pathType"),
                    format!(
                        "Unsupported value: {t:?}: supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\""
                    ),
                )),
                Some("Exact" | "Prefix") => {
                    let p = path.get("path").and_then(Value::as_str).unwrap_or("");
                    if !p.starts_with('/') {
                        causes.push(invalid(
                            &format!("{at}.path"),
                            &format!("{p:?}"),
                            "must be an absolute path",
                        ));
                    }
                }
                Some(_) => {}
            }
            backend(&format!("{at}.backend"), path.get("backend"), &mut causes);
        }
    }
    causes
}

pub(crate) fn validate_ingress_class(obj: &Value) -> Vec<Cause> {
    if obj
        .pointer("/spec/controller")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return vec![required("spec.controller")];
    }
    Vec::new()
}

pub(crate) fn validate_ingress_class_update(old: &Value, new: &Value) -> Vec<Cause> {
    let (o, n) = (
        old.pointer("/spec/controller"),
        new.pointer("/spec/controller"),
    );
    if o == n {
        return Vec::new();
    }
    let shown = n.and_then(Value::as_str).unwrap_or("");
    vec![invalid(
        "spec.controller",
        &format!("{shown:?}"),
        "field is immutable",
    )]
}
