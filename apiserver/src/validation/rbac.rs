//! The validation of RBAC objects: a binding's `roleRef` (upstream's checks),
//! and size limits on the rules of a Role or ClusterRole, checked in validation
//! before the escalation check (`auth::rbac::escalation`) reasons over them.
//! Here, below `resources`, because `strategy` runs them on every write and
//! `auth` imports `resources`. Upstream has no size limits; these
//! are far above any real role (upstream's largest default role lists about
//! 60 resources) and keep one rule from holding millions of permissions
//! (issue 30: 300 groups x 300 resources x 300 verbs).

use serde_json::Value;

use crate::status::Cause;

/// The RBAC API group.
pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";

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

/// Upstream's checks of a binding's `roleRef`.
pub(crate) fn validate_binding(resource: &str, obj: &Value) -> Vec<Cause> {
    let r = &obj["roleRef"];
    let field = |f: &str| format!("roleRef.{f}");
    let mut causes = vec![];
    let mut bad = |f: &str, reason: &str, message: String| {
        causes.push(Cause {
            reason: reason.into(),
            message,
            field: field(f),
        })
    };
    let kind = r["kind"].as_str().unwrap_or("");
    let allowed: &[&str] = if resource == "rolebindings" {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !allowed.contains(&kind) {
        let list = allowed
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ");
        bad(
            "kind",
            "FieldValueNotSupported",
            format!("Unsupported value: \"{kind}\": supported values: {list}"),
        );
    }
    let group = r["apiGroup"].as_str().unwrap_or("");
    if group != GROUP {
        bad(
            "apiGroup",
            "FieldValueNotSupported",
            format!("Unsupported value: \"{group}\": supported values: \"{GROUP}\""),
        );
    }
    if r["name"].as_str().unwrap_or("").is_empty() {
        bad("name", "FieldValueRequired", "Required value".into());
    }
    causes
}

/// Upstream's update check of a binding: its `roleRef` never changes
/// (delete and recreate the binding instead).
pub(crate) fn validate_binding_update(old: &Value, new: &Value) -> Vec<Cause> {
    if old["roleRef"] == new["roleRef"] {
        return vec![];
    }
    let r = &new["roleRef"];
    let s = |f: &str| r[f].as_str().unwrap_or("").to_string();
    vec![Cause {
        reason: "FieldValueInvalid".into(),
        message: format!(
            "Invalid value: rbac.RoleRef{{APIGroup:\"{}\", Kind:\"{}\", Name:\"{}\"}}: cannot change roleRef",
            s("apiGroup"),
            s("kind"),
            s("name")
        ),
        field: "roleRef".into(),
    }]
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
