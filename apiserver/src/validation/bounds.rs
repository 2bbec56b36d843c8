//! ResourceQuota and LimitRange rules, the part of upstream's
//! `ValidateResourceQuota` and `ValidateLimitRange` that admission depends
//! on: quantities that parse and are not negative, known quota scopes, one
//! LimitRange item per type, and `min <= defaultRequest <= default <= max`.

use serde_json::Value;

use super::{cause, invalid};
use crate::resourcequota::quantity::Quantity;
use crate::status::Cause;

const SCOPES: &[&str] = &[
    "BestEffort",
    "CrossNamespacePodAffinity",
    "NotBestEffort",
    "NotTerminating",
    "PriorityClass",
    "Terminating",
    "VolumeAttributesClass",
];

fn quantities<'a>(
    obj: &'a Value,
    path: &str,
) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
    obj.pointer(path)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

/// `Some(q)` for a quantity that parses and is not negative; else a cause.
fn quantity(field: String, v: &Value, causes: &mut Vec<Cause>) -> Option<Quantity> {
    let text = v.as_str().unwrap_or("");
    match Quantity::parse(text) {
        Some(q) if q.milli >= 0 => Some(q),
        Some(_) => {
            causes.push(invalid(
                &field,
                &format!("{text:?}"),
                "must be greater than or equal to 0",
            ));
            None
        }
        None => {
            causes.push(invalid(
                &field,
                &format!("{text:?}"),
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ));
            None
        }
    }
}

pub(crate) fn validate_resourcequota(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (k, v) in quantities(obj, "/spec/hard") {
        quantity(format!("spec.hard[{k}]"), v, &mut causes);
    }
    let supported = SCOPES
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let scopes = obj.pointer("/spec/scopes").and_then(Value::as_array);
    for (i, s) in scopes.into_iter().flatten().enumerate() {
        let s = s.as_str().unwrap_or("");
        if !SCOPES.contains(&s) {
            causes.push(cause(
                "FieldValueNotSupported",
                &format!("spec.scopes[{i}]"),
                format!("Unsupported value: {s:?}: supported values: {supported}"),
            ));
        }
    }
    causes
}

pub(crate) fn validate_limitrange(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut types = Vec::new();
    let items = obj.pointer("/spec/limits").and_then(Value::as_array);
    for (i, item) in items.into_iter().flatten().enumerate() {
        let at = format!("spec.limits[{i}]");
        let ty = item["type"].as_str().unwrap_or("");
        if types.contains(&ty) {
            causes.push(cause(
                "FieldValueDuplicate",
                &format!("{at}.type"),
                format!("Duplicate value: {ty:?}"),
            ));
        }
        types.push(ty);
        let mut lists = std::collections::BTreeMap::new();
        for field in [
            "max",
            "min",
            "default",
            "defaultRequest",
            "maxLimitRequestRatio",
        ] {
            for (k, v) in quantities(item, &format!("/{field}")) {
                if let Some(q) = quantity(format!("{at}.{field}[{k}]"), v, &mut causes) {
                    lists.insert((field, k.clone()), q);
                }
            }
        }
        let names: std::collections::BTreeSet<String> =
            lists.keys().map(|(_, k)| k.clone()).collect();
        for k in names {
            let get = |f: &'static str| lists.get(&(f, k.clone())).copied();
            // (lower, its name, upper, its name, the field the error names)
            let pairs = [
                ("min", "min value", "max", "max value", "min"),
                (
                    "min",
                    "min value",
                    "defaultRequest",
                    "default request value",
                    "defaultRequest",
                ),
                (
                    "defaultRequest",
                    "default request value",
                    "max",
                    "max value",
                    "defaultRequest",
                ),
                (
                    "defaultRequest",
                    "default request value",
                    "default",
                    "default limit value",
                    "defaultRequest",
                ),
                ("min", "min value", "default", "default value", "default"),
                ("default", "default value", "max", "max value", "default"),
            ];
            for (lo, lo_name, hi, hi_name, field) in pairs {
                if let (Some(l), Some(h)) = (get(lo), get(hi))
                    && l > h
                {
                    let shown = get(field).unwrap_or(l);
                    causes.push(invalid(
                        &format!("{at}.{field}[{k}]"),
                        &format!("{:?}", shown.to_string()),
                        &format!("{lo_name} {l} is greater than {hi_name} {h}"),
                    ));
                }
            }
        }
    }
    causes
}
