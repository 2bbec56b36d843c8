//! Whether one set of RBAC rules holds every permission of another, as
//! upstream's escalation check (`k8s.io/component-helpers/auth/rbac/validation`
//! `Covers`, `BreakdownRule`, `CompactString`): the requested rules are broken
//! into one-verb, one-group, one-resource (one-name, one-URL) rules, and each
//! must be covered by a single owner rule.

use std::collections::BTreeMap;

use crate::goquote::go_quote;
use crate::rbac::PolicyRule;

fn has(list: &[String], item: &str) -> bool {
    list.iter().any(|x| x == item)
}

fn has_all(list: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(list, i))
}

/// `rule` split into rules of one verb, group, resource and name (or one
/// verb and non-resource URL).
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = vec![];
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..Default::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for name in &rule.resource_names {
                        out.push(PolicyRule {
                            resource_names: one(name),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..Default::default()
            });
        }
    }
    out
}

fn resources_cover(owner: &[String], requested: &[String]) -> bool {
    if has(owner, "*") || has_all(owner, requested) {
        return true;
    }
    requested.iter().all(|r| {
        has(owner, r)
            || r.split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

fn urls_cover(owner: &[String], requested: &[String]) -> bool {
    requested.iter().all(|r| {
        owner.iter().any(|o| {
            o == r
                || o.strip_suffix('*')
                    .is_some_and(|prefix| r.starts_with(prefix))
        })
    })
}

/// Whether `owner` alone allows everything `sub` allows.
pub fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    // A rule limited to names never covers a rule for every name.
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs
        && groups
        && resources_cover(&owner.resources, &sub.resources)
        && names
        && urls_cover(&owner.non_resource_urls, &sub.non_resource_urls)
}

/// The parts of `requested` that no rule of `owner` covers (empty: the
/// owner holds all of it).
pub fn uncovered(owner: &[PolicyRule], requested: &[PolicyRule]) -> Vec<PolicyRule> {
    requested
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// Broken-down rules merged back: the verbs of rules that differ only in
/// their verb are put together (upstream's `CompactRules`).
pub fn compact(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut merged: BTreeMap<_, PolicyRule> = BTreeMap::new();
    for r in rules {
        let key = (
            r.api_groups.clone(),
            r.resources.clone(),
            r.resource_names.clone(),
            r.non_resource_urls.clone(),
        );
        let entry = merged.entry(key).or_insert_with(|| PolicyRule {
            verbs: vec![],
            ..r.clone()
        });
        for v in &r.verbs {
            if !has(&entry.verbs, v) {
                entry.verbs.push(v.clone());
            }
        }
    }
    merged.into_values().collect()
}

/// Go's `%q` of a string slice: `["a" "b"]`.
pub fn quote_list(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// A rule as upstream prints it in refusals, e.g.
/// `{APIGroups:[""], Resources:["pods"], Verbs:["create" "delete"]}`.
pub fn compact_string(r: &PolicyRule) -> String {
    let mut parts = vec![];
    for (label, list) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ] {
        if !list.is_empty() {
            parts.push(format!("{label}:{}", quote_list(list)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: vec![],
        }
    }

    #[test]
    fn owners_cover_what_they_hold_and_nothing_more() {
        let owner = [
            rule(&["get", "list"], &[""], &["pods", "pods/log"], &[]),
            rule(&["get"], &[""], &["secrets"], &["s1"]),
            rule(&["get"], &["*"], &["*/status"], &[]),
        ];
        assert!(uncovered(&owner, &[rule(&["get"], &[""], &["pods"], &[])]).is_empty());
        assert!(uncovered(&owner, &[rule(&["get"], &[""], &["pods"], &["p"])]).is_empty());
        assert!(
            uncovered(
                &owner,
                &[rule(&["get"], &["apps"], &["deployments/status"], &[])]
            )
            .is_empty()
        );
        assert!(uncovered(&owner, &[rule(&["get"], &[""], &["secrets"], &["s1"])]).is_empty());
        // A name-limited owner rule does not cover every name.
        assert_eq!(
            uncovered(&owner, &[rule(&["get"], &[""], &["secrets"], &[])]),
            [rule(&["get"], &[""], &["secrets"], &[])]
        );
        let missing = uncovered(&owner, &[rule(&["get", "create"], &[""], &["pods"], &[])]);
        assert_eq!(missing, [rule(&["create"], &[""], &["pods"], &[])]);
        // Wildcards are only covered by wildcards.
        assert!(!uncovered(&owner, &[rule(&["*"], &[""], &["pods"], &[])]).is_empty());
        let admin = [
            rule(&["*"], &["*"], &["*"], &[]),
            PolicyRule {
                verbs: v(&["*"]),
                non_resource_urls: v(&["*"]),
                ..Default::default()
            },
        ];
        let url = PolicyRule {
            verbs: v(&["get"]),
            non_resource_urls: v(&["/metrics"]),
            ..Default::default()
        };
        assert!(uncovered(&admin, std::slice::from_ref(&url)).is_empty());
        assert_eq!(uncovered(&owner, std::slice::from_ref(&url)), [url]);
    }

    #[test]
    fn refusals_print_rules_as_upstream() {
        let missing = [
            rule(&["create"], &[""], &["pods"], &[]),
            rule(&["delete"], &[""], &["pods"], &[]),
        ];
        let c = compact(&missing);
        assert_eq!(
            compact_string(&c[0]),
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["create" "delete"]}"#
        );
        let url = PolicyRule {
            verbs: v(&["get"]),
            non_resource_urls: v(&["/metrics"]),
            ..Default::default()
        };
        assert_eq!(
            compact_string(&url),
            r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#
        );
    }
}
