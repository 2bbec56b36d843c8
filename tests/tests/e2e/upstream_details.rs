//! Small answers where clients read upstream's exact behaviour (issue 31
//! item 7): a CRD's create answer carries a status (kube-rs' `crd_api`
//! example unwraps it), an object held by finalizers gets
//! `deletionGracePeriodSeconds: 0`, and an `Accept` naming nothing the server
//! writes is 406.

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::{Plane, configmap, widget_crd};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_read_as_upstreams() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;

    // The create's answer: status with the storage version, names not yet accepted.
    let crd: CustomResourceDefinition =
        serde_json::from_value(widget_crd("widgets", "Widget", "Namespaced"))?;
    let created = Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await?;
    let status = created.status.expect("a status in the create's answer");
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));

    // A delete held by a finalizer: a zero grace period, as upstream writes it.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    let mut cm = configmap("held", &[("k", "v")]);
    cm.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &cm).await?;
    cms.delete("held", &DeleteParams::default()).await?;
    let held = cms.get("held").await?;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.metadata.deletion_grace_period_seconds, Some(0));
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;

    // Accept: what the server cannot write is 406; */* among others is JSON.
    let get = |accept: &str| {
        http::Request::get("/api/v1/namespaces/default/configmaps")
            .header("Accept", accept)
            .body(Vec::new())
            .expect("a request")
    };
    match client.request_text(get("text/html")).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (406, "NotAcceptable")),
        other => panic!("text/html was answered: {other:?}"),
    }
    let text = client.request_text(get("text/html, */*;q=0.8")).await?;
    assert!(text.contains("\"kind\":\"ConfigMapList\""), "{text}");

    // Discovery carries each resource's storage version hash, upstream's value.
    let text = client
        .request_text(http::Request::get("/api/v1").body(Vec::new())?)
        .await?;
    assert!(
        text.contains("\"shortNames\":[\"cm\"],\"storageVersionHash\":\"qFsyl6wFWjQ=\""),
        "{text}"
    );
    Ok(())
}

/// Metadata-only clients (kube-rs `list_metadata`, controller-runtime's
/// metadata informers) get `PartialObjectMetadata`: no data, no spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_clients_get_partial_object_metadata() -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{ListParams, WatchEvent, WatchParams};
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &configmap("big", &[("k", &"x".repeat(10_000))]),
    )
    .await?;
    let list = cms.list_metadata(&ListParams::default()).await?;
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("big"));
    assert!(list.metadata.resource_version.is_some());
    let one = cms.get_metadata("big").await?;
    assert_eq!(
        one.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    // The raw answer carries no data.
    let req = http::Request::get("/api/v1/namespaces/default/configmaps")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())?;
    let text = client.request_text(req).await?;
    assert!(
        text.contains("\"kind\":\"PartialObjectMetadataList\"") && !text.contains("xxxx"),
        "{text}"
    );
    // A watch of metadata sees a change as metadata.
    let rv = list.metadata.resource_version.unwrap_or_default();
    let mut watch = cms
        .watch_metadata(&WatchParams::default().timeout(120), &rv)
        .await?
        .boxed();
    cms.create(&PostParams::default(), &configmap("next", &[("k", "v")]))
        .await?;
    let seen = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(e) = watch.try_next().await? {
            if let WatchEvent::Added(m) = e {
                return anyhow::Ok(m.metadata.name);
            }
        }
        Ok(None)
    })
    .await??;
    assert_eq!(seen.as_deref(), Some("next"));

    // Writes answer metadata only too (issue 46 item 5): kube-rs' `patch_metadata`.
    let patched = cms
        .patch_metadata(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}})),
        )
        .await?;
    assert_eq!(
        patched.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let labels = patched.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("seen").map(String::as_str), Some("yes"));
    let req = http::Request::put("/api/v1/namespaces/default/configmaps/big")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big"}, "data": {"k": "x".repeat(10_000)}}),
        )?)?;
    let text = client.request_text(req).await?;
    assert!(
        text.contains("\"kind\":\"PartialObjectMetadata\"") && !text.contains("xxxx"),
        "{text}"
    );
    Ok(())
}

