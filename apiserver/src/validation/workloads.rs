//! DaemonSet and ReplicationController rules, as upstream's
//! `ValidateDaemonSet(Update)` and `ValidateReplicationController`, and the
//! selector rules Deployments, ReplicaSets and StatefulSets share with them
//! (`ValidateDeploymentSpec`, `ValidateReplicaSetSpec`,
//! `ValidateStatefulSetSpec`, and their updates' immutable selector): a
//! non-empty selector that matches the template's labels, a template whose
//! pods restart `Always`, no negative replicas, and (DaemonSet) a selector
//! that never changes: the controller would orphan every pod it made, and a
//! rolling update that either surges or takes nodes down, never both or
//! neither (`ValidateRollingUpdateDaemonSet`).

use serde_json::Value;
use wasmlet_apimachinery::selector::LabelSelector;

use super::{cause, invalid, required};
use crate::status::Cause;

const NO_MATCH: &str = "`selector` does not match template `labels`";

/// The template's labels, for messages (`map[a:b]` is Go's; JSON reads as well).
fn template_labels(obj: &Value) -> &Value {
    obj.pointer("/spec/template/metadata/labels")
        .unwrap_or(&Value::Null)
}

/// `restartPolicy` of the template: only `Always` (the default) keeps a
/// controller's pod running.
fn restart_policy(obj: &Value, causes: &mut Vec<Cause>) {
    if let Some(p) = obj
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        && p != "Always"
    {
        causes.push(cause(
            "FieldValueNotSupported",
            "spec.template.spec.restartPolicy",
            format!("Unsupported value: \"{p}\": supported values: \"Always\""),
        ));
    }
}

/// A required, non-empty selector that matches the template's labels
/// (`empty` is upstream's message for an empty one, which names the kind,
/// and for a ReplicaSet names a Deployment, as upstream's does).
fn selector_picks_template(obj: &Value, empty: &str, causes: &mut Vec<Cause>) {
    match obj.pointer("/spec/selector").filter(|s| !s.is_null()) {
        None => causes.push(required("spec.selector")),
        Some(s) => match LabelSelector::from_label_selector(s) {
            Ok(sel) if sel.is_empty() => {
                causes.push(invalid("spec.selector", &s.to_string(), empty))
            }
            Ok(sel) => {
                if !sel.matches(template_labels(obj)) {
                    causes.push(invalid(
                        "spec.template.metadata.labels",
                        &template_labels(obj).to_string(),
                        NO_MATCH,
                    ));
                }
            }
            Err(e) => causes.push(invalid("spec.selector", &s.to_string(), &e.to_string())),
        },
    }
}

/// Deployments, ReplicaSets and StatefulSets: a selector that picks the
/// template, as upstream (the rest of their rules are the schema's).
pub(crate) fn validate_replicated(kind: &str, obj: &Value) -> Vec<Cause> {
    let empty = match kind {
        "StatefulSet" => "empty selector is invalid for statefulset",
        _ => "empty selector is invalid for deployment",
    };
    let mut causes = vec![];
    selector_picks_template(obj, empty, &mut causes);
    causes
}

pub(crate) fn validate_daemonset(obj: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    selector_picks_template(obj, "empty selector is invalid for daemonset", &mut causes);
    if obj.pointer("/spec/template").is_none_or(Value::is_null) {
        causes.push(required("spec.template"));
    }
    restart_policy(obj, &mut causes);
    rolling_update(obj, &mut causes);
    causes
}

