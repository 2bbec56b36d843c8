use prost::Message as _;
use serde_json::json;

use super::*;

/// JSON → protobuf → JSON gives the object back.
fn round_trip(v: Value) {
    let pb = encode_object(&v).unwrap_or_else(|e| panic!("encode {}: {e}", v["kind"]));
    assert!(pb.starts_with(MAGIC));
    let back = decode_object(&pb).unwrap_or_else(|e| panic!("decode {}: {e}", v["kind"]));
    assert_eq!(back, v, "{} changed in the round trip", v["kind"]);
}

fn metadata() -> Value {
    json!({
        "name": "web",
        "namespace": "default",
        "uid": "0d5c9a4e-1",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2024-05-06T07:08:09Z",
        "labels": {"app": "web", "tier": ""},
        "annotations": {"note": "a b"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
            "uid": "u-1", "controller": true, "blockOwnerDeletion": true}],
        "finalizers": ["example.com/keep"],
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
            "time": "2024-05-06T07:08:09Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]
    })
}

#[test]
fn a_pod_round_trips_with_quantities_int_or_strings_and_times() {
    round_trip(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(),
        "spec": {
            "nodeName": "n1",
            "hostNetwork": false,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app",
                "image": "example/app:1",
                "args": ["--port", "8080"],
                "ports": [{"containerPort": 8080, "protocol": "TCP", "hostIP": "10.0.0.1"}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"},
                    "requests": {"cpu": "1"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                    "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}},
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
            }],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.1.2.3",
            "podIPs": [{"ip": "10.1.2.3"}],
            "startTime": "2024-05-06T07:08:10Z",
            "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2024-05-06T07:08:11Z"}]
        }
    }));
}

#[test]
fn a_configmap_and_a_secret_round_trip_with_bytes() {
    round_trip(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"},
        "data": {"a": "1", "empty": ""}, "binaryData": {"b": "AAEC/w=="}, "immutable": true
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "d"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}
    }));
}

#[test]
fn a_deployment_service_namespace_and_lease_round_trip() {
    round_trip(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(),
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "i"}]}}
        },
        "status": {"replicas": 3, "observedGeneration": 3, "conditions": [{"type": "Available",
            "status": "True", "lastUpdateTime": "2024-05-06T07:08:09Z"}]}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "d"},
        "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080},
                {"name": "named", "port": 81, "targetPort": "web"}],
            "selector": {"app": "web"}}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team", "deletionTimestamp": "2024-05-06T07:08:09Z"},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Terminating"}
    }));
    round_trip(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": "d"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
            "renewTime": "2024-05-06T07:08:09.123456Z"}
    }));
}

#[test]
fn embedded_objects_lists_and_status_round_trip() {
    round_trip(json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "r", "namespace": "d"}, "revision": 2,
        "data": {"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "7", "continue": "abc"},
        "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}, {"metadata": {"name": "b"}}]
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "configmaps \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "configmaps"}, "code": 404
    }));
    round_trip(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {}, "spec": {"token": "t"},
        "status": {"authenticated": true, "user": {"username": "u",
            "extra": {"scopes": ["a", "b"]}}}
    }));
}

#[test]
fn go_durations_format_and_parse_as_go_does() {
    for (ns, s) in [
        (0, "0s"),
        (1_500_000_000, "1.5s"),
        (3_600_000_000_000, "1h0m0s"),
        (90 * 60_000_000_000, "1h30m0s"),
        (2_000_000, "2ms"),
        (-61_000_000_000, "-1m1s"),
    ] {
        assert_eq!(wire::go_duration(ns), s);
        assert_eq!(wire::parse_go_duration(s), Some(ns), "{s}");
    }
    assert_eq!(wire::parse_go_duration("1h30m"), Some(90 * 60_000_000_000));
    assert_eq!(wire::parse_go_duration("abc"), None);
    assert_eq!(wire::parse_go_duration(""), None);
}

/// What Go writes for unset non-pointer strings, numbers and times is
/// dropped, as its JSON encoding drops them.
#[test]
fn empty_strings_zero_numbers_and_zero_times_are_left_out() {
    let m = schema::SCHEMA.for_kind("v1", "ConfigMap").unwrap();
    // metadata{name:"c", namespace:"", generation:0, creationTimestamp:{}}
    let meta = [
        &[0x0a, 1, b'c'][..],
        &[0x1a, 0][..],
        &[0x38, 0][..], // generation (field 7)
        &[0x42, 0][..], // creationTimestamp (field 8) with no seconds
    ]
    .concat();
    let mut raw = vec![0x0a, meta.len() as u8];
    raw.extend_from_slice(&meta);
    let v = wire::decode(m, &raw, "", 0).unwrap();
    assert_eq!(v, json!({"metadata": {"name": "c"}}));
}

