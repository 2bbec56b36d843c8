//! The sync rules, one scenario each (pods at revisions `r1` = current and
//! `r2` = update unless said otherwise).

use super::*;
use crate::pod::tests::pod_at;
use crate::pod::{POD_INDEX_LABEL, REVISION_LABEL};
use serde_json::{Value, json};

fn now() -> jiff::Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

fn set(spec: Value) -> StatefulSet {
    let mut s = json!({
        "selector": {"matchLabels": {"app": "web"}},
        "serviceName": "web",
        "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "new"}]}},
        "podManagementPolicy": "OrderedReady",
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
    });
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1", "generation": 1},
        "spec": s,
    }))
    .unwrap()
}

fn rev(name: &str, image: &str) -> Revision {
    Revision {
        name: name.into(),
        template: serde_json::from_value(json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]}}))
        .unwrap(),
    }
}

fn ready(n: i32, r: &str) -> Pod {
    pod_at(&format!("web-{n}"), r, "Running", true)
}

fn run(s: &StatefulSet, pods: &[Pod]) -> Plan {
    let pods: Vec<&Pod> = pods.iter().collect();
    plan(s, &pods, &rev("r1", "old"), &rev("r2", "new"), now())
}

/// The ops as short strings: `+web-0@r2`, `-web-4`, `~web-1`.
fn ops(p: &Plan) -> Vec<String> {
    p.ops
        .iter()
        .map(|op| match op {
            Op::Create(pod) => format!(
                "+{}@{}",
                pod.metadata.name.as_deref().unwrap(),
                pod.metadata.labels.as_ref().unwrap()[REVISION_LABEL]
            ),
            Op::Delete { name, .. } => format!("-{name}"),
            Op::Relabel { name, .. } => format!("~{name}"),
        })
        .collect()
}

#[test]
fn ordered_ready_creates_one_pod_and_waits_for_it_to_be_ready() {
    let s = set(json!({"replicas": 3}));
    assert_eq!(ops(&run(&s, &[])), ["+web-0@r2"]);
    // web-0 exists but is not ready: nothing.
    let pending = pod_at("web-0", "r2", "Pending", false);
    assert!(ops(&run(&s, &[pending])).is_empty());
    let unready = pod_at("web-0", "r2", "Running", false);
    assert!(ops(&run(&s, &[unready])).is_empty());
    assert_eq!(ops(&run(&s, &[ready(0, "r2")])), ["+web-1@r2"]);
    assert_eq!(
        ops(&run(&s, &[ready(0, "r2"), ready(1, "r2")])),
        ["+web-2@r2"]
    );
}

#[test]
fn a_created_pod_is_the_template_with_its_identity() {
    let s = set(json!({"replicas": 1}));
    let p = run(&s, &[]);
    let Op::Create(pod) = &p.ops[0] else { panic!() };
    assert_eq!(pod.metadata.labels.as_ref().unwrap()[POD_INDEX_LABEL], "0");
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("new")
    );
    assert_eq!(pod.spec.as_ref().unwrap().subdomain.as_deref(), Some("web"));
}

#[test]
fn parallel_creates_every_missing_pod_at_once() {
    let s = set(json!({"replicas": 4, "podManagementPolicy": "Parallel"}));
    let pending = pod_at("web-1", "r2", "Pending", false);
    assert_eq!(
        ops(&run(&s, &[pending])),
        ["+web-0@r2", "+web-2@r2", "+web-3@r2"]
    );
}

#[test]
fn ordered_ready_scales_down_from_the_highest_ordinal_one_at_a_time() {
    let s = set(json!({"replicas": 2}));
    let pods: Vec<Pod> = (0..5).map(|i| ready(i, "r2")).collect();
    assert_eq!(ops(&run(&s, &pods)), ["-web-4"]);
    // web-4 terminating: wait for it.
    let mut terminating = pods.clone();
    terminating[4].metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ));
    assert!(ops(&run(&s, &terminating)).is_empty());
    assert_eq!(ops(&run(&s, &pods[..4])), ["-web-3"]);
}

#[test]
fn ordered_ready_scale_down_waits_for_unhealthy_pods_except_the_first() {
    let s = set(json!({"replicas": 1}));
    // web-1 is unready and the first unhealthy pod: web-2 (healthy) goes first.
    let pods = [
        ready(0, "r2"),
        pod_at("web-1", "r2", "Running", false),
        ready(2, "r2"),
    ];
    assert_eq!(ops(&run(&s, &pods)), ["-web-2"]);
    // Then web-1, the first unhealthy one, may go although it is not ready.
    assert_eq!(ops(&run(&s, &pods[..2])), ["-web-1"]);
}

#[test]
fn parallel_scales_down_all_at_once() {
    let s = set(json!({"replicas": 1, "podManagementPolicy": "Parallel"}));
    let pods: Vec<Pod> = (0..4).map(|i| ready(i, "r2")).collect();
    assert_eq!(ops(&run(&s, &pods)), ["-web-3", "-web-2", "-web-1"]);
}

#[test]
fn a_failed_pod_is_deleted_and_ordered_ready_waits_for_it_to_go() {
    let s = set(json!({"replicas": 3}));
    let pods = [
        ready(0, "r2"),
        pod_at("web-1", "r2", "Failed", false),
        ready(2, "r2"),
    ];
    assert_eq!(ops(&run(&s, &pods)), ["-web-1"]);
    // Gone: made again, at the update revision.
    assert_eq!(
        ops(&run(&s, &[ready(0, "r2"), ready(2, "r2")])),
        ["+web-1@r2"]
    );
}

