//! Object semantics controllers rely on: resourceVersion, optimistic
//! concurrency, server-set metadata, `generation`, the status subresource, and
//! the Status objects errors come back as.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, ObjectMeta};
use serde_json::json;
use wasmlet_e2e::*;

#[tokio::test]
async fn resource_version_is_monotonic_and_stale_writes_conflict() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // One counter across kinds: every write gets a larger resourceVersion.
    let mut last = 0;
    let mut seen = Vec::new();
    for i in 0..5 {
        let cm = cms
            .create(
                &PostParams::default(),
                &configmap(&format!("cm-{i}"), &[("k", "v")]),
            )
            .await?;
        let p = pods
            .create(&PostParams::default(), &pod(&format!("p-{i}")))
            .await?;
        for rv in [rv_of(&cm), rv_of(&p)] {
            assert!(rv > last, "resourceVersion {rv} not above {last}");
            last = rv;
            seen.push(rv);
        }
    }
    let mut cm = cms.get("cm-0").await?;
    let stale = cm.clone();
    cm.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = cms.replace("cm-0", &PostParams::default(), &cm).await?;
    assert!(rv_of(&updated) > last);
    last = rv_of(&updated);
    // A patch is a write too.
    let patched = cms
        .patch(
            "cm-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "v3"}})),
        )
        .await?;
    assert!(rv_of(&patched) > last);
    last = rv_of(&patched);
    // Deletion is a write too: the list's revision moves past it.
    cms.delete("cm-1", &DeleteParams::default()).await?;
    let list = cms.list(&Default::default()).await?;
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse()?;
    assert!(
        list_rv > last,
        "list rv {list_rv} after a delete not above {last}"
    );

    // Update carrying the stale resourceVersion: 409 Conflict, nothing written.
    let mut stale_update = stale.clone();
    stale_update.data = Some([("k".to_string(), "lost".to_string())].into());
    let s = expect_status(
        cms.replace("cm-0", &PostParams::default(), &stale_update)
            .await,
        409,
        "Conflict",
    );
    assert!(
        s.message.contains("the object has been modified"),
        "{}",
        s.message
    );
    // Merge patch carrying a stale resourceVersion: 409 too.
    let stale_rv = stale.metadata.resource_version.clone().unwrap();
    expect_status(
        cms.patch(
            "cm-0",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"resourceVersion": stale_rv}, "data": {"k": "lost"}}),
            ),
        )
        .await,
        409,
        "Conflict",
    );
    // JSON patch with a `test` of the resourceVersion: upstream answers 422 on a failed test.
    assert_eq!(cms.get("cm-0").await?.data.unwrap()["k"], "v3");
    // With the current resourceVersion the same patch goes through.
    let cur = cms.get("cm-0").await?;
    let ok = cms
        .patch(
            "cm-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": cur.metadata.resource_version}, "data": {"k": "v4"}})),
        )
        .await?;
    assert!(rv_of(&ok) > rv_of(&cur));
    Ok(())
}

