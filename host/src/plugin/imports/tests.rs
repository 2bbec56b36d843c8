use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::cluster::Cluster;
use crate::plugin::manifest::Manifest;
use crate::plugin::sandbox::PluginCtx;

/// A call state whose API server address has nothing listening: any call
/// that reaches it fails with a connection error, not `denied`.
fn state(rules: &str) -> State {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    state_at(&format!("http://{closed}"), rules, "")
}

/// A call state against the API server at `url`.
fn state_at(url: &str, rules: &str, extra: &str) -> State {
    let text = format!(
        "[plugin]\nkind = \"reconciler\"\ncontract = \"0.1.0\"\n[reconciles]\napi-version = \"v1\"\nkind = \"ConfigMap\"\n{extra}[permissions]\nrules = [{rules}]\n"
    );
    let manifest = Arc::new(Manifest::parse(&text, Path::new("/plugins/p.toml")).unwrap());
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let ctx = PluginCtx {
        name: "p".into(),
        manifest,
        api: Some(Arc::new(Cluster::uncached(client))),
        clusters: Default::default(),
        metrics: Default::default(),
        events: None,
        workloads: None,
        http: None,
        recording: None,
        replay: false,
        shadow: None,
    };
    State::new(Arc::new(ctx), "default/x".into())
}

#[tokio::test]
async fn a_call_no_rule_grants_is_denied_before_discovery() {
    let mut s = state(r#"{ api-groups = [""], resources = ["configmaps"], verbs = ["get"] }"#);
    let target = ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: Some("default".into()),
        name: "d".into(),
    };
    let e = client::Host::get(&mut s, target.clone()).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Denied(m) if m.contains("get Deployment.apps")),
        "{e:?}"
    );
    // A granted group and verb but the wrong subresource: also before discovery.
    let e = client::Host::patch_status(&mut s, target, PatchType::Merge, "{}".into())
        .await
        .unwrap_err();
    assert!(matches!(&e, ClientError::Denied(_)), "{e:?}");
    assert_eq!(PluginMetrics::get(&s.plugin.metrics.denied), 2);
    // A call the rules may grant goes on to discovery (here: nothing listens).
    let e = client::Host::get(
        &mut s,
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: "c".into(),
        },
    )
    .await
    .unwrap_err();
    assert!(!matches!(&e, ClientError::Denied(_)), "{e:?}");
}

/// An API server that accepts connections and never answers must not hold
/// a call past its deadline (the epoch deadline cannot interrupt a host call).
#[tokio::test]
async fn a_stalled_api_server_cannot_hold_a_call_past_its_deadline() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut s = state_at(
        &format!("http://{addr}"),
        r#"{ api-groups = [""], resources = ["configmaps"], verbs = ["get"] }"#,
        "[limits]\ndeadline-ms = 300\n",
    );
    let target = ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: "c".into(),
    };
    // Generous: the client's own timeouts are minutes.
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        client::Host::get(&mut s, target),
    )
    .await
    .expect("the call returned at its deadline, not the client's timeout");
    assert!(
        matches!(&r, Err(ClientError::Unavailable(m)) if m.contains("deadline (300 ms)")),
        "{r:?}"
    );
    drop(silent);
}

#[test]
fn a_field_manager_with_a_single_error_is_refused() {
    for bad in ["-starts-with-dash", "has space", "", "a/b/c"] {
        assert!(!names::is_qualified_name(bad).is_empty(), "{bad}");
        assert!(
            matches!(check_field_manager(bad), Err(ClientError::Invalid(m)) if m.contains(bad)),
            "{bad}"
        );
    }
    assert_eq!(names::is_qualified_name("-starts-with-dash").len(), 1);
    for good in [
        "wasmlet",
        "example.com/my-manager",
        "kubectl-client-side-apply",
    ] {
        assert!(check_field_manager(good).is_ok(), "{good}");
    }
}

/// A call state whose manifest says `extra` (e.g. `[clusters.NAME]` tables)
/// and whose host has the named clusters `named`, each an API server address
/// with nothing listening.
fn state_with_clusters(extra: &str, named: &[&str]) -> State {
    let s = state_at("http://127.0.0.1:1", "", extra);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let clients = named.iter().map(|n| {
        let config = kube::Config::new(format!("http://{closed}").parse().unwrap());
        (n.to_string(), kube::Client::try_from(config).unwrap())
    });
    let ctx = PluginCtx {
        name: s.plugin.name.clone(),
        manifest: s.plugin.manifest.clone(),
        api: s.plugin.api.clone(),
        clusters: crate::cluster::NamedClusters::new(clients),
        metrics: Default::default(),
        events: None,
        workloads: None,
        http: None,
        recording: None,
        replay: false,
        shadow: None,
    };
    State::new(Arc::new(ctx), "default/x".into())
}

