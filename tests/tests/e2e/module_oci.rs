//! Workload modules through a real OCI registry (Debian's `docker-registry`,
//! plain HTTP on 127.0.0.1): `wasmlet module push FILE.wasm REF` writes the
//! wasm artifact layout the node pulls, and `kubectl run --image=REF` (with
//! the toleration the wasm node's taint needs) runs it (issue 34 item 10).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::Value;
use wasmlet_e2e::registry::{self, Registry};
use wasmlet_e2e::workload_plane::workloads_dir;
use wasmlet_e2e::{Plane, eventually, wasmlet_bin};

/// The toleration of `up`'s node taint `kubernetes.io/arch=wasm32-wasi`
/// (NoSchedule and NoExecute), as `kubectl run --overrides` takes it.
const TOLERATE_WASM: &str =
    r#"{"spec":{"tolerations":[{"key":"kubernetes.io/arch","operator":"Exists"}]}}"#;

fn wasmlet(args: &[&str]) -> Result<Output> {
    Ok(Command::new(wasmlet_bin()).args(args).output()?)
}

/// `GET http://ADDR/v2/PATH` as JSON (a manifest or a config blob).
fn registry_json(addr: &str, path: &str) -> Result<Value> {
    let out = Command::new("curl")
        .args([
            "-sf",
            "-H",
            "Accept: application/vnd.oci.image.manifest.v1+json",
            &format!("http://{addr}/v2/{path}"),
        ])
        .output()?;
    ensure!(out.status.success(), "GET /v2/{path} failed");
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Pushes `file` from target/workloads as `reference`; returns stdout.
fn push(file: &str, reference: &str) -> Result<String> {
    let path = workloads_dir().join(file);
    let out = wasmlet(&[
        "module",
        "push",
        path.to_str().context("path")?,
        reference,
        "--insecure",
    ])?;
    ensure!(
        out.status.success(),
        "wasmlet module push {file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The manifest of `repo:tag` and its config blob, checked against the
/// layout the node pulls: one `application/wasm` layer titled `file`.
fn layout(addr: &str, repo: &str, file: &str) -> Result<Value> {
    let manifest = registry_json(addr, &format!("{repo}/manifests/v1"))?;
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().context("layers")?;
    ensure!(layers.len() == 1, "one layer: {manifest:#}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(
        layers[0]["annotations"]["org.opencontainers.image.title"],
        file
    );
    let digest = manifest["config"]["digest"].as_str().context("digest")?;
    registry_json(addr, &format!("{repo}/blobs/{digest}"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_module_runs_as_a_kubectl_run_pod() -> Result<()> {
    ensure!(
        Path::new(registry::BIN).exists(),
        "{} is missing: apt-get install -y docker-registry (scripts/setup does)",
        registry::BIN
    );
    let reg = Registry::start().await?;
    let addr = reg.addr.clone();

    // A component and a core module, each in the wasm layout.
    let reference = format!("{addr}/demo/sleeper:v1");
    let out = push("sleeper.wasm", &reference)?;
    ensure!(
        out.contains(&format!("{reference}@sha256:")) && out.contains("wasip2"),
        "{out}"
    );
    let config = layout(&addr, "demo/sleeper", "sleeper.wasm")?;
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    push("hello.p1.wasm", &format!("{addr}/demo/hello:v1"))?;
    assert_eq!(
        layout(&addr, "demo/hello", "hello.p1.wasm")?["os"],
        "wasip1"
    );

    // Not a module: refused before anything is sent, naming the file.
    let bogus = tempfile::NamedTempFile::with_suffix(".wasm")?;
    std::fs::write(bogus.path(), "#!/bin/sh\n")?;
    let out = wasmlet(&[
        "module",
        "push",
        bogus.path().to_str().unwrap(),
        &format!("{addr}/demo/bogus:v1"),
        "--plain-http",
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && err.contains(&bogus.path().display().to_string())
            && err.contains("not a WebAssembly module or component"),
        "{err}"
    );

    // The pod, as a user would start it: its image the pushed reference.
    let plane = Plane::start_up(&["--insecure-registry", &addr]).await?;
    let client = plane.client().await?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    plane.kubectl_ok(&[
        "run",
        "ticker",
        &format!("--image={reference}"),
        &format!("--overrides={TOLERATE_WASM}"),
    ])?;
    let running = eventually(Duration::from_secs(120), "pod ticker Running", || async {
        let p = pods.get("ticker").await.ok()?;
        (phase(&p) == "Running").then_some(p)
    })
    .await;
    let running = running.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let image_id = running
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref()?.first())
        .map(|c| c.image_id.clone())
        .unwrap_or_default();
    ensure!(image_id.contains("sha256:"), "imageID: {image_id:?}");
    eventually(Duration::from_secs(60), "kubectl logs ticker", || async {
        let out = plane.kubectl_ok(&["logs", "ticker"]).ok()?;
        out.contains("tick 1").then_some(())
    })
    .await?;

    // Without the toleration the scheduler says why it stays Pending.
    plane.kubectl_ok(&["run", "plain", &format!("--image={reference}")])?;
    eventually(
        Duration::from_secs(60),
        "pod plain unschedulable, naming the taint",
        || async {
            let out = plane.kubectl_ok(&["describe", "pod", "plain"]).ok()?;
            out.contains("untolerated taint").then_some(())
        },
    )
    .await?;
    Ok(())
}