#[tokio::test]
async fn metadata_is_kept_and_server_set() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[]))
        .await?;
    let owner_uid = owner.metadata.uid.clone().unwrap();

    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "generateName": "gen-",
            "uid": "client-chosen",
            "resourceVersion": "",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": "hello", "example.com/x": "y"},
            "finalizers": ["example.com/hold"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}],
        },
        "data": {"a": "1"},
    }))?;
    let created = cms.create(&PostParams::default(), &cm).await?;
    let m = &created.metadata;
    let name = m.name.clone().unwrap();
    assert!(
        name.starts_with("gen-") && name.len() == "gen-".len() + 5,
        "generated name {name}"
    );
    assert_ne!(m.uid.as_deref(), Some("client-chosen"), "uid is server-set");
    assert_eq!(m.uid.as_ref().unwrap().len(), 36, "uid is a UUID");
    let created_at = m.creation_timestamp.clone().expect("creationTimestamp set");
    assert!(
        (k8s_openapi::jiff::Timestamp::now() - created_at.0)
            .get_seconds()
            .abs()
            < 60
    );
    assert_eq!(m.labels.as_ref().unwrap()["app"], "web");
    assert_eq!(m.annotations.as_ref().unwrap()["example.com/x"], "y");
    assert_eq!(
        m.finalizers.as_deref(),
        Some(&["example.com/hold".to_string()][..])
    );
    assert_eq!(m.owner_references.as_ref().unwrap()[0].uid, owner_uid);
    assert_eq!(m.namespace.as_deref(), Some("default"));

    // Two generateName creates get two names.
    let other = cms.create(&PostParams::default(), &cm).await?;
    assert_ne!(other.metadata.name, created.metadata.name);

    // Read back: everything kept. An update cannot change uid or creationTimestamp.
    let mut got = cms.get(&name).await?;
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.metadata.labels, created.metadata.labels);
    got.metadata.uid = Some("changed".into());
    got.metadata.creation_timestamp = None;
    got.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("extra".into(), "1".into());
    let updated = cms.replace(&name, &PostParams::default(), &got).await?;
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    assert_eq!(
        updated.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );
    assert_eq!(updated.metadata.labels.as_ref().unwrap()["extra"], "1");
    assert_eq!(updated.metadata.finalizers, created.metadata.finalizers);
    assert_eq!(
        updated.metadata.owner_references,
        created.metadata.owner_references
    );

    // Clean up the finalizer so the plane holds nothing pending.
    cms.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w = widgets
        .create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})),
        )
        .await?;
    assert_eq!(w.metadata.generation, Some(1));
    let pp = PatchParams::default();
    // Metadata change: no bump.
    let w = widgets
        .patch(
            "w",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}}})),
        )
        .await?;
    assert_eq!(w.metadata.generation, Some(1));
    // Status change through /status: no bump.
    let w = widgets
        .patch_status(
            "w",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await?;
    assert_eq!(w.metadata.generation, Some(1));
    assert_eq!(w.data["status"]["phase"], "Ready");
    // Spec change: bump.
    let w = widgets
        .patch("w", &pp, &Patch::Merge(json!({"spec": {"size": 2}})))
        .await?;
    assert_eq!(w.metadata.generation, Some(2));
    // Same spec again (no-op): no bump and no new resourceVersion.
    let again = widgets
        .patch("w", &pp, &Patch::Merge(json!({"spec": {"size": 2}})))
        .await?;
    assert_eq!(again.metadata.generation, Some(2));
    assert_eq!(again.metadata.resource_version, w.metadata.resource_version);
    // Spec change through PUT: bump. Client-sent generation is ignored.
    let mut cur = widgets.get("w").await?;
    cur.data["spec"]["size"] = json!(3);
    cur.metadata.generation = Some(100);
    let w = widgets.replace("w", &PostParams::default(), &cur).await?;
    assert_eq!(w.metadata.generation, Some(3));

    // A built-in kind with status: the pod's generation bumps on spec changes
    // only, not on labels or /status.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = pods.create(&PostParams::default(), &pod("p")).await?;
    assert_eq!(p.metadata.generation, Some(1));
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await?;
    assert_eq!(p.metadata.generation, Some(1));
    let p = pods
        .patch_status(
            "p",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await?;
    assert_eq!(p.metadata.generation, Some(1));
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 30}})),
        )
        .await?;
    assert_eq!(p.metadata.generation, Some(2));
    Ok(())
}

#[tokio::test]
async fn status_subresource_separates_spec_and_status() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let pp = PatchParams::default();
    // Status in a create is dropped for kinds with a status subresource.
    let w = widgets
        .create(
            &PostParams::default(),
            &dynamic(json!({
                "apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"size": 1}, "status": {"phase": "Forged"},
            })),
        )
        .await?;
    assert!(
        w.data.get("status").is_none(),
        "status was taken from the create: {:?}",
        w.data
    );

    // Writes to /status change status only (a spec change in the body is ignored).
    let w = widgets
        .patch_status("w", &pp, &Patch::Merge(json!({"spec": {"size": 9}, "metadata": {"labels": {"via": "status"}}, "status": {"phase": "Ready"}})))
        .await?;
    assert_eq!(w.data["status"]["phase"], "Ready");
    assert_eq!(w.data["spec"]["size"], 1);
    assert!(
        w.metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key("via")),
        "/status changed labels"
    );
    // PUT to /status, too.
    let mut cur = widgets.get("w").await?;
    cur.data["status"]["phase"] = json!("Done");
    cur.data["spec"]["size"] = json!(8);
    let w = widgets
        .replace_status("w", &PostParams::default(), &cur)
        .await?;
    assert_eq!(w.data["status"]["phase"], "Done");
    assert_eq!(w.data["spec"]["size"], 1);

    // Main-resource writes leave status untouched: merge patch, and PUT.
    let w = widgets
        .patch(
            "w",
            &pp,
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"phase": "Hacked"}})),
        )
        .await?;
    assert_eq!(w.data["spec"]["size"], 2);
    assert_eq!(w.data["status"]["phase"], "Done");
    let mut cur = widgets.get("w").await?;
    cur.data["status"] = json!({"phase": "Hacked"});
    cur.data["spec"]["size"] = json!(3);
    let w = widgets.replace("w", &PostParams::default(), &cur).await?;
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(w.data["status"]["phase"], "Done");

    // The same for pods.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p")).await?;
    let p = pods
        .patch_status(
            "p",
            &pp,
            &Patch::Merge(json!({"spec": {"containers": [{"name": "main", "image": "evil"}]}, "status": {"phase": "Running", "podIP": "10.0.0.7"}})),
        )
        .await?;
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        p.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("busybox")
    );
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"labels": {"x": "1"}}, "status": {"phase": "Failed"}}),
            ),
        )
        .await?;
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        p.status.as_ref().unwrap().pod_ip.as_deref(),
        Some("10.0.0.7")
    );
    assert_eq!(p.metadata.labels.unwrap()["x"], "1");
    Ok(())
}

