use serde_json::json;

use super::*;
use crate::registry::Registry;

fn rt(group: &str, resource: &str) -> std::sync::Arc<ResourceType> {
    Registry::with_builtins().get(group, resource).unwrap()
}

#[test]
fn pull_policy_follows_the_tag() {
    assert_eq!(pod::pull_policy("nginx"), "Always");
    assert_eq!(pod::pull_policy("nginx:latest"), "Always");
    assert_eq!(pod::pull_policy("localhost:5000/app"), "Always");
    assert_eq!(pod::pull_policy("localhost:5000/app:v1"), "IfNotPresent");
    assert_eq!(pod::pull_policy("app@sha256:abcd"), "IfNotPresent");
    assert_eq!(pod::pull_policy("file:///tmp/hello.wasm"), "IfNotPresent");
}

#[test]
fn a_bare_pod_gets_upstreams_defaults() {
    let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x:1", "ports": [{"containerPort": 80}]}]}});
    apply(&rt("", "pods"), &mut p, true);
    let s = &p["spec"];
    assert_eq!(s["restartPolicy"], "Always");
    assert_eq!(s["dnsPolicy"], "ClusterFirst");
    assert_eq!(s["schedulerName"], "default-scheduler");
    assert_eq!(s["terminationGracePeriodSeconds"], 30);
    assert_eq!(s["securityContext"], json!({}));
    assert_eq!(s["enableServiceLinks"], true);
    assert_eq!(s["serviceAccountName"], "default");
    assert_eq!(s["serviceAccount"], "default");
    // Priority comes from the Priority admission (`crate::priority`), not defaults.
    assert!(s.get("priority").is_none());
    assert_eq!(s["tolerations"].as_array().unwrap().len(), 2);
    let c = &s["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
}

#[test]
fn explicit_values_win_and_defaulting_is_idempotent() {
    let mut p = json!({"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "x", "imagePullPolicy": "Never"}]}});
    apply(&rt("", "pods"), &mut p, true);
    assert_eq!(p["spec"]["restartPolicy"], "Never");
    assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 0);
    assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Never");
    // A toleration of every taint already tolerates not-ready/unreachable.
    assert_eq!(p["spec"]["tolerations"], json!([{"operator": "Exists"}]));
    let once = p.clone();
    apply(&rt("", "pods"), &mut p, true);
    assert_eq!(p, once);
}

#[test]
fn statefulset_defaults_reach_the_template() {
    let mut s = json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    apply(&rt("apps", "statefulsets"), &mut s, true);
    let spec = &s["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    let t = &spec["template"]["spec"];
    assert_eq!(t["restartPolicy"], "Always");
    assert_eq!(t["containers"][0]["imagePullPolicy"], "Always");
    // Admission defaults belong to pods, not templates.
    assert!(t.get("serviceAccountName").is_none());
    assert!(t.get("tolerations").is_none());
}

#[test]
fn an_ondelete_statefulset_gets_no_rolling_update() {
    let mut s = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
    apply(&rt("apps", "statefulsets"), &mut s, true);
    assert_eq!(s["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
}

#[test]
fn namespace_label_is_put_back() {
    let mut n =
        json!({"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "other"}}});
    apply(&rt("", "namespaces"), &mut n, false);
    assert_eq!(
        n["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team"
    );
}

#[test]
fn service_ports_default_protocol_and_target_port() {
    let mut s = json!({"spec": {"ports": [{"port": 80}, {"port": 81, "targetPort": "http"}]}});
    apply(&rt("", "services"), &mut s, true);
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["sessionAffinity"], "None");
    assert_eq!(s["spec"]["internalTrafficPolicy"], "Cluster");
    assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(s["spec"]["ports"][1]["targetPort"], "http");
}

#[test]
fn generation_only_where_upstream_has_it() {
    assert!(has_generation(&rt("apps", "statefulsets")));
    assert!(has_generation(&rt("policy", "poddisruptionbudgets")));
    assert!(has_generation(&rt("", "pods")));
    for r in [
        "configmaps",
        "secrets",
        "nodes",
        "events",
        "namespaces",
        "services",
        "serviceaccounts",
    ] {
        assert!(!has_generation(&rt("", r)), "{r}");
    }
}

#[test]
fn qos_class_follows_requests_and_limits() {
    let qos = |containers: serde_json::Value| {
        let mut p = json!({"spec": {"containers": containers}});
        apply(&rt("", "pods"), &mut p, true);
        pod::qos_class(&p["spec"])
    };
    assert_eq!(qos(json!([{"name": "a", "image": "x"}])), "BestEffort");
    // Limits alone: requests default to them, so guaranteed.
    assert_eq!(
        qos(
            json!([{"name": "a", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])
        ),
        "Guaranteed"
    );
    assert_eq!(
        qos(json!([{"name": "a", "image": "x", "resources": {"requests": {"cpu": "1"}}}])),
        "Burstable"
    );
}

#[test]
fn a_replication_controller_takes_its_selector_and_labels_from_the_template() {
    let mut rc = json!({"metadata": {"name": "r"}, "spec": {"template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
    apply(&rt("", "replicationcontrollers"), &mut rc, true);
    assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(rc["spec"]["replicas"], 1);
    assert_eq!(rc["spec"]["template"]["spec"]["restartPolicy"], "Always");
    assert!(has_generation(&rt("", "replicationcontrollers")));
    // An explicit selector, labels and replicas stay.
    let mut rc = json!({"metadata": {"labels": {"tier": "x"}}, "spec": {"replicas": 0,
        "selector": {"app": "web", "v": "1"},
        "template": {"metadata": {"labels": {"app": "web", "v": "1"}}}}});
    apply(&rt("", "replicationcontrollers"), &mut rc, true);
    assert_eq!(rc["spec"]["selector"], json!({"app": "web", "v": "1"}));
    assert_eq!(rc["metadata"]["labels"], json!({"tier": "x"}));
    assert_eq!(rc["spec"]["replicas"], 0);
}

#[test]
fn a_daemonset_rolls_one_pod_at_a_time_by_default() {
    let mut ds =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
    apply(&rt("apps", "daemonsets"), &mut ds, true);
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    assert!(has_generation(&rt("apps", "daemonsets")));
}