/// An empty string in a list is an element, not an unset field: a Role's
/// `apiGroups: [""]` names the core group (dropped, the rule granted nothing).
#[test]
fn empty_strings_in_lists_are_kept() {
    round_trip(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reader", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["", "apps"], "resources": ["pods", "deployments"], "verbs": ["watch"]}]
    }));
}

#[test]
fn garbage_is_an_error_naming_the_problem_never_a_panic() {
    let enveloped = |raw: &[u8]| {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
            }),
            raw: Some(raw.to_vec()),
            ..Default::default()
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"kind\":\"Pod\"}".to_vec(), "k8s\\0 prefix"),
        (b"k8s\0\x0a\xff".to_vec(), "envelope is malformed"),
        (b"k8s\0".to_vec(), "names no kind"),
        (enveloped(b"\x0a\x05ab"), "truncated"),
        (enveloped(b"\x0a\x02\x0a\xff"), "metadata"),
        (enveloped(b"\x0f"), "wire type"),
        (enveloped(b"\x0a\x03\x0a\x01\xc3"), "UTF-8"),
        (enveloped(&[0x80; 12]), "varint"),
    ];
    for (body, want) in cases {
        let e = decode_object(&body).expect_err("garbage decodes");
        assert!(
            e.0.contains(want),
            "{:?}: {e}",
            String::from_utf8_lossy(&body)
        );
    }
    // A schema nested (through `not`, field 28) past any real object's depth.
    let mut deep = Vec::new();
    for _ in 0..200 {
        let mut outer = vec![0xe2, 0x01];
        prost::encoding::encode_varint(deep.len() as u64, &mut outer);
        outer.extend_from_slice(&deep);
        deep = outer;
    }
    let props = "apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps";
    let m = schema::SCHEMA.message(props).expect("JSONSchemaProps");
    let e = wire::decode(m, &deep, "", 0).expect_err("too deep");
    assert!(e.0.contains("nested too deeply"), "{e}");
    let kind = json!({"apiVersion": "v1", "kind": "NoSuchKind"});
    assert!(encode_object(&kind).unwrap_err().0.contains("NoSuchKind"));
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": 1}});
    assert!(encode_object(&bad).unwrap_err().0.contains("data.a"));
}

#[test]
fn negotiation_follows_the_clients_preference() {
    let pb = Some(Output::Protobuf);
    let js = Some(Output::Json);
    assert_eq!(
        negotiate("application/vnd.kubernetes.protobuf, */*", true),
        pb
    );
    assert_eq!(
        negotiate("application/vnd.kubernetes.protobuf, */*", false),
        js
    );
    assert_eq!(
        negotiate(
            "application/json, application/vnd.kubernetes.protobuf",
            true
        ),
        js
    );
    assert_eq!(negotiate("", true), js);
    // Nothing this server writes: 406, as upstream (it was served as JSON).
    assert_eq!(negotiate("text/html", true), None);
    assert_eq!(negotiate("application/json;q=0", true), None);
    assert_eq!(negotiate("text/html, */*;q=0.8", true), js);
    assert_eq!(negotiate("Application/JSON", true), js);
    assert_eq!(
        negotiate(
            "application/json;q=0.5, application/vnd.kubernetes.protobuf",
            true
        ),
        pb
    );
    assert_eq!(
        negotiate(
            "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json",
            true
        ),
        js
    );
    // A custom resource asked for in protobuf only.
    assert_eq!(
        negotiate("application/vnd.kubernetes.protobuf", false),
        None
    );
}

#[test]
fn a_daemonset_a_replication_controller_and_the_self_reviews_round_trip() {
    round_trip(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": metadata(),
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "10%"}},
            "revisionHistoryLimit": 10,
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"nodeSelector": {"kubernetes.io/os": "wasi"},
                    "containers": [{"name": "app", "image": "i"}]}}},
        "status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2,
            "numberReady": 1, "observedGeneration": 3, "updatedNumberScheduled": 1}
    }));
    round_trip(json!({
        "apiVersion": "v1", "kind": "ReplicationController", "metadata": metadata(),
        "spec": {"replicas": 2, "selector": {"app": "web"},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "i"}]}}},
        "status": {"replicas": 2, "readyReplicas": 1, "observedGeneration": 3}
    }));
    round_trip(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
        "metadata": {"creationTimestamp": "2024-05-06T07:08:09Z"},
        "status": {"userInfo": {"username": "alice", "uid": "u",
            "groups": ["system:authenticated"], "extra": {"k": ["v"]}}}
    }));
    round_trip(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "team"},
        "status": {"resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
            "incomplete": false}
    }));
}
