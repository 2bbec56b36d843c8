//! Unit tests of the three patch kinds.

use super::*;
use crate::builtin::BuiltinListTypes;
use crate::listtype::{AllAtomic, ListType};
use serde_json::json;

fn pod_types() -> BuiltinListTypes {
    BuiltinListTypes::for_kind("", "Pod")
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                     "finalizers": ["a.example.com/x", "b.example.com/y"]},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx:1.25", "args": ["-g", "daemon off;"],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "sidecar", "image": "envoy:1.30"}
            ],
            "tolerations": [{"key": "k1", "operator": "Exists"}],
            "volumes": [{"name": "data", "emptyDir": {}}]
        },
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}
        ]}
    })
}

#[test]
fn merge_patch_is_rfc7386() {
    let mut obj = pod();
    merge(
        &mut obj,
        &json!({"metadata": {"labels": {"app": null, "tier": "fe"}}, "spec": {"tolerations": []}}),
    );
    assert_eq!(obj["metadata"]["labels"], json!({"tier": "fe"}));
    // Lists are replaced whole, even mergeable ones.
    assert_eq!(obj["spec"]["tolerations"], json!([]));
    merge(
        &mut obj,
        &json!({"spec": {"containers": [{"name": "only"}]}}),
    );
    assert_eq!(obj["spec"]["containers"], json!([{"name": "only"}]));
}

#[test]
fn json_patch_applies_and_rolls_back() {
    let mut obj = pod();
    json(
        &mut obj,
        &json!([
            {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.26"},
            {"op": "add", "path": "/metadata/labels/tier", "value": "fe"},
            {"op": "remove", "path": "/spec/tolerations"}
        ]),
    )
    .unwrap();
    assert_eq!(obj["spec"]["containers"][0]["image"], "nginx:1.26");
    assert_eq!(obj["metadata"]["labels"]["tier"], "fe");
    assert!(obj["spec"].get("tolerations").is_none());

    let before = obj.clone();
    let err = json(
        &mut obj,
        &json!([
            {"op": "add", "path": "/metadata/labels/x", "value": "1"},
            {"op": "test", "path": "/status/phase", "value": "Pending"}
        ]),
    )
    .unwrap_err();
    assert!(matches!(err, PatchError::JsonPatchFailed(_)), "{err}");
    assert_eq!(
        obj, before,
        "a failed patch must leave the object unchanged"
    );
}

#[test]
fn json_patch_malformed_documents_say_what_is_wrong() {
    let mut obj = pod();
    let e = json(&mut obj, &json!({"op": "add"})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid JSON patch document: expected an array of operations, not an object"
    );
    let e = json(&mut obj, &json!([{"op": "frobnicate", "path": "/a"}])).unwrap_err();
    assert!(
        matches!(&e, PatchError::MalformedJsonPatch(m) if m.contains("frobnicate")),
        "{e}"
    );
    let e = json(&mut obj, &json!([{"op": "add", "path": "/a"}])).unwrap_err();
    assert!(
        matches!(&e, PatchError::MalformedJsonPatch(m) if m.contains("value")),
        "{e}"
    );
    let e = json(&mut obj, &json!([{"op": "remove", "path": "/spec/nope"}])).unwrap_err();
    assert!(e.to_string().contains("/spec/nope"), "{e}");
}

#[test]
fn smp_merges_containers_by_name() {
    let patch = json!({"spec": {"containers": [
        {"name": "sidecar", "image": "envoy:1.31"},
        {"name": "app", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]}
    ]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    let cs = out["spec"]["containers"].as_array().unwrap();
    // Patch order for the items the patch names.
    assert_eq!(cs[0], json!({"name": "sidecar", "image": "envoy:1.31"}));
    assert_eq!(cs[1]["name"], "app");
    assert_eq!(
        cs[1]["image"], "nginx:1.25",
        "fields the patch does not mention survive"
    );
    assert_eq!(cs[1]["args"], json!(["-g", "daemon off;"]));
    // env merged by name; B changed in place, C new.
    // env merged by name: B changed in place, C added; A (server-only) keeps
    // its place before B.
    assert_eq!(
        cs[1]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}])
    );
    // Untouched parts of the object are untouched.
    assert_eq!(out["status"], pod()["status"]);
    assert_eq!(out["metadata"], pod()["metadata"]);
}

