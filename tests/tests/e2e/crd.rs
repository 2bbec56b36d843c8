//! CustomResourceDefinitions: served at once, namespaced and cluster-scoped,
//! two versions over one stored object, status and scale subresources, schema
//! validation with field-naming causes, defaults, and deletion.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::json;
use std::time::Duration;
use wasmlet_e2e::*;

fn widget(name: &str, spec: serde_json::Value) -> DynamicObject {
    dynamic(
        json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}),
    )
}

#[tokio::test]
async fn crds_are_served_at_once_in_both_scopes_and_versions() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    // Created and used with no wait in between.
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w = widgets
        .create(
            &PostParams::default(),
            &widget("w", json!({"size": 2, "color": "red"})),
        )
        .await?;
    assert_eq!(w.types.as_ref().unwrap().api_version, "test.wasmlet.dev/v1");
    // Discovery lists it.
    let (code, body) = plane.raw("GET", "/apis/test.wasmlet.dev/v1", None, None)?;
    assert_eq!(code, 200);
    let res = body["resources"].as_array().unwrap();
    assert!(
        res.iter()
            .any(|r| r["name"] == "widgets" && r["namespaced"] == true && r["kind"] == "Widget"),
        "{body}"
    );
    assert!(res.iter().any(|r| r["name"] == "widgets/status"));
    assert!(res.iter().any(|r| r["name"] == "widgets/scale"));

    // The same object at v1beta1.
    let beta = widget_resource("widgets", "Widget", "v1beta1");
    let widgets_beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &beta);
    let b = widgets_beta.get("w").await?;
    assert_eq!(
        b.types.as_ref().unwrap().api_version,
        "test.wasmlet.dev/v1beta1"
    );
    assert_eq!(b.metadata.uid, w.metadata.uid);
    assert_eq!(b.data["spec"], w.data["spec"]);
    // Written at v1beta1, read at v1.
    widgets_beta
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "blue"}})),
        )
        .await?;
    assert_eq!(widgets.get("w").await?.data["spec"]["color"], "blue");
    let created_beta = widgets_beta
        .create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": "test.wasmlet.dev/v1beta1", "kind": "Widget", "metadata": {"name": "wb"}, "spec": {"size": 1}})),
        )
        .await?;
    assert_eq!(
        created_beta.types.unwrap().api_version,
        "test.wasmlet.dev/v1beta1"
    );
    assert_eq!(
        widgets.get("wb").await?.types.unwrap().api_version,
        "test.wasmlet.dev/v1"
    );
    let list = widgets_beta.list(&Default::default()).await?;
    assert_eq!(list.items.len(), 2);

    // Cluster-scoped.
    install_crd(&client, widget_crd("gadgets", "Gadget", "Cluster")).await?;
    let gar = widget_resource("gadgets", "Gadget", "v1");
    let gadgets: Api<DynamicObject> = Api::all_with(client.clone(), &gar);
    let g = gadgets
        .create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": 1}})),
        )
        .await?;
    assert!(
        g.metadata.namespace.is_none(),
        "a cluster-scoped object got a namespace"
    );
    assert_eq!(gadgets.list(&Default::default()).await?.items.len(), 1);
    // A namespaced path for a cluster-scoped kind is not found.
    let (code, _) = plane.raw(
        "GET",
        "/apis/test.wasmlet.dev/v1/namespaces/default/gadgets",
        None,
        None,
    )?;
    assert_eq!(code, 404);

    // The CRD is Established by the server.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually(
        Duration::from_secs(60),
        "the CRD to be Established",
        || async {
            let c = crds.get("widgets.test.wasmlet.dev").await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn scale_subresource() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    widgets
        .create(
            &PostParams::default(),
            &widget("w", json!({"size": 1, "replicas": 2})),
        )
        .await?;
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "selector": "app=w"}})),
        )
        .await?;
    let s = widgets.get_scale("w").await?;
    assert_eq!(s.spec.unwrap().replicas, Some(2));
    let st = s.status.unwrap();
    assert_eq!(st.replicas, 1);
    assert_eq!(st.selector.as_deref(), Some("app=w"));
    let s = widgets
        .patch_scale(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await?;
    assert_eq!(s.spec.unwrap().replicas, Some(5));
    let w = widgets.get("w").await?;
    assert_eq!(w.data["spec"]["replicas"], 5);
    assert_eq!(w.metadata.generation, Some(2));
    // Replace with a stale resourceVersion: 409.
    let mut scale = widgets.get_scale("w").await?;
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 3}})),
        )
        .await?;
    scale.spec.as_mut().unwrap().replicas = Some(7);
    expect_status(
        widgets
            .replace_scale("w", &PostParams::default(), &scale)
            .await,
        409,
        "Conflict",
    );
    Ok(())
}

