//! Plugins as OCI artifacts against a real registry (Debian's
//! `docker-registry`): `wasmlet plugin push` / `pull` in the CNCF wasm
//! layout, credentials from flags and from a docker config file, digests
//! verified, and a plugin listed in `plugins.toml` pulled, loaded and
//! hot-swapped when its tag moves.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use wasmlet_e2e::registry::{self, Registry};
use wasmlet_e2e::summary::{create_configmap, create_summary, status_keys, summaries};
use wasmlet_e2e::{Plane, built_plugins, eventually, wasmlet_bin};

/// `htpasswd -nbB alice pw-alice`.
const ALICE: (&str, &str, &str) = (
    "alice",
    "pw-alice",
    "$2y$05$uun.X4YNo.Cirs.qNlqPkOKzIoBdorqs6YxB3kwN.Xgd9asEHRnQq",
);

fn wasmlet(args: &[&str], stdin: Option<&str>, env: &[(&str, &Path)]) -> Result<Output> {
    use std::io::Write;
    let mut cmd = Command::new(wasmlet_bin());
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    let mut input = child.stdin.take().context("stdin")?;
    input.write_all(stdin.unwrap_or("").as_bytes())?;
    drop(input);
    Ok(child.wait_with_output()?)
}

fn ok(out: Output) -> Result<String> {
    ensure!(
        out.status.success(),
        "wasmlet failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn have_registry() -> bool {
    let there = Path::new(registry::BIN).exists();
    if !there {
        eprintln!(
            "SKIPPED: {} is missing (scripts/setup installs it)",
            registry::BIN
        );
    }
    there
}

/// `wasmlet plugin push PATH REFERENCE --insecure` without credentials;
/// returns the digest it reports.
fn push(path: &Path, reference: &str) -> Result<String> {
    let out = ok(wasmlet(
        &[
            "plugin",
            "push",
            path.to_str().unwrap(),
            reference,
            "--insecure",
        ],
        None,
        &[],
    )?)?;
    out.split('@')
        .nth(1)
        .map(|d| d.trim().to_string())
        .context("a digest")
}

/// The raw manifest of `repo:tag` on a plain-HTTP registry (alice's
/// credentials; a registry without users ignores them).
fn manifest_of(addr: &str, repo: &str, tag: &str) -> Result<Value> {
    let out = Command::new("curl")
        .args([
            "-sf",
            "-u",
            &format!("{}:{}", ALICE.0, ALICE.1),
            "-H",
            "Accept: application/vnd.oci.image.manifest.v1+json",
            &format!("http://{addr}/v2/{repo}/manifests/{tag}"),
        ])
        .output()?;
    ensure!(out.status.success(), "GET manifest failed");
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test]
async fn push_and_pull_keep_every_file_in_the_wasm_layout_with_credentials() -> Result<()> {
    if !have_registry() {
        return Ok(());
    }
    let reg = Registry::start_with_users(&[ALICE]).await?;
    let reference = format!("{}/plugins/configmap-summary:v1", reg.addr);
    let src = built_plugins().join("configmap-summary.toml");
    let out = ok(wasmlet(
        &[
            "plugin",
            "push",
            src.to_str().unwrap(),
            &reference,
            "--insecure",
            "--username",
            ALICE.0,
            "--password-stdin",
        ],
        Some(ALICE.1),
        &[],
    )?)?;
    ensure!(out.contains("@sha256:"), "{out}");

    // What other OCI tools see: the wasm config and component layer first.
    let m = manifest_of(&reg.addr, "plugins/configmap-summary", "v1")?;
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = m["layers"].as_array().context("layers")?;
    let types: Vec<&str> = layers
        .iter()
        .filter_map(|l| l["mediaType"].as_str())
        .collect();
    assert_eq!(
        types,
        [
            "application/wasm",
            "application/vnd.wasmlet.plugin.manifest.v1+toml",
            "application/vnd.wasmlet.plugin.crd.v1+yaml"
        ]
    );
    assert_eq!(
        layers[2]["annotations"]["org.opencontainers.image.title"],
        json!("configsummary.crd.yaml")
    );

    // Anonymous: refused, and nothing written.
    let dir = tempfile::tempdir()?;
    let empty = tempfile::tempdir()?;
    let out = wasmlet(
        &[
            "plugin",
            "pull",
            &reference,
            dir.path().to_str().unwrap(),
            "--insecure",
        ],
        None,
        &[("DOCKER_CONFIG", empty.path())],
    )?;
    ensure!(!out.status.success(), "an anonymous pull succeeded");
    ensure!(std::fs::read_dir(dir.path())?.next().is_none());

    // With the docker config file's credentials: the same bytes come back.
    let docker = tempfile::tempdir()?;
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", ALICE.0, ALICE.1));
    std::fs::write(
        docker.path().join("config.json"),
        json!({"auths": {reg.addr.clone(): {"auth": auth}}}).to_string(),
    )?;
    ok(wasmlet(
        &[
            "plugin",
            "pull",
            &reference,
            dir.path().to_str().unwrap(),
            "--insecure",
        ],
        None,
        &[("DOCKER_CONFIG", docker.path())],
    )?)?;
    for f in [
        "configmap-summary.wasm",
        "configmap-summary.toml",
        "configsummary.crd.yaml",
    ] {
        assert_eq!(
            std::fs::read(dir.path().join(f))?,
            std::fs::read(built_plugins().join(f))?,
            "{f} differs after the round trip"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_tampered_blob_is_refused() -> Result<()> {
    if !have_registry() {
        return Ok(());
    }
    let reg = Registry::start().await?;
    let reference = format!("{}/plugins/configmap-summary:v1", reg.addr);
    let src = built_plugins().join("configmap-summary.toml");
    push(&src, &reference)?;
    // Flip bytes of the component's blob in the registry's storage (same size).
    let m = manifest_of(&reg.addr, "plugins/configmap-summary", "v1")?;
    let digest = m["layers"][0]["digest"].as_str().context("digest")?;
    let hex = digest.trim_start_matches("sha256:");
    let blob = reg.storage().join(format!(
        "docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    ));
    let mut bytes = std::fs::read(&blob)?;
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&blob, bytes)?;

    let dir = tempfile::tempdir()?;
    let out = wasmlet(
        &[
            "plugin",
            "pull",
            &reference,
            dir.path().to_str().unwrap(),
            "--insecure",
        ],
        None,
        &[],
    )?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "a tampered blob was accepted");
    ensure!(err.to_lowercase().contains("digest"), "{err}");
    ensure!(
        !dir.path().join("configmap-summary.wasm").exists(),
        "the tampered component was written"
    );
    Ok(())
}

#[tokio::test]
async fn a_listed_plugin_is_pulled_loaded_and_swapped_when_its_tag_moves() -> Result<()> {
    if !have_registry() {
        return Ok(());
    }
    let reg = Registry::start().await?;
    let reference = format!("{}/plugins/configmap-summary:stable", reg.addr);
    let src = built_plugins().join("configmap-summary.toml");
    let first = push(&src, &reference)?;

    let plane = Plane::start_up(&["--plugin-poll-seconds", "1"]).await?;
    std::fs::write(
        plane.plugin_dir().join("plugins.toml"),
        format!("[[plugin]]\nsource = \"oci://{reference}\"\ninsecure = true\n"),
    )?;
    let client = plane.client().await?;
    let api = summaries(&client);
    eventually(
        Duration::from_secs(60),
        "the pulled plugin's CRD",
        || async { api.list(&Default::default()).await.ok() },
    )
    .await?;
    create_summary(&api, "s", json!({})).await?;
    create_configmap(&client, "s-cm", "s", 2).await?;
    eventually(
        Duration::from_secs(60),
        "the pulled plugin reconciling",
        || async { (status_keys(&api.get("s").await.ok()?) == Some(2)).then_some(()) },
    )
    .await?;
    ensure!(
        plane.log().contains(&first),
        "the log names the pulled digest"
    );

    // A new version under the same tag (here: a manifest with other limits).
    let staged = tempfile::tempdir()?;
    for f in ["configmap-summary.wasm", "configsummary.crd.yaml"] {
        std::fs::copy(built_plugins().join(f), staged.path().join(f))?;
    }
    let toml = std::fs::read_to_string(&src)?;
    let toml = toml.replace("[limits]", "[limits]\n# v2\n");
    std::fs::write(staged.path().join("configmap-summary.toml"), toml)?;
    let second = push(&staged.path().join("configmap-summary.toml"), &reference)?;
    ensure!(first != second);
    eventually(
        Duration::from_secs(60),
        "the new digest swapped in",
        || async {
            let log = plane.log();
            (log.contains(&second)
                && log
                    .lines()
                    .any(|l| l.contains("plugin replaced") && l.contains("configmap-summary")))
            .then_some(())
        },
    )
    .await?;
    // Unlisted: the plugin goes away.
    std::fs::write(plane.plugin_dir().join("plugins.toml"), "")?;
    eventually(
        Duration::from_secs(60),
        "the unlisted plugin removed",
        || async {
            plane
                .log()
                .lines()
                .any(|l| l.contains("plugin removed") && l.contains("configmap-summary"))
                .then_some(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_change_to_plugins_toml_is_synced_at_once_not_at_the_next_poll() -> Result<()> {
    if !have_registry() {
        return Ok(());
    }
    let reg = Registry::start().await?;
    let reference = format!("{}/plugins/configmap-summary:v1", reg.addr);
    push(&built_plugins().join("configmap-summary.toml"), &reference)?;
    // A poll an hour apart: only the list's own change can pull in time.
    let plane = Plane::start_up(&["--plugin-poll-seconds", "3600"]).await?;
    let client = plane.client().await?;
    let api = summaries(&client);
    // The built-ins loaded: the list's first sync (none there) is long past.
    eventually(Duration::from_secs(60), "the host's first scan", || async {
        plane
            .log()
            .lines()
            .any(|l| l.contains("plugin loaded") && l.contains("scheduler"))
            .then_some(())
    })
    .await?;
    std::fs::write(
        plane.plugin_dir().join("plugins.toml"),
        format!("[[plugin]]\nsource = \"oci://{reference}\"\ninsecure = true\n"),
    )?;
    eventually(
        Duration::from_secs(60),
        "the listed plugin pulled and its CRD served",
        || async { api.list(&Default::default()).await.ok() },
    )
    .await?;
    // Unlisted, again at once.
    std::fs::write(plane.plugin_dir().join("plugins.toml"), "")?;
    eventually(
        Duration::from_secs(60),
        "the unlisted plugin removed",
        || async {
            plane
                .log()
                .lines()
                .any(|l| l.contains("plugin removed") && l.contains("configmap-summary"))
                .then_some(())
        },
    )
    .await?;
    Ok(())
}
