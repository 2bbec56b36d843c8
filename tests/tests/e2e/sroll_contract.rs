//! What the StatefulsetRollout operator promises beyond a rollout's moves
//! (issue 45, point 4): its budget follows `maxUnavailable` (a user's own is
//! left alone), its callback reports each (stageId, rolloutIdentity,
//! generation) once, its CRD refuses at admission what it would refuse
//! later, and `buildMetadata` reads the annotations its README names.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::sroll::{
    self, FakeServer, edit, failing_template, rollout, template, wait_phase, wait_status,
};
use wasmlet_e2e::{Plane, eventually};

use super::sroll::plane;

async fn max_unavailable(pdbs: &Api<PodDisruptionBudget>, name: &str) -> Option<Value> {
    let pdb = pdbs.get(name).await.ok()?;
    serde_json::to_value(pdb.spec?.max_unavailable?).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_follows_max_unavailable_and_a_users_own_is_left_alone() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let api = sroll::api(&client);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    // Ours: created from maxUnavailable (2), then it follows an edit.
    api.create(
        &PostParams::default(),
        &rollout("web", 100, template("web", "1"), json!({}))?,
    )
    .await?;
    wait_phase(&plane, &api, "web", "RolloutDone").await?;
    assert_eq!(max_unavailable(&pdbs, "web-sroll").await, Some(json!(2)));
    edit(&api, "web", json!({"maxUnavailable": "25%"})).await?;
    eventually(Duration::from_secs(60), "the budget at 25%", || async {
        (max_unavailable(&pdbs, "web-sroll").await == Some(json!("25%"))).then_some(())
    })
    .await?;
    wait_phase(&plane, &api, "web", "RolloutDone").await?;
    // A user's own budget selecting the pods is used as it is.
    let own: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "db-own"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }))?;
    pdbs.create(&PostParams::default(), &own).await?;
    api.create(
        &PostParams::default(),
        &rollout("db", 100, template("db", "1"), json!({}))?,
    )
    .await?;
    wait_phase(&plane, &api, "db", "RolloutDone").await?;
    edit(&api, "db", json!({"maxUnavailable": 3})).await?;
    wait_phase(&plane, &api, "db", "RolloutDone").await?;
    let kept = pdbs.get("db-own").await?;
    assert_eq!(max_unavailable(&pdbs, "db-own").await, Some(json!(1)));
    assert_eq!(kept.metadata.generation, Some(1), "never written");
    ensure!(
        pdbs.get_opt("db-sroll").await?.is_none(),
        "no second budget beside the user's"
    );
    Ok(())
}

/// A failed rollout retried through a new rolloutIdentity under the same
/// stage id reports both outcomes, each once (the old code keyed the
/// callback on the stage id alone and never reported the retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_through_a_new_identity_is_reported_once() -> Result<()> {
    let server = FakeServer::start().await?;
    let (plane, client) = plane(&[]).await?;
    let api = sroll::api(&client);
    let callback = json!({"url": format!("{}/callback", server.url), "stageId": "stage-7"});
    api.create(
        &PostParams::default(),
        &rollout(
            "job",
            100,
            template("job", "1"),
            json!({"rolloutIdentity": "r1", "callback": callback}),
        )?,
    )
    .await?;
    wait_phase(&plane, &api, "job", "RolloutDone").await?;
    edit(
        &api,
        "job",
        json!({"statefulset": {"spec": {"template": failing_template("job")}}}),
    )
    .await?;
    wait_phase(&plane, &api, "job", "RolloutFailed").await?;
    let delivered = |n: usize| {
        let server = &server;
        async move {
            eventually(Duration::from_secs(60), "the callbacks", || async {
                (server.state.lock().unwrap().callbacks.len() >= n).then_some(())
            })
            .await
        }
    };
    delivered(2).await?;
    edit(
        &api,
        "job",
        json!({"rolloutIdentity": "r2",
            "statefulset": {"spec": {"template": template("job", "2")}}}),
    )
    .await?;
    let st = wait_phase(&plane, &api, "job", "RolloutDone").await?;
    delivered(3).await?;
    // Passes after the report send nothing more.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got: Vec<(Value, Value, Value)> = server
        .state
        .lock()
        .unwrap()
        .callbacks
        .iter()
        .map(|c| {
            (
                c["stageId"].clone(),
                c["rolloutIdentity"].clone(),
                c["outcome"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (json!("stage-7"), json!("r1"), json!("success")),
            (json!("stage-7"), json!("r1"), json!("failure")),
            (json!("stage-7"), json!("r2"), json!("success")),
        ]
    );
    assert_eq!(st["lastCallback"]["rolloutIdentity"], "r2");
    Ok(())
}

/// `kubectl apply` of `manifest` (YAML): its combined output and success.
fn kubectl_apply(plane: &Plane, name: &str, manifest: &str) -> Result<(bool, String)> {
    let file = plane.data_dir().join(format!("{name}.yaml"));
    std::fs::write(&file, manifest)?;
    let out = plane.kubectl(&["apply", "-f", file.to_str().context("a path")?])?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

/// The rollout as YAML with `spec` merged into a valid one.
fn manifest(name: &str, patch: Value) -> Result<String> {
    let mut obj = serde_json::to_value(rollout(name, 50, template(name, "1"), json!({}))?)?;
    merge(&mut obj["spec"], &patch);
    Ok(serde_json::to_string(&obj)?)
}

fn merge(v: &mut Value, patch: &Value) {
    match (v.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, pv) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), pv);
            }
        }
        _ => *v = patch.clone(),
    }
}

