//! The StatefulsetRollout operator (guests/sroll-reconciler) end to end:
//! `wasmlet up` with the built-in StatefulSet and disruption controllers, the
//! scheduler and wasi-runner pods that really run; the operator loaded from
//! target/plugins with the CRD it ships. Everything it does goes through APIs
//! a real cluster serves (StatefulSet, PodDisruptionBudget, Eviction).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use wasmlet_e2e::sroll::{
    self, FakeServer, edit, failing_template, max_unavailable, rollout, template, wait_phase,
    wait_status,
};
use wasmlet_e2e::workload_plane::{self, record};
use wasmlet_e2e::{Plane, eventually, free_port, install_plugin_with};

const REVISION: &str = "controller-revision-hash";

/// `wasmlet up` with the controllers a rollout runs against, and the operator.
pub(crate) async fn plane(extra: &[&str]) -> Result<(Plane, kube::Client)> {
    let (plane, client) = workload_plane::start_with(
        "scheduler,wasi-runner,statefulset-controller,disruption-controller",
        extra,
    )
    .await?;
    // The shipped manifest allows the local Consul port only; the fake chat,
    // Consul and callback server listens on another loopback port.
    install_plugin_with(&plane.plugin_dir(), "sroll-reconciler", |toml| {
        let shipped = r#"http-hosts = ["slack.com", "127.0.0.1:8500"]"#;
        assert!(toml.contains(shipped), "the shipped http-hosts changed");
        toml.replace(shipped, r#"http-hosts = ["slack.com", "127.0.0.1"]"#)
    })?;
    sroll::wait_served(&client).await?;
    Ok((plane, client))
}

pub(crate) async fn pods_of(client: &kube::Client, app: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items)
}

fn revision(p: &Pod) -> String {
    workload_plane::label(p, REVISION)
}

