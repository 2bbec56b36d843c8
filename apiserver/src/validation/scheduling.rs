//! PriorityClass rules, as upstream's `ValidatePriorityClass`: the two
//! system classes keep their values, other names may not start with
//! `system-`, a user's class is at most one billion, and neither the value
//! nor the preemption policy changes after creation. (Only one class may be
//! the global default: that needs the other classes, so `priority` checks
//! it at admission.)

use serde_json::Value;

use super::{cause, forbidden, invalid};
use crate::priority::SYSTEM_CLASSES;
use crate::status::Cause;

/// The highest value a user-defined class may have.
const HIGHEST_USER_DEFINABLE: i64 = 1_000_000_000;

pub(crate) fn validate_priority_class(obj: &Value) -> Vec<Cause> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let value = obj.get("value").and_then(Value::as_i64).unwrap_or(0);
    let global = obj
        .get("globalDefault")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut causes = Vec::new();
    if let Some((_, want)) = SYSTEM_CLASSES.iter().find(|(n, _)| *n == name) {
        if value != *want {
            causes.push(invalid(
                "value",
                &value.to_string(),
                &format!("value of {name} PriorityClass must be {want}"),
            ));
        }
        if global {
            causes.push(invalid(
                "globalDefault",
                "true",
                &format!("globalDefault of {name} PriorityClass must be false"),
            ));
        }
    } else if name.starts_with("system-") {
        causes.push(forbidden(
            "metadata.name",
            "priority class names with 'system-' prefix are reserved for system use only",
        ));
    } else if value > HIGHEST_USER_DEFINABLE {
        causes.push(forbidden(
            "value",
            &format!(
                "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"
            ),
        ));
    }
    if let Some(p) = obj.get("preemptionPolicy").and_then(Value::as_str) {
        let known = ["Never", "PreemptLowerPriority"];
        if !known.contains(&p) {
            causes.push(cause(
                "FieldValueNotSupported",
                "preemptionPolicy",
                format!("Unsupported value: {p:?}: supported values: \"Never\", \"PreemptLowerPriority\""),
            ));
        }
    }
    causes
}

pub(crate) fn validate_priority_class_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if old.get("value") != new.get("value") {
        causes.push(forbidden("value", "may not be changed in an update."));
    }
    if old.get("preemptionPolicy") != new.get("preemptionPolicy") {
        let p = new
            .get("preemptionPolicy")
            .and_then(Value::as_str)
            .unwrap_or("");
        causes.push(invalid(
            "preemptionPolicy",
            &format!("{p:?}"),
            "field is immutable",
        ));
    }
    causes
}
