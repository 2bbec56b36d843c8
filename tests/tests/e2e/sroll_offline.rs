//! The StatefulsetRollout operator is fast and offline once a rollout is
//! done, and self-enqueued: a finished rollout makes no call outside the
//! host's caches (no Consul, no chat, no callback, no Secret read), and pod
//! changes do not wake it (issue 45, point 4). Counted where a user would
//! count them: the fake chat/Consul/callback server's requests, the plane's
//! `apiserver_request_total` for Secret GETs, and the host's call counter.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmlet_e2e::sroll::{self, FakeServer, rollout, template, wait_phase, wait_status};
use wasmlet_e2e::workload_plane::{self, is_ready};
use wasmlet_e2e::{Plane, eventually};

use super::sroll::{chat_secret, plane, pods_of};

/// Everything the operator sent outside the host's caches so far: Consul
/// calls, chat calls, callback POSTs and Secret GETs the plane served.
async fn external(server: &FakeServer, client: &kube::Client) -> Result<[f64; 4]> {
    let secrets = workload_plane::api_requests(client, "GET", "secrets").await?;
    let s = server.state.lock().unwrap();
    Ok([
        s.consul_calls as f64,
        s.chat.len() as f64,
        s.callbacks.len() as f64,
        secrets,
    ])
}

async fn calls(plane: &Plane) -> Result<f64> {
    workload_plane::plugin_calls(plane, "sroll-reconciler").await
}

/// The external calls and guest calls once they stop changing (two readings
/// 2.5 s apart, past the operator's 2 s poll, agree), within 60 s.
async fn settled(
    server: &FakeServer,
    client: &kube::Client,
    plane: &Plane,
) -> Result<([f64; 4], f64)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = (external(server, client).await?, calls(plane).await?);
    loop {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let now = (external(server, client).await?, calls(plane).await?);
        if now == last {
            return Ok(now);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the finished rollout was still working after 60 s: {now:?}"
        );
        last = now;
    }
}

/// Pod churn a finished rollout must sleep through: a label on every pod
/// (twice), then one pod deleted and recreated by the StatefulSet
/// controller until it is Ready again.
async fn churn_pods(client: &kube::Client, app: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for round in 0..2 {
        for i in 0..4 {
            let patch = json!({"metadata": {"labels": {"churn": round.to_string()}}});
            pods.patch(
                &format!("{app}-{i}"),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        }
    }
    let victim = format!("{app}-3");
    let old_uid = pods.get(&victim).await?.metadata.uid;
    pods.delete(&victim, &DeleteParams::default()).await?;
    eventually(
        Duration::from_secs(120),
        "the pod back and Ready",
        || async {
            let p = pods.get(&victim).await.ok()?;
            (p.metadata.uid != old_uid && is_ready(&p)).then_some(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_rollout_is_offline_and_pod_changes_do_not_wake_it() -> Result<()> {
    let server = FakeServer::start().await?;
    server.state.lock().unwrap().passing.insert("api".into(), 4);
    let (plane, client) = plane(&[]).await?;
    chat_secret(&client, "xoxb-test").await?;
    let api = sroll::api(&client);
    let url = server.url.clone();
    api.create(
        &PostParams::default(),
        &rollout("api", 100, template("api", "1"), sroll::integrations(&url))?,
    )
    .await?;
    wait_phase(&plane, &api, "api", "RolloutDone").await?;
    wait_status(
        &plane,
        &api,
        "api",
        "the callback",
        Duration::from_secs(60),
        |s| s["lastCallbackStageId"] == "stage-1",
    )
    .await?;
    ensure!(
        pods_of(&client, "api").await?.iter().all(is_ready),
        "all pods Ready"
    );
    // The last word (chat, callback) is out: wait until the final pass's
    // writes are in, two readings a poll (2 s) apart agreeing, on however
    // loaded a machine.
    let (before, calls_before) = settled(&server, &client, &plane).await?;
    ensure!(before[0] >= 1.0 && before[1] >= 1.0 && before[2] == 1.0 && before[3] >= 1.0);

    churn_pods(&client, "api").await?;
    // Longer than the operator's own poll (2 s): a woken pass would show.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = external(&server, &client).await?;
    let calls_after = calls(&plane).await?;
    assert_eq!(
        after, before,
        "[Consul, chat, callback, Secret GETs] after pod churn of a finished rollout"
    );
    assert_eq!(
        calls_after, calls_before,
        "reconcile calls of the operator while pods of a finished rollout changed"
    );
    let st = wait_phase(&plane, &api, "api", "RolloutDone").await?;
    assert_eq!(st["updatedReplicas"], 4);
    Ok(())
}
