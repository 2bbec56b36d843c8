//! HorizontalPodAutoscaler (autoscaling/v2) defaults, as upstream's
//! `SetDefaults_HorizontalPodAutoscaler`: at least one replica, an 80 %
//! average CPU utilization target when no metric is given, and, when a
//! `behavior` is given, each of its unset rules filled with the defaults
//! the autoscaler would use (scale up at most 4 pods or 100 % per 15 s; scale
//! down at most 100 % per 15 s after a 300 s stabilization window).

use serde_json::{Map, Value, json};

use super::default;

pub(crate) fn horizontal_pod_autoscaler(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    default(spec, "minReplicas", json!(1));
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        rules(
            behavior,
            "scaleUp",
            0,
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
                   {"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
        rules(
            behavior,
            "scaleDown",
            300,
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
    }
}

fn rules(behavior: &mut Map<String, Value>, key: &str, window: i64, policies: Value) {
    let rules = behavior.entry(key).or_insert_with(|| json!({}));
    if let Some(r) = rules.as_object_mut() {
        default(r, "stabilizationWindowSeconds", json!(window));
        default(r, "selectPolicy", json!("Max"));
        if r.get("policies").is_none_or(Value::is_null) {
            r.insert("policies".into(), policies);
        }
    }
}