/// Aggregated discovery (apidiscovery.k8s.io/v2), which kube-rs'
/// `run_aggregated` and kubectl ask for first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_discovery_lists_every_group() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(widget_crd("widgets", "Widget", "Namespaced"))?,
        )
        .await?;
    let discovery = wasmlet_e2e::eventually(
        std::time::Duration::from_secs(60),
        "the widgets group in aggregated discovery",
        || async {
            let d = kube::Discovery::new(client.clone())
                .run_aggregated()
                .await
                .ok()?;
            d.has_group("test.wasmlet.dev").then_some(d)
        },
    )
    .await?;
    let apps = discovery.get("apps").expect("the apps group");
    let (deploy, caps) = apps
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.kind == "Deployment")
        .expect("Deployments in apps");
    assert_eq!(
        (deploy.plural.as_str(), deploy.version.as_str()),
        ("deployments", "v1")
    );
    assert!(
        caps.subresources
            .iter()
            .any(|(r, _)| r.plural == "deployments/scale" || r.plural == "scale"),
        "{:?}",
        caps.subresources
    );
    let core = discovery.get("").expect("the core group");
    assert!(
        core.recommended_resources()
            .iter()
            .any(|(r, _)| r.kind == "Pod")
    );
    // kubectl reads the same documents.
    let out = plane.kubectl_ok(&["api-resources", "--api-group=test.wasmlet.dev"])?;
    assert!(out.contains("widgets"), "{out}");
    Ok(())
}

/// What kube-apiserver protects (issue 46 item 3), through kubectl: the three
/// namespaces the cluster needs are never deleted, a Service's cluster IP
/// never changes once set, and a Deployment's, ReplicaSet's or StatefulSet's
/// selector must pick its template and never changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_kube_apiserver_protects() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    plane.kubectl_ok(&["create", "namespace", "scratch"])?;
    for ns in ["default", "kube-system", "kube-public"] {
        let out = plane.kubectl_fails(&["delete", "namespace", ns])?;
        assert!(
            out.contains(&format!(
                "namespaces \"{ns}\" is forbidden: this namespace may not be deleted"
            )),
            "{out}"
        );
    }
    // `--all` deletes the others and fails on the three.
    let _ = plane.kubectl(&["delete", "namespace", "--all", "--wait=false"])?;
    let left = plane.kubectl_ok(&["get", "namespaces", "-o", "name"])?;
    for ns in ["default", "kube-system", "kube-public"] {
        assert!(left.contains(&format!("namespace/{ns}\n")), "{left}");
    }

    let dir = tempfile::tempdir()?;
    let apply = |name: &str, v: serde_json::Value| -> Result<std::process::Output> {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec(&v)?)?;
        plane.kubectl(&["create", "-f", &path.display().to_string()])
    };
    let service = |name: &str, ip: &str| {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]}})
    };
    anyhow::ensure!(
        apply("headless", service("headless", "None"))?
            .status
            .success()
    );
    anyhow::ensure!(apply("plain", service("plain", ""))?.status.success());
    for name in ["headless", "plain"] {
        let out = plane.kubectl_fails(&[
            "patch",
            "service",
            name,
            "-p",
            r#"{"spec":{"clusterIP":"10.0.0.12"}}"#,
        ])?;
        assert!(
            out.contains(
                "spec.clusterIPs[0]: Invalid value: \"10.0.0.12\": may not change once set"
            ),
            "{name}: {out}"
        );
    }
    let ips = plane.kubectl_ok(&[
        "get",
        "service",
        "headless",
        "-o",
        "jsonpath={.spec.clusterIP} {.spec.clusterIPs[0]}",
    ])?;
    assert_eq!(ips, "None None");

    let template = json!({"metadata": {"labels": {"app": "b"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]}});
    for (kind, resource) in [
        ("Deployment", "deployment"),
        ("ReplicaSet", "replicaset"),
        ("StatefulSet", "statefulset"),
    ] {
        let workload = |app: &str| {
            let mut w = json!({"apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": format!("{resource}-{app}"), "namespace": "default"},
                "spec": {"replicas": 0,
                    "selector": {"matchLabels": {"app": app}}, "template": template}});
            if kind == "StatefulSet" {
                w["spec"]["serviceName"] = json!("s");
            }
            w
        };
        let out = apply(resource, workload("a"))?;
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && text.contains(
                    "spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`"
                ),
            "{kind}: {text}"
        );
        let out = apply(resource, workload("b"))?;
        anyhow::ensure!(out.status.success(), "{kind}: {out:?}");
        let out = plane.kubectl_fails(&[
            "patch",
            resource,
            &format!("{resource}-b"),
            "-p",
            r#"{"spec":{"selector":{"matchLabels":{"app":"b","x":"y"}}}}"#,
        ])?;
        assert!(
            out.contains("spec.selector: Invalid value:") && out.contains("field is immutable"),
            "{kind}: {out}"
        );
    }
    Ok(())
}