/// `getIntOrPercentValue`: the number of an int or of a percent (`"25%"` is
/// 25); any other string counts by its own digits, else 0.
fn int_or_percent(v: &Value) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => s.strip_suffix('%').unwrap_or(s).parse().unwrap_or(0),
        _ => 0,
    }
}

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent` of one field.
fn int_or_percent_field(v: &Value, field: &str, causes: &mut Vec<Cause>) {
    match v {
        Value::Number(_) if int_or_percent(v) < 0 => {
            causes.push(invalid(
                field,
                &v.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        Value::String(s) => {
            let digits = s.strip_suffix('%').filter(|d| {
                !d.is_empty() && d.len() <= 10 && d.bytes().all(|b| b.is_ascii_digit())
            });
            match digits {
                None => causes.push(invalid(
                    field,
                    &v.to_string(),
                    "a valid percent string must be a numeric string followed by an ending '%' \
                     (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )),
                Some(_) if int_or_percent(v) > 100 => {
                    causes.push(invalid(
                        field,
                        &v.to_string(),
                        "must not be greater than 100%",
                    ));
                }
                Some(_) => {}
            }
        }
        _ => {}
    }
}

/// A `RollingUpdate` either surges (`maxSurge`, with `maxUnavailable` 0) or
/// takes nodes down (`maxUnavailable`), as upstream: both or neither is 422.
fn rolling_update(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(r) = obj
        .pointer("/spec/updateStrategy")
        .filter(|u| u["type"] == "RollingUpdate")
        .and_then(|u| u.get("rollingUpdate"))
        .filter(|r| r.is_object())
    else {
        return;
    };
    const UNAVAILABLE: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";
    const SURGE: &str = "spec.updateStrategy.rollingUpdate.maxSurge";
    let (unavailable, surge) = (&r["maxUnavailable"], &r["maxSurge"]);
    int_or_percent_field(unavailable, UNAVAILABLE, causes);
    int_or_percent_field(surge, SURGE, causes);
    match (int_or_percent(unavailable) != 0, int_or_percent(surge) != 0) {
        (true, true) => causes.push(invalid(
            SURGE,
            &surge.to_string(),
            "may not be set when maxUnavailable is non-zero",
        )),
        (false, false) => causes.push(cause(
            "FieldValueRequired",
            UNAVAILABLE,
            "Required value: cannot be 0 when maxSurge is 0".into(),
        )),
        _ => {}
    }
}

/// An apps/v1 workload's selector never changes (DaemonSet, Deployment,
/// ReplicaSet, StatefulSet): its controller would orphan every pod it made.
pub(crate) fn selector_unchanged(old: &Value, new: &Value) -> Vec<Cause> {
    let (o, n) = (old.pointer("/spec/selector"), new.pointer("/spec/selector"));
    if o != n {
        return vec![invalid(
            "spec.selector",
            &n.map(Value::to_string).unwrap_or_else(|| "null".into()),
            "field is immutable",
        )];
    }
    vec![]
}

pub(crate) fn validate_replicationcontroller(obj: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    if obj
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .is_some_and(|r| r < 0)
    {
        causes.push(invalid(
            "spec.replicas",
            &obj["spec"]["replicas"].to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let selector = obj
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty());
    let Some(selector) = selector else {
        causes.push(required("spec.selector"));
        return causes;
    };
    if obj.pointer("/spec/template").is_none_or(Value::is_null) {
        causes.push(required("spec.template"));
        return causes;
    }
    let labels = template_labels(obj);
    let matches = selector
        .iter()
        .all(|(k, v)| labels.get(k).is_some_and(|l| l == v));
    if !matches {
        causes.push(invalid(
            "spec.template.metadata.labels",
            &labels.to_string(),
            NO_MATCH,
        ));
    }
    restart_policy(obj, &mut causes);
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Full;
    use super::*;

    fn ds(selector: Value, labels: Value) -> Value {
        json!({"spec": {"selector": selector, "template": {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    }

    #[test]
    fn a_daemonset_selector_must_match_its_template() {
        let ok = ds(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        assert!(validate_daemonset(&ok).is_empty());
        let bad = ds(json!({"matchLabels": {"app": "a"}}), json!({"app": "b"}));
        let c = validate_daemonset(&bad);
        assert_eq!(
            c[0].full(),
            "spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`"
        );
        let empty = ds(json!({}), json!({"app": "a"}));
        assert!(
            validate_daemonset(&empty)[0]
                .full()
                .contains("empty selector is invalid")
        );
        let none = json!({"spec": {"template": {}}});
        assert_eq!(
            validate_daemonset(&none)[0].full(),
            "spec.selector: Required value"
        );
    }

    #[test]
    fn a_daemonset_selector_is_immutable() {
        let old = ds(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        let new = ds(json!({"matchLabels": {"app": "b"}}), json!({"app": "b"}));
        let c = selector_unchanged(&old, &new);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].full().ends_with("field is immutable"),
            "{}",
            c[0].full()
        );
        assert!(selector_unchanged(&old, &old).is_empty());
    }

    #[test]
    fn a_daemonset_rolling_update_surges_or_takes_nodes_down() {
        let with = |r: Value| {
            let mut d = ds(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
            d["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": r});
            validate_daemonset(&d)
                .iter()
                .map(Full::full)
                .collect::<Vec<_>>()
        };
        assert!(with(json!({"maxUnavailable": 1, "maxSurge": 0})).is_empty());
        assert!(with(json!({"maxUnavailable": 0, "maxSurge": "25%"})).is_empty());
        assert_eq!(
            with(json!({"maxUnavailable": 0, "maxSurge": "0%"})),
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
            ]
        );
        assert_eq!(
            with(json!({"maxUnavailable": 1, "maxSurge": 1})),
            [
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"
            ]
        );
        assert_eq!(
            with(json!({"maxUnavailable": 0, "maxSurge": "150%"})),
            [
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"150%\": must not be greater than 100%"
            ]
        );
        let bad = with(json!({"maxUnavailable": -1, "maxSurge": "x"}));
        assert!(
            bad[0]
                .contains("maxUnavailable: Invalid value: -1: must be greater than or equal to 0"),
            "{bad:?}"
        );
        assert!(
            bad[1].contains("maxSurge: Invalid value: \"x\": a valid percent string"),
            "{bad:?}"
        );
    }

    #[test]
    fn a_replication_controller_needs_a_matching_selector_and_template() {
        let ok = json!({"spec": {"replicas": 2, "selector": {"app": "a"},
            "template": {"metadata": {"labels": {"app": "a", "x": "y"}}}}});
        assert!(validate_replicationcontroller(&ok).is_empty());
        let bad = json!({"spec": {"selector": {"app": "a"},
            "template": {"metadata": {"labels": {"app": "b"}},
                "spec": {"restartPolicy": "Never"}}}});
        let c: Vec<String> = validate_replicationcontroller(&bad)
            .iter()
            .map(Full::full)
            .collect();
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].contains("does not match template"));
        assert!(c[1].starts_with("spec.template.spec.restartPolicy: Unsupported value: \"Never\""));
        let none = json!({"spec": {"replicas": -1}});
        let c: Vec<String> = validate_replicationcontroller(&none)
            .iter()
            .map(Full::full)
            .collect();
        assert_eq!(
            c,
            [
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.selector: Required value"
            ]
        );
    }
}
