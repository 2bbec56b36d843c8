//! Whether one set of RBAC rules holds every permission of another, as
//! upstream's escalation check (`k8s.io/component-helpers/auth/rbac/validation`
//! `Covers`, `BreakdownRule`, `CompactString`): the requested rules are broken
//! into one-verb, one-group, one-resource (one-name, one-URL) rules, and each
//! must be covered by a single owner rule.
//!
//! The broken-down permissions are never built: a rule of 300 groups, 300
//! resources and 300 verbs holds 27 million of them. [`missing`] walks the
//! rule's lists one dimension at a time, keeping for each partial permission
//! only the set of owner rules that still allow it, and merges partial
//! permissions with the same set (see [`missing`]).

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

/// Most broken-down permissions [`missing`] lists; it counts the rest.
pub const MAX_LISTED: usize = 20;
/// Most distinct sets of owner rules [`missing`] tracks for one requested
/// rule (see [`TooVaried`]).
pub const MAX_STATES: usize = 4096;

/// The permissions of `requested` that no single rule of `owner` allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Missing {
    /// The first [`MAX_LISTED`] of them, broken down (one verb, group,
    /// resource and name, or one verb and URL), in the requested lists' order.
    pub listed: Vec<PolicyRule>,
    /// How many there are in all (distinct values of each list counted once).
    pub total: u128,
}

/// A requested rule whose values split the owner rules into more than
/// [`MAX_STATES`] different sets: checking it would cost too much. Only
/// absurd owner rule sets get there (each set needs owner rules that tell
/// the rule's values apart); smaller requested rules check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rules[{rule}] is too varied to check against the permissions held; split it into smaller rules"
)]
pub struct TooVaried {
    /// Index in the requested rules (`rules[...]`) of the rule that could not be checked.
    pub rule: usize,
}

/// A set of owner rules, one bit each.
type Owners = Vec<u64>;

/// One list of a requested rule (verbs, groups, resources, names or URLs),
/// its distinct values, and whether an owner rule allows a value of it.
struct Dim<'a> {
    values: Vec<Option<&'a str>>,
    allows: fn(&PolicyRule, Option<&str>) -> bool,
}

fn distinct(list: &[String]) -> Vec<Option<&str>> {
    let mut seen = std::collections::HashSet::new();
    list.iter()
        .filter(|s| seen.insert(s.as_str()))
        .map(|s| Some(s.as_str()))
        .collect()
}

fn verb_allows(o: &PolicyRule, v: Option<&str>) -> bool {
    v.is_some_and(|v| has(&o.verbs, "*") || has(&o.verbs, v))
}

fn group_allows(o: &PolicyRule, g: Option<&str>) -> bool {
    g.is_some_and(|g| has(&o.api_groups, "*") || has(&o.api_groups, g))
}

fn resource_allows(o: &PolicyRule, r: Option<&str>) -> bool {
    r.is_some_and(|r| resources_cover(&o.resources, &[r.to_string()]))
}

/// `None`: the requested rule names no resource names, which only an owner
/// rule for every name covers.
fn name_allows(o: &PolicyRule, n: Option<&str>) -> bool {
    o.resource_names.is_empty() || n.is_some_and(|n| has(&o.resource_names, n))
}

/// A URL permission is covered by a rule for every name that matches the URL
/// (its groups and resources do not matter, as in upstream's `Covers`).
fn url_allows(o: &PolicyRule, u: Option<&str>) -> bool {
    o.resource_names.is_empty()
        && u.is_some_and(|u| urls_cover(&o.non_resource_urls, &[u.to_string()]))
}

