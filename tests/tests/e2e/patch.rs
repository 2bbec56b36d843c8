//! PATCH: JSON merge patch, JSON patch (RFC 6902), strategic merge patch and
//! server-side apply, through the kube client's `Patch` variants.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::json;
use wasmlet_e2e::*;

#[tokio::test]
async fn merge_and_json_patch() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &configmap("c", &[("a", "1"), ("b", "2")]),
    )
    .await?;
    let pp = PatchParams::default();

    // Merge patch: set, replace, null deletes.
    let c = cms
        .patch(
            "c",
            &pp,
            &Patch::Merge(json!({"data": {"a": "10", "b": null, "c": "3"}})),
        )
        .await?;
    let data = c.data.unwrap();
    assert_eq!(data.get("a").map(String::as_str), Some("10"));
    assert!(!data.contains_key("b"));
    assert_eq!(data.get("c").map(String::as_str), Some("3"));

    // JSON patch: add, replace, remove, test.
    let ops: json_patch_ops::Ops = json_patch_ops::ops(json!([
        {"op": "add", "path": "/data/d", "value": "4"},
        {"op": "replace", "path": "/data/a", "value": "11"},
        {"op": "remove", "path": "/data/c"},
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
    ]));
    let c = cms.patch("c", &pp, &Patch::<()>::Json(ops)).await?;
    let data = c.data.unwrap();
    assert_eq!(data.get("a").map(String::as_str), Some("11"));
    assert_eq!(data.get("d").map(String::as_str), Some("4"));
    assert!(!data.contains_key("c"));
    assert_eq!(c.metadata.labels.unwrap()["x"], "y");

    // A failing `test` op rejects the whole patch and writes nothing.
    let before = cms.get("c").await?;
    let ops = json_patch_ops::ops(json!([
        {"op": "replace", "path": "/data/a", "value": "never"},
        {"op": "test", "path": "/data/a", "value": "something else"},
    ]));
    let s = api_error(cms.patch("c", &pp, &Patch::<()>::Json(ops)).await);
    assert!(
        s.code == 422 || s.code == 409 || s.code == 400,
        "unexpected {s:?}"
    );
    let after = cms.get("c").await?;
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data.unwrap()["a"], "11");
    // Removing a missing path is an error too.
    let ops = json_patch_ops::ops(json!([{"op": "remove", "path": "/data/nope"}]));
    api_error(cms.patch("c", &pp, &Patch::<()>::Json(ops)).await);

    // Merge patch on a custom resource.
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    widgets
        .create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "tags": ["a", "b"]}})),
        )
        .await?;
    let w = widgets
        .patch(
            "w",
            &pp,
            &Patch::Merge(json!({"spec": {"tags": ["c"], "color": "red"}})),
        )
        .await?;
    assert_eq!(
        w.data["spec"]["tags"],
        json!(["c"]),
        "merge patch replaces lists"
    );
    assert_eq!(w.data["spec"]["color"], "red");
    assert_eq!(w.data["spec"]["size"], 1);
    // Strategic merge patch is not supported for custom resources (upstream: 415).
    expect_status(
        widgets
            .patch("w", &pp, &Patch::Strategic(json!({"spec": {"size": 2}})))
            .await,
        415,
        "UnsupportedMediaType",
    );
    Ok(())
}

#[tokio::test]
async fn strategic_merge_patch_merges_lists_by_key() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    // Containers of a pod template (a pod's own spec is immutable, as upstream).
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let containers = |s: &StatefulSet| -> Vec<Container> {
        s.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers
            .clone()
    };
    let s: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "s"},
        "spec": {"selector": {"matchLabels": {"app": "s"}}, "serviceName": "s", "template": {
            "metadata": {"labels": {"app": "s"}},
            "spec": {"containers": [
                {"name": "a", "image": "img-a:1", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "img-b:1"},
            ]},
        }},
    }))?;
    sets.create(&PostParams::default(), &s).await?;
    let pp = PatchParams::default();

    // Containers merge by name: b's image changes, a stays, env merges by name.
    let s = sets
        .patch(
            "s",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "b", "image": "img-b:2"},
                {"name": "a", "env": [{"name": "Y", "value": "2"}]},
            ]}}}})),
        )
        .await?;
    let cs = containers(&s);
    assert_eq!(cs.len(), 2);
    let a = cs.iter().find(|c| c.name == "a").unwrap();
    let b = cs.iter().find(|c| c.name == "b").unwrap();
    assert_eq!(a.image.as_deref(), Some("img-a:1"));
    assert_eq!(b.image.as_deref(), Some("img-b:2"));
    let env: Vec<&str> = a
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(env.len(), 2, "env merged by name: {env:?}");
    assert!(env.contains(&"X") && env.contains(&"Y"));

    // $patch: delete removes one element by key.
    let s = sets
        .patch(
            "s",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}}}),
            ),
        )
        .await?;
    let names: Vec<String> = containers(&s).into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["a"]);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p")).await?;
    // Status conditions merge by type (through /status).
    pods.patch_status(
        "p",
        &pp,
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "Initialized", "status": "True"},
        ]}})),
    )
    .await?;
    let p = pods
        .patch_status(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await?;
    let conds = p.status.unwrap().conditions.unwrap();
    let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert!(
        conds.iter().any(|c| c.type_ == "Initialized"),
        "Initialized was lost: {conds:?}"
    );
    // The Pending pod's PodScheduled etc. are not our concern; nothing duplicated.
    let mut types: Vec<&str> = conds.iter().map(|c| c.type_.as_str()).collect();
    types.sort();
    types.dedup();
    assert_eq!(types.len(), conds.len());
    Ok(())
}

