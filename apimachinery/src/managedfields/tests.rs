use super::*;
use crate::builtin::BuiltinListTypes;
use serde_json::json;

const T0: &str = "2025-03-01T10:00:00Z";
const T1: &str = "2025-03-01T10:05:00Z";

// The tests read best with every input in view: positional shorthands over
// [`Writer`] (these shadow the glob-imported functions).
fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    lists: &dyn ListTypes,
    now: &str,
) -> Result<Value, ApplyError> {
    let w = Writer::new(manager, api_version, lists, now).forced(force);
    super::apply(live, applied, &w)
}

fn update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    api_version: &str,
    lists: &dyn ListTypes,
    now: &str,
) -> Value {
    super::update(old, new, &Writer::new(manager, api_version, lists, now))
}

fn update_scoped(
    old: Option<&Value>,
    new: &Value,
    (manager, api_version): (&str, &str),
    lists: &dyn ListTypes,
    now: &str,
    scope: &Scope,
) -> Value {
    let w = Writer::new(manager, api_version, lists, now).scoped(scope);
    super::update(old, new, &w)
}

fn sts() -> BuiltinListTypes {
    BuiltinListTypes::for_apply("apps", "StatefulSet")
}

fn cfg(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default", "labels": {"app": "db"}},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "pg", "image": image, "ports": [{"containerPort": 5432}]}]}
            }
        }
    })
}

/// The live object as the server would store it: server-set metadata added.
fn stored(mut v: Value) -> Value {
    v["metadata"]["uid"] = json!("6f1c0c8e-0000-4000-8000-000000000001");
    v["metadata"]["resourceVersion"] = json!("42");
    v["metadata"]["creationTimestamp"] = json!(T0);
    v
}

fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

fn owns(obj: &Value, manager: &str, path: &[&str]) -> bool {
    let Some(e) = entry(obj, manager) else {
        return false;
    };
    let mut node = &e["fieldsV1"];
    for p in path {
        node = &node[*p];
    }
    node.is_object()
}

#[test]
fn create_by_apply_owns_exactly_the_applied_fields() {
    let obj = apply(
        None,
        &cfg(3, "postgres:16"),
        "kubectl",
        "apps/v1",
        false,
        &sts(),
        T0,
    )
    .unwrap();
    assert_eq!(obj["spec"]["replicas"], 3);
    let mf = obj["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(
        mf[0],
        json!({
            "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {}, "f:selector": {"f:matchLabels": {"f:app": {}}}, "f:serviceName": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"pg\"}": {
                            ".": {}, "f:image": {}, "f:name": {},
                            "f:ports": {"k:{\"containerPort\":5432,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                        }}}
                    }
                }
            }
        })
    );
    // name, namespace, apiVersion and kind are never owned.
    assert!(!owns(&obj, "kubectl", &["f:metadata", "f:name"]));
}