#[test]
fn smp_new_items_order_follows_upstream() {
    // upstream patch_test.go "preserve the order from the patch in a merging
    // int list": [1,2,3] + [3,1] = [2,3,1].
    let types = |p: &[&str]| {
        if p == ["list"] {
            ListType::Set
        } else {
            ListType::Atomic
        }
    };
    struct T<F: Fn(&[&str]) -> ListType>(F);
    impl<F: Fn(&[&str]) -> ListType> ListTypes for T<F> {
        fn list_type(&self, p: &[&str]) -> ListType {
            (self.0)(p)
        }
    }
    let out = strategic(
        &json!({"list": [1, 2, 3]}),
        &json!({"list": [3, 1]}),
        &T(types),
    )
    .unwrap();
    assert_eq!(out["list"], json!([2, 3, 1]));
    // New finalizer without $setElementOrder lands first, as upstream.
    let out = strategic(
        &pod(),
        &json!({"metadata": {"finalizers": ["c.example.com/z"]}}),
        &pod_types(),
    )
    .unwrap();
    assert_eq!(
        out["metadata"]["finalizers"],
        json!(["c.example.com/z", "a.example.com/x", "b.example.com/y"])
    );
    // A new container likewise.
    let out = strategic(
        &pod(),
        &json!({"spec": {"containers": [{"name": "new", "image": "busybox"}]}}),
        &pod_types(),
    )
    .unwrap();
    let names: Vec<_> = out["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("new"), json!("app"), json!("sidecar")]);
}

#[test]
fn smp_unions_finalizers_and_deletes_from_primitive_list() {
    let patch = json!({
        "metadata": {
            "$setElementOrder/finalizers": ["a.example.com/x", "b.example.com/y", "c.example.com/z"],
            "finalizers": ["b.example.com/y", "c.example.com/z"]
        }
    });
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    assert_eq!(
        out["metadata"]["finalizers"],
        json!(["a.example.com/x", "b.example.com/y", "c.example.com/z"])
    );
    let patch =
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/x", "nope"]}});
    let out = strategic(&out, &patch, &pod_types()).unwrap();
    assert_eq!(
        out["metadata"]["finalizers"],
        json!(["b.example.com/y", "c.example.com/z"])
    );
    // Deleting from a list that is not there does not create it.
    let out = strategic(&json!({"metadata": {}}), &patch, &pod_types()).unwrap();
    assert_eq!(out, json!({"metadata": {}}));
}

#[test]
fn smp_patch_delete_removes_list_element_and_map() {
    let patch = json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]},
                       "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    let cs = out["spec"]["containers"].as_array().unwrap();
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0]["name"], "app");
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Initialized", "status": "True"}])
    );
    // $patch: delete on a map empties it.
    let out = strategic(
        &pod(),
        &json!({"metadata": {"labels": {"$patch": "delete"}}}),
        &pod_types(),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({}));
}

#[test]
fn smp_patch_replace_on_list_and_map() {
    let patch =
        json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "x"}]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "solo", "image": "x"}])
    );
    let patch = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"only": "this"}));
}

#[test]
fn smp_replaces_atomic_lists() {
    let patch = json!({"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}],
                                "containers": [{"name": "app", "args": ["-v"]}]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    assert_eq!(
        out["spec"]["tolerations"],
        json!([{"key": "k2", "operator": "Exists"}])
    );
    assert_eq!(out["spec"]["containers"][0]["args"], json!(["-v"]));
    // With no list semantics at all, even containers are replaced.
    let out = strategic(
        &pod(),
        &json!({"spec": {"containers": [{"name": "x"}]}}),
        &AllAtomic,
    )
    .unwrap();
    assert_eq!(out["spec"]["containers"], json!([{"name": "x"}]));
}

#[test]
fn smp_set_element_order_reorders() {
    let patch =
        json!({"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    assert_eq!(out["spec"]["containers"][0]["name"], "sidecar");
    assert_eq!(out["spec"]["containers"][1]["name"], "app");
    assert_eq!(out["spec"]["containers"][1]["image"], "nginx:1.25");
    // kubectl's shape: order list + changed items; new item placed as ordered.
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "mid"}, {"name": "sidecar"}],
        "containers": [{"name": "mid", "image": "busybox"}]
    }});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    let names: Vec<_> = out["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["app", "mid", "sidecar"]);
    // Patch items out of the declared order are rejected.
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
        "containers": [{"name": "sidecar", "image": "a"}, {"name": "app", "image": "b"}]
    }});
    let err = strategic(&pod(), &patch, &pod_types()).unwrap_err();
    assert!(
        err.to_string().contains("doesn't match $setElementOrder"),
        "{err}"
    );
}

