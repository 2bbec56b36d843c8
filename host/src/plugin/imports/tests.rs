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