#[test]
fn applied_managed_fields_are_refused_as_upstream() {
    let mut c = cfg(3, "postgres:16");
    c["metadata"]["managedFields"] = json!([{"manager": "evil", "operation": "Apply", "apiVersion": "apps/v1",
                                             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]);
    let err = apply(None, &c, "kubectl", "apps/v1", false, &sts(), T0).unwrap_err();
    assert_eq!(err.to_string(), "metadata.managedFields must be nil");
    // Even empty (Go's non-nil slice); only null is no value.
    c["metadata"]["managedFields"] = json!([]);
    assert_eq!(
        apply(None, &c, "kubectl", "apps/v1", false, &sts(), T0),
        Err(ApplyError::ManagedFields)
    );
    c["metadata"]["managedFields"] = Value::Null;
    assert!(apply(None, &c, "kubectl", "apps/v1", false, &sts(), T0).is_ok());
}

#[test]
fn second_applier_with_a_different_value_conflicts() {
    let live = stored(
        apply(
            None,
            &cfg(3, "postgres:16"),
            "alice",
            "apps/v1",
            false,
            &sts(),
            T0,
        )
        .unwrap(),
    );
    let err = apply(
        Some(&live),
        &cfg(5, "postgres:16"),
        "bob",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap_err();
    let ApplyError::Conflicts(c) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    assert_eq!(
        c.causes(),
        vec![(
            "conflict with \"alice\"".to_string(),
            ".spec.replicas".to_string()
        )]
    );
}

#[test]
fn conflict_with_an_update_manager_names_its_api_version() {
    let created = update(
        None,
        &stored(cfg(3, "postgres:16")),
        "kubectl-client-side-apply",
        "apps/v1",
        &sts(),
        T0,
    );
    let err = apply(
        Some(&created),
        &cfg(5, "postgres:16"),
        "argo",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas"
    );
    let err = apply(
        Some(&created),
        &cfg(5, "postgres:17"),
        "argo",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"kubectl-client-side-apply\" using apps/v1:\n\
         - .spec.replicas\n\
         - .spec.template.spec.containers[name=\"pg\"].image"
    );
    let ApplyError::Conflicts(c) = err else {
        panic!()
    };
    assert_eq!(
        c.0[1].field,
        ".spec.template.spec.containers[name=\"pg\"].image"
    );
    assert_eq!(
        c.0[1].message(),
        "conflict with \"kubectl-client-side-apply\" using apps/v1"
    );
}

#[test]
fn conflicts_group_by_manager_in_sorted_order() {
    let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "1"}});
    let lists = BuiltinListTypes::for_apply("", "ConfigMap");
    let live = update(None, &base, "zed", "v1", &lists, T0);
    let live = apply(Some(&live), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "1"}}), "amy", "v1", false, &lists, T0).unwrap();
    let change = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2", "b": "2"}});
    let err = apply(Some(&live), &change, "me", "v1", false, &lists, T1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 3 conflicts: conflicts with \"amy\":\n- .data.b\nconflicts with \"zed\" using v1:\n- .data.a\n- .data.b"
    );
}

#[test]
fn force_takes_ownership() {
    let live = stored(
        apply(
            None,
            &cfg(3, "postgres:16"),
            "alice",
            "apps/v1",
            false,
            &sts(),
            T0,
        )
        .unwrap(),
    );
    let obj = apply(
        Some(&live),
        &cfg(5, "postgres:16"),
        "bob",
        "apps/v1",
        true,
        &sts(),
        T1,
    )
    .unwrap();
    assert_eq!(obj["spec"]["replicas"], 5);
    assert!(owns(&obj, "bob", &["f:spec", "f:replicas"]));
    assert!(!owns(&obj, "alice", &["f:spec", "f:replicas"]));
    // Fields both apply with equal values stay shared.
    assert!(owns(&obj, "alice", &["f:spec", "f:serviceName"]));
    assert!(owns(&obj, "bob", &["f:spec", "f:serviceName"]));
    // Server-set metadata is kept.
    assert_eq!(obj["metadata"]["uid"], live["metadata"]["uid"]);
    assert_eq!(entry(&obj, "bob").unwrap()["time"], T1);
    assert_eq!(entry(&obj, "alice").unwrap()["time"], T0);
}

#[test]
fn a_field_dropped_by_its_sole_owner_is_removed() {
    let mut first = cfg(3, "postgres:16");
    first["metadata"]["labels"]["tier"] = json!("data");
    first["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "pg", "image": "postgres:16"},
        {"name": "exporter", "image": "exporter:1"}
    ]);
    let live = stored(apply(None, &first, "alice", "apps/v1", false, &sts(), T0).unwrap());
    let second = cfg(3, "postgres:16"); // no tier label, no exporter, a port added
    let obj = apply(Some(&live), &second, "alice", "apps/v1", false, &sts(), T1).unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"app": "db"}));
    let containers = obj["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0]["name"], "pg");
    assert!(!owns(&obj, "alice", &["f:metadata", "f:labels", "f:tier"]));
    assert_eq!(
        obj["metadata"]["uid"], live["metadata"]["uid"],
        "server fields survive pruning"
    );
    assert_eq!(obj["metadata"]["name"], "db");
}

