//! NodeRestriction (issue 8): the node agent's own identity
//! (`DIR/kubeconfig-node`, `system:node:n1`) tries to act on other nodes,
//! promote itself with labels, shed its taints, take another node's Lease
//! and rewrite its pods, and is refused as upstream's admission plugin
//! refuses a kubelet.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use wasmlet_e2e::{Plane, create_json as create, eventually, expect_status};

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_only_itself_and_the_status_of_its_pods() -> Result<()> {
    let plane = Plane::start_up(&["--node-name", "n1"]).await?;
    let admin = plane.client().await?;
    let node = plane.identity_client("kubeconfig-node").await?;
    let admin_nodes = Api::<Node>::all(admin.clone());
    eventually(Duration::from_secs(30), "Node n1 registered", || async {
        admin_nodes.get_opt("n1").await.ok().flatten()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let nodes = Api::<Node>::all(node.clone());
    let pp = PatchParams::default();

    // Registering a Node of another name.
    let s = expect_status(
        create(&nodes, json!({"metadata": {"name": "n3"}})).await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "nodes \"n3\" is forbidden: node \"n1\" is not allowed to modify node \"n3\""
    );
    expect_status(admin_nodes.get("n3").await, 404, "NotFound");
    // Another node's object.
    create(&admin_nodes, json!({"metadata": {"name": "n2"}})).await?;
    let label = json!({"metadata": {"labels": {"x": "y"}}});
    expect_status(
        nodes.patch("n2", &pp, &merge(label.clone())).await,
        403,
        "Forbidden",
    );
    expect_status(
        nodes.delete("n2", &DeleteParams::default()).await,
        403,
        "Forbidden",
    );

    // Promoting itself, or claiming labels reserved for admins.
    for key in [
        "node-role.kubernetes.io/control-plane",
        "node-restriction.kubernetes.io/dedicated",
    ] {
        let s = expect_status(
            nodes
                .patch(
                    "n1",
                    &pp,
                    &merge(json!({"metadata": {"labels": {key: "true"}}})),
                )
                .await,
            403,
            "Forbidden",
        );
        assert_eq!(
            s.message,
            format!(
                "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify labels: {key}"
            )
        );
    }
    // Labels of its own are fine.
    nodes.patch("n1", &pp, &merge(label)).await?;
    // Shedding the taints that keep other workloads off it.
    let s = expect_status(
        nodes
            .patch("n1", &pp, &merge(json!({"spec": {"taints": null}})))
            .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
    );
    // Its status it keeps writing.
    nodes
        .patch_status(
            "n1",
            &pp,
            &merge(json!({"status": {"nodeInfo": {"osImage": "wasmlet"}}})),
        )
        .await?;

    // Another node's heartbeat.
    let s = expect_status(
        create(
            &Api::<Lease>::namespaced(node.clone(), "kube-node-lease"),
            json!({"metadata": {"name": "n2"}, "spec": {"holderIdentity": "n2"}}),
        )
        .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node"
    );

    // Pods: the status of its own, nothing else.
    let admin_pods = Api::<Pod>::namespaced(admin.clone(), "default");
    for (name, on) in [("mine", "n1"), ("theirs", "n2")] {
        create(
            &admin_pods,
            json!({"metadata": {"name": name},
                   "spec": {"nodeName": on, "containers": [{"name": "m", "image": "file:///nonexistent.wasm"}]}}),
        )
        .await?;
    }
    let pods = Api::<Pod>::namespaced(node.clone(), "default");
    let status = merge(json!({"status": {"message": "seen by n1"}}));
    pods.patch_status("mine", &pp, &status).await?;
    expect_status(
        pods.patch_status("theirs", &pp, &status).await,
        403,
        "Forbidden",
    );
    let s = expect_status(
        pods.patch(
            "mine",
            &pp,
            &merge(json!({"metadata": {"labels": {"app": "db"}}})),
        )
        .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods \"mine\" is forbidden: node \"n1\" can only update the status of pods, not the pods themselves"
    );
    expect_status(
        create(
            &pods,
            json!({"metadata": {"name": "new"},
                   "spec": {"nodeName": "n2", "containers": [{"name": "m", "image": "x"}]}}),
        )
        .await,
        403,
        "Forbidden",
    );
    // The agent itself was never refused.
    let log = plane.log();
    assert!(
        !log.contains("is forbidden"),
        "the agent was refused: {log}"
    );
    Ok(())
}