#[test]
fn smp_null_deletes_and_retain_keys() {
    let out = strategic(
        &pod(),
        &json!({"spec": {"tolerations": null}, "status": null}),
        &pod_types(),
    )
    .unwrap();
    assert!(out["spec"].get("tolerations").is_none());
    assert!(out.get("status").is_none());
    // $retainKeys clears what it does not list (volume source switch).
    let patch = json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/d"}}]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "data", "hostPath": {"path": "/d"}}])
    );
    let bad = json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {"path": "/d"}}]}});
    let err = strategic(&pod(), &bad, &pod_types()).unwrap_err();
    assert!(err.to_string().contains("not in $retainKeys"), "{err}");
}

#[test]
fn smp_errors_are_actionable() {
    let err = strategic(&pod(), &json!({"spec": {"$frobnicate": 1}}), &pod_types()).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "invalid strategic merge patch at .spec: unknown directive \"$frobnicate\""
        ),
        "{err}"
    );
    let err = strategic(
        &pod(),
        &json!({"spec": {"containers": [{"image": "x"}]}}),
        &pod_types(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid strategic merge patch at .spec.containers: map: {\"image\":\"x\"} does not contain declared merge key: name"
    );
    let err = strategic(
        &pod(),
        &json!({"metadata": {"labels": {"$patch": "merge"}}}),
        &pod_types(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown patch type: \"merge\""),
        "{err}"
    );
    let err = strategic(
        &pod(),
        &json!({"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}),
        &pod_types(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("merging lists cannot yet be specified"),
        "{err}"
    );
    let err = strategic(
        &pod(),
        &json!({"metadata": {"finalizers": ["x", 1]}}),
        &pod_types(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("not identical"), "{err}");
    let err = strategic(&pod(), &json!([1]), &pod_types()).unwrap_err();
    assert_eq!(
        err,
        PatchError::NotAnObject {
            what: "a strategic merge patch",
            got: "a list"
        }
    );
    let err = strategic(
        &pod(),
        &json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
        &pod_types(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid patch format of primitive list"),
        "{err}"
    );
}

#[test]
fn smp_new_values_lose_directives_and_nulls() {
    let patch = json!({"spec": {"containers": [{"name": "n", "image": "i", "command": null,
                                                "env": [{"name": "X", "$patch": "delete"}]}]}});
    let out = strategic(&pod(), &patch, &pod_types()).unwrap();
    let new = out["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "n")
        .unwrap()
        .clone();
    assert_eq!(new, json!({"name": "n", "image": "i", "env": []}));
    // $ref is a field of CRD schemas, not a directive.
    let out = strategic(&json!({}), &json!({"schema": {"$ref": "#/x"}}), &AllAtomic).unwrap();
    assert_eq!(out, json!({"schema": {"$ref": "#/x"}}));
}

/// Found by the fuzzer (`merge-patch` target): a `move` to a path whose
/// parent does not exist fails after the json-patch crate removed the source,
/// and the source stayed removed, although a failed patch must change nothing.
#[test]
fn a_failing_move_leaves_the_object_unchanged() {
    let before = json!({"c": {"d": {"e": 1}}});
    let mut obj = before.clone();
    let ops = json!([{"op": "move", "from": "/c/d", "path": "/g/d/e"}]);
    assert!(matches!(
        json(&mut obj, &ops),
        Err(PatchError::JsonPatchFailed(_))
    ));
    assert_eq!(obj, before);
}

/// Found by the fuzzer (`merge-patch` target): moving a child over its parent
/// and then failing made json-patch's undo try to move the parent into
/// itself, which it answers with `unreachable!`: a request panicked.
#[test]
fn a_failing_patch_after_moving_a_child_over_its_parent_is_an_error() {
    let before = json!({"x": {"y": 1}});
    let mut obj = before.clone();
    let ops = json!([
        {"op": "move", "from": "/x/y", "path": "/x"},
        {"op": "test", "path": "/nope", "value": 1},
    ]);
    assert!(matches!(
        json(&mut obj, &ops),
        Err(PatchError::JsonPatchFailed(_))
    ));
    assert_eq!(obj, before);
}

/// Issue 30 row 1: each op copies the object into its own deepest point,
/// doubling its depth; the op that would pass the depth limit is refused,
/// by index and path, and nothing is applied.
#[test]
fn copies_into_a_descendant_stop_at_the_depth_limit() {
    let before = json!({"a": {"x": 1}});
    let mut obj = before.clone();
    let mut ops = vec![];
    // Depth of /a after k ops: 2^k; its deepest object is at /a/x/x/...
    let mut deepest = "/a".to_string();
    for k in 0..30 {
        ops.push(json!({"op": "copy", "from": "/a", "path": format!("{deepest}/x")}));
        for _ in 0..(1usize << k) {
            deepest.push_str("/x");
        }
        if deepest.len() > 1000 {
            break;
        }
    }
    let e = json(&mut obj, &Value::Array(ops)).unwrap_err();
    let PatchError::TooDeep {
        op,
        ref path,
        depth,
    } = e
    else {
        panic!("{e:?}")
    };
    // Depths 2, 3, 5, 9, 17, 33 fit; op 6 would put /a (64 deep) 65 down.
    assert_eq!((op, depth), (6, 129), "{e}");
    assert!(path.starts_with("/a/x/x"), "{path}");
    assert!(
        e.to_string()
            .contains("operation '/6' failed at path '/a/x/x"),
        "{e}"
    );
    assert_eq!(obj, before);
}

/// Issue 30 row 1: a 2 KB patch whose copies double the object's size is
/// refused once the copies add more than upstream's 3 MiB.
#[test]
fn copies_that_double_the_size_stop_at_the_copy_limit() {
    let before = json!({"a": ["x".repeat(1000)]});
    let mut obj = before.clone();
    let ops: Vec<Value> = (0..40)
        .map(|_| json!({"op": "copy", "from": "/a", "path": "/a/-"}))
        .collect();
    let e = json(&mut obj, &Value::Array(ops)).unwrap_err();
    let PatchError::CopyTooLarge {
        op, accumulated, ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert!(accumulated > bounds::MAX_COPY_BYTES && op < 20, "{e}");
    assert!(
        e.to_string()
            .contains("Unable to complete the copy, the accumulated size increase of copy is"),
        "{e}"
    );
    assert_eq!(obj, before);
    // Copies under the limit apply.
    let ops: Vec<Value> = (0..5)
        .map(|_| json!({"op": "copy", "from": "/a", "path": "/a/-"}))
        .collect();
    json(&mut obj, &Value::Array(ops)).unwrap();
    assert_eq!(bounds::measure(&obj).depth, 7);
}

#[test]
fn at_most_ten_thousand_operations() {
    let test = json!({"op": "test", "path": "/a", "value": 1});
    let mut obj = json!({"a": 1});
    json(&mut obj, &Value::Array(vec![test.clone(); 10_000])).unwrap();
    let e = json(&mut obj, &Value::Array(vec![test; 10_001])).unwrap_err();
    assert_eq!(e, PatchError::TooManyOperations { got: 10_001 });
    assert_eq!(
        e.to_string(),
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
}

#[test]
fn added_values_are_bounded_in_depth_and_the_result_in_size() {
    let mut deep = json!(1);
    for _ in 0..99 {
        deep = json!([deep]);
    }
    let mut obj = json!({"a": {}});
    // 1 + 99 levels fit; 2 + 99 do not.
    json(
        &mut obj,
        &json!([{"op": "add", "path": "/b", "value": deep}]),
    )
    .unwrap();
    let e = json(
        &mut obj,
        &json!([{"op": "add", "path": "/a/b", "value": deep}]),
    )
    .unwrap_err();
    assert!(
        matches!(e, PatchError::TooDeep { op: 0, depth: 101, ref path } if path == "/a/b"),
        "{e:?}"
    );
    // A move deepens too.
    let e = json(
        &mut obj,
        &json!([{"op": "move", "from": "/b", "path": "/a/c"}]),
    )
    .unwrap_err();
    assert!(matches!(e, PatchError::TooDeep { op: 0, .. }), "{e:?}");
    let big = "x".repeat(2 * 1024 * 1024);
    let before = obj.clone();
    let e = json(
        &mut obj,
        &json!([
            {"op": "add", "path": "/c", "value": big},
            {"op": "add", "path": "/d", "value": big},
        ]),
    )
    .unwrap_err();
    assert!(
        matches!(e, PatchError::ResultTooLarge { bytes } if bytes > 4 * 1024 * 1024),
        "{e:?}"
    );
    assert_eq!(obj, before);
}
