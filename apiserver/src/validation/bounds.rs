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

/// Upstream's `IsStandardQuotaResourceName`, for the names a scope may limit.
fn standard(name: &str) -> bool {
    matches!(
        name,
        "pods"
            | "services"
            | "replicationcontrollers"
            | "resourcequotas"
            | "secrets"
            | "configmaps"
            | "persistentvolumeclaims"
            | "services.nodeports"
            | "services.loadbalancers"
    ) || pod_compute(name)
}

fn pod_compute(name: &str) -> bool {
    let bare = name
        .strip_prefix("requests.")
        .or_else(|| name.strip_prefix("limits."))
        .unwrap_or(name);
    matches!(bare, "cpu" | "memory" | "ephemeral-storage")
}

/// Upstream's `IsResourceQuotaScopeValidForResource`: pod scopes limit pod
/// names only, and `BestEffort` (no compute) only the pod count.
fn scope_allows(scope: &str, name: &str) -> bool {
    let pods = matches!(name, "pods" | "count/pods");
    match scope {
        "BestEffort" => pods,
        "Terminating" | "NotTerminating" | "NotBestEffort" | "PriorityClass" => {
            pods || pod_compute(name)
        }
        _ => true,
    }
}

pub(crate) fn validate_resourcequota(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (k, v) in quantities(obj, "/spec/hard") {
        quantity(format!("spec.hard[{k}]"), v, &mut causes);
    }
    // Upstream's validateResourceQuotaScopes: each cause names the whole list.
    let scopes: Vec<&str> = obj
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let shown = format!("{scopes:?}");
    let mut scope_causes = Vec::new();
    let hard: Vec<&String> = quantities(obj, "/spec/hard").map(|(k, _)| k).collect();
    for scope in &scopes {
        if !SCOPES.contains(scope) {
            scope_causes.push("unsupported scope");
        }
        for k in &hard {
            if standard(k) && !scope_allows(scope, k) {
                scope_causes.push("unsupported scope applied to resource");
            }
        }
    }
    for (a, b) in [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ] {
        if scopes.contains(&a) && scopes.contains(&b) {
            scope_causes.push("conflicting scopes");
        }
    }
    for detail in scope_causes {
        causes.push(invalid("spec.scopes", &shown, detail));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limitrange_bounds_are_ordered_and_types_unique() {
        let lr = json!({"spec": {"limits": [
            {"type": "Container", "min": {"memory": "2Gi"}, "max": {"memory": "1Gi"}},
            {"type": "Container", "default": {"cpu": "-1"}}]}});
        let messages: Vec<String> = validate_limitrange(&lr)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            messages,
            [
                "spec.limits[0].min[memory]: Invalid value: \"2Gi\": min value 2Gi is greater than max value 1Gi",
                "spec.limits[1].type: Duplicate value: \"Container\"",
                "spec.limits[1].default[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            ]
        );
    }

    #[test]
    fn quota_scopes_are_checked_against_each_other_and_the_hard_names() {
        let q = json!({"spec": {"hard": {"requests.cpu": "1"},
            "scopes": ["BestEffort", "NotBestEffort"]}});
        let details: Vec<String> = validate_resourcequota(&q)
            .into_iter()
            .map(|c| c.message)
            .collect();
        assert_eq!(
            details,
            [
                "Invalid value: [\"BestEffort\", \"NotBestEffort\"]: unsupported scope applied to resource",
                "Invalid value: [\"BestEffort\", \"NotBestEffort\"]: conflicting scopes",
            ]
        );
    }
}