#[test]
fn a_co_owned_field_is_no_conflict_and_survives_when_one_owner_drops_it() {
    let live = stored(
        apply(
            None,
            &cfg(3, "postgres:16"),
            "alice",
            "apps/v1",
            false,
            &sts(),
            T0,
        )
        .unwrap(),
    );
    let live = apply(
        Some(&live),
        &cfg(3, "postgres:16"),
        "bob",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap();
    assert!(owns(&live, "alice", &["f:spec", "f:replicas"]));
    assert!(owns(&live, "bob", &["f:spec", "f:replicas"]));
    let mut without = cfg(3, "postgres:16");
    without["spec"].as_object_mut().unwrap().remove("replicas");
    let obj = apply(Some(&live), &without, "alice", "apps/v1", false, &sts(), T1).unwrap();
    assert_eq!(obj["spec"]["replicas"], 3);
    assert!(!owns(&obj, "alice", &["f:spec", "f:replicas"]));
    assert!(owns(&obj, "bob", &["f:spec", "f:replicas"]));
}

#[test]
fn a_field_owned_by_an_updater_survives_the_appliers_drop() {
    let live = stored(
        apply(
            None,
            &cfg(3, "postgres:16"),
            "alice",
            "apps/v1",
            false,
            &sts(),
            T0,
        )
        .unwrap(),
    );
    // An HPA-like controller scales through a plain update.
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(7);
    let live = update(Some(&live), &scaled, "autoscaler", "apps/v1", &sts(), T1);
    assert!(owns(&live, "autoscaler", &["f:spec", "f:replicas"]));
    assert!(
        !owns(&live, "alice", &["f:spec", "f:replicas"]),
        "update took it from the applier"
    );
    let mut without = cfg(3, "postgres:16");
    without["spec"].as_object_mut().unwrap().remove("replicas");
    let obj = apply(Some(&live), &without, "alice", "apps/v1", false, &sts(), T1).unwrap();
    assert_eq!(obj["spec"]["replicas"], 7);
}

#[test]
fn update_moves_ownership_of_changed_fields_only() {
    let live = stored(
        apply(
            None,
            &cfg(3, "postgres:16"),
            "alice",
            "apps/v1",
            false,
            &sts(),
            T0,
        )
        .unwrap(),
    );
    let mut edited = live.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:17");
    edited["metadata"]["annotations"] = json!({"note": "x"});
    let out = update(Some(&live), &edited, "kubectl-edit", "apps/v1", &sts(), T1);
    let img = [
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        "k:{\"name\":\"pg\"}",
        "f:image",
    ];
    assert!(owns(&out, "kubectl-edit", &img));
    assert!(!owns(&out, "alice", &img));
    assert!(
        owns(&out, "alice", &["f:spec", "f:replicas"]),
        "unchanged fields stay with their owner"
    );
    assert!(!owns(&out, "kubectl-edit", &["f:spec", "f:replicas"]));
    let e = entry(&out, "kubectl-edit").unwrap();
    assert_eq!(e["operation"], "Update");
    assert_eq!(e["time"], T1);
    // A new map is owned itself and field by field, as upstream records it.
    assert_eq!(
        e["fieldsV1"]["f:metadata"],
        json!({"f:annotations": {".": {}, "f:note": {}}})
    );
    // Entries are sorted: Apply before Update.
    let ops: Vec<_> = out["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["operation"].clone())
        .collect();
    assert_eq!(ops, vec![json!("Apply"), json!("Update")]);
    // A no-op update changes nothing.
    let again = update(Some(&out), &out, "someone", "apps/v1", &sts(), T1);
    assert_eq!(again, out);
}

#[test]
fn update_drops_entries_whose_fields_are_all_taken_or_removed() {
    let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let lists = BuiltinListTypes::for_apply("", "ConfigMap");
    let v1 = update(None, &base, "one", "v1", &lists, T0);
    let mut v2 = v1.clone();
    v2["data"]["a"] = json!("2");
    let v2 = update(Some(&v1), &v2, "two", "v1", &lists, T1);
    // "one" keeps only the map it created; the changed key moved to "two".
    assert_eq!(
        entry(&v2, "one").unwrap()["fieldsV1"],
        json!({"f:data": {}}),
        "{v2}"
    );
    assert_eq!(
        entry(&v2, "two").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    // Removing a field removes it from its owner; an empty owner disappears.
    let mut v3 = v2.clone();
    v3.as_object_mut().unwrap().remove("data");
    let v3 = update(Some(&v2), &v3, "three", "v1", &lists, T1);
    assert!(v3["metadata"].get("managedFields").is_none(), "{v3}");
}

#[test]
fn update_honours_client_sent_managed_fields() {
    let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let lists = BuiltinListTypes::for_apply("", "ConfigMap");
    let v1 = update(None, &base, "one", "v1", &lists, T0);
    let mut reset = v1.clone();
    reset["metadata"]["managedFields"] = json!([]);
    let out = update(Some(&v1), &reset, "two", "v1", &lists, T1);
    assert!(
        out["metadata"].get("managedFields").is_none(),
        "[] resets and nothing changed: {out}"
    );
}

#[test]
fn map_lists_merge_by_key_with_defaulted_keys() {
    let pod_lists = BuiltinListTypes::for_apply("", "Pod");
    let live = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [
            {"name": "app", "image": "a:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
             "terminationMessagePath": "/dev/termination-log"},
            {"name": "side", "image": "s:1"}
        ]}
    });
    let live = update(None, &live, "creator", "v1", &pod_lists, T0);
    let applied = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app", "image": "a:1", "ports": [{"containerPort": 80}]}]}
    });
    let obj = apply(Some(&live), &applied, "me", "v1", false, &pod_lists, T1).unwrap();
    let cs = obj["spec"]["containers"].as_array().unwrap();
    assert_eq!(
        cs.len(),
        2,
        "the sidecar is kept: merged by name, not replaced"
    );
    assert_eq!(
        cs[0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}]),
        "port matched through the TCP default"
    );
    assert_eq!(cs[0]["terminationMessagePath"], "/dev/termination-log");
    let port = [
        "f:spec",
        "f:containers",
        "k:{\"name\":\"app\"}",
        "f:ports",
        "k:{\"containerPort\":80,\"protocol\":\"TCP\"}",
    ];
    assert!(owns(&obj, "me", &port));
    assert!(owns(&obj, "creator", &port), "same value: shared");
}

