//! What one sync does (upstream's `manage`, `rollingUpdate` and
//! `updateDaemonSetStatus`), from the nodes and the set's pods alone, so it
//! is tested without a host.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{pod_condition, pod_ready, scaled_value};

use crate::nodes::{daemon_tolerations, should_run};
use crate::revision::{GENERATION_LABEL, HASH_LABEL};

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its node is gone, or no longer takes it.
    Misplaced,
    /// A second pod on one node (the oldest stays).
    Extra,
    Failed,
    /// An old revision replaced by the rolling update.
    Update,
}

/// The status counts of `updateDaemonSetStatus`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub desired: i32,
    pub current: i32,
    pub misscheduled: i32,
    pub ready: i32,
    pub available: i32,
    pub updated: i32,
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Nodes that get a new pod.
    pub create: Vec<String>,
    /// (name, uid, why) of pods to delete.
    pub delete: Vec<(String, String, Why)>,
    pub counts: Counts,
    /// A surging node's new pod is Ready, not yet available: look again
    /// after `minReadySeconds`.
    pub recheck: bool,
}

pub fn owned_by(p: &Pod, uid: &str) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// The node a pod is on, or (not bound yet) the node its affinity names.
fn node_of(p: &Pod) -> Option<&str> {
    let spec = p.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first())
        .map(String::as_str)
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `podutil.IsPodAvailable`.
pub(crate) fn available(p: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !pod_ready(p) {
        return false;
    }
    min_ready_seconds <= 0
        || pod_condition(p, "Ready")
            .and_then(|c| c.last_transition_time.as_ref())
            .is_some_and(|t| {
                t.0 + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds)) <= now
            })
}

/// `dsutil.IsPodUpdated`: the current hash, or the current template generation.
pub(crate) fn updated(ds: &DaemonSet, p: &Pod, hash: &str) -> bool {
    let labels = p.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    label(HASH_LABEL) == Some(hash)
        || ds
            .metadata
            .generation
            .is_some_and(|g| label(GENERATION_LABEL) == Some(g.to_string().as_str()))
}

fn created(p: &Pod) -> Option<Timestamp> {
    p.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// The template's pod spec with the daemon tolerations, as upstream's `NewPod`.
fn daemon_spec(ds: &DaemonSet) -> PodSpec {
    let mut spec = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    daemon_tolerations(&mut spec);
    spec
}

pub fn plan(ds: &DaemonSet, hash: &str, nodes: &[Node], pods: &[&Pod], now: Timestamp) -> Plan {
    let spec = ds.spec.clone().unwrap_or_default();
    let pod_spec = daemon_spec(ds);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let surge = crate::surge::allows_surge(ds);
    // Nodes that should run the set, with their live running pods (surge).
    let mut surge_nodes = vec![];
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in pods {
        by_node.entry(node_of(p).unwrap_or("")).or_default().push(p);
    }
    let mut out = Plan::default();
    let mut delete = |p: &Pod, why: Why| {
        out.delete.push((
            p.metadata.name.clone().unwrap_or_default(),
            p.metadata.uid.clone().unwrap_or_default(),
            why,
        ));
    };
    let mut create = vec![];
    let mut counts = Counts::default();
    // Rolling update: nodes without an available pod, and what may go.
    let (mut unavailable, mut replace, mut candidates) = (0i32, vec![], vec![]);
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let (run, keep) = should_run(&pod_spec, node);
        let on_node = by_node.remove(name).unwrap_or_default();
        let (terminating, live): (Vec<&Pod>, Vec<&Pod>) = on_node
            .iter()
            .partition(|p| p.metadata.deletion_timestamp.is_some());
        let (finished, mut running): (Vec<&Pod>, Vec<&Pod>) = live
            .iter()
            .partition(|p| matches!(phase(p), "Failed" | "Succeeded"));
        running.sort_by_key(|p| created(p));
        // Status, from the pods before this sync acts.
        if run {
            counts.desired += 1;
            if let Some(p) = running.first() {
                counts.current += 1;
                counts.ready += i32::from(pod_ready(p));
                counts.available += i32::from(available(p, min_ready, now));
                counts.updated += i32::from(updated(ds, p, hash));
            }
        } else if !running.is_empty() {
            counts.misscheduled += 1;
        }
        // Manage.
        if run && on_node.is_empty() {
            create.push(name.to_string());
        } else if keep {
            for p in &finished {
                delete(p, Why::Failed);
            }
            if !surge {
                for p in running.iter().skip(1) {
                    delete(p, Why::Extra);
                }
            } else if running.is_empty() && run {
                // Surging: a node whose pods all go gets its new one now.
                create.push(name.to_string());
            } else {
                for p in crate::surge::extra_on_node(ds, hash, &running, min_ready) {
                    delete(p, Why::Extra);
                }
            }
        } else {
            for p in &live {
                delete(p, Why::Misplaced);
            }
        }
        if run && surge {
            surge_nodes.push((name, running));
            continue;
        }
        // Rolling update candidates: a node with exactly one live pod and
        // nothing else pending; any other node counts as unavailable.
        if run {
            match (
                running.as_slice(),
                terminating.is_empty() && finished.is_empty(),
            ) {
                ([p], true) if updated(ds, p, hash) => {
                    unavailable += i32::from(!available(p, min_ready, now));
                }
                ([p], true) if !available(p, min_ready, now) => {
                    // Down already: replaced at once, and counted.
                    unavailable += 1;
                    replace.push(*p);
                }
                ([p], true) => candidates.push(*p),
                _ => unavailable += 1,
            }
        }
    }
    // Pods on nodes that are gone.
    for p in by_node.values().flatten() {
        if p.metadata.deletion_timestamp.is_none() {
            delete(p, Why::Misplaced);
        }
    }
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate");
    if surge {
        // Upstream's rolling pass waits for the manage pass's changes to be
        // seen (its expectations): only a quiet sync surges.
        if create.is_empty() && out.delete.is_empty() {
            let max = crate::surge::max_surge(ds, counts.desired);
            let roll = crate::surge::roll(ds, hash, &surge_nodes, max, min_ready, now);
            for p in roll.delete {
                out.delete.push((
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.uid.clone().unwrap_or_default(),
                    Why::Update,
                ));
            }
            create = roll.create;
            out.recheck = roll.waiting;
        }
    } else if rolling {
        let max = max_unavailable(ds, counts.desired);
        for p in &replace {
            delete(p, Why::Update);
        }
        let room = usize::try_from((max - unavailable).max(0)).unwrap_or(0);
        for p in candidates.iter().take(room) {
            delete(p, Why::Update);
        }
    }
    out.create = create;
    out.counts = counts;
    out
}

