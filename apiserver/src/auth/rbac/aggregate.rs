//! Aggregated ClusterRoles, as kube-controller-manager's
//! clusterrole-aggregation controller: a ClusterRole with
//! `aggregationRule.clusterRoleSelectors` gets as its `rules` the rules of
//! every other ClusterRole its selectors match (in selector order, then by
//! name, without duplicates), rewritten whenever a ClusterRole changes. The
//! authorizer reads the stored rules, so it sees the aggregated ones.

use serde_json::Value;
use wasmlet_apimachinery::rbac::PolicyRule;
use wasmlet_apimachinery::selector::LabelSelector;

use super::GROUP;
use crate::meta;
use crate::resources::{Resources, WriteOptions};

/// The field manager of the rules this controller writes.
const MANAGER: &str = "wasmlet-clusterrole-aggregation-controller";

/// The rules `role` aggregates from `all` (every ClusterRole), or `None`
/// when it has no aggregation rule.
pub(crate) fn aggregated_rules(role: &Value, all: &[Value]) -> Option<Vec<PolicyRule>> {
    let selectors = role
        .pointer("/aggregationRule/clusterRoleSelectors")?
        .as_array()?;
    let mut rules: Vec<PolicyRule> = vec![];
    let me = meta::name(role);
    for sel in selectors {
        // A selector that does not parse selects nothing (validation
        // should have refused it).
        let Ok(sel) = LabelSelector::from_label_selector(sel) else {
            continue;
        };
        let mut matched: Vec<&Value> = all
            .iter()
            .filter(|r| meta::name(r) != me)
            .filter(|r| {
                let labels = r.pointer("/metadata/labels").cloned().unwrap_or_default();
                sel.matches(&labels)
            })
            .collect();
        matched.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
        for r in matched {
            let theirs: Vec<PolicyRule> =
                serde_json::from_value(r["rules"].clone()).unwrap_or_default();
            for rule in theirs {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }
    Some(rules)
}

/// One pass over every aggregated ClusterRole; returns how many changed.
pub(crate) async fn aggregate_all(resources: &Resources) -> usize {
    let Some(rt) = resources.registry.get(GROUP, "clusterroles") else {
        return 0;
    };
    let snap = resources.store.snapshot();
    let all: Vec<Value> = snap
        .range(&rt.prefix(None), None)
        .filter_map(|s| s.value().ok())
        .collect();
    let mut changed = 0;
    for role in &all {
        let Some(rules) = aggregated_rules(role, &all) else {
            continue;
        };
        // Compared as rules, not JSON, so that a stored spelling (an empty
        // list written out) never makes a pass write again.
        let current: Vec<PolicyRule> =
            serde_json::from_value(role["rules"].clone()).unwrap_or_default();
        if current == rules {
            continue;
        }
        let rules = serde_json::to_value(&rules).unwrap_or_default();
        let name = meta::name(role).to_string();
        let result = resources
            .modify(&rt, "", &name, &WriteOptions::by(MANAGER), |current| {
                let mut v = current.clone();
                v["rules"] = rules.clone();
                Some(v)
            })
            .await;
        match result {
            Ok(_) => changed += 1,
            Err(e) => tracing::warn!(clusterrole = %name, error = %e, "aggregating rules failed"),
        }
    }
    changed
}

/// Keeps aggregated ClusterRoles in step with the ClusterRoles they select;
/// runs until the store stops.
pub(crate) async fn run(resources: Resources) {
    let Some(rt) = resources.registry.get(GROUP, "clusterroles") else {
        return;
    };
    let prefix = rt.prefix(None);
    loop {
        let rv = resources.store.snapshot().rv;
        aggregate_all(&resources).await;
        let mut sub = match resources.store.watch(&prefix, rv) {
            Ok(sub) => sub,
            Err(e) => {
                tracing::warn!(error = %e, "clusterrole aggregation: watch failed, restarting");
                continue;
            }
        };
        if !sub.backlog.is_empty() {
            aggregate_all(&resources).await;
        }
        while sub.live.recv().await.is_some() {
            // One pass covers every change queued meanwhile.
            while sub.live.try_recv().is_some() {}
            aggregate_all(&resources).await;
        }
        tracing::info!("clusterrole aggregation: resynchronising");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selected_roles_are_gathered_in_order_without_duplicates() {
        let rule = |r: &str| json!({"verbs": ["get"], "apiGroups": [""], "resources": [r]});
        let all = vec![
            json!({"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"to-agg": "true"}}]}, "rules": [rule("stale")]}),
            json!({"metadata": {"name": "b", "labels": {"to-agg": "true"}}, "rules": [rule("pods"), rule("secrets")]}),
            json!({"metadata": {"name": "a", "labels": {"to-agg": "true"}}, "rules": [rule("pods")]}),
            json!({"metadata": {"name": "c", "labels": {"to-agg": "false"}}, "rules": [rule("nodes")]}),
        ];
        let got = aggregated_rules(&all[0], &all).unwrap();
        let resources: Vec<&str> = got.iter().map(|r| r.resources[0].as_str()).collect();
        assert_eq!(resources, ["pods", "secrets"]);
        assert!(aggregated_rules(&all[1], &all).is_none());
    }
}
