//! HorizontalPodAutoscaler (v2) rules, as upstream's
//! `validateHorizontalPodAutoscalerSpec`: a target to scale, at least one
//! replica, and a minimum no larger than the maximum.

use serde_json::Value;

use super::{invalid, required};
use crate::status::Cause;

pub(crate) fn validate_horizontal_pod_autoscaler(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["kind", "name"] {
        let set = obj
            .pointer(&format!("/spec/scaleTargetRef/{field}"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !set {
            causes.push(required(&format!("spec.scaleTargetRef.{field}")));
        }
    }
    let min = obj.pointer("/spec/minReplicas").and_then(Value::as_i64);
    let max = obj
        .pointer("/spec/maxReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(m) = min.filter(|m| *m < 1) {
        causes.push(invalid(
            "spec.minReplicas",
            &m.to_string(),
            "must be greater than or equal to 1",
        ));
    }
    if max < 1 {
        causes.push(invalid(
            "spec.maxReplicas",
            &max.to_string(),
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|m| m > max) {
        causes.push(invalid(
            "spec.maxReplicas",
            &max.to_string(),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    causes
}