#[tokio::test]
async fn errors_are_status_objects_with_upstream_codes() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // NotFound, with details naming the object.
    let s = expect_status(cms.get("missing").await, 404, "NotFound");
    assert_eq!(s.message, "configmaps \"missing\" not found");
    assert_eq!(s.details.as_ref().unwrap().name, "missing");
    expect_status(
        cms.delete("missing", &DeleteParams::default()).await,
        404,
        "NotFound",
    );
    // Namespace that does not exist.
    let s = expect_status(
        Api::<ConfigMap>::namespaced(client.clone(), "nowhere")
            .create(&PostParams::default(), &configmap("c", &[]))
            .await,
        404,
        "NotFound",
    );
    assert!(s.message.contains("nowhere"), "{}", s.message);

    // AlreadyExists.
    cms.create(&PostParams::default(), &configmap("dup", &[]))
        .await?;
    let s = expect_status(
        cms.create(&PostParams::default(), &configmap("dup", &[]))
            .await,
        409,
        "AlreadyExists",
    );
    assert_eq!(s.message, "configmaps \"dup\" already exists");

    // Conflict.
    let mut cur = cms.get("dup").await?;
    cur.metadata.resource_version = Some("1".into());
    expect_status(
        cms.replace("dup", &PostParams::default(), &cur).await,
        409,
        "Conflict",
    );

    // Invalid, with causes naming the field.
    let bad = ConfigMap {
        metadata: ObjectMeta {
            name: Some("Not_A_Name".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let s = expect_status(
        cms.create(&PostParams::default(), &bad).await,
        422,
        "Invalid",
    );
    let causes = &s.details.as_ref().unwrap().causes;
    assert!(
        causes.iter().any(|c| c.field == "metadata.name"),
        "{causes:?}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let s = expect_status(
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
            )?,
        )
        .await,
        422,
        "Invalid",
    );
    assert!(
        s.details
            .unwrap()
            .causes
            .iter()
            .any(|c| c.field == "spec.containers")
    );

    // BadRequest: a malformed label selector.
    expect_status(
        cms.list(&kube::api::ListParams::default().labels("a in (b"))
            .await,
        400,
        "BadRequest",
    );
    // Gone: a continue token older than the history.
    // (covered with --watch-history in list_watch.rs)

    // MethodNotAllowed: POST to a named object.
    let (code, body) = plane.raw(
        "POST",
        "/api/v1/namespaces/default/configmaps/dup",
        Some("application/json"),
        Some(b"{}"),
    )?;
    assert_eq!(code, 405);
    assert_eq!(body["reason"], "MethodNotAllowed");
    assert_eq!(body["kind"], "Status");

    // UnsupportedMediaType: a patch type nobody knows.
    let (code, body) = plane.raw(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/dup",
        Some("application/x-nonsense"),
        Some(b"{}"),
    )?;
    assert_eq!(code, 415);
    assert_eq!(body["reason"], "UnsupportedMediaType");

    // Unauthorized: a wrong token, through the kube client.
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(plane.kubeconfig())?,
        &Default::default(),
    )
    .await?;
    config.auth_info.token = Some("wrong".to_string().into());
    let bad_client = kube::Client::try_from(config)?;
    expect_status(
        Api::<ConfigMap>::namespaced(bad_client, "default")
            .list(&Default::default())
            .await,
        401,
        "Unauthorized",
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_unconditional_patches_all_land() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("hot", &[]))
        .await?;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let cms = cms.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                cms.patch(
                    "hot",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {format!("t{t}-{i}"): "x"}})),
                )
                .await
                .map_err(|e| format!("task {t} patch {i}: {e}"))?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(anyhow::Error::msg)?;
    }
    let data = cms.get("hot").await?.data.unwrap_or_default();
    assert_eq!(
        data.len(),
        200,
        "patches without a resourceVersion were lost"
    );
    Ok(())
}

#[tokio::test]
async fn dry_run_and_delete_preconditions() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let c = cms.create(&dry, &configmap("ghost", &[("a", "1")])).await?;
    assert_eq!(c.metadata.name.as_deref(), Some("ghost"));
    expect_status(cms.get("ghost").await, 404, "NotFound");
    let real = cms
        .create(&PostParams::default(), &configmap("real", &[("a", "1")]))
        .await?;
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let p = cms
        .patch("real", &pp, &Patch::Merge(json!({"data": {"a": "2"}})))
        .await?;
    assert_eq!(p.data.unwrap()["a"], "2");
    let got = cms.get("real").await?;
    assert_eq!(got.data.unwrap()["a"], "1");
    assert_eq!(
        got.metadata.resource_version,
        real.metadata.resource_version
    );
    cms.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await?;
    assert!(cms.get_opt("real").await?.is_some());

    // Preconditions: a wrong uid or resourceVersion is a 409, the right ones delete.
    let wrong_uid = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    expect_status(cms.delete("real", &wrong_uid).await, 409, "Conflict");
    let wrong_rv = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    expect_status(cms.delete("real", &wrong_rv).await, 409, "Conflict");
    let right = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: real.metadata.uid.clone(),
            resource_version: real.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    cms.delete("real", &right).await?;
    expect_status(cms.get("real").await, 404, "NotFound");
    Ok(())
}
