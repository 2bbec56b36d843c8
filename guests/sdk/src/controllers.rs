//! Helpers every workload controller needs, with upstream's semantics: label
//! selectors (`metav1.LabelSelector`) as list strings and matchers, the
//! controller owner reference, pod readiness, and `intstr` percentages.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// `selector` in the string syntax `ListParams::labels` takes, as upstream's
/// `LabelSelectorAsSelector(...).String()`; `None` when it selects nothing (a
/// missing selector, or an operator upstream rejects). `Some("")` selects everything.
pub fn selector_string(selector: Option<&LabelSelector>) -> Option<String> {
    let selector = selector?;
    let mut parts: Vec<(String, String)> = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        parts.push((k.clone(), format!("{k}={v}")));
    }
    for e in selector.match_expressions.iter().flatten() {
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        let part = match e.operator.as_str() {
            "In" if !values.is_empty() => format!("{} in ({})", e.key, values.join(",")),
            "NotIn" if !values.is_empty() => format!("{} notin ({})", e.key, values.join(",")),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            _ => return None,
        };
        parts.push((e.key.clone(), part));
    }
    parts.sort();
    Some(
        parts
            .into_iter()
            .map(|(_, p)| p)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Whether `selector` selects an object with `labels` (a missing selector
/// selects nothing, an empty one everything).
pub fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| values.contains(v)),
                "NotIn" => have.is_none_or(|v| !values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// Whether a selector selects everything (`{}`), which workload controllers refuse.
pub fn selector_is_empty(selector: Option<&LabelSelector>) -> bool {
    selector.is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    })
}

/// The owner reference with `controller: true`, as `metav1.GetControllerOf`.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Whether the pod's `Ready` condition is True (`podutil.IsPodReady`).
pub fn pod_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// A pod condition by type.
pub fn pod_condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// `intstr.GetScaledValueFromIntOrPercent`: an integer as is, `"N%"` of `total`
/// rounded up or down; anything else is an error naming the value.
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(n) = s.strip_suffix('%') else {
                return Err(format!(
                    "invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"
                ));
            };
            let pct: i64 = n.parse().map_err(|e| format!("invalid value {s:?}: {e}"))?;
            let prod = pct * i64::from(total);
            let v = if round_up {
                (prod + 99).div_euclid(100)
            } else {
                prod.div_euclid(100)
            };
            i32::try_from(v).map_err(|_| format!("invalid value {s:?}: out of range"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn selectors_print_and_match_as_upstream() {
        let s = sel(json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["b", "a"]},
            {"key": "old", "operator": "DoesNotExist"}]}));
        assert_eq!(
            selector_string(Some(&s)).unwrap(),
            "app=web,!old,tier in (a,b)"
        );
        let labels: BTreeMap<String, String> =
            [("app".into(), "web".into()), ("tier".into(), "a".into())].into();
        assert!(selector_matches(Some(&s), Some(&labels)));
        let mut old = labels.clone();
        old.insert("old".into(), "1".into());
        assert!(!selector_matches(Some(&s), Some(&old)));
        assert!(!selector_matches(None, Some(&labels)));
        assert_eq!(selector_string(None), None);
        assert!(selector_matches(Some(&sel(json!({}))), None));
        assert!(selector_is_empty(Some(&sel(json!({})))));
    }

    #[test]
    fn percentages_scale_and_round_as_upstream() {
        let p = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled_value(&p("50%"), 5, true), Ok(3));
        assert_eq!(scaled_value(&p("50%"), 5, false), Ok(2));
        assert_eq!(scaled_value(&p("25%"), 4, true), Ok(1));
        assert_eq!(scaled_value(&IntOrString::Int(2), 10, false), Ok(2));
        assert!(scaled_value(&p("50"), 5, true).is_err());
        assert!(scaled_value(&p("x%"), 5, true).is_err());
    }
}
