//! DaemonSet and ReplicationController rules, as upstream's
//! `ValidateDaemonSet(Update)` and `ValidateReplicationController`: a
//! non-empty selector that matches the template's labels, a template whose
//! pods restart `Always`, no negative replicas, and (DaemonSet) a selector
//! that never changes: the controller would orphan every pod it made.

use serde_json::Value;
use wasmlet_apimachinery::selector::LabelSelector;

use super::super::status::Cause;
use super::{cause, invalid, required};

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

pub fn validate_daemonset(obj: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    match obj.pointer("/spec/selector").filter(|s| !s.is_null()) {
        None => causes.push(required("spec.selector")),
        Some(s) => match LabelSelector::from_label_selector(s) {
            Ok(sel) if sel.is_empty() => causes.push(invalid(
                "spec.selector",
                &s.to_string(),
                "empty selector is invalid for daemonset",
            )),
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
    if obj.pointer("/spec/template").is_none_or(Value::is_null) {
        causes.push(required("spec.template"));
    }
    restart_policy(obj, &mut causes);
    causes
}

/// A DaemonSet's `spec.selector` is immutable (apps/v1).
pub fn validate_daemonset_update(old: &Value, new: &Value) -> Vec<Cause> {
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

pub fn validate_replicationcontroller(obj: &Value) -> Vec<Cause> {
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
        let c = validate_daemonset_update(&old, &new);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].full().ends_with("field is immutable"),
            "{}",
            c[0].full()
        );
        assert!(validate_daemonset_update(&old, &old).is_empty());
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