/// The permissions in `requested` that no rule of `owner` covers, as
/// [`uncovered`] defines them, without breaking the rules down.
///
/// For each requested rule the lists are taken one at a time. A partial
/// permission (a verb; a verb and a group; ...) is represented only by the
/// set of owner rules that allow all of it so far; partial permissions with
/// the same set are merged, keeping their count and the first
/// [`MAX_LISTED`] of them. Values of a list that the same owner rules allow
/// are merged the same way first. The cost is the number of distinct sets
/// times the number of distinct values per list, independent of the product
/// of the lists' lengths; a permission is missing when its set ends empty.
pub fn missing(owner: &[PolicyRule], requested: &[PolicyRule]) -> Result<Missing, TooVaried> {
    let mut out = Missing::default();
    for (i, rule) in requested.iter().enumerate() {
        let verbs = Dim {
            values: distinct(&rule.verbs),
            allows: verb_allows,
        };
        let names = if rule.resource_names.is_empty() {
            vec![None]
        } else {
            distinct(&rule.resource_names)
        };
        let resource_dims = [
            Dim {
                values: distinct(&rule.api_groups),
                allows: group_allows,
            },
            Dim {
                values: distinct(&rule.resources),
                allows: resource_allows,
            },
            Dim {
                values: names,
                allows: name_allows,
            },
        ];
        let url_dims = [Dim {
            values: distinct(&rule.non_resource_urls),
            allows: url_allows,
        }];
        for (kind, dims) in [
            (Kind::Resource, &resource_dims[..]),
            (Kind::Url, &url_dims[..]),
        ] {
            let verbs = Dim {
                values: verbs.values.clone(),
                allows: verbs.allows,
            };
            let all: Vec<&Dim> = std::iter::once(&verbs).chain(dims).collect();
            let (listed, total) = walk(owner, &all).ok_or(TooVaried { rule: i })?;
            out.total += total;
            for tuple in listed {
                if out.listed.len() < MAX_LISTED {
                    out.listed.push(kind.rule(&tuple));
                }
            }
        }
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Kind {
    Resource,
    Url,
}

impl Kind {
    /// The broken-down rule of one value per list (verb first).
    fn rule(self, t: &[Option<&str>]) -> PolicyRule {
        let one = |v: Option<&str>| v.map(|s| vec![s.to_string()]).unwrap_or_default();
        match self {
            Kind::Resource => PolicyRule {
                verbs: one(t[0]),
                api_groups: one(t[1]),
                resources: one(t[2]),
                resource_names: one(t[3]),
                non_resource_urls: vec![],
            },
            Kind::Url => PolicyRule {
                verbs: one(t[0]),
                non_resource_urls: one(t[1]),
                ..Default::default()
            },
        }
    }
}

/// Partial permissions with the same owner rules allowing them.
struct State<'a> {
    count: u128,
    /// The first [`MAX_LISTED`] of them, one value per list so far.
    first: Vec<Vec<Option<&'a str>>>,
}

/// The first [`MAX_LISTED`] permissions of `dims`' product that no owner rule
/// allows, and how many there are; `None` past [`MAX_STATES`].
fn walk<'a>(owner: &[PolicyRule], dims: &[&Dim<'a>]) -> Option<(Vec<Vec<Option<&'a str>>>, u128)> {
    let words = owner.len().div_ceil(64);
    let full: Owners = (0..words)
        .map(|w| {
            let bits = (owner.len() - w * 64).min(64);
            if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            }
        })
        .collect();
    // In the order of first appearance too.
    let mut states: Vec<(Owners, State)> = vec![(
        full,
        State {
            count: 1,
            first: vec![vec![]],
        },
    )];
    for dim in dims {
        // The list's values grouped by the owner rules allowing them.
        // In the order of first appearance, so the listing follows the rule's lists.
        let mut classes: Vec<(Owners, Vec<Option<&'a str>>)> = vec![];
        let mut class_of: BTreeMap<Owners, usize> = BTreeMap::new();
        for &v in &dim.values {
            let mut set = vec![0u64; words];
            for (j, o) in owner.iter().enumerate() {
                if (dim.allows)(o, v) {
                    set[j / 64] |= 1 << (j % 64);
                }
            }
            let at = *class_of.entry(set.clone()).or_insert_with(|| {
                classes.push((set, vec![]));
                classes.len() - 1
            });
            classes[at].1.push(v);
        }
        let mut next: Vec<(Owners, State)> = vec![];
        let mut state_of: BTreeMap<Owners, usize> = BTreeMap::new();
        for (set, state) in &states {
            for (class, values) in &classes {
                let both: Owners = set.iter().zip(class).map(|(a, b)| a & b).collect();
                let at = *state_of.entry(both.clone()).or_insert_with(|| {
                    next.push((
                        both,
                        State {
                            count: 0,
                            first: vec![],
                        },
                    ));
                    next.len() - 1
                });
                let entry = &mut next[at].1;
                entry.count = entry
                    .count
                    .saturating_add(state.count.saturating_mul(values.len() as u128));
                'fill: for prefix in &state.first {
                    for &v in values {
                        if entry.first.len() >= MAX_LISTED {
                            break 'fill;
                        }
                        let mut t = prefix.clone();
                        t.push(v);
                        entry.first.push(t);
                    }
                }
                if next.len() > MAX_STATES {
                    return None;
                }
            }
        }
        states = next;
    }
    let none = states
        .into_iter()
        .find(|(set, _)| set.iter().all(|w| *w == 0))
        .map(|(_, s)| s);
    Some(none.map_or((vec![], 0), |s| (s.first, s.count)))
}

