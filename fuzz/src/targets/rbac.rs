//! RBAC coverage without breaking rules down (issue 30 row 2): on small rules
//! `rbac_covers::missing` agrees with the breakdown into one-permission rules;
//! on rules with lists of any length up to the validation limit it finishes,
//! lists at most `MAX_LISTED` and counts no more than the product.

use arbitrary::Unstructured;
use wasmlet_apimachinery::rbac::PolicyRule;
use wasmlet_apimachinery::rbac_covers::{MAX_LISTED, missing, uncovered};

const VERBS: &[&str] = &["get", "list", "*", "create"];
const GROUPS: &[&str] = &["", "apps", "*"];
const RESOURCES: &[&str] = &[
    "pods",
    "pods/log",
    "*/status",
    "*",
    "secrets",
    "deployments/status",
];
const NAMES: &[&str] = &["a", "b"];
const URLS: &[&str] = &["/a", "/a/*", "*", "/b", "/a/b"];

/// Up to `max` entries drawn from `vocab`, or numbered past it (`x17`).
fn list(u: &mut Unstructured, vocab: &[&str], max: usize) -> Vec<String> {
    let n = u.int_in_range(0..=max).unwrap_or(0);
    (0..n)
        .map(|i| match u.choose(vocab) {
            Ok(s) if u.ratio(3, 4).unwrap_or(true) => s.to_string(),
            _ => format!("x{i}"),
        })
        .collect()
}

fn rule(u: &mut Unstructured, max: usize) -> PolicyRule {
    PolicyRule {
        verbs: list(u, VERBS, max),
        api_groups: list(u, GROUPS, max),
        resources: list(u, RESOURCES, max),
        resource_names: if u.ratio(1, 3).unwrap_or(false) {
            list(u, NAMES, max.min(3))
        } else {
            vec![]
        },
        non_resource_urls: if u.ratio(1, 4).unwrap_or(false) {
            list(u, URLS, max)
        } else {
            vec![]
        },
    }
}

pub fn rbac_covers(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let owners: Vec<PolicyRule> = (0..u.int_in_range(0..=6u8).unwrap_or(0))
        .map(|_| rule(&mut u, 4))
        .collect();
    let small: Vec<PolicyRule> = (0..u.int_in_range(0..=3u8).unwrap_or(0))
        .map(|_| rule(&mut u, 4))
        .collect();
    for r in &small {
        let all = uncovered(&owners, std::slice::from_ref(r));
        let m =
            missing(&owners, std::slice::from_ref(r)).expect("small rules are never too varied");
        // `missing` counts a value listed twice once; the breakdown repeats it.
        let mut distinct = all.clone();
        distinct.sort_by_key(|r| format!("{r:?}"));
        distinct.dedup();
        assert_eq!(
            m.total,
            distinct.len() as u128,
            "owners {owners:?}, requested {r:?}"
        );
        assert!(m.listed.len() <= MAX_LISTED && m.listed.iter().all(|l| all.contains(l)));
        assert_eq!(m.listed.is_empty(), all.is_empty());
    }

    // A rule with lists up to the validation limit (256 each).
    let big = rule(&mut u, 256);
    let product = [&big.verbs, &big.api_groups, &big.resources]
        .iter()
        .map(|l| l.len() as u128)
        .product::<u128>()
        * big.resource_names.len().max(1) as u128
        + (big.verbs.len() * big.non_resource_urls.len()) as u128;
    if let Ok(m) = missing(&owners, std::slice::from_ref(&big)) {
        assert!(m.total <= product && m.listed.len() <= MAX_LISTED);
    }
}
