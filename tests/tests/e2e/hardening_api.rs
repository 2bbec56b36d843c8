//! Hardening (issue 30): requests that used to reach past their rights in the
//! embedded plane, each made as the attacker would, through the kube client,
//! kubectl or raw HTTP. After each, another client still writes and watches,
//! and what was stored is still there.
//!
//! - row 4: a CRD that names a built-in type (`leases.coordination.k8s.io`)
//!   or another type of a Kubernetes group replaced the built-in;
//! - row 9: a plain list in a namespace named `watch` was served as a watch
//!   to a user who may only list;
//! - row 12: a node minted unbound ServiceAccount tokens;
//! - row 14: `kubectl create role --resource=configmaps` (protobuf) lost
//!   `apiGroups: [""]`, so the role granted nothing.

use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use wasmlet_e2e::{Plane, configmap, expect_status};

/// The plane still serves another user: a watch started before a write
/// sees it, and the write reads back.
async fn still_serves(client: &kube::Client, name: &str) -> Result<()> {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    // Generous: the watch must still be open when the write's event comes.
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(120);
    let mut watch = cms.watch(&wp, "0").await?.boxed();
    cms.create(&PostParams::default(), &configmap(name, &[("k", "v")]))
        .await
        .with_context(|| format!("another client's write of {name}"))?;
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(e) = watch.try_next().await? {
            if let WatchEvent::Added(cm) = e {
                return Ok::<_, anyhow::Error>(cm.metadata.name == Some(name.into()));
            }
        }
        Ok(false)
    })
    .await
    .context("the watch saw nothing in 60 s")??;
    assert!(seen, "another client's watch missed {name}");
    assert_eq!(cms.get(name).await?.data.unwrap_or_default()["k"], "v");
    Ok(())
}

fn lease(name: &str) -> Lease {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}}))
    .expect("a Lease")
}

fn crd(group: &str, plural: &str, kind: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "annotations": annotations},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

/// Row 4: no CRD takes a built-in's name, and a Kubernetes group needs
/// upstream's approval annotation; Leases and access reviews go on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_never_replace_built_in_types() -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    let leases = Api::<Lease>::namespaced(admin.clone(), "default");
    leases
        .create(&PostParams::default(), &lease("before"))
        .await?;
    let crds = Api::<Crd>::all(admin.clone());
    let create = |v: Value| {
        let crds = crds.clone();
        async move {
            crds.create(&PostParams::default(), &serde_json::from_value(v)?)
                .await
                .map_err(anyhow::Error::from)
        }
    };
    let refused = |r: Result<Crd>| -> Result<kube::core::Status> {
        match r {
            Err(e) => match e.downcast::<kube::Error>()? {
                kube::Error::Api(s) => Ok(*s),
                other => Err(other.into()),
            },
            Ok(c) => anyhow::bail!("created {:?}", c.metadata.name),
        }
    };

    // Without the annotation: upstream's message for a protected group.
    let s = refused(create(crd("coordination.k8s.io", "leases", "Lease", json!({}))).await)?;
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    assert!(
        s.message
            .contains("metadata.annotations[api-approved.kubernetes.io]")
            && s.message
                .contains("protected groups must have approval annotation"),
        "{}",
        s.message
    );
    // With it, still refused: the server serves that type itself.
    let approved = json!({"api-approved.kubernetes.io": "unapproved, testing"});
    for (group, plural, kind) in [
        ("coordination.k8s.io", "leases", "Lease"),
        (
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
        ),
    ] {
        let s = refused(create(crd(group, plural, kind, approved.clone())).await)?;
        assert_eq!(s.code, 422, "{s:?}");
        assert!(
            s.message.contains("spec.names.plural")
                && s.message.contains(&format!(
                    "{plural}.{group} is served by this API server natively"
                )),
            "{}",
            s.message
        );
    }
    // A new type in a Kubernetes group: with the annotation, as upstream.
    let s = refused(create(crd("example.k8s.io", "gizmos", "Gizmo", json!({}))).await)?;
    assert_eq!(s.code, 422, "{s:?}");
    let s = refused(
        create(crd(
            "example.k8s.io",
            "gizmos",
            "Gizmo",
            json!({"api-approved.kubernetes.io": "not a url"}),
        ))
        .await,
    )?;
    assert!(
        s.message.contains("Invalid value: \"not a url\""),
        "{}",
        s.message
    );
    create(crd("example.k8s.io", "gizmos", "Gizmo", approved.clone())).await?;
    create(crd(
        "other.k8s.io",
        "gizmos",
        "Gizmo",
        json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"}),
    ))
    .await?;

    // Leases are still the built-in's, and so are access reviews (kubectl
    // auth can-i answers through them).
    assert_eq!(
        leases
            .get("before")
            .await?
            .spec
            .and_then(|s| s.holder_identity),
        Some("me".into())
    );
    leases
        .create(&PostParams::default(), &lease("after"))
        .await?;
    assert_eq!(leases.list(&ListParams::default()).await?.items.len(), 2);
    assert_eq!(
        plane
            .kubectl_ok(&["auth", "can-i", "get", "leases"])?
            .trim(),
        "yes"
    );
    still_serves(&admin, "after-crds").await
}