#[test]
fn set_lists_merge_by_value() {
    let lists = BuiltinListTypes::for_apply("", "ConfigMap");
    let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": ["a/x"]}});
    let live = update(None, &base, "ctrl", "v1", &lists, T0);
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": ["b/y"]}});
    let obj = apply(Some(&live), &applied, "me", "v1", false, &lists, T1).unwrap();
    assert_eq!(obj["metadata"]["finalizers"], json!(["a/x", "b/y"]));
    assert!(owns(
        &obj,
        "me",
        &["f:metadata", "f:finalizers", "v:\"b/y\""]
    ));
    assert!(owns(
        &obj,
        "ctrl",
        &["f:metadata", "f:finalizers", "v:\"a/x\""]
    ));
}

#[test]
fn atomic_lists_are_replaced_and_owned_whole() {
    let live = stored(
        apply(
            None,
            &cfg(3, "postgres:16"),
            "alice",
            "apps/v1",
            false,
            &sts(),
            T0,
        )
        .unwrap(),
    );
    let mut c = cfg(3, "postgres:16");
    c["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-c", "max_connections=50"]);
    let obj = apply(Some(&live), &c, "alice", "apps/v1", false, &sts(), T1).unwrap();
    c["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-c"]);
    let obj = apply(Some(&obj), &c, "alice", "apps/v1", false, &sts(), T1).unwrap();
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["-c"])
    );
    assert!(owns(
        &obj,
        "alice",
        &[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            "k:{\"name\":\"pg\"}",
            "f:args"
        ]
    ));
}