#[tokio::test]
async fn schema_validation_names_the_field_and_defaults_apply() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let cases = [
        (json!({"size": "big"}), "spec.size", "FieldValueTypeInvalid"),
        (json!({"color": "red"}), "spec.size", "FieldValueRequired"),
        (
            json!({"size": 1, "color": "purple"}),
            "spec.color",
            "FieldValueNotSupported",
        ),
        (json!({"size": 11}), "spec.size", "FieldValueInvalid"),
        (json!({"size": 0}), "spec.size", "FieldValueInvalid"),
        (
            json!({"size": 1, "tags": [1]}),
            "spec.tags[0]",
            "FieldValueTypeInvalid",
        ),
    ];
    for (i, (spec, field, reason)) in cases.into_iter().enumerate() {
        let s = expect_status(
            widgets
                .create(
                    &PostParams::default(),
                    &widget(&format!("bad-{i}"), spec.clone()),
                )
                .await,
            422,
            "Invalid",
        );
        let causes = s.details.as_ref().unwrap().causes.clone();
        assert!(
            causes
                .iter()
                .any(|c| c.field == field && c.reason == reason),
            "spec {spec}: expected {reason} on {field}, got {causes:?}"
        );
        assert!(
            s.message.contains(field),
            "the message names {field}: {}",
            s.message
        );
    }
    assert!(
        widgets.list(&Default::default()).await?.items.is_empty(),
        "an invalid object was stored"
    );

    // Defaults: `mode` filled in on create.
    let w = widgets
        .create(&PostParams::default(), &widget("ok", json!({"size": 10})))
        .await?;
    assert_eq!(w.data["spec"]["mode"], "fast");
    // An explicit value is kept.
    let w = widgets
        .create(
            &PostParams::default(),
            &widget("slow", json!({"size": 1, "mode": "slow"})),
        )
        .await?;
    assert_eq!(w.data["spec"]["mode"], "slow");
    // Updates are validated too.
    expect_status(
        widgets
            .patch(
                "ok",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": 100}})),
            )
            .await,
        422,
        "Invalid",
    );
    assert_eq!(widgets.get("ok").await?.data["spec"]["size"], 10);
    // Unknown fields are pruned (and rejected with fieldValidation=Strict).
    let w = widgets
        .create(
            &PostParams::default(),
            &widget("pruned", json!({"size": 1, "bogus": true})),
        )
        .await?;
    assert!(w.data["spec"].get("bogus").is_none());
    let body = serde_json::to_vec(&widget("strict", json!({"size": 1, "bogus": true})))?;
    let (code, s) = plane.raw(
        "POST",
        "/apis/test.wasmlet.dev/v1/namespaces/default/widgets?fieldValidation=Strict",
        Some("application/json"),
        Some(&body),
    )?;
    assert_eq!(
        (code, s["reason"].as_str()),
        (400, Some("BadRequest")),
        "{s}"
    );
    assert!(s["message"].as_str().unwrap().contains("bogus"), "{s}");
    Ok(())
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let ar = install_widgets(&client).await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    for i in 0..3 {
        widgets
            .create(
                &PostParams::default(),
                &widget(&format!("w{i}"), json!({"size": 1})),
            )
            .await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.test.wasmlet.dev", &DeleteParams::default())
        .await?;
    eventually(Duration::from_secs(60), "the CRD to go", || async {
        crds.get_opt("widgets.test.wasmlet.dev")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    let (code, _) = plane.raw(
        "GET",
        "/apis/test.wasmlet.dev/v1/namespaces/default/widgets",
        None,
        None,
    )?;
    assert_eq!(code, 404);
    // Re-created: served again, empty.
    install_widgets(&client).await?;
    assert!(
        widgets.list(&Default::default()).await?.items.is_empty(),
        "objects of the deleted CRD came back"
    );
    Ok(())
}
