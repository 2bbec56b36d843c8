//! `scripts/install PREFIX`: the binary, the built-in plugins and a copy of
//! the SDK (with the contract) under one prefix. The installed binary, run
//! outside this checkout, scaffolds a plugin on that SDK copy pinned to its
//! version, and `up` finds the built-ins beside it. A binary alone (as
//! `cargo install --path host` leaves it) says how to get its built-ins.
//!
//! The scaffolded crate starts from this workspace's `Cargo.lock` (installed
//! beside the SDK), so it resolves offline to the versions the workspace
//! locks, which its build (`scripts/build-guests`, the host's) or a `cargo
//! fetch` at the workspace root put in the cargo cache, and not to whatever a
//! machine's index happens to know. A crate missing from the cache anyway is
//! named, with the command that fetches it.
//!
//! The build of the scaffolded plugin (the README's commands, offline, from
//! the installed SDK) is ignored by default: it compiles a standalone crate
//! and its dependencies natively and for wasm32-wasip2 (about 10 minutes
//! cold on 2 cores, in `target/scaffold`, shared with tests/tests/e2e/scaffold.rs).
//! Run it with `cargo test --test e2e -- --ignored install::`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use wasmlet_e2e::{built_plugins, eventually, offline_error, scaffold_cargo, wasmlet_bin};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace version (the SDK's and the binary's).
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn ok(out: Output, what: &str) -> Result<String> {
    ensure!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `cargo ARGS --offline` in the scaffolded crate `dir`: its stdout, or
/// [`offline_error`]'s account of the failure.
fn cargo_offline(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()?;
    ok(out, &format!("cargo {} --offline", args.join(" "))).map_err(offline_error)
}

/// The registry packages a `Cargo.lock` pins: (name, version).
fn locked(lock: &str) -> Vec<(String, String)> {
    lock.split("[[package]]")
        .filter(|p| p.contains("source = \"registry+"))
        .filter_map(|p| {
            let field = |key: &str| {
                p.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(" = \""))
                    .and_then(|v| v.strip_suffix('"'))
                    .map(str::to_owned)
            };
            Some((field("name")?, field("version")?))
        })
        .collect()
}

/// `scripts/install PREFIX` with the builds the suite made (the debug binary,
/// `target/plugins`), not a release build of its own.
fn install(prefix: &Path) -> Result<()> {
    let out = Command::new(repo().join("scripts/install"))
        .arg(prefix)
        .arg("--bin")
        .arg(wasmlet_bin())
        .arg("--plugins")
        .arg(built_plugins())
        .output()?;
    ok(out, "scripts/install")?;
    Ok(())
}

/// `PREFIX/bin/wasmlet plugin new hello --crd ...` in `dir` (no --sdk-path):
/// the crate's directory.
fn scaffold(prefix: &Path, dir: &Path) -> Result<PathBuf> {
    let out = Command::new(prefix.join("bin/wasmlet"))
        .args([
            "plugin",
            "new",
            "hello",
            "--crd",
            "demo.example.com/v1/Greeting",
        ])
        .current_dir(dir)
        .output()?;
    ok(out, "wasmlet plugin new")?;
    Ok(dir.join("hello"))
}

