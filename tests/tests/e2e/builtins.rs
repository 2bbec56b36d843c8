//! Shipping of the built-in plugins end to end: a plugin of the same name in the
//! user's plugin directory replaces the built-in one (and removing it brings the
//! built-in back), `--no-builtins` loads none of them while the user's
//! plugins still load, and a controller does not wait for the built-ins that
//! load after its plugin.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use wasmlet_e2e::workload_plane::{self, NODE, sleeper_spec};
use wasmlet_e2e::{Plane, eventually, install_plugin, install_plugin_with};

fn unbound_pod(name: &str, team: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"team": team}},
        "spec": sleeper_spec(),
    }))?)
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn has_scheduled_condition(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled"))
}

fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The index of `log`'s first line with all of `words`.
fn line_of(log: &str, words: &[&str]) -> Option<usize> {
    log.lines()
        .position(|l| words.iter().all(|w| l.contains(w)))
}

/// Waits until the log has a line with all of `words`.
async fn logged(plane: &Plane, what: &str, words: &[&str]) -> Result<()> {
    eventually(Duration::from_secs(60), what, || async {
        line_of(&plane.log(), words).map(|_| ())
    })
    .await
}

#[tokio::test]
async fn a_users_plugin_named_like_a_builtin_replaces_it_until_removed() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    logged(
        &plane,
        "the built-in scheduler",
        &["plugin loaded", "scheduler"],
    )
    .await?;

    // The user's own scheduler: the built-in's component with a manifest that
    // only takes pods of team a.
    let dir = plane.plugin_dir();
    install_plugin_with(&dir, "scheduler", |toml| {
        toml.replace("[reconciles]", "[reconciles]\nlabel-selector = \"team=a\"")
    })?;
    logged(
        &plane,
        "the user's scheduler",
        &["plugin replaced", "scheduler"],
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &unbound_pod("b", "b")?)
        .await?;
    pods.create(&PostParams::default(), &unbound_pod("a", "a")?)
        .await?;
    eventually(
        Duration::from_secs(60),
        "pod a bound and running",
        || async {
            let p = pods.get("a").await.ok()?;
            (node_of(&p) == Some(NODE) && is_running(&p)).then_some(())
        },
    )
    .await?;
    // Created first, yet never looked at: the built-in would have bound it or
    // said why not (PodScheduled) long before pod a ran.
    let b = pods.get("b").await?;
    ensure!(
        node_of(&b).is_none() && !has_scheduled_condition(&b),
        "the built-in scheduler still ran beside the user's: {:?}",
        b.status
    );

    // Without the user's file the built-in is loaded again and takes pod b.
    std::fs::remove_file(dir.join("scheduler.wasm"))?;
    std::fs::remove_file(dir.join("scheduler.toml"))?;
    eventually(
        Duration::from_secs(60),
        "pod b bound by the built-in again",
        || async {
            let p = pods.get("b").await.ok()?;
            (node_of(&p) == Some(NODE)).then_some(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn no_builtins_loads_none_but_the_users_plugins_still_load() -> Result<()> {
    let (plane, client) = workload_plane::start_with("*", &["--no-builtins"]).await?;
    ensure!(
        !plane.data_dir().join("plugins/builtin").exists(),
        "built-ins were installed into the data directory"
    );
    ensure!(
        !plane.log().contains("built-in plugins installed"),
        "{}",
        plane.log()
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &unbound_pod("unbound", "x")?)
        .await?;
    let mut placed = unbound_pod("placed", "x")?;
    placed.spec.as_mut().unwrap().node_name = Some(NODE.into());
    pods.create(&PostParams::default(), &placed).await?;

    // No provider on the node until the user installs one.
    install_plugin(&plane.plugin_dir(), "wasi-runner")?;
    eventually(
        Duration::from_secs(60),
        "the placed pod running under the user's wasi-runner",
        || async { is_running(&pods.get("placed").await.ok()?).then_some(()) },
    )
    .await?;
    // No scheduler ever looked at the other pod.
    let p = pods.get("unbound").await?;
    ensure!(
        node_of(&p).is_none() && !has_scheduled_condition(&p),
        "a scheduler ran: {:?}",
        p.status
    );
    Ok(())
}

/// Each controller starts once its own plugin is loaded. On a fresh data
/// directory the built-ins that sort after configmap-summary compile for
/// seconds; every controller used to wait for the whole first scan.
#[tokio::test]
async fn a_controller_starts_while_later_plugins_still_compile() -> Result<()> {
    // A fresh install without a precompiled seed: the built-ins copied alone,
    // and an empty seed directory instead of the one the harness passes.
    let source = tempfile::tempdir()?;
    for name in ["scheduler", "statefulset-controller", "wasi-runner"] {
        install_plugin(source.path(), name)?;
    }
    let no_seed = tempfile::tempdir()?;
    let plane = Plane::start_up_with(
        &[
            "--builtin-plugins",
            "scheduler,statefulset-controller,wasi-runner",
            "--builtin-source",
            &source.path().display().to_string(),
            "--precompiled",
            &no_seed.path().display().to_string(),
        ],
        &["configmap-summary"],
    )
    .await?;
    logged(
        &plane,
        "the last built-in loaded",
        &["plugin loaded", "wasi-runner"],
    )
    .await?;
    logged(
        &plane,
        "configmap-summary's controller started",
        &["controller started", "configmap-summary"],
    )
    .await?;
    let log = plane.log();
    let started = line_of(&log, &["controller started", "configmap-summary"]);
    let last_loaded = line_of(&log, &["plugin loaded", "wasi-runner"]);
    ensure!(
        started < last_loaded,
        "configmap-summary's controller started only after every plugin had loaded; log:\n{log}"
    );
    Ok(())
}