/// `maxUnavailable` scaled to `desired` (rounded up); 1 when it comes to 0
/// with no surge, as upstream.
fn max_unavailable(ds: &DaemonSet, desired: i32) -> i32 {
    let v = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.clone())
        .unwrap_or(IntOrString::Int(1));
    scaled_value(&v, desired, true).unwrap_or(1).max(1)
}

/// `NewPod` for `node`: the template's metadata with the revision labels,
/// `generateName: DS-`, the set as controller, the daemon tolerations, and
/// the required node affinity replaced by `metadata.name In [node]`
/// (`ReplaceDaemonSetPodNodeNameNodeAffinity`), so the scheduler binds it.
pub fn new_pod(ds: &DaemonSet, hash: &str, node: &str) -> Pod {
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.clone().unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.into());
    if let Some(g) = ds.metadata.generation {
        labels.insert(GENERATION_LABEL.into(), g.to_string());
    }
    let mut spec = daemon_spec(ds);
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        ..Default::default()
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
    let pod: Value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", ds.metadata.name.as_deref().unwrap_or_default()),
            "namespace": ds.metadata.namespace,
            "labels": labels,
            "annotations": meta.annotations,
            "finalizers": meta.finalizers,
            "ownerReferences": [crate::owner(ds)],
        },
        "spec": spec,
    });
    serde_json::from_value(pod).unwrap_or_default()
}