#[tokio::test]
async fn server_side_apply_owns_fields_per_manager() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let alice = PatchParams::apply("alice");
    let bob = PatchParams::apply("bob");

    // Apply creates.
    let c = cms
        .patch(
            "c",
            &alice,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "shared": "alice"}})),
        )
        .await?;
    assert_eq!(c.data.as_ref().unwrap()["a"], "1");
    let mf = c.metadata.managed_fields.clone().unwrap();
    let alice_entry = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("alice"))
        .expect("alice manages fields");
    assert_eq!(alice_entry.operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_string(&alice_entry.fields_v1)?;
    assert!(
        fields.contains("f:a") && fields.contains("f:shared"),
        "{fields}"
    );

    // Bob applies a field of his own: both managers listed, alice's field kept.
    let c = cms
        .patch("c", &bob, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}})))
        .await?;
    let data = c.data.clone().unwrap();
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("1", "2"));
    let managers: Vec<String> = c
        .metadata
        .managed_fields
        .unwrap()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.contains(&"alice".into()) && managers.contains(&"bob".into()),
        "{managers:?}"
    );

    // Bob applies a different value for alice's field: 409 Conflict naming it.
    let s = expect_status(
        cms.patch(
            "c",
            &bob,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2", "shared": "bob"}})),
        )
        .await,
        409,
        "Conflict",
    );
    assert!(
        s.message.contains("alice"),
        "conflict names the owner: {}",
        s.message
    );
    assert!(
        s.details
            .unwrap()
            .causes
            .iter()
            .any(|c| c.field.contains("shared"))
    );
    assert_eq!(cms.get("c").await?.data.unwrap()["shared"], "alice");

    // force=true takes the field.
    let c = cms
        .patch(
            "c",
            &bob.clone().force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2", "shared": "bob"}})),
        )
        .await?;
    assert_eq!(c.data.as_ref().unwrap()["shared"], "bob");
    let mf = c.metadata.managed_fields.unwrap();
    let alice_fields = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("alice"))
        .map(|m| serde_json::to_string(&m.fields_v1).unwrap())
        .unwrap_or_default();
    assert!(
        !alice_fields.contains("f:shared"),
        "alice still owns shared: {alice_fields}"
    );
    let bob_fields = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("bob"))
        .map(|m| serde_json::to_string(&m.fields_v1).unwrap())
        .unwrap();
    assert!(bob_fields.contains("f:shared"));

    // Alice re-applies without `a`: the field she alone owned goes away.
    let c = cms
        .patch("c", &alice, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}})))
        .await?;
    let data = c.data.unwrap_or_default();
    assert!(
        !data.contains_key("a"),
        "alice's dropped field remains: {data:?}"
    );
    assert_eq!(data.get("b").map(String::as_str), Some("2"));
    assert_eq!(data.get("shared").map(String::as_str), Some("bob"));

    // An update (non-apply) by another manager is recorded as Update.
    let c = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("carol".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"z": "9"}})),
        )
        .await?;
    let carol = c
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("carol"))
        .unwrap();
    assert_eq!(carol.operation.as_deref(), Some("Update"));

    // Apply on a custom resource's status through /status.
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w = widgets
        .patch(
            "w",
            &alice,
            &Patch::Apply(json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}})),
        )
        .await?;
    assert_eq!(w.data["spec"]["size"], 3);
    let w = widgets
        .patch_status(
            "w",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"phase": "Up"}})),
        )
        .await?;
    assert_eq!(w.data["status"]["phase"], "Up");
    assert_eq!(w.data["spec"]["size"], 3);
    let sw = w
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("status-writer"))
        .unwrap();
    assert_eq!(sw.subresource.as_deref(), Some("status"));
    Ok(())
}

/// JSON patch documents for `Patch::Json`.
mod json_patch_ops {
    pub type Ops = json_patch::Patch;
    pub fn ops(v: serde_json::Value) -> Ops {
        serde_json::from_value(v).expect("a JSON patch")
    }
}