#[test]
fn invalid_configurations_are_errors_not_panics() {
    let mut c = cfg(3, "postgres:16");
    c["spec"]["template"]["spec"]["containers"] = json!([{"image": "x"}]);
    let err = apply(None, &c, "me", "apps/v1", false, &sts(), T0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid apply configuration: .spec.template.spec.containers: element 0: associative list with keys has an \
         element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
    );
    c["spec"]["template"]["spec"]["containers"] = json!([{"name": "a"}, {"name": "a"}]);
    let err = apply(None, &c, "me", "apps/v1", false, &sts(), T0).unwrap_err();
    assert!(
        err.to_string()
            .contains("duplicate entries for key [name=\"a\"]"),
        "{err}"
    );
    assert!(matches!(
        apply(None, &json!([]), "me", "v1", false, &sts(), T0),
        Err(ApplyError::Invalid(_))
    ));
    // Garbage managedFields in the live object are dropped, not fatal.
    let mut live = stored(cfg(3, "postgres:16"));
    live["metadata"]["managedFields"] = json!([{"manager": 1}, "x", {"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"bad": {}}}]);
    let obj = apply(
        Some(&live),
        &cfg(4, "postgres:16"),
        "me",
        "apps/v1",
        true,
        &sts(),
        T0,
    )
    .unwrap();
    let managers: Vec<_> = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].clone())
        .collect();
    assert_eq!(
        managers,
        vec![json!("me"), json!(BEFORE_FIRST_APPLY)],
        "undecodable entries dropped"
    );
    // Duplicate keys in the stored object: that list is handled atomically.
    let mut dup = stored(cfg(3, "postgres:16"));
    dup["spec"]["template"]["spec"]["containers"] = json!([{"name": "a"}, {"name": "a"}]);
    let out = update(None, &dup, "me", "apps/v1", &sts(), T0);
    assert!(owns(
        &out,
        "me",
        &["f:spec", "f:template", "f:spec", "f:containers"]
    ));
}

#[test]
fn scope_ignores_fields_and_records_the_subresource() {
    let lists = BuiltinListTypes::for_apply("", "Pod");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}});
    let main = Scope {
        subresource: None,
        ignored: vec![vec!["status".into()]],
    };
    let live = update_scoped(None, &pod, ("kubelet-ish", "v1"), &lists, T0, &main);
    assert!(!owns(&live, "kubelet-ish", &["f:status"]));
    assert!(owns(&live, "kubelet-ish", &["f:spec"]));
    let mut running = live.clone();
    running["status"]["phase"] = json!("Running");
    let status = Scope {
        subresource: Some("status".into()),
        ignored: vec![vec!["spec".into()]],
    };
    let out = update_scoped(
        Some(&live),
        &running,
        ("kubelet", "v1"),
        &lists,
        T1,
        &status,
    );
    let e = entry(&out, "kubelet").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    // An apply that conflicts through a subresource owner names it.
    let applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Failed"}});
    let err = apply(Some(&out), &applied, "me", "v1", false, &lists, T1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubelet\" with subresource \"status\" using v1: .status.phase"
    );
}

#[test]
fn untracked_objects_start_tracking_at_the_first_apply() {
    let untracked = stored(cfg(3, "postgres:16"));
    // Updates of an existing object without managedFields stay untracked.
    let mut scaled = untracked.clone();
    scaled["spec"]["replicas"] = json!(4);
    let out = update(Some(&untracked), &scaled, "scaler", "apps/v1", &sts(), T1);
    assert!(out["metadata"].get("managedFields").is_none(), "{out}");
    // The first apply gives what was there to before-first-apply.
    let err = apply(
        Some(&out),
        &cfg(5, "postgres:16"),
        "me",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
    );
    let obj = apply(
        Some(&out),
        &cfg(4, "postgres:16"),
        "me",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap();
    assert!(owns(&obj, BEFORE_FIRST_APPLY, &["f:spec", "f:replicas"]));
    assert!(owns(&obj, "me", &["f:spec", "f:replicas"]));
}

#[test]
fn odd_inputs_never_panic() {
    let lists = BuiltinListTypes::for_apply("", "Pod");
    let odd = [
        json!(null),
        json!(1),
        json!("x"),
        json!([]),
        json!({}),
        json!({"metadata": 1}),
        json!({"metadata": {"managedFields": "nope"}, "spec": {"containers": "x"}}),
        json!({"spec": {"containers": [1, null, [], {"name": null}]}}),
        json!({"spec": {"containers": [{"name": "a", "ports": [{"protocol": "UDP"}, {}]}]}}),
        json!({"metadata": {"finalizers": [{"a": 1}, [1], null]}}),
    ];
    for a in &odd {
        for b in &odd {
            let _ = apply(Some(a), b, "m", "v1", false, &lists, T0);
            let _ = apply(None, b, "m", "v1", true, &lists, T0);
            let _ = update(Some(a), b, "m", "v1", &lists, T0);
            let _ = crate::patch::strategic(a, b, &BuiltinListTypes::for_kind("", "Pod"));
        }
    }
}

/// Found by the fuzzer (`apply` target): a null inside an object in an atomic
/// list was dropped when the list was created but stored when it was
/// replaced, so re-applying an unchanged configuration changed the object.
#[test]
fn reapplying_a_null_inside_an_atomic_list_changes_nothing() {
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
        "x": [{"a": null, "b": 1}]});
    let first = apply(
        None,
        &cfg,
        "alice",
        "v1",
        false,
        &crate::listtype::AllAtomic,
        T0,
    )
    .unwrap();
    assert_eq!(first["x"], json!([{"b": 1}]));
    let again = apply(
        Some(&first),
        &cfg,
        "alice",
        "v1",
        false,
        &crate::listtype::AllAtomic,
        T0,
    )
    .unwrap();
    assert_eq!(again, first);
}