/// At admission, as on any API server: `percent` 0-100, intervals and
/// deadlines bounded, and the embedded StatefulSet typed as apps/v1's, so a
/// misspelled field is refused by kubectl's strict validation instead of
/// being dropped unseen (the old CRD kept any field there and accepted
/// `percent: 250`, finding out after the write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crd_refuses_bad_specs_at_admission() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let cases = [
        (json!({"percent": 250}), "spec.percent"),
        (json!({"percent": -1}), "spec.percent"),
        (
            json!({"minPodEvictionIntervalSeconds": -5}),
            "spec.minPodEvictionIntervalSeconds",
        ),
        (
            json!({"progressDeadlineSeconds": 0}),
            "spec.progressDeadlineSeconds",
        ),
        (
            json!({"statefulset": {"spec": {"replicaz": 3}}}),
            "spec.statefulset.spec.replicaz",
        ),
        (
            json!({"statefulset": {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "x.wasm", "imagePullPolicy": "Never", "evn": []}]}}}}}),
            "evn",
        ),
        (
            json!({"statefulset": {"spec": {"replicas": "four"}}}),
            "spec.statefulset.spec.replicas",
        ),
    ];
    for (i, (patch, field)) in cases.iter().enumerate() {
        let (ok, out) =
            kubectl_apply(&plane, &format!("bad{i}"), &manifest("bad", patch.clone())?)?;
        ensure!(!ok, "{patch} was accepted: {out}");
        ensure!(
            out.contains(field),
            "{patch}: the error names {field}: {out}"
        );
    }
    let api = sroll::api(&client);
    ensure!(api.get_opt("bad").await?.is_none(), "nothing was stored");
    let (ok, out) = kubectl_apply(&plane, "good", &manifest("good", json!({}))?)?;
    ensure!(ok, "a valid rollout: {out}");
    wait_phase(&plane, &api, "good", "RolloutDone").await?;
    Ok(())
}

/// README: `buildMetadata` comes from annotations ending in `git-branch` /
/// `git-commit` on the set or its template (the old code matched only the
/// part after the last `/`, so `deploy.example.com/app-git-branch` was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_metadata_reads_the_annotations_the_readme_names() -> Result<()> {
    let (plane, client) = plane(&[]).await?;
    let api = sroll::api(&client);
    let mut t = template("meta", "1");
    t["metadata"]["annotations"] = json!({"example.com/git-commit": "0123abc"});
    let mut obj = serde_json::to_value(rollout("meta", 100, t, json!({}))?)?;
    obj["spec"]["statefulset"]["metadata"] =
        json!({"annotations": {"deploy.example.com/app-git-branch": "release-7"}});
    api.create(&PostParams::default(), &serde_json::from_value(obj)?)
        .await?;
    let st = wait_status(
        &plane,
        &api,
        "meta",
        "buildMetadata",
        Duration::from_secs(180),
        |s| !s["buildMetadata"].is_null(),
    )
    .await?;
    assert_eq!(
        st["buildMetadata"],
        json!({"branch": "release-7", "commit": "0123abc"})
    );
    Ok(())
}