#[tokio::test]
async fn an_installed_wasmlet_scaffolds_on_its_own_sdk_and_finds_its_builtins() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let prefix = tmp.path().join("prefix");
    install(&prefix)?;
    let prefix = prefix.canonicalize()?;

    // Only the built-ins (and their CRDs) are installed, not the test guests.
    let plugins = prefix.join("lib/wasmlet/plugins");
    for name in ["scheduler", "wasi-runner", "sroll-reconciler"] {
        ensure!(plugins.join(format!("{name}.wasm")).is_file(), "{name}");
    }
    ensure!(plugins.join("statefulsetrollout.crd.yaml").is_file());
    ensure!(
        !plugins.join("trap.wasm").exists(),
        "a test guest installed"
    );

    // The SDK copy: standalone (nothing inherited from this workspace), with
    // the contract where its bindings look for it (`../../wit`).
    let sdk = prefix.join(format!("share/wasmlet/{VERSION}/guests/sdk"));
    let manifest = std::fs::read_to_string(sdk.join("Cargo.toml"))?;
    ensure!(
        manifest.contains(&format!("version = \"{VERSION}\""))
            && !manifest.contains("workspace = true"),
        "{manifest}"
    );
    ensure!(sdk.join("../../wit/reconciler.wit").is_file());
    // And the workspace's lock beside them, where the scaffold looks for it.
    let workspace_lock = std::fs::read_to_string(repo().join("Cargo.lock"))?;
    ensure!(
        std::fs::read_to_string(sdk.join("../../Cargo.lock"))? == workspace_lock,
        "the installed Cargo.lock is not the workspace's"
    );

    // Scaffolded outside the checkout, the crate names that copy, pinned.
    let work = tempfile::tempdir()?;
    let krate = scaffold(&prefix, work.path())?;
    let cargo_toml = std::fs::read_to_string(krate.join("Cargo.toml"))?;
    let want = format!(
        "wasmlet-sdk = {{ version = \"={VERSION}\", path = {:?} }}",
        sdk.display().to_string()
    );
    ensure!(cargo_toml.contains(&want), "want {want} in:\n{cargo_toml}");
    ensure!(
        std::fs::read_to_string(krate.join("Cargo.lock"))? == workspace_lock,
        "the crate does not start from the installed Cargo.lock"
    );
    // Its dependency graph resolves offline: the SDK copy's manifest is
    // valid and everything else is on crates.io (the local cache). For the
    // platforms the README builds on and for: unfiltered, cargo would want
    // every platform's crates in the cache (jiff's portable-atomic-util,
    // for targets without pointer-sized atomics), which no build here
    // downloads.
    let meta = cargo_offline(
        &krate,
        &[
            "metadata",
            "--format-version",
            "1",
            "--filter-platform",
            "host-tuple",
            "--filter-platform",
            "wasm32-wasip2",
        ],
    )?;
    ensure!(
        meta.contains(&format!(
            "\"name\":\"wasmlet-sdk\",\"version\":\"{VERSION}\""
        )),
        "the SDK is not in the graph"
    );
    // On the workspace's versions, each one: nothing resolved afresh.
    let meta: serde_json::Value = serde_json::from_str(&meta)?;
    let pinned = locked(&workspace_lock);
    let unpinned: Vec<String> = meta["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
        .iter()
        .filter(|p| {
            p["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("registry+"))
        })
        .filter_map(|p| {
            let (name, version) = (p["name"].as_str()?, p["version"].as_str()?);
            let ours = pinned.iter().any(|(n, v)| n == name && v == version);
            (!ours).then(|| format!("{name} {version}"))
        })
        .collect();
    ensure!(
        unpinned.is_empty(),
        "resolved to versions the workspace does not lock: {unpinned:?}"
    );

    // `up` from the prefix finds its built-ins beside it.
    let data = tempfile::tempdir()?;
    let log = std::fs::File::create(data.path().join("wasmlet.log"))?;
    let mut up = Command::new(prefix.join("bin/wasmlet"))
        .args(["up", "--data-dir"])
        .arg(data.path())
        .args([
            "--port",
            "0",
            "--kubelet-port",
            "0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args([
            "--builtin-plugins",
            "scheduler,wasi-runner",
            "--node-name",
            "installed",
        ])
        .env("WASMLET_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()?;
    let result = async {
        let kubeconfig = data.path().join("kubeconfig");
        eventually(Duration::from_secs(30), "the kubeconfig", || async {
            kubeconfig.exists().then_some(())
        })
        .await?;
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        let nodes: Api<Node> = Api::all(kube::Client::try_from(config)?);
        // Ready: the built-in wasi-runner loaded and runs the node.
        eventually(Duration::from_secs(60), "Node installed Ready", || async {
            let n = nodes.get_opt("installed").await.ok().flatten()?;
            n.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        })
        .await?;
        let log = std::fs::read_to_string(data.path().join("wasmlet.log"))?;
        let from = log
            .lines()
            .filter(|l| l.contains("built-in plugins installed"))
            .find_map(|l| l.split(' ').find_map(|w| w.strip_prefix("from=")))
            .and_then(|p| Path::new(p).canonicalize().ok());
        ensure!(
            from.as_deref() == Some(plugins.as_path()),
            "the built-ins did not come from {}:\n{log}",
            plugins.display()
        );
        anyhow::Ok(())
    }
    .await;
    let _ = up.kill();
    let _ = up.wait();
    result.with_context(|| {
        std::fs::read_to_string(data.path().join("wasmlet.log")).unwrap_or_default()
    })
}

/// The binary alone in a `bin/` (what `cargo install --path host` leaves in
/// ~/.cargo/bin): `up` says where it looked for the built-ins and how to put
/// them there; `plugin new` falls back to the checkout it was built from,
/// pinned to its version.
#[test]
fn a_lone_binary_says_how_to_get_its_builtins_and_scaffolds_on_its_checkout() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let bin = tmp.path().join("cargo/bin/wasmlet");
    std::fs::create_dir_all(bin.parent().context("bin/")?)?;
    std::fs::copy(wasmlet_bin(), &bin)?;
    let data = tmp.path().join("data");
    let out = Command::new(&bin)
        .args(["up", "--port", "0", "--kubelet-port", "0", "--data-dir"])
        .arg(&data)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "up started without built-ins");
    ensure!(
        stderr.contains("scripts/install PREFIX")
            && stderr.contains("--builtin-source DIR")
            && stderr.contains(
                &tmp.path()
                    .join("cargo/bin/wasmlet-plugins")
                    .display()
                    .to_string()
            ),
        "{stderr}"
    );
    let out = Command::new(&bin)
        .args(["plugin", "new", "hello"])
        .current_dir(tmp.path())
        .output()?;
    ok(out, "wasmlet plugin new")?;
    let cargo_toml = std::fs::read_to_string(tmp.path().join("hello/Cargo.toml"))?;
    let checkout = repo().join("guests/sdk").canonicalize()?;
    let want = format!(
        "wasmlet-sdk = {{ version = \"={VERSION}\", path = {:?} }}",
        checkout.display().to_string()
    );
    ensure!(cargo_toml.contains(&want), "want {want} in:\n{cargo_toml}");
    ensure!(
        std::fs::read_to_string(tmp.path().join("hello/Cargo.lock"))?
            == std::fs::read_to_string(repo().join("Cargo.lock"))?,
        "the crate does not start from the checkout's Cargo.lock"
    );
    Ok(())
}