#[test]
fn long_map_lists_are_compared_and_merged() {
    // 20,000 items matched by key pairwise were 4·10⁸ comparisons per walk;
    // the time is printed by `cargo bench --bench amplification` (row 4).
    let pod_lists = BuiltinListTypes::for_apply("", "Pod");
    let pod = |image: &str, reversed: bool| {
        let mut cs: Vec<Value> = (0..20_000)
            .map(|i| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        if reversed {
            cs.reverse();
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": cs}})
    };
    let live = update(None, &pod("a", false), "creator", "v1", &pod_lists, T0);
    let live = update(Some(&live), &pod("b", true), "editor", "v1", &pod_lists, T1);
    let obj = apply(
        Some(&live),
        &pod("c", false),
        "me",
        "v1",
        true,
        &pod_lists,
        T1,
    )
    .unwrap();
    assert_eq!(obj["spec"]["containers"].as_array().unwrap().len(), 20_000);
    assert_eq!(obj["spec"]["containers"][0]["image"], "c");
}

/// An object as `kubectl apply` (client-side) creates it: the annotation holds
/// the configuration, `kubectl-client-side-apply` owns every field it set.
fn client_side_applied(c: &Value) -> Value {
    let mut obj = c.clone();
    obj["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: format!("{}\n", c)});
    update(
        None,
        &stored(obj),
        "kubectl-client-side-apply",
        "apps/v1",
        &sts(),
        T0,
    )
}

#[test]
fn a_no_op_apply_by_a_new_manager_is_recorded_without_a_new_time() {
    let live = apply(
        None,
        &cfg(3, "postgres:16"),
        "alice",
        "apps/v1",
        false,
        &sts(),
        T0,
    )
    .unwrap();
    let live = stored(live);
    let out = apply(
        Some(&live),
        &cfg(3, "postgres:16"),
        "bob",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap();
    assert!(owns(&out, "bob", &["f:spec", "f:replicas"]));
    assert!(owns(&out, "alice", &["f:spec", "f:replicas"]), "co-owned");
    assert_eq!(entry(&out, "bob").unwrap().get("time"), None);
    // The same apply again changes nothing at all, entries included.
    let again = apply(
        Some(&out),
        &cfg(3, "postgres:16"),
        "bob",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap();
    assert_eq!(
        again["metadata"]["managedFields"],
        out["metadata"]["managedFields"]
    );
    // A change stamps the time (forced: bob co-owns every field).
    let changed = apply(
        Some(&out),
        &cfg(3, "postgres:17"),
        "alice",
        "apps/v1",
        true,
        &sts(),
        T1,
    )
    .unwrap();
    assert_eq!(entry(&changed, "alice").unwrap()["time"], T1);
}

#[test]
fn kubectl_server_side_apply_takes_what_its_client_side_apply_set() {
    let live = client_side_applied(&cfg(3, "postgres:16"));
    // Upstream's documented upgrade: no conflict for kubectl's own fields.
    let out = apply(
        Some(&live),
        &cfg(5, "postgres:16"),
        "kubectl",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap();
    assert_eq!(out["spec"]["replicas"], 5);
    assert!(owns(&out, "kubectl", &["f:spec", "f:replicas"]));
    assert!(!owns(
        &out,
        "kubectl-client-side-apply",
        &["f:spec", "f:replicas"]
    ));
    // The annotation now holds what was applied, keys sorted as Go writes them.
    let last = out["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(last.ends_with('\n'));
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["spec"]["replicas"], 5);
    // Another manager gets the conflict, as upstream (the upgrade is kubectl's only).
    let err = apply(
        Some(&live),
        &cfg(5, "postgres:16"),
        "argo",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("kubectl-client-side-apply"),
        "{err}"
    );
}

#[test]
fn kubectl_still_conflicts_on_a_field_changed_since_its_client_side_apply() {
    let live = client_side_applied(&cfg(3, "postgres:16"));
    // Someone else scaled it: the annotation no longer matches live replicas.
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(4);
    let scaled = update(Some(&live), &scaled, "kubectl-scale", "apps/v1", &sts(), T1);
    let err = apply(
        Some(&scaled),
        &cfg(5, "postgres:17"),
        "kubectl",
        "apps/v1",
        false,
        &sts(),
        T1,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
    );
}

#[test]
fn managed_fields_a_client_sends_replace_them_unless_invalid() {
    let live = client_side_applied(&cfg(3, "postgres:16"));
    // kubectl's migration: the client-side entry's fields under its Apply entry.
    let mut migrated = live.clone();
    let mut e = live["metadata"]["managedFields"][0].clone();
    e["manager"] = json!("kubectl");
    e["operation"] = json!("Apply");
    migrated["metadata"]["managedFields"] = json!([e]);
    let out = update(Some(&live), &migrated, "kubectl", "apps/v1", &sts(), T1);
    let mf = out["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!((mf.len(), &mf[0]["operation"]), (1, &json!("Apply")));
    // One undecodable entry: the live ones are kept, as upstream.
    let mut bad = migrated.clone();
    bad["metadata"]["managedFields"] = json!([e, {"manager": "x", "operation": "Bogus"}]);
    let out = update(Some(&live), &bad, "kubectl", "apps/v1", &sts(), T1);
    assert_eq!(
        out["metadata"]["managedFields"],
        live["metadata"]["managedFields"]
    );
}

#[test]
fn past_ten_update_entries_the_oldest_merge_into_ancient_changes() {
    let lists = crate::listtype::AllAtomic;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "labels": {}}, "data": {"k": "v"}});
    let mut obj = update(None, &stored(cm), "creator", "v1", &lists, T0);
    for i in 0..12 {
        let mut new = obj.clone();
        new["metadata"]["labels"][format!("l{i:02}")] = json!("x");
        let now = format!("2025-03-01T10:{i:02}:00Z");
        obj = update(Some(&obj), &new, &format!("u{i:02}"), "v1", &lists, &now);
    }
    // 13 updaters: the creator (oldest) and u00..u02 merged into one.
    let mf = obj["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(mf.len(), 10);
    let ancient = entry(&obj, "ancient-changes").unwrap();
    assert_eq!(ancient["time"], "2025-03-01T10:02:00Z");
    assert!(owns(&obj, "ancient-changes", &["f:data", "f:k"]));
    for l in ["l00", "l01", "l02"] {
        assert!(owns(
            &obj,
            "ancient-changes",
            &["f:metadata", "f:labels", &format!("f:{l}")]
        ));
    }
    assert!(entry(&obj, "u02").is_none() && entry(&obj, "u03").is_some());
    // Appliers are never merged.
    let applied = apply(
        Some(&obj),
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "labels": {"mine": "y"}}}),
        "ssa",
        "v1",
        false,
        &lists,
        T1,
    )
    .unwrap();
    assert_eq!(
        applied["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .len(),
        11
    );
}

#[test]
fn many_managed_fields_entries_from_a_client_cost_linear_work() {
    // 50,000 Update entries sent by a client: decoding, de-duplicating and
    // capping them were each quadratic in their number.
    let lists = crate::listtype::AllAtomic;
    let live = update(
        None,
        &stored(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}}),
        ),
        "creator",
        "v1",
        &lists,
        T0,
    );
    let mut sent = live.clone();
    let entries: Vec<Value> = (0..50_000)
        .map(|i| {
            json!({"manager": format!("m{i}"), "operation": "Update", "apiVersion": "v1",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {format!("f:k{i}"): {}}}})
        })
        .collect();
    sent["metadata"]["managedFields"] = Value::Array(entries);
    let out = update(Some(&live), &sent, "kubectl", "v1", &lists, T1);
    let mf = out["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(mf.len(), 10);
    assert!(owns(&out, "ancient-changes", &["f:data", "f:k0"]));
    assert!(owns(&out, "ancient-changes", &["f:data", "f:k49990"]));
    // Without times, the greatest identities are the newest: "m9999" stays.
    assert!(owns(&out, "m9999", &["f:data", "f:k9999"]));
}