#[test]
fn rolling_update_replaces_the_highest_outdated_pod_first_and_waits() {
    let s = set(json!({"replicas": 3}));
    let pods: Vec<Pod> = (0..3).map(|i| ready(i, "r1")).collect();
    let p = run(&s, &pods);
    assert_eq!(ops(&p), ["-web-2"]);
    assert_eq!(p.counts.current, 2);
    // web-2 back at r2 but not ready: wait.
    let mut next = pods[..2].to_vec();
    next.push(pod_at("web-2", "r2", "Running", false));
    assert!(ops(&run(&s, &next)).is_empty());
    next[2] = ready(2, "r2");
    assert_eq!(ops(&run(&s, &next)), ["-web-1"]);
}

#[test]
fn rolling_update_with_a_partition_leaves_lower_ordinals_alone() {
    let s = set(
        json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate",
        "rollingUpdate": {"partition": 3}}}),
    );
    let mut pods: Vec<Pod> = (0..5).map(|i| ready(i, "r1")).collect();
    assert_eq!(ops(&run(&s, &pods)), ["-web-4"]);
    pods[4] = ready(4, "r2");
    assert_eq!(ops(&run(&s, &pods)), ["-web-3"]);
    pods[3] = ready(3, "r2");
    assert!(ops(&run(&s, &pods)).is_empty());
    // A pod below the partition that is deleted comes back at the current revision.
    pods.remove(1);
    assert_eq!(ops(&run(&s, &pods)), ["+web-1@r1"]);
}

#[test]
fn max_unavailable_replaces_several_pods_at_once() {
    let s = set(json!({"replicas": 5, "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "RollingUpdate",
        "rollingUpdate": {"partition": 0, "maxUnavailable": 2}}}));
    let mut pods: Vec<Pod> = (0..5).map(|i| ready(i, "r1")).collect();
    assert_eq!(ops(&run(&s, &pods)), ["-web-4", "-web-3"]);
    // One of them back but not ready: one more may go.
    pods[4] = pod_at("web-4", "r2", "Running", false);
    pods[3] = ready(3, "r2");
    assert_eq!(ops(&run(&s, &pods)), ["-web-2"]);
    // Percentages round down, at least 1.
    assert_eq!(max_unavailable(&IntOrString::String("50%".into()), 5), 2);
    assert_eq!(max_unavailable(&IntOrString::String("10%".into()), 5), 1);
}

#[test]
fn on_delete_never_replaces_pods_but_a_deleted_one_comes_back_updated() {
    let s = set(json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}));
    let pods: Vec<Pod> = (0..3).map(|i| ready(i, "r1")).collect();
    assert!(ops(&run(&s, &pods)).is_empty());
    assert_eq!(
        ops(&run(&s, &[pods[0].clone(), pods[2].clone()])),
        ["+web-1@r2"]
    );
}

#[test]
fn min_ready_seconds_holds_ordered_ready_until_the_pod_is_available() {
    // Ready since 00:00, now is 01:00.
    let s = set(json!({"replicas": 2, "minReadySeconds": 7200}));
    let p = run(&s, &[ready(0, "r2")]);
    assert!(ops(&p).is_empty());
    assert_eq!((p.counts.ready, p.counts.available), (1, 0));
    let s = set(json!({"replicas": 2, "minReadySeconds": 60}));
    let p = run(&s, &[ready(0, "r2")]);
    assert_eq!(ops(&p), ["+web-1@r2"]);
    assert_eq!((p.counts.ready, p.counts.available), (1, 1));
}

#[test]
fn counts_follow_the_pods_revisions_and_readiness() {
    let s = set(json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}));
    let pods = [
        ready(0, "r1"),
        ready(1, "r2"),
        pod_at("web-2", "r2", "Pending", false),
    ];
    let c = run(&s, &pods).counts;
    assert_eq!(
        c,
        Counts {
            replicas: 3,
            ready: 2,
            available: 2,
            current: 1,
            updated: 2
        }
    );
}

#[test]
fn pods_missing_their_identity_labels_get_them_back() {
    let s = set(json!({"replicas": 1}));
    let mut p = ready(0, "r2");
    p.metadata.labels.as_mut().unwrap().remove(POD_INDEX_LABEL);
    assert_eq!(ops(&run(&s, &[p])), ["~web-0"]);
}

#[test]
fn a_set_being_deleted_makes_no_pods() {
    let mut s = set(json!({"replicas": 3}));
    s.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-01-01T00:00:00Z".parse().unwrap(),
    ));
    assert!(ops(&run(&s, &[])).is_empty());
}

#[test]
fn a_million_parallel_replicas_plan_one_batch_of_creates() {
    let s = set(json!({"replicas": 1_000_000, "podManagementPolicy": "Parallel"}));
    let p = run(&s, &[]);
    assert_eq!(p.ops.len(), MAX_CREATES);
    let Op::Create(last) = &p.ops[MAX_CREATES - 1] else {
        panic!()
    };
    assert_eq!(last.metadata.name.as_deref(), Some("web-499"));
    // int32's largest replicas, ordered: one create, nothing per replica.
    let s = set(json!({"replicas": i32::MAX}));
    assert_eq!(ops(&run(&s, &[])), ["+web-0@r2"]);
}
