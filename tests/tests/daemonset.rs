//! `apps/v1` DaemonSets: served as upstream serves them (discovery with `ds`
//! and category `all`, defaults, validation with an immutable selector,
//! strategic merge, the status subresource, kubectl's columns).

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::{Plane, expect_status};

fn ds_json(name: &str) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": {"kubernetes.io/os": "wasi"},
                "containers": [{"name": "main", "image": "example.com/agent:1"}]}}}})
}

/// The API surface alone (`wasmlet apiserver`, no controller).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonsets_are_served_as_upstream() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;

    let resources = plane.kubectl_ok(&["api-resources", "--api-group=apps", "-o", "wide"])?;
    let row = resources
        .lines()
        .find(|l| l.starts_with("daemonsets "))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        cells.get(1) == Some(&"ds")
            && cells.get(4) == Some(&"DaemonSet")
            && cells.last() == Some(&"all"),
        "{resources}"
    );

    let path = plane.data_dir().join("ds.json");
    std::fs::write(&path, ds_json("agent").to_string())?;
    plane.kubectl_ok(&["apply", "-f", path.to_str().unwrap()])?;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let ds = sets.get("agent").await?;
    let spec = ds.spec.clone().unwrap();
    let strategy = spec.update_strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = serde_json::to_value(strategy.rolling_update.unwrap())?;
    assert_eq!(rolling, json!({"maxUnavailable": 1, "maxSurge": 0}));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(ds.metadata.generation, Some(1));

    // A second apply of the same manifest changes nothing.
    plane.kubectl_ok(&["apply", "-f", path.to_str().unwrap()])?;
    let again = sets.get("agent").await?;
    assert_eq!(
        again.metadata.resource_version,
        ds.metadata.resource_version
    );

    // `kubectl get ds` columns, wide ones included.
    let wide = plane.kubectl_ok(&["get", "ds", "agent", "-o", "wide"])?;
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
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(
        lines[1][..7],
        ["agent", "0", "0", "0", "0", "0", "kubernetes.io/os=wasi"]
    );
    assert_eq!(lines[1][8..], ["main", "example.com/agent:1", "app=agent"]);

    // The status subresource: a status write keeps the spec, a main write
    // keeps the status.
    let status = json!({"status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2,
        "numberReady": 1, "numberMisscheduled": 0, "observedGeneration": 1}});
    sets.patch_status("agent", &PatchParams::default(), &Patch::Merge(status))
        .await?;
    let got = sets.get("agent").await?.status.unwrap();
    assert_eq!((got.desired_number_scheduled, got.number_ready), (2, 1));
    let row = plane.kubectl_ok(&["get", "ds", "agent", "--no-headers"])?;
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>()[..4],
        ["agent", "2", "2", "1"]
    );

    // Strategic merge: `kubectl set image` changes one container in place.
    plane.kubectl_ok(&["set", "image", "ds/agent", "main=example.com/agent:2"])?;
    let ds = sets.get("agent").await?;
    let containers = ds.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("example.com/agent:2"));
    assert_eq!(ds.metadata.generation, Some(2));
    assert_eq!(ds.status.map(|s| s.number_ready), Some(1));

    // The selector is immutable, and must match the template.
    let err = sets
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"matchLabels": {"app": "x"}},
                "template": {"metadata": {"labels": {"app": "x"}}}}})),
        )
        .await;
    let s = expect_status(err, 422, "Invalid");
    assert!(
        s.message.contains("spec.selector: Invalid value")
            && s.message.contains("field is immutable"),
        "{}",
        s.message
    );
    let mut bad = ds_json("bad");
    bad["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
    let err = sets
        .create(&PostParams::default(), &serde_json::from_value(bad)?)
        .await;
    let s = expect_status(err, 422, "Invalid");
    assert!(
        s.message.contains("does not match template"),
        "{}",
        s.message
    );

    let explain = plane.kubectl_ok(&["explain", "ds.spec.updateStrategy"])?;
    assert!(explain.contains("KIND:       DaemonSet"), "{explain}");
    let all = plane.kubectl_ok(&["get", "all"])?;
    assert!(all.contains("daemonset.apps/agent"), "{all}");
    Ok(())
}