/// The deletion times (as the API server stamped them) of the pods of
/// `revision` in `history`, by pod name.
fn deletions(history: &[(bool, Pod)], revision_: &str) -> Vec<(String, i64)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (_, p) in history {
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(t) = &p.metadata.deletion_timestamp
            && revision(p) == revision_
            && seen.insert(name.clone())
        {
            out.push((name, t.0.as_second()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_by_percent_in_budgeted_batches_pauses_resumes_and_rolls_back() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let api = sroll::api(&client);
    let interval = 5;
    api.create(
        &PostParams::default(),
        &rollout(
            "web",
            100,
            template("web", "1"),
            json!({"minPodEvictionIntervalSeconds": interval}),
        )?,
    )
    .await?;
    // A fresh set comes up entirely on its only revision.
    let st = wait_phase(&plane, &api, "web", "RolloutDone").await?;
    assert_eq!(st["percentDeployed"], 100);
    assert_eq!(st["readyReplicas"], 4);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb = pdbs.get("web-sroll").await?;
    assert_eq!(
        serde_json::to_value(&pdb.spec)?["maxUnavailable"],
        2,
        "the budget comes from maxUnavailable"
    );
    let v1 = revision(&pods_of(&client, "web").await?[0]);

    let history = record(Api::<Pod>::namespaced(client.clone(), "default")).await?;
    // Version 2 to 50 %: two pods, in one batch.
    edit(
        &api,
        "web",
        json!({"percent": 50, "statefulset": {"spec": {"template": template("web", "2")}}}),
    )
    .await?;
    let st = wait_phase(&plane, &api, "web", "RolloutDone").await?;
    assert_eq!(st["percentDeployed"], 50);
    assert_eq!(st["updatedReplicas"], 2);
    let pods = pods_of(&client, "web").await?;
    let v2: BTreeSet<String> = pods
        .iter()
        .filter(|p| revision(p) != v1)
        .map(revision)
        .collect();
    ensure!(v2.len() == 1, "one new revision: {v2:?}");
    let v2 = v2.into_iter().next().unwrap();
    let on_v2: BTreeSet<String> = pods
        .iter()
        .filter(|p| revision(p) == v2)
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(on_v2, BTreeSet::from(["web-2".into(), "web-3".into()]));
    // The target beside the deployed share, the pods with their total,
    // whether it is paused.
    let out = plane.kubectl_ok(&["get", "sroll", "web"])?;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    ensure!(
        lines.len() == 2
            && lines[0]
                == [
                    "NAME", "PHASE", "TARGET", "DEPLOYED", "REPLICAS", "UPDATED", "READY",
                    "PAUSED", "AGE"
                ]
            && lines[1][..8] == ["web", "RolloutDone", "50", "50", "4", "2", "4", "false"],
        "kubectl get sroll: {out}"
    );

    // 100 %: the other two, only after the interval since the first batch,
    // followed by `kubectl get sroll -w` as a person would.
    let mut watch = std::process::Command::new(wasmlet_e2e::kubectl_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .args(["get", "sroll", "web", "-w", "--request-timeout=300s"])
        .env("HOME", plane.data_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let (tx, shown) = std::sync::mpsc::channel::<Vec<String>>();
    let stdout = watch.stdout.take().context("kubectl's stdout")?;
    std::thread::spawn(move || {
        use std::io::BufRead;
        // Columns: NAME PHASE TARGET DEPLOYED REPLICAS UPDATED READY PAUSED AGE.
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let row = line.split_whitespace().map(str::to_string).collect();
            if tx.send(row).is_err() {
                break;
            }
        }
    });
    // Its first row (the set as it is now) means its watch is up: it shows
    // every change the edit makes, however slowly kubectl started (started
    // after the rollout, it would show only the end).
    let is_row = |r: &Vec<String>| r.first().map(String::as_str) == Some("web") && r.len() > 3;
    let mut rows = Vec::new();
    while rows.is_empty() {
        let r = shown
            .recv_timeout(Duration::from_secs(60))
            .context("kubectl get sroll -w printed no row in 60 s")?;
        if is_row(&r) {
            rows.push(r);
        }
    }
    edit(&api, "web", json!({"percent": 100})).await?;
    let st = wait_phase(&plane, &api, "web", "RolloutDone").await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let done =
        |r: &Vec<String>| r[1..].starts_with(&["RolloutDone".into(), "100".into(), "100".into()]);
    while !rows.last().is_some_and(done) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match shown.recv_timeout(left) {
            Ok(r) if is_row(&r) => rows.push(r),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = watch.kill();
    ensure!(
        rows.iter().any(|r| r[1] != "RolloutDone") && rows.last().is_some_and(done),
        "kubectl get sroll -w showed no progress to 100 %: {rows:?}"
    );
    assert_eq!(st["percentDeployed"], 100);
    let snap = history.snapshot();
    let del = deletions(&snap, &v1);
    ensure!(del.len() == 4, "each v1 pod evicted once: {del:?}");
    let first = del
        .iter()
        .filter(|d| d.0 == "web-2" || d.0 == "web-3")
        .map(|d| d.1)
        .max()
        .unwrap();
    let second = del
        .iter()
        .filter(|d| d.0 == "web-0" || d.0 == "web-1")
        .map(|d| d.1)
        .min()
        .unwrap();
    // deletionTimestamp has one-second resolution.
    ensure!(
        second - first >= interval - 1,
        "batches {first} and {second} closer than {interval}s: {del:?}"
    );
    let worst = max_unavailable(&snap, "web", 4);
    ensure!(worst <= 2, "{worst} pods unavailable at once (budget 2)");

    // Version 3, paused after the first batch: no more evictions while paused.
    edit(
        &api,
        "web",
        json!({"statefulset": {"spec": {"template": template("web", "3")}}}),
    )
    .await?;
    // The last batch of the v2 rollout was web-1 and web-0; v3's first is web-3 and web-2.
    wait_status(
        &plane,
        &api,
        "web",
        "the first v3 batch",
        Duration::from_secs(120),
        |s| s["lastEvicted"] == json!(["web-3", "web-2"]),
    )
    .await?;
    edit(&api, "web", json!({"pauseRequested": true})).await?;
    let st = wait_status(
        &plane,
        &api,
        "web",
        "paused with every pod ready",
        Duration::from_secs(120),
        |s| s["phase"] == "Paused" && s["readyReplicas"] == 4,
    )
    .await?;
    assert_eq!(st["paused"], true);
    assert_eq!(st["updatedReplicas"], 2, "no eviction while paused");
    edit(&api, "web", json!({"pauseRequested": false})).await?;
    let st = wait_phase(&plane, &api, "web", "RolloutDone").await?;
    assert_eq!(st["paused"], false);
    assert_eq!(st["updatedReplicas"], 4);

    // Roll back by restoring version 2: every pod returns to v2's revision.
    edit(
        &api,
        "web",
        json!({"statefulset": {"spec": {"template": template("web", "2")}}}),
    )
    .await?;
    wait_phase(&plane, &api, "web", "RolloutDone").await?;
    let revs: BTreeSet<String> = pods_of(&client, "web")
        .await?
        .iter()
        .map(revision)
        .collect();
    assert_eq!(
        revs,
        BTreeSet::from([v2]),
        "rolled back to version 2's revision"
    );
    let worst = max_unavailable(&history.snapshot(), "web", 4);
    ensure!(worst <= 2, "{worst} pods unavailable at once (budget 2)");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollout_is_retried_with_a_new_identity() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let api = sroll::api(&client);
    api.create(
        &PostParams::default(),
        &rollout(
            "db",
            100,
            template("db", "1"),
            json!({"rolloutIdentity": "r1"}),
        )?,
    )
    .await?;
    wait_phase(&plane, &api, "db", "RolloutDone").await?;
    edit(
        &api,
        "db",
        json!({"statefulset": {"spec": {"template": failing_template("db")}}}),
    )
    .await?;
    let st = wait_phase(&plane, &api, "db", "RolloutFailed").await?;
    ensure!(
        st["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("failing"),
        "reason: {st}"
    );
    let failed: Vec<String> = pods_of(&client, "db").await?.iter().map(revision).collect();
    // Final: the other old pods stay.
    let st = wait_status(
        &plane,
        &api,
        "db",
        "still failed",
        Duration::from_secs(30),
        |s| s["phase"] == "RolloutFailed",
    )
    .await?;
    assert_eq!(
        st["updatedReplicas"], 2,
        "the failed batch only: {failed:?}"
    );
    // The image is fixed, and a new identity retries.
    edit(
        &api,
        "db",
        json!({"rolloutIdentity": "r2",
        "statefulset": {"spec": {"template": template("db", "2")}}}),
    )
    .await?;
    let st = wait_phase(&plane, &api, "db", "RolloutDone").await?;
    assert_eq!(st["rolloutIdentity"], "r2");
    assert_eq!(st["updatedReplicas"], 4);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_rollout_resumes_without_evicting_twice() -> Result<()> {
    // A fixed port: the same clients (and the pod watch) work after the restart.
    let port = free_port().to_string();
    let (mut plane, client) = plane(&["--port", &port]).await?;
    let api = sroll::api(&client);
    api.create(
        &PostParams::default(),
        &rollout(
            "kv",
            100,
            template("kv", "1"),
            json!({"minPodEvictionIntervalSeconds": 3}),
        )?,
    )
    .await?;
    wait_phase(&plane, &api, "kv", "RolloutDone").await?;
    let v1 = revision(&pods_of(&client, "kv").await?[0]);
    let history = record(Api::<Pod>::namespaced(client.clone(), "default")).await?;
    edit(
        &api,
        "kv",
        json!({"statefulset": {"spec": {"template": template("kv", "2")}}}),
    )
    .await?;
    wait_status(
        &plane,
        &api,
        "kv",
        "the first batch",
        Duration::from_secs(120),
        |s| !s["lastEvicted"].as_array().is_none_or(Vec::is_empty) && s["phase"] != "RolloutDone",
    )
    .await?;
    // The budget held up to the kill. (The host is also the node: its pods
    // restart with it, so availability across the restart is not the operator's.)
    let before = history.snapshot();
    let worst = max_unavailable(&before, "kv", 4);
    ensure!(worst <= 2, "{worst} pods unavailable at once (budget 2)");
    plane.kill9();
    plane.spawn().await?;
    let st = wait_phase(&plane, &api, "kv", "RolloutDone").await?;
    assert_eq!(st["updatedReplicas"], 4);
    // Each ordinal was replaced exactly once (its v1 pod, then one new pod).
    let snap = history.snapshot();
    for i in 0..4 {
        let name = format!("kv-{i}");
        let uids: BTreeSet<String> = snap
            .iter()
            .filter(|(_, p)| p.metadata.name.as_deref() == Some(name.as_str()))
            .filter_map(|(_, p)| p.metadata.uid.clone())
            .collect();
        ensure!(uids.len() == 2, "{name} had {} pods: {uids:?}", uids.len());
    }
    ensure!(
        deletions(&snap, &v1).len() == 4,
        "every v1 pod evicted once"
    );
    Ok(())
}

/// The rollout of `guests/sroll-reconciler/README.md`'s example: two
/// sleepers, `version` in their environment, `percent` on the new template.
fn readme_rollout(version: &str, percent: u32) -> String {
    let image = workload_plane::workload("sleeper.wasm");
    format!(
        r#"apiVersion: rollouts.wasmlet.dev/v1
kind: StatefulsetRollout
metadata:
  name: web
spec:
  percent: {percent}
  maxUnavailable: 1
  statefulset:
    spec:
      replicas: 2
      serviceName: web
      updateStrategy:
        type: OnDelete
      selector:
        matchLabels:
          app: web
      template:
        metadata:
          labels:
            app: web
        spec:
          terminationGracePeriodSeconds: 1
          tolerations:
          - key: kubernetes.io/arch
            operator: Exists
          containers:
          - name: main
            image: {image}
            env:
            - name: VERSION
              value: "{version}"
"#
    )
}

/// `wasmlet up` ships the operator: with the default built-ins (`*`)
/// `kubectl get sroll` answers as soon as the plane is up, and a rollout is
/// driven with kubectl alone, as the crate's README shows. On the old code
/// the CRD was never installed: "the server doesn't have a resource type".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_ships_the_operator_and_kubectl_drives_a_rollout() -> Result<()> {
    let (plane, client) = workload_plane::start_with("*", &[]).await?;
    eventually(
        Duration::from_secs(120),
        "kubectl get sroll after up",
        || async { plane.kubectl_ok(&["get", "sroll"]).ok() },
    )
    .await?;
    let file = plane.data_dir().join("web.yaml");
    std::fs::write(&file, readme_rollout("1", 100))?;
    let file = file.display().to_string();
    plane.kubectl_ok(&["apply", "-f", &file])?;
    let api = sroll::api(&client);
    let st = wait_phase(&plane, &api, "web", "RolloutDone").await?;
    assert_eq!(st["readyReplicas"], 2);
    let v1 = revision(&pods_of(&client, "web").await?[0]);

    // Version 2 to 50 %: one of the two pods moves, the other stays.
    std::fs::write(&file, readme_rollout("2", 50))?;
    plane.kubectl_ok(&["apply", "-f", &file])?;
    let st = wait_phase(&plane, &api, "web", "RolloutDone").await?;
    assert_eq!(st["updatedReplicas"], 1, "{st}");
    let revs: Vec<String> = pods_of(&client, "web")
        .await?
        .iter()
        .map(revision)
        .collect();
    ensure!(
        revs.iter().filter(|r| **r == v1).count() == 1,
        "one pod left on the old revision: {revs:?}"
    );
    let out = plane.kubectl_ok(&["get", "sroll", "web"])?;
    ensure!(
        out.contains("RolloutDone") && out.contains(" 50 "),
        "kubectl get sroll web: {out}"
    );
    Ok(())
}

/// `--builtin-plugins '*,-sroll-reconciler'` leaves the operator out: every
/// other built-in loads, the operator and its CRD do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_plugins_can_leave_the_operator_out() -> Result<()> {
    let (plane, _client) = workload_plane::start_with("*,-sroll-reconciler", &[]).await?;
    // Plugins load one by one in name order, each after its CRDs: once the
    // last (wasi-runner) is loaded, the operator would have been too.
    eventually(
        Duration::from_secs(120),
        "the last built-in loaded",
        || async {
            let log = plane.log();
            log.lines()
                .any(|l| l.contains("plugin loaded") && l.contains("wasi-runner"))
                .then_some(())
        },
    )
    .await?;
    let builtin = plane.data_dir().join("plugins/builtin");
    ensure!(
        builtin.join("deployment-controller.wasm").exists()
            && !builtin.join("sroll-reconciler.wasm").exists(),
        "installed built-ins: {:?}",
        std::fs::read_dir(&builtin)?.collect::<Vec<_>>()
    );
    let out = plane.kubectl(&["get", "sroll"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("resource type"),
        "kubectl get sroll: {err}"
    );
    Ok(())
}

/// The Secret `chat` holding the chat API's bearer `token`.
pub(crate) async fn chat_secret(client: &kube::Client, token: &str) -> Result<()> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "chat"}, "stringData": {"token": token}}),
            )?,
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_consul_and_callback_follow_the_rollout() -> Result<()> {
    let server = FakeServer::start().await?;
    server.state.lock().unwrap().passing.insert("api".into(), 4);
    server.state.lock().unwrap().callback_failures = 2;
    let (plane, client) = plane(&[]).await?;
    chat_secret(&client, "xoxb-test").await?;
    let api = sroll::api(&client);
    let url = server.url.clone();
    api.create(
        &PostParams::default(),
        &rollout("api", 100, template("api", "1"), sroll::integrations(&url))?,
    )
    .await?;
    let st = wait_phase(&plane, &api, "api", "RolloutDone").await?;
    assert_eq!(st["consulServices"], json!(["api"]));
    // The callback failed twice, then got through: three attempts, one success.
    let st = wait_status(
        &plane,
        &api,
        "api",
        "the callback",
        Duration::from_secs(60),
        |s| s["lastCallbackStageId"] == "stage-1",
    )
    .await?;
    {
        let s = server.state.lock().unwrap();
        assert_eq!(s.callbacks.len(), 3, "{:?}", s.callbacks);
        assert!(s.callbacks.iter().all(|c| c["stageId"] == "stage-1"));
        assert_eq!(s.callbacks[2]["outcome"], "success");
        let posts = s.chat.iter().filter(|c| c.0 == "chat.postMessage").count();
        assert_eq!(posts, 1, "one message per rollout: {:?}", s.chat);
        assert!(s.chat.iter().all(|c| c.1 == "Bearer xoxb-test"));
        // The message's ts (the server's answer to the first postMessage) is kept.
        assert_eq!(st["notificationMessage"]["ts"], "1700000000.000000");
        assert_eq!(s.chat[0].2["channel"], "#deploys");
    }
    // A service failing in Consul holds the next rollout.
    server.state.lock().unwrap().passing.insert("api".into(), 1);
    edit(
        &api,
        "api",
        json!({"statefulset": {"spec": {"template": template("api", "2")}}}),
    )
    .await?;
    let st = wait_phase(&plane, &api, "api", "WaitingForServiceDiscovery").await?;
    assert_eq!(
        st["updatedReplicas"], 0,
        "nothing evicted while Consul fails"
    );
    server.state.lock().unwrap().passing.insert("api".into(), 4);
    let st = wait_phase(&plane, &api, "api", "RolloutDone").await?;
    assert_eq!(st["updatedReplicas"], 4);
    // The new template is a new generation: its outcome is reported too,
    // under the same stage id, once.
    let st = wait_status(
        &plane,
        &api,
        "api",
        "the second callback",
        Duration::from_secs(60),
        |s| s["lastCallback"]["generation"] == st["observedGeneration"],
    )
    .await?;
    let s = server.state.lock().unwrap();
    assert_eq!(s.callbacks.len(), 4, "{:?}", s.callbacks);
    assert_eq!(s.callbacks[3]["stageId"], "stage-1");
    assert_eq!(s.callbacks[3]["outcome"], "success");
    assert_eq!(s.callbacks[3]["generation"], st["observedGeneration"]);
    let posts = s.chat.iter().filter(|c| c.0 == "chat.postMessage").count();
    assert_eq!(posts, 2, "a new message for the new rollout");
    assert!(s.chat.iter().any(|c| c.0 == "chat.update"));
    Ok(())
}

/// Benchmark, not a test (ignored; run on purpose, ideally with a release
/// binary: `WASMLET_BIN=target/release/wasmlet cargo test --test e2e --
/// sroll::bench_ --ignored --nocapture`): a StatefulSet of `SROLL_BENCH_PODS` (default
/// 1,000) sleepers, which are Ready as soon as they run, rolled to 100 % at
/// `maxUnavailable: 10%` with chat notifications on. Prints the wall time of
/// the rollout, the operator's reconcile calls, every API write the plane
/// served meanwhile (controllers' and node agent's included), and the chat
/// calls (at most ceil(pods / 50) pod pages plus one update per batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures, asserts nothing about time"]
async fn bench_rollout_of_a_large_statefulset() -> Result<()> {
    let n = workload_plane::bench_size("SROLL_BENCH_PODS", 1000) as i32;
    let server = FakeServer::start().await?;
    let room = (n + 10).to_string();
    let (plane, client) = plane(&["--max-pods", &room]).await?;
    chat_secret(&client, "xoxb-bench").await?;
    let api = sroll::api(&client);
    let set = |version: &str| {
        json!({"spec": {
            "replicas": n,
            "serviceName": "big",
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": "big"}},
            "template": template("big", version),
        }})
    };
    let start = std::time::Instant::now();
    api.create(
        &PostParams::default(),
        &rollout(
            "big",
            100,
            template("big", "1"),
            json!({
                "statefulset": set("1"),
                "maxUnavailable": "10%",
                "channel": "#deploys",
                "notifications": {"url": format!("{}/api", server.url), "tokenSecret": {"name": "chat"}},
            }),
        )?,
    )
    .await?;
    let slow = Duration::from_secs(3600);
    let done = |what: &'static str| {
        let (plane, api) = (&plane, &api);
        async move {
            wait_status(plane, api, "big", what, slow, |s| {
                s["phase"] == "RolloutDone"
            })
            .await
        }
    };
    let st0 = done("first version up").await?;
    let up = start.elapsed();
    let c0 = workload_plane::plugin_calls(&plane, "sroll-reconciler").await?;
    let w0 = workload_plane::api_writes_by(&client).await?;
    let chat0 = server.state.lock().unwrap().chat.len();
    // Each batch stamps status.lastEvictionTime: the distinct stamps seen
    // while the rollout runs are its batches.
    let batches = Arc::new(Mutex::new(BTreeSet::new()));
    let first_stamp = st0["lastEvictionTime"].clone();
    let stamps = {
        let (api, batches) = (api.clone(), batches.clone());
        let cfg = watcher::Config::default().fields("metadata.name=big");
        tokio::spawn(async move {
            let mut seen = watcher(api, cfg).applied_objects().boxed();
            while let Some(Ok(o)) = seen.next().await {
                let stamp = &o.data["status"]["lastEvictionTime"];
                if !stamp.is_null() && *stamp != first_stamp {
                    batches.lock().unwrap().insert(stamp.to_string());
                }
            }
        })
    };
    let start = std::time::Instant::now();
    edit(&api, "big", json!({"statefulset": set("2")})).await?;
    let st = done("rolled to version 2").await?;
    let took = start.elapsed();
    stamps.abort();
    let c1 = workload_plane::plugin_calls(&plane, "sroll-reconciler").await?;
    let w1 = workload_plane::api_writes_by(&client).await?;
    let writes = w1.values().sum::<f64>() - w0.values().sum::<f64>();
    let batches = batches.lock().unwrap().len();
    let chat = server.state.lock().unwrap().chat[chat0..].to_vec();
    let posts = chat.iter().filter(|c| c.0 == "chat.postMessage").count();
    let updates = chat.iter().filter(|c| c.0 == "chat.update").count();
    ensure!(st["updatedReplicas"] == n, "{st}");
    println!(
        "sroll bench: {n} pods up in {:.1} s; rollout to 100 % at maxUnavailable 10 %: \
         {:.1} s in {batches} batches, {} reconcile calls, {writes} API writes ({}), chat: \
         {posts} postMessage + {updates} update (allowed: {} pages + one update per batch)",
        up.as_secs_f64(),
        took.as_secs_f64(),
        c1 - c0,
        workload_plane::growth(&w0, &w1),
        (n as usize).div_ceil(50),
    );
    Ok(())
}
