//! Size limits on the rules of a Role or ClusterRole, checked in validation
//! before the escalation check reasons over them. Upstream has none; these
//! are far above any real role (upstream's largest default role lists about
//! 60 resources) and keep one rule from holding millions of permissions
//! (issue 30: 300 groups x 300 resources x 300 verbs).

use serde_json::Value;

use crate::status::Cause;

/// Most rules in one role.
pub(crate) const MAX_RULES: usize = 1000;
/// Most entries in one list of a rule (verbs, apiGroups, resources,
/// resourceNames, nonResourceURLs).
pub(crate) const MAX_ENTRIES: usize = 256;

const LISTS: [&str; 5] = [
    "verbs",
    "apiGroups",
    "resources",
    "resourceNames",
    "nonResourceURLs",
];

/// Upstream's `field.TooMany` cause.
fn too_many(field: String, got: usize, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany".into(),
        message: format!("Too many: {got}: must have at most {max} items"),
        field,
    }
}

/// The causes for a role whose rules pass the limits.
pub(crate) fn validate_role(obj: &Value) -> Vec<Cause> {
    let Some(rules) = obj.get("rules").and_then(Value::as_array) else {
        return vec![];
    };
    if rules.len() > MAX_RULES {
        return vec![too_many("rules".into(), rules.len(), MAX_RULES)];
    }
    let mut causes = vec![];
    for (i, rule) in rules.iter().enumerate() {
        for list in LISTS {
            let n = rule.get(list).and_then(Value::as_array).map_or(0, Vec::len);
            if n > MAX_ENTRIES {
                causes.push(too_many(format!("rules[{i}].{list}"), n, MAX_ENTRIES));
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
    fn absurd_rules_are_refused_by_field() {
        let many = |n: usize| (0..n).map(|i| format!("x{i}")).collect::<Vec<_>>();
        let ok = json!({"rules": [{"verbs": many(256), "apiGroups": many(256), "resources": many(256)}]});
        assert!(validate_role(&ok).is_empty());
        let bad = json!({"rules": [
            {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
            {"verbs": many(300), "apiGroups": many(300), "resources": many(2), "nonResourceURLs": many(257)},
        ]});
        let causes: Vec<String> = validate_role(&bad)
            .iter()
            .map(|c| format!("{} {}: {}", c.reason, c.field, c.message))
            .collect();
        assert_eq!(
            causes,
            [
                "FieldValueTooMany rules[1].verbs: Too many: 300: must have at most 256 items",
                "FieldValueTooMany rules[1].apiGroups: Too many: 300: must have at most 256 items",
                "FieldValueTooMany rules[1].nonResourceURLs: Too many: 257: must have at most 256 items",
            ]
        );
        let rule = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let causes = validate_role(&json!({"rules": vec![rule; 1001]}));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "rules");
    }
}
