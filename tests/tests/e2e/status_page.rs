//! The status page (`/` on the metrics address) in a real headless browser
//! (Debian's chromium): plugins, queues, a failed reconcile with its key, the
//! node's pods with their state, the provider's state graph drawn (inline
//! SVG, the running pod's count on its state) and each controller's charts.
//! A screenshot is saved to `target/status-page.png` for people to look at.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use wasmlet_e2e::summary::{create_configmap, create_summary, ready, status_keys, summaries};
use wasmlet_e2e::workload_plane::{self, NODE, sleeper_spec};
use wasmlet_e2e::{eventually, install_plugin, install_plugin_with};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Headless chromium with the flags a closed network needs, on a fresh profile.
fn chromium(profile: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()?)
}

#[tokio::test]
async fn the_status_page_shows_plugins_errors_pods_and_graphs_in_a_browser() -> Result<()> {
    if !Path::new(CHROMIUM).exists() {
        eprintln!("SKIPPED: {CHROMIUM} is missing (scripts/setup installs it)");
        return Ok(());
    }
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    install_plugin_with(&plane.plugin_dir(), "configmap-summary", |toml| {
        toml.replace(
            "[reconciles]",
            "[reconciles]\nlabel-selector = \"!wasmlet.dev/test\"",
        )
    })?;
    install_plugin(&plane.plugin_dir(), "trap")?;
    let api = summaries(&client);
    eventually(Duration::from_secs(60), "the CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    create_summary(&api, "good", json!({})).await?;
    create_configmap(&client, "good-cm", "good", 1).await?;
    create_summary(&api, "bad", json!({"wasmlet.dev/test": "trap"})).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sleeper"},
        "spec": sleeper_spec(),
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eventually(Duration::from_secs(60), "everything settled", || async {
        let good = status_keys(&api.get("good").await.ok()?) == Some(1);
        let bad = ready(&api.get("bad").await.ok()?).as_deref() == Some("False");
        let p = pods.get("sleeper").await.ok()?;
        let running = p.status.and_then(|s| s.phase).as_deref() == Some("Running");
        (good && bad && running).then_some(())
    })
    .await?;

    let url = plane
        .metrics_url()
        .await?
        .trim_end_matches("/metrics")
        .to_string()
        + "/";
    let profile = tempfile::tempdir()?;
    let out = chromium(profile.path(), &["--dump-dom", &url])?;
    let dom = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && dom.contains("<h1>wasmlet</h1>"),
        "{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for text in [
        // Plugins with their contract.
        "<td>configmap-summary</td>",
        "<td>trap</td>",
        "<td>wasmlet:plugin@0.1.0</td>",
        // The failed reconcile, with its key and reason.
        "<td>default/bad</td>",
        "<td>PluginFailed</td>",
        // The pod and its state.
        &format!("Pods on node {NODE}"),
        "<td>default/sleeper</td><td>Running</td>",
        // The provider's graph.
        "State graph of wasi-runner",
        // Plugin history.
        "<td>trap</td><td>loaded ",
    ] {
        ensure!(dom.contains(text), "the page lacks {text:?}:\n{dom}");
    }
    // The provider's graph is drawn: every state of the wasi-runner a box,
    // the sleeper counted on Running and nowhere else.
    ensure!(
        dom.contains("<svg class=\"state-graph\""),
        "no drawing:\n{dom}"
    );
    for state in [
        "Registered",
        "ImagePull",
        "VolumeMount",
        "Initializing",
        "Starting",
        "Error",
        "CrashLoopBackOff",
        "Terminated",
    ] {
        let node = format!("data-state=\"{state}\" data-pods=\"0\"");
        ensure!(dom.contains(&node), "the drawing lacks {node:?}:\n{dom}");
    }
    ensure!(
        dom.contains("class=\"state occupied\" data-state=\"Running\" data-pods=\"1\""),
        "the running pod is not on Running:\n{dom}"
    );
    ensure!(dom.contains("<text class=\"count\""), "{dom}");
    // Each controller's queue depth and reconcile rate, charted.
    for controller in ["configmap-summary", "trap"] {
        let row = format!("<tr data-controller=\"{controller}\">");
        let at = dom
            .find(&row)
            .ok_or_else(|| anyhow::anyhow!("no charts for {controller}:\n{dom}"))?;
        let row = &dom[at..at + dom[at..].find("</tr>").unwrap_or(0)];
        ensure!(
            row.contains("<svg class=\"spark depth\"")
                && row.contains("<svg class=\"spark rate\"")
                && row.contains("<polyline"),
            "{row}"
        );
    }
    // The script ran: the timestamp is the browser's, not the server's "now".
    ensure!(dom.contains("<span id=\"updated\">20"), "{dom}");

    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/status-page.png");
    let out = chromium(
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1700",
            &url,
        ],
    )?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        std::fs::metadata(&shot)?.len() > 10_000,
        "an empty screenshot"
    );
    Ok(())
}