/// Preconditions and defaults as kube-apiserver keeps them (issue 46 item 2):
/// `resourceVersion: "0"` in a replace is no precondition, a pod replaced from
/// the manifest it was created from keeps the priority admission gave it, and
/// `kubectl scale --dry-run=server` changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconditions_and_defaults_as_upstreams() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("zero", &[("k", "v")]))
        .await?;
    let mut cm = configmap("zero", &[("k", "w")]);
    cm.metadata.resource_version = Some("0".into());
    let replaced = cms.replace("zero", &PostParams::default(), &cm).await?;
    assert_eq!(replaced.data.unwrap()["k"], "w");

    let dir = tempfile::tempdir()?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"serviceAccountName": "default", "containers": [{"name": "c", "image": "x"}]}});
    let path = dir.path().join("pod.json");
    std::fs::write(&path, serde_json::to_vec(&pod)?)?;
    let path = path.display().to_string();
    plane.kubectl_ok(&["create", "-f", &path])?;
    // The manifest carries neither priority nor preemptionPolicy (its
    // service account it must name: upstream's ServiceAccount plugin sets it
    // on create only, and pod updates may not change it).
    plane.kubectl_ok(&["replace", "-f", &path])?;
    let got = plane.kubectl_ok(&[
        "get",
        "pod",
        "p",
        "-o",
        "jsonpath={.spec.priority} {.spec.preemptionPolicy}",
    ])?;
    assert_eq!(got, "0 PreemptLowerPriority");

    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "rs", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let path = dir.path().join("rs.json");
    std::fs::write(&path, serde_json::to_vec(&rs)?)?;
    plane.kubectl_ok(&["create", "-f", &path.display().to_string()])?;
    let out = plane.kubectl_ok(&[
        "scale",
        "replicaset",
        "rs",
        "--replicas=5",
        "--dry-run=server",
    ])?;
    assert!(out.contains("scaled (server dry run)"), "{out}");
    let replicas =
        plane.kubectl_ok(&["get", "replicaset", "rs", "-o", "jsonpath={.spec.replicas}"])?;
    assert_eq!(replicas, "1");
    let bad = plane.kubectl(&["scale", "replicaset", "rs", "--replicas=5"])?;
    assert!(bad.status.success());
    let replicas =
        plane.kubectl_ok(&["get", "replicaset", "rs", "-o", "jsonpath={.spec.replicas}"])?;
    assert_eq!(replicas, "5");
    Ok(())
}

/// kube-rs' event recorder about a cluster-scoped object (a Node): the event
/// goes to `default` with no namespace in its reference, as upstream stores
/// it, and a repeat becomes a series (issue 46 item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_about_a_node_are_stored_in_default() -> Result<()> {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test-controller".into(),
            instance: Some("i-1".into()),
        },
    );
    let node = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("n1".into()),
        uid: Some("u-n1".into()),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "Overheating".into(),
        note: Some("the node is hot".into()),
        action: "Checking".into(),
        secondary: None,
    };
    recorder.publish(&ev, &node).await?;
    recorder.publish(&ev, &node).await?;
    let out = plane.kubectl_ok(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        "involvedObject.kind=Node",
    ])?;
    assert!(
        out.contains("Overheating") && out.contains("node/n1"),
        "{out}"
    );
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let stored = v1.list(&Default::default()).await?;
    let e = stored
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("Overheating"))
        .expect("the event");
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2), "{e:?}");
    Ok(())
}