/// The merge patch bringing the status to `c`, or `None` when nothing changes.
pub fn status_patch(ds: &DaemonSet, c: &Counts) -> Option<Value> {
    let st = ds.status.clone().unwrap_or_default();
    let generation = ds.metadata.generation.unwrap_or(0);
    let unavailable = c.desired - c.available;
    let same = st.desired_number_scheduled == c.desired
        && st.current_number_scheduled == c.current
        && st.number_misscheduled == c.misscheduled
        && st.number_ready == c.ready
        && st.number_available.unwrap_or(0) == c.available
        && st.updated_number_scheduled.unwrap_or(0) == c.updated
        && st.number_unavailable.unwrap_or(0) == unavailable
        && st.observed_generation == Some(generation);
    (!same).then(|| {
        json!({"status": {
            "desiredNumberScheduled": c.desired,
            "currentNumberScheduled": c.current,
            "numberMisscheduled": c.misscheduled,
            "numberReady": c.ready,
            "numberAvailable": c.available,
            "updatedNumberScheduled": c.updated,
            "numberUnavailable": unavailable,
            "observedGeneration": generation,
        }})
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(strategy: Value) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "d", "uid": "u", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "d"}}, "updateStrategy": strategy,
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
        .unwrap()
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "uid": name,
            "labels": {HASH_LABEL: hash}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}}))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    #[test]
    fn every_node_gets_one_pod_and_a_gone_node_loses_it() {
        let d = ds(json!({"type": "RollingUpdate"}));
        let a = pod("a", "n1", "h", true);
        let gone = pod("g", "n9", "h", true);
        let extra = pod("b", "n1", "h", true);
        let nodes = [node("n1"), node("n2")];
        let p = plan(&d, "h", &nodes, &[&a, &extra, &gone], now());
        assert_eq!(p.create, ["n2"]);
        let deleted: Vec<(&str, Why)> = p.delete.iter().map(|(n, _, w)| (n.as_str(), *w)).collect();
        assert_eq!(deleted, [("b", Why::Extra), ("g", Why::Misplaced)]);
        assert_eq!(
            p.counts,
            Counts {
                desired: 2,
                current: 1,
                misscheduled: 0,
                ready: 1,
                available: 1,
                updated: 1
            }
        );
        let new = new_pod(&d, "h", "n2");
        let labels = new.metadata.labels.unwrap();
        assert_eq!(labels[HASH_LABEL], "h");
        assert_eq!(labels[GENERATION_LABEL], "2");
        assert_eq!(node_of(&new_pod(&d, "h", "n2")), Some("n2"));
    }

    #[test]
    fn a_rolling_update_replaces_at_most_max_unavailable_at_once() {
        let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
        let nodes = [node("n1"), node("n2"), node("n3")];
        let (a, b, c) = (
            pod("a", "n1", "old", true),
            pod("b", "n2", "old", true),
            pod("c", "n3", "old", true),
        );
        let p = plan(&d, "new", &nodes, &[&a, &b, &c], now());
        assert_eq!(p.delete.len(), 1, "{:?}", p.delete);
        assert_eq!(p.delete[0].2, Why::Update);
        // One node is being replaced (its pod terminating): nothing more goes.
        let mut going = a.clone();
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        let p = plan(&d, "new", &nodes, &[&going, &b, &c], now());
        assert!(p.delete.is_empty() && p.create.is_empty(), "{p:?}");
        // Its new pod not ready yet: still nothing.
        let fresh = pod("a2", "n1", "new", false);
        assert!(
            plan(&d, "new", &nodes, &[&fresh, &b, &c], now())
                .delete
                .is_empty()
        );
        // Ready: the next old pod goes; an unavailable old pod goes at once.
        let fresh = pod("a2", "n1", "new", true);
        let sick = pod("c", "n3", "old", false);
        let p = plan(&d, "new", &nodes, &[&fresh, &b, &sick], now());
        let deleted: Vec<&str> = p.delete.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            deleted,
            ["c"],
            "the unavailable pod counts against maxUnavailable"
        );
        assert_eq!(p.counts.updated, 1);
        // OnDelete: old pods stay.
        let d = ds(json!({"type": "OnDelete"}));
        assert!(
            plan(&d, "new", &nodes, &[&a, &b, &c], now())
                .delete
                .is_empty()
        );
    }

    fn names(p: &Plan) -> Vec<&str> {
        p.delete.iter().map(|(n, _, _)| n.as_str()).collect()
    }

    #[test]
    fn a_surging_update_creates_first_and_caps_at_max_surge() {
        let d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
        );
        let nodes = [node("n1"), node("n2"), node("n3")];
        let (a, b, c) = (
            pod("a", "n1", "old", true),
            pod("b", "n2", "old", true),
            pod("c", "n3", "old", true),
        );
        // One new pod beside its old one; nothing deleted.
        let p = plan(&d, "new", &nodes, &[&a, &b, &c], now());
        assert_eq!(p.create, ["n1"]);
        assert!(p.delete.is_empty(), "{p:?}");
        // A percent is of the nodes, rounded up: 50% of 3 is 2.
        let half = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "50%"}}),
        );
        assert_eq!(
            plan(&half, "new", &nodes, &[&a, &b, &c], now()).create,
            ["n1", "n2"]
        );
        // The new pod not ready: both stay, no other node surges.
        let fresh = pod("a2", "n1", "new", false);
        let p = plan(&d, "new", &nodes, &[&a, &fresh, &b, &c], now());
        assert!(p.delete.is_empty() && p.create.is_empty(), "{p:?}");
        assert_eq!(p.counts.ready, 3, "the old pod still serves n1");
        // Ready: the old pod goes (and only it).
        let fresh = pod("a2", "n1", "new", true);
        let p = plan(&d, "new", &nodes, &[&a, &fresh, &b, &c], now());
        assert_eq!(names(&p), ["a"]);
        assert!(p.create.is_empty(), "{p:?}");
        // Old pod gone: the next node surges.
        let p = plan(&d, "new", &nodes, &[&fresh, &b, &c], now());
        assert_eq!(p.create, ["n2"]);
        assert!(p.delete.is_empty(), "{p:?}");
        // An unavailable old pod gets its new pod at once, beyond the cap.
        let sick = pod("c", "n3", "old", false);
        let waiting = pod("b2", "n2", "new", false);
        let p = plan(&d, "new", &nodes, &[&fresh, &b, &waiting, &sick], now());
        assert_eq!(p.create, ["n3"]);
        assert!(p.delete.is_empty(), "{p:?}");
    }

    #[test]
    fn a_surging_update_waits_for_min_ready_seconds() {
        let mut d = ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
        );
        d.spec.as_mut().unwrap().min_ready_seconds = Some(3600);
        let nodes = [node("n1")];
        let old = pod("a", "n1", "old", true);
        let mut fresh = pod("a2", "n1", "new", true);
        fresh.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        let p = plan(&d, "new", &nodes, &[&old, &fresh], now());
        assert!(p.delete.is_empty() && p.create.is_empty(), "{p:?}");
        assert!(p.recheck);
        let later = now() + jiff::SignedDuration::from_secs(3600);
        assert_eq!(
            names(&plan(&d, "new", &nodes, &[&old, &fresh], later)),
            ["a"]
        );
    }
}
