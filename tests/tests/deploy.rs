//! The deploy manifests (`deploy/`) and the monitoring files against the real
//! kubectl and a real host: the kustomize base passes a server-side dry run and
//! applies, the RBAC it grants is what the host and node agent need (checked
//! with `kubectl auth can-i --as`), the checked-in plugin RBAC is what
//! `wasmlet plugin rbac` prints, and every metric the dashboard and alerts
//! query is on `/metrics`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use serde_json::json;
use wasmlet_e2e::summary::{create_configmap, create_summary, status_keys, summaries};
use wasmlet_e2e::{Plane, built_plugins, eventually, install_plugin, wasmlet_bin};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

#[tokio::test]
async fn the_kustomize_base_dry_runs_applies_and_grants_what_each_agent_needs() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let base = deploy().display().to_string();
    // As upstream, namespaced objects need their namespace to exist even in a
    // dry run: the namespace first.
    plane.kubectl_ok(&["apply", "-f", &format!("{base}/namespace.yaml")])?;
    let out = plane.kubectl_ok(&["apply", "-k", &base, "--dry-run=server"])?;
    ensure!(
        out.contains("deployment.apps/wasmlet-controller created (server dry run)"),
        "{out}"
    );
    ensure!(
        plane
            .kubectl(&[
                "get",
                "deployment",
                "-n",
                "wasmlet-system",
                "wasmlet-controller"
            ])?
            .status
            .code()
            != Some(0),
        "a dry run stored the Deployment"
    );
    plane.kubectl_ok(&["apply", "-k", &base])?;
    let replicas = plane.kubectl_ok(&[
        "get",
        "deployment",
        "-n",
        "wasmlet-system",
        "wasmlet-controller",
        "-o",
        "jsonpath={.spec.replicas}",
    ])?;
    assert_eq!(replicas, "2");

    // The plugin's CRD, as the host applies it when the plugin loads (so
    // kubectl can resolve the resource).
    let crd = built_plugins().join("configsummary.crd.yaml");
    plane.kubectl_ok(&["apply", "-f", &crd.display().to_string()])?;
    let can = |who: &str, args: &[&str]| -> Result<String> {
        let sa = format!("system:serviceaccount:wasmlet-system:{who}");
        let mut full = vec!["auth", "can-i", "--as", &sa];
        full.extend_from_slice(args);
        let out = plane.kubectl(&full)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let controller = [
        (vec!["list", "configsummaries.examples.wasmlet.dev"], "yes"),
        (
            vec![
                "patch",
                "configsummaries.examples.wasmlet.dev",
                "--subresource=status",
            ],
            "yes",
        ),
        (vec!["watch", "configmaps", "-A"], "yes"),
        (
            vec!["create", "customresourcedefinitions.apiextensions.k8s.io"],
            "yes",
        ),
        (
            vec!["update", "leases/wasmlet-controller", "-n", "kube-system"],
            "yes",
        ),
        (vec!["update", "leases/other", "-n", "kube-system"], "no"),
        (vec!["delete", "configsummaries.examples.wasmlet.dev"], "no"),
        (vec!["get", "secrets", "-A"], "no"),
    ];
    for (args, want) in controller {
        assert_eq!(
            can("wasmlet-controller", &args)?,
            want,
            "controller: {args:?}"
        );
    }
    let node = [
        (vec!["create", "nodes"], "yes"),
        (vec!["patch", "nodes", "--subresource=status"], "yes"),
        (vec!["update", "leases", "-n", "kube-node-lease"], "yes"),
        (vec!["patch", "pods", "--subresource=status", "-A"], "yes"),
        (vec!["get", "secrets", "-A"], "yes"),
        (vec!["delete", "nodes"], "no"),
        (vec!["create", "deployments.apps"], "no"),
    ];
    for (args, want) in node {
        assert_eq!(can("wasmlet-node", &args)?, want, "node agent: {args:?}");
    }
    Ok(())
}

#[test]
fn the_checked_in_plugin_rbac_is_what_plugin_rbac_prints() -> Result<()> {
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "rbac"])
        .arg(built_plugins().join("configmap-summary.toml"))
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked_in = std::fs::read_to_string(deploy().join("cluster-agent/plugin-rbac.yaml"))?;
    ensure!(
        String::from_utf8_lossy(&out.stdout) == checked_in,
        "deploy/cluster-agent/plugin-rbac.yaml is stale: regenerate it with \
         `wasmlet plugin rbac target/plugins/configmap-summary.toml`"
    );
    Ok(())
}

/// Metric names in PromQL expressions: identifiers of the host's families.
fn queried_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i > start {
            let word = &text[start..i];
            if [
                "controller_runtime_",
                "workqueue_",
                "wasmlet_",
                "leader_election_",
            ]
            .iter()
            .any(|p| word.starts_with(p))
            {
                names.insert(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_query_is_exported() -> Result<()> {
    let dashboard = std::fs::read_to_string(deploy().join("monitoring/grafana-dashboard.json"))?;
    serde_json::from_str::<serde_json::Value>(&dashboard)?;
    let alerts = std::fs::read_to_string(deploy().join("monitoring/alerts.yaml"))?;
    let parsed: serde_yaml::Value = serde_yaml::from_str(&alerts)?;
    ensure!(
        parsed["groups"][0]["rules"]
            .as_sequence()
            .is_some_and(|r| r.len() >= 7)
    );
    let mut wanted = queried_metrics(&dashboard);
    wanted.extend(queried_metrics(&alerts));
    ensure!(wanted.len() >= 15, "{wanted:?}");

    // A host with a plugin, leader election and a node agent, briefly busy.
    let plane = Plane::start_up(&["--leader-elect"]).await?;
    install_plugin(&plane.plugin_dir(), "configmap-summary")?;
    let client = plane.client().await?;
    let api = summaries(&client);
    eventually(Duration::from_secs(60), "the CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    create_summary(&api, "m", json!({})).await?;
    create_configmap(&client, "m-cm", "m", 1).await?;
    eventually(Duration::from_secs(60), "a reconcile", || async {
        (status_keys(&api.get("m").await.ok()?) == Some(1)).then_some(())
    })
    .await?;
    let exported: BTreeSet<String> = plane
        .metrics()
        .await?
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = wanted.iter().filter(|m| !exported.contains(*m)).collect();
    ensure!(missing.is_empty(), "queried but not exported: {missing:?}");
    Ok(())
}