fn configmap(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: name.into(),
    }
}

const EU_CONFIGMAPS: &str = "[clusters.eu-west]\nrules = [{ api-groups = [\"\"], resources = [\"configmaps\"], verbs = [\"get\"] }]\n";

#[tokio::test]
async fn a_named_cluster_is_reached_only_as_the_manifest_grants_and_errors_name_it() {
    use crate::plugin::bindings::reconciler::wasmlet::plugin::clusters;
    let mut s = state_with_clusters(EU_CONFIGMAPS, &["eu-west", "us-east"]);
    // A cluster the manifest does not name: denied, naming it.
    let e = clusters::Host::get(&mut s, "us-east".into(), configmap("c"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Denied(m) if m.contains("grants nothing in cluster \"us-east\"") && m.contains("[clusters.us-east]")),
        "{e:?}"
    );
    // A named cluster, a kind its rules do not grant.
    let e = clusters::Host::create(
        &mut s,
        "eu-west".into(),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"default"}}"#
            .into(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, ClientError::Denied(m) if m.contains("\"create ConfigMap\" in cluster \"eu-west\"")),
        "{e:?}"
    );
    assert_eq!(PluginMetrics::get(&s.plugin.metrics.denied), 2);
    // Granted: the call goes on to that cluster's API server (nothing listens).
    let e = clusters::Host::get(&mut s, "eu-west".into(), configmap("c"))
        .await
        .unwrap_err();
    assert!(matches!(&e, ClientError::Unavailable(_)), "{e:?}");
    // The host's own cluster keeps `[permissions]` (none here).
    let e = client::Host::get(&mut s, configmap("c")).await.unwrap_err();
    assert!(matches!(&e, ClientError::Denied(_)), "{e:?}");

    // `*` reaches any name; one the host was not given is invalid, named.
    let mut s = state_with_clusters(&EU_CONFIGMAPS.replace("eu-west", "\"*\""), &["eu-west"]);
    let e = clusters::Host::get(&mut s, "ap-south".into(), configmap("c"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Invalid(m) if m.starts_with("cluster \"ap-south\" is not configured on this host") && m.contains("configured: eu-west")),
        "{e:?}"
    );
}

#[tokio::test]
async fn named_cluster_calls_are_taped_with_the_cluster_and_answered_by_replay() {
    use crate::plugin::bindings::reconciler::wasmlet::plugin::clusters;
    use crate::plugin::tape::{Redaction, Tape, TapeMode};
    let recording = {
        let s = state_with_clusters(EU_CONFIGMAPS, &[]);
        let tape = Tape::new(Redaction::default(), 0);
        tape.start(TapeMode::Record);
        let mut s = State::with_tape(s.plugin.clone(), "default/x".into(), Some(tape.clone()));
        let r = clusters::Host::get(&mut s, "us-east".into(), configmap("c")).await;
        assert!(matches!(r, Err(ClientError::Denied(_))), "{r:?}");
        tape.finish().entries
    };
    assert_eq!(recording.len(), 1);
    assert_eq!(recording[0].op, "clusters.get");
    assert_eq!(recording[0].args["cluster"], "us-east");
    assert_eq!(recording[0].args["target"]["name"], "c");
    // The cluster first, then `client`'s arguments: records keep one layout.
    assert!(
        recording[0]
            .args
            .to_string()
            .starts_with(r#"{"cluster":"us-east","target":{"#),
        "{}",
        recording[0].args
    );

    // Replayed under a manifest that would answer differently live: the
    // record answers, and a call to another cluster is not answered.
    let s = state_with_clusters("[clusters.\"*\"]\nrules = []\n", &[]);
    let tape = Tape::new(Redaction::default(), 0);
    tape.start(TapeMode::Replay(recording));
    let mut s = State::with_tape(s.plugin.clone(), "default/x".into(), Some(tape.clone()));
    let r = clusters::Host::get(&mut s, "us-east".into(), configmap("c")).await;
    assert!(
        matches!(&r, Err(ClientError::Denied(m)) if m.contains("\"us-east\"")),
        "{r:?}"
    );
    let r = clusters::Host::get(&mut s, "eu-west".into(), configmap("c")).await;
    assert!(
        matches!(&r, Err(ClientError::Unavailable(m)) if m.starts_with("replay: the record has no answer for clusters.get")),
        "{r:?}"
    );
}

/// With `bindings-in-flight`, `bind` returns once the binding is sent; its
/// failure arrives when the call's bindings land, naming the pod and node.
/// Past the limit, or without it, a binding fails the import itself.
#[tokio::test]
async fn a_binding_in_flight_fails_where_it_lands() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{closed}");
    let rules = r#"{ api-groups = [""], resources = ["pods/binding"], verbs = ["create"] }"#;
    let mut s = state_at(&url, rules, "[limits]\nbindings-in-flight = 1\n");
    client::Host::bind(&mut s, "default".into(), "p".into(), "n1".into())
        .await
        .unwrap();
    assert_eq!(s.in_flight.len(), 1);
    // Past the limit, a binding of the same call waits for its answer.
    let e = client::Host::bind(&mut s, "default".into(), "q".into(), "n1".into())
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Unavailable(_)), "{e:?}");
    assert_eq!(s.in_flight.len(), 1);
    let landed = crate::plugin::in_flight::land(std::mem::take(&mut s.in_flight)).await;
    assert!(landed.writes.is_empty());
    let failed = landed.failed.unwrap();
    assert!(
        failed.starts_with("binding pod default/p to node n1: unavailable"),
        "{failed}"
    );

    let mut s = state_at(&url, rules, "");
    let e = client::Host::bind(&mut s, "default".into(), "p".into(), "n1".into())
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Unavailable(_)), "{e:?}");
    assert!(s.in_flight.is_empty());
}