#[test]
#[ignore = "compiles a standalone crate (about 10 minutes cold); run with --ignored"]
fn a_plugin_on_the_installed_sdk_builds_offline_and_checks_clean() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let prefix = tmp.path().join("prefix");
    install(&prefix)?;
    let work = tempfile::tempdir()?;
    let krate = scaffold(&prefix, work.path())?;
    let started = Instant::now();
    // The scaffold README's commands: the unit tests (they write the CRD),
    // the wasm build, the check.
    scaffold_cargo(&krate, &["test"])?;
    scaffold_cargo(&krate, &["build", "--release", "--target", "wasm32-wasip2"])?;
    eprintln!("built in {:.0?}", started.elapsed());
    let wasm = krate.join("hello.wasm");
    std::fs::copy(
        repo().join("target/scaffold/wasm32-wasip2/release/hello.wasm"),
        &wasm,
    )?;
    let out = Command::new(prefix.join("bin/wasmlet"))
        .args(["plugin", "check"])
        .arg(&wasm)
        .env("NO_COLOR", "1")
        .output()?;
    let stdout = ok(out.clone(), "wasmlet plugin check")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}{stderr}");
    ensure!(
        !all.to_lowercase().contains("warn"),
        "plugin check warned:\n{all}"
    );
    Ok(())
}