/// `wasmlet ARGS...` with quiet logs: (success, stdout, stderr).
fn wasmlet(args: &[&str]) -> Result<(bool, String, String)> {
    let out = Command::new(wasmlet_e2e::wasmlet_bin())
        .args(args)
        .env("WASMLET_LOG", "warn")
        .output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn wasmlet_status_and_plugin_list_show_a_running_hosts_plugins_and_pods() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    install_plugin(&plane.plugin_dir(), "configmap-summary")?;
    // A plugin whose only version is refused: listed, with why.
    let dir = plane.plugin_dir();
    std::fs::copy(
        wasmlet_e2e::built_plugins().join("configmap-summary.toml"),
        dir.join("broken.toml"),
    )?;
    std::fs::write(dir.join("broken.wasm"), b"not a component")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sleeper"},
        "spec": sleeper_spec(),
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let url = plane.metrics_url().await?;
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();

    // The JSON, once the reconciler runs, the broken plugin is refused and
    // the pod runs.
    let status: serde_json::Value =
        eventually(Duration::from_secs(60), "the host's status", || async {
            let (ok, out, _) = wasmlet(&["status", "--host", &host, "-o", "json"]).ok()?;
            let v: serde_json::Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
            let plugin = |name: &str| {
                v["plugins"]
                    .as_array()?
                    .iter()
                    .find(|p| p["name"] == name)
                    .cloned()
            };
            let running = v["node"]["pods"]["Running"] == 1;
            let reconciling = plugin("configmap-summary")?["state"] == "reconciling";
            let rejected = plugin("broken")?["state"] == "rejected";
            (running && reconciling && rejected).then_some(v)
        })
        .await?;
    let plugin = |name: &str| {
        status["plugins"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    let summary = plugin("configmap-summary");
    ensure!(summary["kind"] == "reconciler", "{status:#}");
    ensure!(
        summary["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("sha256:")),
        "{status:#}"
    );
    ensure!(summary["queue"]["ready"].is_u64(), "{status:#}");
    let runner = plugin("wasi-runner");
    ensure!(
        runner["kind"] == "provider" && runner["state"] == "running pods",
        "{status:#}"
    );
    ensure!(
        plugin("broken")["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{status:#}"
    );
    ensure!(
        status["node"]["name"] == NODE && status["node"]["provider"] == "wasi-runner",
        "{status:#}"
    );

    // The table.
    let (ok, table, err) = wasmlet(&["status", "--host", &host])?;
    ensure!(ok, "{table}{err}");
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    ensure!(table.starts_with("NAME "), "{table}");
    let row = line("configmap-summary");
    ensure!(
        row.len() >= 6
            && row[1] == "reconciler"
            && row[2].starts_with("sha256:")
            && row[3] == "reconciling",
        "{table}"
    );
    ensure!(
        line("broken")[..3] == ["broken", "<none>", "<none>"],
        "{table}"
    );
    ensure!(
        table.contains(&format!(
            "node {NODE} (provider wasi-runner): 1 pod (1 Running)"
        )),
        "{table}"
    );

    // `plugin list`: the same plugins.
    let (ok, list, err) = wasmlet(&["plugin", "list", "--host", &host, "-o", "json"])?;
    ensure!(ok, "{list}{err}");
    let list: serde_json::Value = serde_json::from_str(&list)?;
    let names: Vec<&str> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for name in ["broken", "configmap-summary", "scheduler", "wasi-runner"] {
        ensure!(names.contains(&name), "{name} not in {names:?}");
    }
    let (ok, list, err) = wasmlet(&["plugin", "list", "--host", &host])?;
    ensure!(
        ok && list.contains("configmap-summary   reconciler"),
        "{list}{err}"
    );

    // No host there: the error names the address and the flag.
    let (ok, _, err) = wasmlet(&["status", "--host", "127.0.0.1:1"])?;
    ensure!(
        !ok && err.contains("127.0.0.1:1/status") && err.contains("--metrics-addr"),
        "{err}"
    );
    Ok(())
}