/// The parts of `requested` that no rule of `owner` covers (empty: the
/// owner holds all of it), by breaking every rule down: the reference
/// [`missing`] is tested against, for small rules only.
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

    /// `missing` agrees with breaking the rules down.
    fn check(owner: &[PolicyRule], requested: &[PolicyRule]) -> Missing {
        let m = missing(owner, requested).unwrap();
        let all = uncovered(owner, requested);
        assert_eq!(m.total, all.len() as u128, "{requested:?}");
        assert_eq!(m.listed.len(), all.len().min(MAX_LISTED));
        for r in &m.listed {
            assert!(all.contains(r), "{r:?}");
        }
        m
    }

    #[test]
    fn missing_agrees_with_the_breakdown() {
        let owner = [
            rule(
                &["get", "list"],
                &["", "apps"],
                &["pods", "pods/log", "deployments"],
                &[],
            ),
            rule(&["get", "update"], &[""], &["secrets"], &["s1", "s2"]),
            rule(&["*"], &["*"], &["*/status"], &[]),
            PolicyRule {
                verbs: v(&["get"]),
                non_resource_urls: v(&["/healthz", "/api/*"]),
                ..Default::default()
            },
        ];
        let requested = [
            rule(
                &["get", "list", "watch", "*"],
                &["", "apps", "x"],
                &["pods", "a/status", "*", "deployments"],
                &[],
            ),
            rule(
                &["get", "update", "patch"],
                &["", "apps"],
                &["secrets", "pods"],
                &["s1", "s2", "s3"],
            ),
            rule(&["get"], &[], &["pods"], &[]),
            PolicyRule {
                verbs: v(&["get", "post"]),
                non_resource_urls: v(&["/healthz", "/api/v1", "/metrics"]),
                ..Default::default()
            },
        ];
        for r in &requested {
            check(&owner, std::slice::from_ref(r));
        }
        check(&owner, &requested);
        check(&[], &requested);
        check(&owner, &[]);
    }

    /// Issue 30 row 2: 300 groups x 300 resources x 300 verbs, 27 million
    /// permissions, checked without breaking them down; the listing stops at
    /// MAX_LISTED and the count is exact.
    #[test]
    fn a_huge_rule_is_checked_without_breaking_it_down() {
        let many = |p: &str| (0..300).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        let huge = PolicyRule {
            verbs: many("v"),
            api_groups: many("g"),
            resources: many("r"),
            ..Default::default()
        };
        let owner = [
            rule(&["*"], &["*"], &["pods"], &[]),
            PolicyRule {
                verbs: many("v"),
                api_groups: many("g"),
                resources: many("r")[..299].to_vec(),
                ..Default::default()
            },
        ];
        let m = missing(&owner, std::slice::from_ref(&huge)).unwrap();
        assert_eq!(m.total, 300 * 300);
        assert_eq!(m.listed.len(), MAX_LISTED);
        assert!(m.listed.iter().all(|r| r.resources == ["r299"]));
        let admin = [rule(&["*"], &["*"], &["*"], &[])];
        assert_eq!(
            missing(&admin, std::slice::from_ref(&huge)).unwrap().total,
            0
        );
        assert_eq!(missing(&[], &[huge]).unwrap().total, 27_000_000);
    }

    /// Owner rules that tell every value apart make the sets many; past
    /// MAX_STATES the check gives up instead of growing.
    #[test]
    fn too_varied_rules_are_refused() {
        let many = |p: &str, n: usize| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        // One owner rule per (verb, group): 100 x 100 distinct sets.
        let owner: Vec<PolicyRule> = (0..100)
            .flat_map(|i| {
                (0..100).map(move |j| PolicyRule {
                    verbs: vec![format!("v{i}")],
                    api_groups: vec![format!("g{j}")],
                    resources: vec!["r".into()],
                    ..Default::default()
                })
            })
            .collect();
        let requested = PolicyRule {
            verbs: many("v", 100),
            api_groups: many("g", 100),
            resources: vec!["r".into()],
            ..Default::default()
        };
        assert_eq!(missing(&owner, &[requested]), Err(TooVaried { rule: 0 }));
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
