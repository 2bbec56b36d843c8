//! A Service's update rules, as upstream's `ValidateServiceUpdate`.

use serde_json::Value;

use super::invalid;
use crate::status::Cause;

/// A Service's primary cluster IP may not change once set (upstream's
/// `validateUpgradeDowngradeClusterIPs`), unless it is or becomes an
/// `ExternalName`. A change of `clusterIP` alone counts as a change of
/// `clusterIPs[0]`, as upstream's strategy carries it over before checking.
pub(crate) fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let external =
        |v: &Value| v.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if external(old) || external(new) {
        return vec![];
    }
    let ip = |v: &Value| {
        v.pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let primary = |v: &Value| {
        v.pointer("/spec/clusterIPs/0")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let before = primary(old);
    let after = if ip(new) != ip(old) && primary(new) == before {
        ip(new)
    } else {
        primary(new)
    };
    if before.is_empty() || after == before {
        return vec![];
    }
    vec![invalid(
        "spec.clusterIPs[0]",
        &format!("\"{after}\""),
        "may not change once set",
    )]
}