/// `create-all` answers each object as `create` would (a refused one alone),
/// tapes the batch as one `client.create` per object, and a replay answers
/// it from those; more than [`MAX_CREATE_ALL`] objects is refused whole.
#[tokio::test]
async fn create_all_answers_each_object_and_is_taped_as_its_creates() {
    use crate::plugin::tape::{Redaction, Tape, TapeMode};
    let doc = |api_version: &str, kind: &str, name: &str| {
        serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"namespace": "default", "name": name}})
            .to_string()
    };
    let batch = vec![
        doc("v1", "ConfigMap", "a"),
        doc("apps/v1", "Deployment", "s"),
        doc("v1", "ConfigMap", "b"),
    ];
    let rules = r#"{ api-groups = [""], resources = ["configmaps"], verbs = ["create"] }"#;
    let recording = {
        let s = state(rules);
        let tape = Tape::new(Redaction::default(), 0);
        tape.start(TapeMode::Record);
        let mut s = State::with_tape(s.plugin.clone(), "default/x".into(), Some(tape.clone()));
        let answers = client::Host::create_all(&mut s, batch.clone())
            .await
            .unwrap();
        // Granted: on to the API server (nothing listens); refused: denied alone.
        assert!(
            matches!(&answers[0], Err(ClientError::Unavailable(_))),
            "{answers:?}"
        );
        assert!(
            matches!(&answers[1], Err(ClientError::Denied(m)) if m.contains("create Deployment")),
            "{answers:?}"
        );
        assert!(
            matches!(&answers[2], Err(ClientError::Unavailable(_))),
            "{answers:?}"
        );
        tape.finish().entries
    };
    let ops: Vec<(&str, &str)> = recording
        .iter()
        .map(|e| {
            (
                e.op.as_str(),
                e.args["obj"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("client.create", "a"),
            ("client.create", "s"),
            ("client.create", "b")
        ]
    );

    // Replayed under rules that grant nothing: the record answers.
    let s = state("");
    let tape = Tape::new(Redaction::default(), 0);
    tape.start(TapeMode::Replay(recording));
    let mut s = State::with_tape(s.plugin.clone(), "default/x".into(), Some(tape.clone()));
    let answers = client::Host::create_all(&mut s, batch).await.unwrap();
    assert!(
        matches!(&answers[1], Err(ClientError::Denied(_))),
        "{answers:?}"
    );
    assert!(
        matches!(&answers[2], Err(ClientError::Unavailable(_))),
        "{answers:?}"
    );

    let mut s = state(rules);
    let many = vec![doc("v1", "ConfigMap", "c"); MAX_CREATE_ALL + 1];
    let e = client::Host::create_all(&mut s, many).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Invalid(m) if m.contains("at most 500")),
        "{e:?}"
    );
    assert!(s.writes.is_empty());
}
