//! `v1` ReplicationControllers: served as upstream serves them (discovery
//! with `rc` and category `all`, defaults, validation, strategic merge, the
//! scale subresource, kubectl's columns), and run by the built-in ReplicaSet
//! controller as upstream's ReplicaSet controller runs them.

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ReplicationController;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::{Plane, expect_status};

fn rc_json(name: &str, replicas: i32) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "example.com/app:1"}]}}}})
}

/// The API surface alone (`wasmlet apiserver`, no controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_controllers_are_served_as_upstream() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;

    // Discovery: the short name and the `all` category.
    let resources = plane.kubectl_ok(&["api-resources", "--api-group=", "-o", "wide"])?;
    let row = resources
        .lines()
        .find(|l| l.starts_with("replicationcontrollers "))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        cells.get(1) == Some(&"rc")
            && cells.get(4) == Some(&"ReplicationController")
            && cells.last() == Some(&"all"),
        "{resources}"
    );

    // Defaults: the selector and labels from the template.
    let path = plane.data_dir().join("rc.json");
    std::fs::write(&path, rc_json("web", 2).to_string())?;
    plane.kubectl_ok(&["create", "-f", path.to_str().unwrap()])?;
    let rcs: Api<ReplicationController> = Api::default_namespaced(client.clone());
    let rc = rcs.get("web").await?;
    let spec = rc.spec.clone().unwrap();
    assert_eq!(
        spec.selector,
        Some([("app".to_string(), "web".to_string())].into())
    );
    assert_eq!(rc.metadata.labels, spec.selector);
    assert_eq!(rc.metadata.generation, Some(1));

    // `kubectl get rc` columns, wide ones included.
    let wide = plane.kubectl_ok(&["get", "rc", "web", "-o", "wide"])?;
    let lines: Vec<Vec<&str>> = wide
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(lines[1][..4], ["web", "2", "0", "0"]);
    assert_eq!(lines[1][5..], ["main", "example.com/app:1", "app=web"]);

    // The scale subresource, through kubectl and kube-rs.
    plane.kubectl_ok(&["scale", "rc", "web", "--replicas=3"])?;
    let scale = rcs.get_scale("web").await?;
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(
        scale.status.and_then(|s| s.selector).as_deref(),
        Some("app=web")
    );
    assert_eq!(rcs.get("web").await?.metadata.generation, Some(2));

    // Strategic merge: a new container joins the list by name.
    let patched = rcs
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "side", "image": "example.com/side:1"}]}}}})),
        )
        .await?;
    let names: Vec<String> = patched
        .spec
        .unwrap()
        .template
        .unwrap()
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["side", "main"]);

    // Validation: a selector the template does not match is refused.
    let mut bad = rc_json("bad", 1);
    bad["spec"]["selector"] = json!({"app": "other"});
    let err = rcs
        .create(&PostParams::default(), &serde_json::from_value(bad)?)
        .await;
    let status = expect_status(err, 422, "Invalid");
    assert!(
        status
            .message
            .contains("spec.template.metadata.labels: Invalid value"),
        "{}",
        status.message
    );
    // `kubectl explain` reads its published schema.
    let explain = plane.kubectl_ok(&["explain", "rc.spec.selector"])?;
    assert!(
        explain.contains("KIND:       ReplicationController"),
        "{explain}"
    );
    // `kubectl get all` lists it (category `all`).
    let all = plane.kubectl_ok(&["get", "all"])?;
    assert!(all.contains("replicationcontroller/web"), "{all}");
    Ok(())
}