/// Row 9: a namespace may be named `watch`; a plain GET of a list there is
/// a list for authorization and for the handler alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_named_watch_is_listed_not_watched() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "watch"}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Api::<ConfigMap>::namespaced(admin.clone(), "watch")
        .create(&PostParams::default(), &configmap("inside", &[("a", "b")]))
        .await?;
    plane.kubectl_ok(&[
        "create",
        "role",
        "lister",
        "-n",
        "watch",
        "--verb=list",
        "--resource=configmaps",
    ])?;
    plane.kubectl_ok(&[
        "create",
        "rolebinding",
        "lister",
        "-n",
        "watch",
        "--role=lister",
        "--user=lister",
    ])?;
    let lister = plane.client_as("lister").await?;
    let get = |q: &str| {
        http::Request::get(format!("/api/v1/namespaces/watch/configmaps{q}"))
            .body(Vec::new())
            .expect("a request")
    };
    // A list: one complete answer, not a stream that never ends.
    let text = tokio::time::timeout(Duration::from_secs(60), lister.request_text(get("")))
        .await
        .context("a plain list in namespace `watch` did not finish: served as a watch")??;
    let list: Value = serde_json::from_str(&text).with_context(|| text.clone())?;
    assert_eq!(list["kind"], "ConfigMapList", "{text}");
    assert_eq!(list["items"][0]["metadata"]["name"], "inside", "{text}");
    // A watch, however it is spelled, is still refused to this user.
    for path in [
        "/api/v1/watch/namespaces/watch/configmaps",
        "/api/v1/namespaces/watch/configmaps?watch=true",
    ] {
        let req = http::Request::get(path).body(Vec::new())?;
        match tokio::time::timeout(Duration::from_secs(60), lister.request_text(req)).await? {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{path}: {s:?}"),
            other => panic!("{path} was served to a list-only user: {other:?}"),
        }
    }
    still_serves(&admin, "after-watch-ns").await
}

/// Row 14: `kubectl create role` sends protobuf; the core group is an
/// empty string in `apiGroups` and must survive decoding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_created_by_kubectl_grants_the_core_group() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &configmap("readable", &[("k", "v")]),
        )
        .await?;
    plane.kubectl_ok(&[
        "create",
        "role",
        "cm-reader",
        "--verb=get,list",
        "--resource=configmaps",
    ])?;
    plane.kubectl_ok(&[
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        "--user=reader",
    ])?;
    let out = plane.kubectl_ok(&["get", "role", "cm-reader", "-o", "json"])?;
    let role: Value = serde_json::from_str(&out)?;
    assert_eq!(role["rules"][0]["apiGroups"], json!([""]), "{out}");
    let reader = plane.client_as("reader").await?;
    let cm = Api::<ConfigMap>::namespaced(reader, "default")
        .get("readable")
        .await?;
    assert_eq!(cm.data.unwrap_or_default()["k"], "v");
    assert_eq!(
        plane
            .kubectl_ok(&["auth", "can-i", "list", "configmaps", "--as", "reader"])?
            .trim(),
        "yes"
    );
    still_serves(&admin, "after-role").await
}

/// Row 12: a node may request a ServiceAccount token only bound, by uid,
/// to a pod scheduled on itself (upstream's NodeRestriction); an admin's
/// unbound request still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_mints_only_tokens_bound_to_its_own_pods() -> Result<()> {
    let plane = Plane::start_up(&["--node-name", "n1"]).await?;
    let admin = plane.client().await?;
    let node = plane.identity_client("kubeconfig-node").await?;
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "robot"}}))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await?;
    let pods = Api::<Pod>::namespaced(admin.clone(), "default");
    let mut uids = Vec::new();
    for (name, on) in [("here", "n1"), ("there", "n2")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": on, "serviceAccountName": "robot",
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "m", "image": "file:///nonexistent.wasm"}]}}))?;
        let pod = pods.create(&PostParams::default(), &pod).await?;
        uids.push(pod.metadata.uid.unwrap_or_default());
    }
    let request = |client: &kube::Client, spec: Value| {
        let sas = Api::<ServiceAccount>::namespaced(client.clone(), "default");
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": spec});
        async move {
            sas.create_subresource::<Value, Value>("token", "robot", &PostParams::default(), &body)
                .await
        }
    };
    let pod_ref = |name: &str, uid: &str| {
        json!({"audiences": ["api"], "boundObjectRef":
            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}})
    };
    for (spec, why) in [
        (
            json!({"audiences": ["api"]}),
            "node requested token not bound to a pod",
        ),
        (
            json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "here"}}),
            "node requested token with a pod binding without a uid",
        ),
        (
            pod_ref("there", &uids[1]),
            "node requested token bound to a pod scheduled on a different node",
        ),
    ] {
        let s = expect_status(request(&node, spec).await, 403, "Forbidden");
        assert_eq!(
            s.message,
            format!("serviceaccounts \"robot\" is forbidden: {why}")
        );
    }
    let token = request(&node, pod_ref("here", &uids[0])).await?;
    assert!(token["status"]["token"].is_string(), "{token}");
    let unbound = request(&admin, json!({"audiences": ["api"]})).await?;
    assert!(unbound["status"]["token"].is_string(), "{unbound}");
    still_serves(&admin, "after-tokens").await
}
